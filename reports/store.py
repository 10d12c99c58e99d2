"""A study's runs as polars frames (:class:`RunSet`), from any store the record layer reads.

The reading itself (SQLite, Postgres or an MLflow server) is :func:`record.store.read_rows`;
this module names the tags reports need and shapes the rows into frames.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import polars as pl

from record import schema
from record.layout import STORE_FILE
from record.store import StoreError, read_rows, redact, sqlite_uri, unpack

# Tags read for every run: the run-record schema of docs/architecture.md §6.
RUN_TAGS: tuple[str, ...] = (
    schema.ROLE, schema.HPARAMS, schema.TASK, schema.VARIANT, schema.SEED, schema.N_SEEDS,
    schema.STATUS, schema.CODE_VERSION, schema.TABLES, schema.CELL, schema.DIRTY,
    schema.LABELS, schema.TABLE_DEFS,
)

# Short column names in the runs frame for the tags above.
TAG_COLUMNS: dict[str, str] = {
    schema.ROLE: "role",
    schema.HPARAMS: "hparams",
    schema.TASK: "task",
    schema.VARIANT: "variant",
    schema.SEED: "seed",
    schema.N_SEEDS: "n_seeds",
    schema.STATUS: "status",
    schema.CODE_VERSION: "code_version",
    schema.TABLES: "tables",
    schema.CELL: "cell",
    schema.DIRTY: "dirty",
    schema.LABELS: "labels",
    schema.TABLE_DEFS: "table_defs",
}


class ReportsError(ValueError):
    """A problem with the input of ``reports`` (missing study, empty store, bad option)."""


@dataclass(frozen=True)
class RunSet:
    """The runs of one study.

    ``runs``: one row per run with columns ``run_id, mlflow_status, start_time, end_time`` (ms),
    the tag columns of :data:`TAG_COLUMNS` (strings; ``seed``/``n_seeds`` as Int64) and one
    column per requested param (named by its key, e.g. ``task.t0``).
    ``metrics``: one row per run x metric: ``run_id, key, value``.
    """

    study: str
    source: str
    runs: pl.DataFrame
    metrics: pl.DataFrame

    def tidy(self) -> pl.DataFrame:
        """One row per run x metric, with the run's columns beside ``key`` and ``value``."""
        return self.metrics.join(self.runs, on="run_id", how="inner")

    def recorded_labels(self) -> list[str]:
        """The ``locattn.labels`` tags of the study's parent runs, as recorded at launch (none in
        a store from before); :meth:`reports.labels.StudyLabels.from_tags` reads them."""
        if "labels" not in self.runs.columns:
            return []
        return self.runs.filter(pl.col("role") == schema.ROLE_STUDY)["labels"].drop_nulls().to_list()


# ---------------------------------------------------------------------------------------------
# Locating the store


def resolve_source(
    study_dir: str | Path | None = None,
    *,
    tracking_uri: str | None = None,
    study: str | None = None,
) -> tuple[str, str]:
    """(tracking URI, study name) from a study directory or an explicit URI + name."""
    if study_dir is not None and tracking_uri is not None:
        raise ReportsError("give either a study directory or --tracking-uri, not both")
    if study_dir is not None:
        path = Path(study_dir)
        if not path.exists():
            raise ReportsError(
                f"study directory {str(path)!r} does not exist "
                f"(expected studies/<name>/ containing {STORE_FILE})"
            )
        if path.is_file():
            db = path
            name = study or path.resolve().parent.name
        else:
            db = path / STORE_FILE
            name = study or path.resolve().name
            try:
                unpack(db)  # a record committed compressed (mlflow.db.xz)
            except StoreError as exc:
                raise ReportsError(str(exc)) from None
            if not db.exists():
                raise ReportsError(
                    f"{str(path)!r} holds no {STORE_FILE}: it is not a study directory, "
                    "or the study has not started any run yet"
                )
        return sqlite_uri(db.resolve()), name
    if tracking_uri is None:
        raise ReportsError("give a study directory, or --tracking-uri together with --study NAME")
    if not study:
        raise ReportsError("--tracking-uri needs --study NAME (the MLflow experiment name)")
    return tracking_uri, study


def _wide(long: pl.DataFrame, keys: Iterable[str], rename: dict[str, str] | None) -> pl.DataFrame:
    keys = list(keys)
    if long.height:
        wide = long.pivot(on="key", index="run_id", values="value", aggregate_function="first")
    else:
        wide = pl.DataFrame(schema={"run_id": pl.String})
    for k in keys:
        if k not in wide.columns:
            wide = wide.with_columns(pl.lit(None, dtype=pl.String).alias(k))
    wide = wide.select(["run_id", *keys])
    return wide.rename(rename) if rename else wide


def runs_from_rows(
    study: str, source: str, runs: list[tuple], tags: list[tuple], params: list[tuple],
    metrics: list[tuple], param_keys: Sequence[str],
) -> RunSet:
    """:func:`assemble_runs` from plain rows: runs ``(run_id, mlflow_status, start_time,
    end_time)``, tags and params ``(run_id, key, value)``, metrics ``(run_id, key, float)``."""
    s3 = {"run_id": pl.String, "key": pl.String, "value": pl.String}
    return assemble_runs(
        study, source,
        pl.DataFrame(runs, schema={"run_id": pl.String, "mlflow_status": pl.String,
                                   "start_time": pl.Int64, "end_time": pl.Int64}, orient="row"),
        pl.DataFrame(tags, schema=s3, orient="row"),
        pl.DataFrame(params, schema=s3, orient="row"),
        pl.DataFrame(metrics, schema={"run_id": pl.String, "key": pl.String,
                                      "value": pl.Float64}, orient="row"),
        param_keys,
    )


def assemble_runs(
    study: str, source: str, runs: pl.DataFrame, tags: pl.DataFrame, params: pl.DataFrame,
    metrics: pl.DataFrame, param_keys: Sequence[str],
) -> RunSet:
    """One :class:`RunSet` from long-format runs, tags, params and metrics frames (the shape
    every reader produces: SQL, REST, or ``reports.synth``'s synthetic stores)."""
    tag_wide = _wide(tags, RUN_TAGS, TAG_COLUMNS)
    param_wide = _wide(params, param_keys, None)
    frame = (
        runs.join(tag_wide, on="run_id", how="left")
        .join(param_wide, on="run_id", how="left")
        .with_columns(
            pl.col("seed").cast(pl.Int64, strict=False),
            pl.col("n_seeds").cast(pl.Int64, strict=False),
            # The study writes locattn.status; fall back on MLflow's own status for runs
            # that never got the tag (killed before the first report).
            pl.coalesce(
                pl.col("status"),
                pl.col("mlflow_status").str.to_lowercase().replace(schema.MLFLOW_STATUS_FALLBACK),
            ).alias("status"),
        )
        .sort("run_id")
    )
    # A cell's run carries its seeds' medians for the MLflow UI: not a run of the record's tables.
    cells = frame.filter(pl.col("role") == schema.ROLE_CELL)["run_id"].to_list()
    return RunSet(study=study, source=source, runs=frame.filter(~pl.col("run_id").is_in(cells)),
                  metrics=metrics.filter(~pl.col("run_id").is_in(cells)).sort(["run_id", "key"]))


def read_runs(
    tracking_uri: str,
    study: str,
    *,
    metric_keys: Sequence[str] | None = None,
    metric_prefixes: Sequence[str] = (),
    param_keys: Sequence[str] = (),
) -> RunSet:
    """Read the runs of ``study`` (an MLflow experiment name) from ``tracking_uri``.

    ``metric_keys``: latest values of these metric keys (and of keys starting with one of
    ``metric_prefixes``); None reads every metric. ``param_keys``: params to add as columns.
    """
    try:
        rows = read_rows(tracking_uri, study, tag_keys=RUN_TAGS, metric_keys=metric_keys,
                         metric_prefixes=metric_prefixes, param_keys=param_keys)
    except StoreError as exc:
        raise ReportsError(str(exc)) from exc
    return runs_from_rows(study, redact(tracking_uri), rows.runs, rows.tags, rows.params,
                          rows.metrics, param_keys)
