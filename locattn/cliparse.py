"""argparse for the project's three command lines (``locattn``, ``study``, ``reports``).

A usage error is one line on stderr, exit status 2, no traceback. It names the sub-command
(``study launch: error: ...``), the valid options, and the closest one to a mistyped flag.
Stock argparse reports an unknown flag of a sub-command on the top-level parser, which knows
none of that sub-command's options. Standard library only: the ``reports`` command must start
without importing torch.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import Any, Iterable, NoReturn, Sequence

EXIT_USAGE = 2


def did_you_mean(value: Any, choices: Iterable[Any]) -> str:
    """`` (did you mean X?)`` naming the closest of ``choices`` to ``value``, or ``""``: the one
    hint of the ``locattn`` and ``study`` commands' unknown-name errors."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    return f" (did you mean {close[0]}?)" if close else ""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line naming the valid options.

    Abbreviated flags are refused (``--epoch`` is not ``--epochs``): a mistyped flag exits 2, as
    the README promises. ``epilog`` may be a function, called only when help is shown (a listing
    that needs a heavy import stays off the path of every other command).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def format_help(self) -> str:
        if callable(self.epilog):
            self.epilog = self.epilog()
        return super().format_help()

    def long_options(self) -> list[str]:
        return sorted({s for a in self._actions for s in a.option_strings if s.startswith("--")})

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments"):
            message += _suggestions(message, self.long_options())
            message += f"; valid options: {', '.join(self.long_options())}"
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _suggestions(message: str, options: list[str]) -> str:
    words = message.split(":", 1)[1].split()
    hints = {}
    for word in words:
        flag = word.split("=", 1)[0]
        if flag.startswith("--"):
            close = difflib.get_close_matches(flag, options, n=1, cutoff=0.6)
            if close:
                hints[flag] = close[0]
    if len(hints) == 1:
        return f" (did you mean {next(iter(hints.values()))}?)"
    if hints:
        return f" (did you mean {', '.join(f'{c} for {f}' for f, c in hints.items())}?)"
    return ""


def chosen_subparser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Parser | None:
    """The sub-command parser that ``args`` went through, if any."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            return chosen if isinstance(chosen, Parser) else None
    return None


def parse(parser: Parser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, but unknown flags are reported by the sub-command's parser."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        (chosen_subparser(parser, args) or parser).error(
            f"unrecognized arguments: {' '.join(extra)}"
        )
    return args


def closest_path(typed: str, candidates: Iterable[Path]) -> str:
    """`` (did you mean X?)`` naming the candidate whose file name is closest to the typed
    path's, written as the user would type it; ``""`` when none is close."""
    by_name: dict[str, Path] = {}
    for c in sorted(candidates):
        by_name.setdefault(c.name, c)
    close = difflib.get_close_matches(Path(typed).name, list(by_name), n=1, cutoff=0.6)
    return f" (did you mean {by_name[close[0]]}?)" if close else ""
