"""MkDocs hook: the reference pages that are generated from the code at build time, so they
cannot drift from it.

- ``reference/cli.md``: the ``--help`` of every command and subcommand of the three console
  scripts (``locattn``, ``study``, ``reports``) and of ``python -m locattn.offline``, read from
  their argparse parsers.
- ``reference/spec.schema.json``: the spec's JSON Schema (``study schema``);
- the key tables of ``reference/spec.md``, from the spec parser's key tables
  (``study/spec/checks.py``), in place of its ``<!-- generated: spec keys -->`` line.

It also lets the pages keep the README's list style: a list right after a paragraph line, and
lists nested by two spaces (Python-Markdown wants a blank line and four).

Run by ``mkdocs build`` (``hooks:`` in mkdocs.yml); ``python docs/_hooks/reference.py cli``
prints the page.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its subparsers nowhere public
        if isinstance(action.choices, dict):
            return dict(action.choices)
    return {}


def _help(main, argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(argv)
    return out.getvalue().rstrip()


def cli_page() -> str:
    """The CLI reference as Markdown: one section per command, its ``--help`` verbatim."""
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: a fixed width, a stable page
    sys.path.insert(0, str(ROOT))
    # (imported here, not at the top: mkdocs loads this hook before the project is on sys.path)
    from locattn import cli as locattn_cli, offline
    from reports import cli as reports_cli
    from study import cli as study_cli

    programs = (("locattn", locattn_cli.build_parser(), locattn_cli.main),
                ("study", study_cli.parser(), study_cli.main),
                ("reports", reports_cli.parser(), reports_cli.main))
    lines = ["# Command line", "",
             "Generated from the argparse parsers when the site is built "
             "(`docs/_hooks/reference.py`): this is exactly what `--help` prints.", ""]
    for name, parser, main in programs:
        lines += [f"## `{name}`", "", "```text", _help(main, ["--help"]), "```", ""]
        for sub in _subcommands(parser):
            lines += [f"### `{name} {sub}`", "", "```text", _help(main, [sub, "--help"]), "```", ""]
    lines += ["## `python -m locattn.offline`", "", "```text", _help(offline.main, ["--help"]),
              "```", ""]
    return "\n".join(lines)


SPEC_MARK = "<!-- generated: spec keys -->"


def spec_keys_markdown() -> str:
    """Markdown tables of the spec's top-level, profile and search keys."""
    sys.path.insert(0, str(ROOT))
    # (imported here, not at the top: mkdocs loads this hook before the project is on sys.path)
    from study.spec import checks

    rows = ["| key | meaning | in a profile |", "|---|---|---|"]
    for key, meaning in checks.TOP_KEYS.items():
        rows.append(f"| `{key}` | {meaning} | {'yes' if key in checks.PROFILE_KEYS else 'no'} |")
    rows += ["", "`search:` holds:", "", "| key | meaning |", "|---|---|"]
    rows += [f"| `{k}` | {v} |" for k, v in checks.SEARCH_KEYS.items()]
    rows += ["", f"`resources:` holds {', '.join(f'`{k}`' for k in sorted(checks.RESOURCE_KEYS))}; "
             f"a search space's `type` is one of {', '.join(f'`{t}`' for t in checks.SPACE_TYPES)}; "
             f"`sampler` one of {', '.join(f'`{t}`' for t in checks.SAMPLERS)}. Grid axes "
             f"{', '.join(f'`{a}`' for a in checks.SPECIAL_AXES)} are special; any other axis "
             "is a dotted config path."]
    return "\n".join(rows)


LIST_ITEM = re.compile(r"^( *)([-*+]|\d+\.) ")


def loosen_lists(markdown: str) -> str:
    """A blank line before a list that follows a paragraph line, and nested list items indented
    twice as deep, outside fenced code."""
    out: list[str] = []
    fenced = False
    for line in markdown.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        item = None if fenced else LIST_ITEM.match(line)
        if item:
            prev = out[-1] if out else ""
            if prev.strip() and not LIST_ITEM.match(prev) and not prev.startswith(" ") \
                    and not prev.lstrip().startswith("|"):
                out.append("")
            line = item.group(1) + line  # 2 spaces of nesting become 4
        out.append(line)
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files):
    """Fill the generated parts of a page, and loosen its lists (mkdocs ``on_page_markdown``)."""
    if SPEC_MARK in markdown:
        markdown = markdown.replace(SPEC_MARK, spec_keys_markdown())
    return loosen_lists(markdown)


def on_files(files, config):
    """Add the generated pages to the site (mkdocs ``on_files`` event)."""
    # (imported here: only mkdocs runs this hook, and the module stays importable without it)
    from mkdocs.structure.files import File

    files.append(File.generated(config, "reference/cli.md", content=cli_page()))
    sys.path.insert(0, str(ROOT))
    # (imported here, not at the top: mkdocs loads this hook before the project is on sys.path)
    from study.spec.json_schema import schema_text

    files.append(File.generated(config, "reference/spec.schema.json", content=schema_text()))
    return files


if __name__ == "__main__":
    print(cli_page())
