"""Time-boxed slices: ``study launch|resume --time-limit 9m`` stops a study before a deadline.

A batch scheduler's wall-time limit (SLURM ``--time``) or a preemptible GPU's notice gives a
driver a fixed time. Given ``--time-limit``, the driver asks for the same graceful stop as
Ctrl-C a margin before the limit (:func:`stop_after`): running trials stop, every finished
epoch is already checkpointed, the record is flushed, and the driver prints the resume
command and exits with :data:`EXIT_TIME_LIMIT`, so a job script can tell "slice over, resume
me" from success (0), failure (1), a usage error (2) and Ctrl-C (130).

Pure Python: the parsing and the arithmetic, tested without Ray.
"""

from __future__ import annotations

import re

#: Exit status of a study stopped by its ``--time-limit`` (sysexits' EX_TEMPFAIL: "try again").
EXIT_TIME_LIMIT = 75
#: The stop is asked for this fraction of the limit before it (at most MARGIN_MAX seconds),
#: the time the driver needs to stop the trials, save Tune's state and shut Ray down.
MARGIN_FRACTION = 0.1
MARGIN_MAX = 60.0
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


#: Longest ``--time-limit`` (a year): a longer one is a typo, not a plan.
MAX_TIME_LIMIT = 366 * 86400


def parse_time_limit(text: str) -> float:
    """Seconds in ``9m``, ``1h30m``, ``90s``, ``2.5h``, ``600`` (plain seconds) or SLURM's
    ``[[D-]HH:]MM:SS``; ValueError with the accepted forms otherwise."""
    raw = str(text).strip().lower()
    seconds: float | None = None
    if re.fullmatch(r"\d+(?:\.\d+)?", raw):
        seconds = float(raw)
    elif re.fullmatch(r"(?:\d+(?:\.\d+)?[smhd])+", raw):
        seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(raw))
    else:
        m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", raw)
        if m:
            d, h, mi, s = (int(g) if g else 0 for g in m.groups())
            seconds = float(((d * 24 + h) * 60 + mi) * 60 + s)
    if seconds is None or not 0 < seconds < float("inf"):
        raise ValueError(f"--time-limit {text!r}: expected a positive duration such as 9m, 1h30m, "
                         "90s, 600 (seconds) or SLURM's [[D-]HH:]MM:SS")
    if seconds > MAX_TIME_LIMIT:
        raise ValueError(f"--time-limit {text!r}: {seconds:.3g} s; at most {MAX_TIME_LIMIT // 86400} days "
                         "(leave it out for no limit)")
    return seconds


def stop_after(limit_seconds: float) -> float:
    """Seconds after the start at which to ask for the graceful stop: the limit less its
    margin (a tenth of it, at most a minute)."""
    return max(0.0, limit_seconds - min(MARGIN_MAX, MARGIN_FRACTION * limit_seconds))
