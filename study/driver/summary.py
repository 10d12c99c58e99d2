"""What a launch or resume returns and prints: :class:`StudySummary` (a study that ran, or stopped)
and :class:`DryRunPlan` (``--dry-run``), the summary of a finished pass and its closing line with
the resume command.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from record.summary import RunCounts
from study.driver.signals import limit_text
from study.plan import slices
from study.recording.study_store import browse_advice
from study.spec import size_warnings

if TYPE_CHECKING:
    from ray.tune import ResultGrid


def resume_command(study_dir: Path, max_concurrent: int | None, address: str | None) -> str:
    """The ``study resume`` command a stopped driver prints, as it works when pasted: the study's
    folder (so no ``--root``), the concurrency it was given, and the Ray cluster it joined (the
    tracking URI is in study.json)."""
    return (f"study resume {study_dir}" + (f" --max-concurrent {max_concurrent}" if max_concurrent is not None else "")
            + (f" --address {address}" if address else ""))


@dataclass(frozen=True)
class StudySummary:
    """What one driver pass of :func:`launch` or :func:`resume` did (a dry run returns a
    :class:`DryRunPlan` instead). Run counts are the record's, not Tune's trial states."""

    name: str
    """The study's name (its MLflow experiment)."""
    study_dir: Path
    """The study folder."""
    tracking_uri: str
    """The record's store (it may hold a password: show it through ``record.store.redact``)."""
    trials: int
    """Tune trials this pass fitted (0 when every trial was already finished in the record)."""
    errors: int
    """Of those, the trials that ended in an error."""
    skipped: int
    """Trials not run because the record holds all their runs finished."""
    wall_seconds: float
    """The pass's wall time, seconds."""
    fit_seconds: float
    """The Tuner's ``fit`` wall time, seconds (0.0 when nothing was fitted)."""
    interrupted: bool
    """Whether a signal or the time limit stopped the pass (``study resume`` continues it)."""
    time_limit: bool
    """Whether it was the time limit (``--time-limit``): the exit status is then 75."""
    runs: RunCounts
    """The record's run counts after the pass."""


@dataclass(frozen=True)
class DryRunPlan:
    """What ``study launch --dry-run`` planned (printed on its ``out``; nothing was written)."""

    name: str
    """The study's name."""
    study_dir: Path
    """The folder a launch would create or continue."""
    n_trials: int
    """Tune trials the spec plans."""
    n_runs: int
    """Trial runs (cells x hparam points x seeds)."""
    data_problems: tuple[str, ...]
    """A task's data that is missing or unreadable, one line each."""
    size_warnings: tuple[str, ...]
    """Limits the spec exceeds (:data:`study.spec.SIZE_LIMITS`): a launch asks for ``--yes``."""
    disk_short: bool
    """Whether the study folder's disk lacks the space the plan needs."""


def summarise(name: str, study_dir: Path, tracking_uri: str, grid: ResultGrid | None, counts: RunCounts, *,
              skipped: int, wall_seconds: float, fit_seconds: float, interrupted: bool,
              timed_out: bool) -> StudySummary:
    """A driver pass's summary: the study, trials fitted and failed (``grid``: Tune's result
    grid or None), ``counts`` (the record's run counts), times in seconds, and whether a signal
    (``interrupted``) or the time limit (``time_limit``) stopped it."""
    return StudySummary(
        name=name, study_dir=Path(study_dir), tracking_uri=tracking_uri,
        trials=len(grid) if grid is not None else 0,
        errors=sum(1 for r in grid if r.error is not None) if grid is not None else 0,
        skipped=skipped, wall_seconds=wall_seconds, fit_seconds=fit_seconds,
        interrupted=interrupted, time_limit=interrupted and timed_out, runs=counts)


def summary_line(summary: StudySummary, *, max_concurrent: int | None, address: str | None,
                 deadline: tuple[float, float] | None) -> str:
    """The driver's last line: runs finished, failed and not finished, the record, and what to
    do next (resume after a signal or the time limit, else where to browse the record)."""
    name, study_dir, tracking_uri, runs = summary.name, summary.study_dir, summary.tracking_uri, summary.runs
    line = (f"[study {name}] {runs.finished} of {runs.expected} runs finished, "
            f"{runs.failed} failed, {runs.unfinished} not finished; record: "
            f"{tracking_uri} (experiment {name!r})")
    # The resume command says the concurrency this driver was given: the study resumes with
    # the spec's otherwise, which may be more trials than the user chose to run at once.
    again = resume_command(study_dir, max_concurrent, address)
    if summary.time_limit:
        limit_arg = limit_text(deadline[0])
        return (f"{line}. Time limit {limit_arg} reached (exit status {slices.EXIT_TIME_LIMIT}): "
                f"continue with `{again} --time-limit {limit_arg}`")
    if summary.interrupted:
        return f"{line}. Interrupted: continue with `{again}`"
    return f"{line}; {browse_advice(tracking_uri, study_dir, name)}"
