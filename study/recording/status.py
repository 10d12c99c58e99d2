"""``study status``: per cell, seeds done / running / stale / failed / missing, in well under 2 s.

The command reads what it needs and nothing more: the saved ``study.json`` (the resolved grid,
seeds and hparams, without re-validating the spec, which would import torch), the runs through
the record's reader (:func:`record.store.read_rows`: plain ``sqlite3`` on a SQLite store), and
the driver record in ``study.lock``. It never imports torch, Ray, MLflow or polars.

A trial is *stale* (stopped, resumable) when the record says it is running, or interrupted, but
no driver runs the study: the lock file names no holder (a driver empties it on exit), or names a
PID on this host that no longer exists (``kill -9``, a crash). A driver on another host cannot be
checked from here; its trials count as running and the status line says where the driver is.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from record import schema
from locattn.folders import RUN_KEY as RUN_KEY_PATTERN
from record.layout import LOCK_FILE, RESULT_FILE, RUNS_DIR
from record.store import StoreError, StudyNotFound, read_rows
from study.recording.meta import StudyMeta
from study.spec import SpecError, cell_id

STALE = "stale"


@dataclass(frozen=True, kw_only=True)
class Driver:
    """What ``study.lock`` says about the study's driver."""

    pid: int | None = None
    """PID of the last driver that held the lock (None: never launched with a lock, or exited)."""
    host: str = ""
    """Host of that driver."""
    alive: bool | None = False
    """True: running here; False: not running; None: on another host, so unknown."""

    def describe(self) -> str:
        if self.pid is None:
            return "no driver running"
        where = f"PID {self.pid} on {self.host}"
        if self.alive is None:
            return f"driver {where} (another host: not checked from here)"
        return f"driver {where} is running" if self.alive else f"driver {where} is dead"


@dataclass(frozen=True, kw_only=True)
class CellStatus:
    """Counts of one cell."""

    cell: str
    expected: int
    seeds: dict[str, list[int]] = field(default_factory=dict)
    """Status (finished, running, stale, failed) -> sorted seeds with a run in that status."""

    def count(self, status: str) -> int:
        return len(self.seeds.get(status, []))

    @property
    def missing(self) -> int:
        return max(0, self.expected - sum(len(v) for v in self.seeds.values()))


def pid_alive(pid: int) -> bool:
    """Whether a process with this PID exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_driver(study_dir: Path) -> Driver:
    """The driver recorded in ``<study_dir>/study.lock`` and whether it still runs."""
    try:
        text = (study_dir / LOCK_FILE).read_text()
        record = json.loads(text) if text.strip() else {}
    except (OSError, ValueError):
        record = {}
    if not isinstance(record, dict) or not record.get("pid"):
        return Driver()
    pid, host = int(record["pid"]), str(record.get("host", ""))
    if host and host != socket.gethostname():
        return Driver(pid=pid, host=host, alive=None)
    return Driver(pid=pid, host=host or socket.gethostname(), alive=pid_alive(pid))


def expected_cells(resolved: Mapping[str, Any]) -> tuple[list[str], int]:
    """(cell ids in grid order, runs expected per cell) from the resolved spec in ``study.json``.

    The same expansion as :func:`study.spec.resolve_spec` (task and variant first, an ablation by
    its name, other axes by value), without validating the configs again.
    """
    grid = resolved.get("grid") or {}
    cells = []
    for combo in itertools.product(*grid.values()):
        label = {}
        for key, value in zip(grid, combo):
            label[key] = value["name"] if key == "ablation" and isinstance(value, Mapping) else value
        cells.append(cell_id(label))
    points = 1
    for values in (resolved.get("hparams") or {}).values():
        points *= len(values)
    search = resolved.get("search")
    per_point = int(search.get("num_samples", 8)) if isinstance(search, Mapping) else 1
    return cells, len(resolved.get("seeds") or []) * points * per_point


def trial_runs(tracking_uri: str, name: str) -> list[tuple[str, int, str]]:
    """(cell, seed, status) of the study's trial runs, read from its store."""
    return [(cell, seed, status) for cell, seed, status, _ in keyed_trial_runs(tracking_uri, name)]


def keyed_trial_runs(tracking_uri: str, name: str) -> list[tuple[str, int, str, str]]:
    """(cell, seed, status, run key) of the study's trial runs, read from its store (the key
    ``""`` for a run without a ``locattn.run_key`` tag)."""
    try:
        rows = read_rows(tracking_uri, name, tag_keys=(schema.ROLE, schema.CELL, schema.SEED,
                                                       schema.STATUS, schema.RUN_KEY), metric_keys=[])
    except StudyNotFound:
        return []  # launched, but no run recorded yet
    except StoreError as exc:
        if "does not exist" in str(exc):
            return []  # launched, but the store is not created yet
        raise SpecError(str(exc)) from None
    tags: dict[str, dict[str, str]] = {}
    for run_id, key, value in rows.tags:
        tags.setdefault(run_id, {})[key] = value
    out = []
    for run_id, mlflow_status, _, _ in sorted(rows.runs):
        t = tags.get(run_id, {})
        if t.get(schema.ROLE) == schema.ROLE_TRIAL and schema.CELL in t:
            seed = t.get(schema.SEED)
            out.append((t[schema.CELL], -1 if seed is None else int(seed),
                        t.get(schema.STATUS) or _status_of(mlflow_status), t.get(schema.RUN_KEY, "")))
    return out


def _status_of(mlflow_status: str) -> str:
    """A run without a ``locattn.status`` tag, by MLflow's own status."""
    status = (mlflow_status or "").lower()
    return schema.MLFLOW_STATUS_FALLBACK.get(status, status)


def study_status(meta: StudyMeta, study_dir: Path) -> tuple[list[CellStatus], Driver]:
    """Per-cell status of a study (``meta``: its ``study.json``, :func:`study.recording.folder.load_meta`) and its driver."""
    # A study.json without the resolved spec (none written so far) still lists its runs by cell.
    cells, expected = expected_cells(meta.resolved or {})
    driver = read_driver(study_dir)
    by_cell: dict[str, dict[str, list[int]]] = {c: {} for c in cells}
    for cell, seed, status, key in keyed_trial_runs(meta.tracking_uri, meta.name):
        if status != schema.STATUS_FINISHED and finished_in_folder(study_dir, key):
            # its result.json is written, the record's finish is not (a driver killed in between):
            # finished, as the next resume counts it and records it (study.recording.record_callback.reconcile)
            status = schema.STATUS_FINISHED
        elif status == schema.STATUS_INTERRUPTED or (status == schema.STATUS_RUNNING and driver.alive is False):
            status = STALE  # stopped with its driver (Ctrl-C, kill): resumable
        by_cell.setdefault(cell, {}).setdefault(status, []).append(seed)
    rows = [CellStatus(cell=c, expected=expected, seeds={k: sorted(v) for k, v in s.items()})
            for c, s in by_cell.items()]
    return rows, driver


def finished_in_folder(study_dir: Path, key: str) -> bool:
    """Whether the run ``key``'s folder holds its ``result.json``, which a run writes last: the
    run finished, recorded or not (``study runs`` says ``finished`` for it too)."""
    return bool(RUN_KEY_PATTERN.fullmatch(key)) and (study_dir / RUNS_DIR / key / RESULT_FILE).is_file()


COLUMNS = (("done", schema.STATUS_FINISHED), ("running", schema.STATUS_RUNNING), ("stale", STALE),
           ("failed", schema.STATUS_FAILED))


def format_status(rows: list[CellStatus], driver: Driver, study: str) -> str:
    """A compact per-cell table, a total, and a line about the driver."""
    width = max([len("cell")] + [len(r.cell) for r in rows])
    head = "  ".join(f"{name:>{max(4, len(name))}}" for name, _ in COLUMNS)
    lines = [f"{'cell':<{width}}  {head}  missing"]
    totals = dict.fromkeys([s for _, s in COLUMNS], 0)
    missing = 0
    for r in rows:
        cols = "  ".join(f"{r.count(s):>{max(4, len(n))}}" for n, s in COLUMNS)
        extra = ""
        for label, status in (("failed", schema.STATUS_FAILED), ("stale", STALE)):
            if r.seeds.get(status):
                extra += f"  {label} seeds {r.seeds[status]}"
        lines.append(f"{r.cell:<{width}}  {cols}  {r.missing:>7}{extra}")
        for _, s in COLUMNS:
            totals[s] += r.count(s)
        missing += r.missing
    cols = "  ".join(f"{totals[s]:>{max(4, len(n))}}" for n, s in COLUMNS)
    lines.append(f"{'total':<{width}}  {cols}  {missing:>7}")
    note = driver.describe()
    if totals[STALE]:
        note += f"; {totals[STALE]} run(s) stopped with it, resumable: study resume {study}"
    lines.append(note)
    return "\n".join(lines)
