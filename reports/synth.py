"""Synthetic study stores for tests and benchmarks.

Two writers of the same run records (the schema of :mod:`record.schema`):

- :func:`write_with_client`: through ``MlflowClient`` (slow, exactly what the study writes);
- :func:`write_bulk_sql`: MLflow creates the SQLite schema, then rows are bulk-inserted with SQL
  (fast; for the 10,000-run benchmark).

:func:`synth_study` makes the runs of given cells (:class:`SynthCell`: what a spec plans, its
cell ids and logged params; ``benchmarks/bench_reports.py`` derives them from the committed
specs) with the metrics the report tables read (:func:`table_metrics`), any number of them.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from record import schema
from record.store import insert_rows, sqlite_uri


@dataclass(frozen=True, kw_only=True)
class SynthRun:
    """One trial run to write."""

    task: str
    """Task key."""
    variant: str
    """Variant key."""
    seed: int
    """Seed."""
    hparams: dict = field(default_factory=dict)
    """Selection hyperparameters (also logged as params)."""
    status: str = schema.STATUS_FINISHED
    """``finished``, ``running`` or ``failed``."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Final metrics (``best_selection_score``, ``test.<split>.<metric>``, ...)."""
    params: dict[str, str] = field(default_factory=dict)
    """Extra params (e.g. ``task.t0``); part of the cell id."""
    n_seeds: int = 5
    """Seeds the spec expects for the cell."""
    end_time_ms: int | None = None
    """End time; default: start + 1 s. Running runs get none."""
    history: dict[str, tuple[float, ...]] = field(default_factory=dict)
    """Per-epoch metrics (step = epoch from 1), e.g. ``{"dev_score": (0.1, 0.5)}``."""
    cell: str = ""
    """Cell id as the study tags it; empty: ``task=..,variant=..`` and every param in key order."""


def _cell(run: SynthRun) -> str:
    if run.cell:
        return run.cell
    extra = "".join(f",{k}={v}" for k, v in sorted(run.params.items()))
    return f"task={run.task},variant={run.variant}{extra}"


def _tags(study: str, run: SynthRun) -> dict[str, str]:
    hp = json.dumps(run.hparams, sort_keys=True)
    key = hashlib.sha1(f"{study}|{_cell(run)}|{hp}|{run.seed}".encode()).hexdigest()[:16]
    tags = {
        schema.ROLE: schema.ROLE_TRIAL, schema.STUDY: study, schema.RUN_KEY: key,
        schema.CELL: _cell(run), schema.HPARAMS: hp, schema.TASK: run.task,
        schema.VARIANT: run.variant, schema.SEED: str(run.seed),
        schema.N_SEEDS: str(run.n_seeds), schema.STATUS: run.status,
        schema.CODE_VERSION: "synthetic", schema.DEV_SCORING: "teacher_forced",
    }
    if run.status == schema.STATUS_FAILED:
        tags[schema.ERROR] = "synthetic failure"
    return tags


def _params(run: SynthRun) -> dict[str, str]:
    p = {"task.name": run.task, "variant": run.variant, "seed": str(run.seed)}
    p.update({k: str(v) for k, v in run.hparams.items()})
    p.update(run.params)
    return p


_MLFLOW_STATUS = {schema.STATUS_FINISHED: "FINISHED", schema.STATUS_FAILED: "FAILED",
                  schema.STATUS_RUNNING: "RUNNING"}


def write_with_client(tracking_uri: str, study: str, runs: Iterable[SynthRun], *,
                      tables: Sequence[str] = (), t0_ms: int = 1_700_000_000_000) -> list[str]:
    """Write a parent run and ``runs`` through ``MlflowClient``; returns the trial run ids."""
    # mlflow (about 1 s) only when a store is written through its client
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(study)
    eid = exp.experiment_id if exp else client.create_experiment(study)
    parent = client.create_run(eid, start_time=t0_ms, tags={
        schema.ROLE: schema.ROLE_STUDY, schema.STUDY: study, schema.TABLES: ",".join(tables),
        schema.STATUS: schema.STATUS_FINISHED,
    })
    ids = []
    for i, r in enumerate(runs):
        start = t0_ms + 1000 * (i + 1)
        tags = _tags(study, r) | {"mlflow.parentRunId": parent.info.run_id}
        run = client.create_run(eid, start_time=start, tags=tags)
        rid = run.info.run_id
        client.log_batch(
            rid,
            metrics=[Metric(k, float(v), start + 500, 0) for k, v in sorted(r.metrics.items())],
            params=[Param(k, v) for k, v in sorted(_params(r).items())],
        )
        if r.status != schema.STATUS_RUNNING:
            client.set_terminated(rid, status=_MLFLOW_STATUS[r.status],
                                  end_time=r.end_time_ms or start + 1000)
        ids.append(rid)
    client.set_terminated(parent.info.run_id, end_time=t0_ms + 1000 * (len(ids) + 2))
    return ids


def create_empty_store(db_path: str | Path, study: str) -> int:
    """Let MLflow create its SQLite schema and the study's experiment; returns its id."""
    from mlflow.tracking import MlflowClient  # mlflow only when a store is created

    client = MlflowClient(tracking_uri=sqlite_uri(Path(db_path).resolve()))
    exp = client.get_experiment_by_name(study)
    return int(exp.experiment_id if exp else client.create_experiment(study))


def write_bulk_sql(db_path: str | Path, study: str, runs: Iterable[SynthRun], *,
                   tables: Sequence[str] = (), t0_ms: int = 1_700_000_000_000, first_id: int = 0) -> int:
    """Create the schema with MLflow (or the study's experiment in a store that has it), then
    insert ``runs`` (and a parent) with plain SQL.

    Fills ``runs``, ``tags``, ``params``, ``latest_metrics`` and ``metrics`` as MLflow does.
    Run ids are the UUIDs of the integers from ``first_id + 1`` (the parent) on, so that several
    studies written into one store each get their own (start the next at ``first_id`` plus the
    count returned). Returns the number of runs written (trials + parent).
    """
    eid = create_empty_store(db_path, study)
    run_rows, tag_rows, param_rows, lm_rows, m_rows = [], [], [], [], []

    def add_run(rid: str, status: str, start: int, end: int | None) -> None:
        run_rows.append((rid, rid[:8], "LOCAL", "synth", "", "synth", status, start, end, "",
                         "active", f"mlflow-artifacts:/{eid}/{rid}/artifacts", eid))

    parent = uuid.UUID(int=first_id + 1).hex
    add_run(parent, "FINISHED", t0_ms, None)
    tag_rows += [(schema.ROLE, schema.ROLE_STUDY, parent), (schema.STUDY, study, parent),
                 (schema.TABLES, ",".join(tables), parent)]
    n = 1
    last_end = t0_ms
    for i, r in enumerate(runs):
        rid = uuid.UUID(int=first_id + i + 2).hex
        start = t0_ms + 1000 * (i + 1)
        end = None if r.status == schema.STATUS_RUNNING else (r.end_time_ms or start + 1000)
        add_run(rid, _MLFLOW_STATUS[r.status], start, end)
        last_end = max(last_end, end or 0)
        tag_rows += [(k, v, rid) for k, v in _tags(study, r).items()]
        tag_rows.append(("mlflow.parentRunId", parent, rid))
        param_rows += [(k, v, rid) for k, v in _params(r).items()]
        for k, v in r.metrics.items():
            lm_rows.append((k, float(v), start + 500, 0, 0, rid))
            m_rows.append((k, float(v), start + 500, rid, 0, 0))
        for k, vs in r.history.items():
            for step, v in enumerate(vs, start=1):
                m_rows.append((k, float(v), start + step, rid, step, 0))
            if vs:
                lm_rows.append((k, float(vs[-1]), start + len(vs), len(vs), 0, rid))
        n += 1
    run_rows[0] = run_rows[0][:8] + (last_end + 1000,) + run_rows[0][9:]
    insert_rows(db_path, {
        "runs": (("run_uuid", "name", "source_type", "source_name", "entry_point_name", "user_id",
                  "status", "start_time", "end_time", "source_version", "lifecycle_stage",
                  "artifact_uri", "experiment_id"), run_rows),
        "tags": (("key", "value", "run_uuid"), tag_rows),
        "params": (("key", "value", "run_uuid"), param_rows),
        "latest_metrics": (("key", "value", "timestamp", "step", "is_nan", "run_uuid"), lm_rows),
        "metrics": (("key", "value", "timestamp", "run_uuid", "step", "is_nan"), m_rows),
    })
    return n


def runset_from_synth(study: str, runs: Sequence[SynthRun], *, tables: Sequence[str] = (),
                      param_keys: Sequence[str] = (), t0_ms: int = 1_700_000_000_000):
    """An in-memory :class:`~reports.runset.RunSet` with the same columns the readers produce."""
    from reports.runset import runs_from_rows  # polars: only when an in-memory store is built

    run_rows, tag_rows, param_rows, metric_rows = [], [], [], []
    parent = uuid.UUID(int=1).hex
    run_rows.append((parent, "FINISHED", t0_ms, t0_ms + 1000 * (len(runs) + 2)))
    tag_rows += [(parent, schema.ROLE, schema.ROLE_STUDY), (parent, schema.STUDY, study),
                 (parent, schema.TABLES, ",".join(tables))]
    for i, r in enumerate(runs):
        rid = uuid.UUID(int=i + 2).hex
        start = t0_ms + 1000 * (i + 1)
        end = None if r.status == schema.STATUS_RUNNING else (r.end_time_ms or start + 1000)
        run_rows.append((rid, _MLFLOW_STATUS[r.status], start, end))
        tag_rows += [(rid, k, v) for k, v in _tags(study, r).items()]
        param_rows += [(rid, k, v) for k, v in _params(r).items() if k in param_keys]
        metric_rows += [(rid, k, float(v)) for k, v in r.metrics.items()]
    return runs_from_rows(study, "memory", run_rows, tag_rows, param_rows, metric_rows, param_keys)


# ---------------------------------------------------------------------------- runs of planned cells


@dataclass(frozen=True, kw_only=True)
class SynthCell:
    """One cell of a study as its spec plans it."""

    cell: str
    """Cell id (``task=copy,variant=onestep[,axis=value]``), as the study tags its runs."""
    task: str
    """Task key."""
    variant: str
    """Variant key."""
    params: Mapping[str, str] = field(default_factory=dict)
    """What each run of the cell logs as params: its flattened config as the study's writer
    logs it (``record.writer.param_items``), without ``seed``, which each run adds."""
    points: tuple[Mapping[str, object], ...] = ({},)
    """The hparams points the cell trains, each logged as params too."""
    seeds: tuple[int, ...] = (0,)
    """The seeds the spec plans per point."""


#: Metrics a run logs per epoch (the study's epoch metrics a report reads: the learning curve).
HISTORY_METRICS = ("train_loss", "dev_loss", "dev_score", "dev_seq_acc", "lr", "epoch_seconds")


def table_metrics(tables: Iterable[object]) -> dict[str, tuple[str, ...]]:
    """Task -> the final metric keys a run of it logs that the given report tables read:
    ``test.<split>.<metric>`` for every split any of them reads of the task and every metric
    any of them reads of it, and ``epochs_to_100`` where a table reads it (Raffel & Ellis).
    ``tables``: :class:`reports.tables.TableDef` objects."""
    splits: dict[str, dict[str, None]] = {}
    metrics: dict[str, dict[str, None]] = {}
    for t in tables:
        for c in t.columns:
            for task in c.tasks:
                splits.setdefault(task, {}).update(dict.fromkeys(c.splits))
                metrics.setdefault(task, {})[t.metric if t.kind == "split" else "accuracy"] = None
                if t.kind == "epochs_or_accuracy":
                    metrics[task]["epochs_to_100"] = None
    out = {}
    for task, names in metrics.items():
        keys = [f"test.{s}.{m}" for s in splits[task] for m in names if m != "epochs_to_100"]
        out[task] = tuple(keys + (["epochs_to_100"] if "epochs_to_100" in names else []))
    return out


def _value(key: str, rng: np.random.Generator) -> float:
    """A plausible value of a metric: a fraction for accuracies, a count or distance otherwise."""
    name = key.rsplit(".", 1)[-1]
    if name == "epochs_to_100":
        return float(rng.integers(1, 30))
    if "acc" in name:
        return float(rng.uniform())
    return float(rng.uniform(0, 50))


def synth_study(cells: Sequence[SynthCell], metrics: Mapping[str, Sequence[str]], n_runs: int, *,
                epochs: int = 0, seed: int = 0, unfinished: float = 0.02) -> list[SynthRun]:
    """``n_runs`` runs of ``cells``: first one run of every cell (its first point, first seed),
    then the rest of every cell's points and seeds, then further seeds beyond the spec's, round
    by round, so that any ``n_runs`` of at least ``len(cells)`` holds every cell and every
    table, and a larger one the planned study and then more seeds of it. Each run logs its
    cell's params and point, the final metrics its task's ``metrics`` names (``epochs_to_100``
    for 70 % of the runs), ``best_selection_score`` and, with ``epochs``, a history of
    :data:`HISTORY_METRICS`; ``unfinished`` of them are running or failed. The ``n_seeds`` tag
    of a run is the number of seeds its cell and point get in the store."""
    rng = np.random.default_rng(seed)
    plan: list[tuple[SynthCell, int, int]] = []  # (cell, point index, seed)
    first = {(id(c), 0, c.seeds[0]) for c in cells}
    plan += [(c, 0, c.seeds[0]) for c in cells]
    plan += [(c, p, s) for c in cells for p in range(len(c.points)) for s in c.seeds if (id(c), p, s) not in first]
    extra = 0
    while len(plan) < n_runs and cells:
        extra += 1
        plan += [(c, p, s + extra * (max(c.seeds) + 1)) for c in cells for p in range(len(c.points)) for s in c.seeds]
    plan = plan[:n_runs]
    count: dict[tuple[int, int], int] = {}
    for c, p, _ in plan:
        count[(id(c), p)] = count.get((id(c), p), 0) + 1
    runs = []
    for c, p, s in plan:
        m = {"best_selection_score": float(rng.uniform()), "best_epoch": float(rng.integers(1, 100)),
             "epochs_run": 100.0}
        for key in metrics.get(c.task, ()):
            if key != "epochs_to_100" or rng.uniform() < 0.7:
                m[key] = _value(key, rng)
        hist = {k: tuple(float(x) for x in rng.uniform(size=epochs)) for k in HISTORY_METRICS} if epochs else {}
        status = schema.STATUS_FINISHED if rng.uniform() >= unfinished else str(
            rng.choice([schema.STATUS_RUNNING, schema.STATUS_FAILED]))
        point = dict(c.points[p])
        runs.append(SynthRun(task=c.task, variant=c.variant, seed=s, hparams=point, cell=c.cell,
                             params={**c.params, **{k: str(v) for k, v in point.items()}}, metrics=m,
                             n_seeds=count[(id(c), p)], status=status, history=hist))
    return runs
