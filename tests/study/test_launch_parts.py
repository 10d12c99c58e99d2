"""The driver pass's parts that run without Ray: the summary and its last line
(:func:`study.driver.summary.summarise`, :func:`study.driver.summary.summary_line`)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from record.summary import RunCounts
from study.driver.summary import StudySummary, summarise, summary_line

COUNTS = RunCounts(expected=4, finished=3, failed=1, unfinished=0)


def _summary(tmp_path: Path, *, interrupted: bool = False, timed_out: bool = False) -> StudySummary:
    grid = [SimpleNamespace(error=None), SimpleNamespace(error=RuntimeError("nan"))]
    return summarise("s", tmp_path / "s", "sqlite:///x/mlflow.db", grid, COUNTS, skipped=2, wall_seconds=9.0,
                     fit_seconds=7.5, interrupted=interrupted, timed_out=timed_out)


def test_the_summary_counts_the_grids_trials_and_errors_and_the_records_runs(tmp_path: Path) -> None:
    summary = _summary(tmp_path)
    assert summary == StudySummary(name="s", study_dir=tmp_path / "s", tracking_uri="sqlite:///x/mlflow.db",
                                   trials=2, errors=1, skipped=2, wall_seconds=9.0, fit_seconds=7.5,
                                   interrupted=False, time_limit=False, runs=COUNTS)
    none = summarise("s", tmp_path, "u", None, COUNTS, skipped=0, wall_seconds=1.0, fit_seconds=0.0,
                     interrupted=True, timed_out=False)
    assert (none.trials, none.errors, none.time_limit) == (0, 0, False)


def test_the_last_line_says_what_to_do_next(tmp_path: Path) -> None:
    head = (f"[study s] 3 of 4 runs finished, 1 failed, 0 not finished; record: sqlite:///x/mlflow.db "
            "(experiment 's')")
    done = summary_line(_summary(tmp_path), max_concurrent=None, address=None, deadline=None)
    assert done == f"{head}; `study ui {tmp_path / 's'}` to browse"
    stopped = summary_line(_summary(tmp_path, interrupted=True), max_concurrent=2, address="auto", deadline=None)
    assert stopped == f"{head}. Interrupted: continue with `study resume {tmp_path / 's'} --max-concurrent 2 --address auto`"
    timed = summary_line(_summary(tmp_path, interrupted=True, timed_out=True), max_concurrent=None,
                         address=None, deadline=(5400.0, 0.0))
    assert timed == (f"{head}. Time limit 1h30m reached (exit status 75): continue with "
                     f"`study resume {tmp_path / 's'} --time-limit 1h30m`")
