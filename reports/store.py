"""Read a study's runs from an MLflow tracking store into polars frames.

Three ways in, one result (:class:`RunSet`):

- SQLite store (``sqlite:///...``, what the study package writes to ``<study_dir>/mlflow.db``):
  plain SQL through the standard library ``sqlite3`` module, read-only.
- Other SQL stores (``postgresql://``, ``mysql://``): the same SQL through SQLAlchemy.
- An MLflow server (``http://`` / ``https://``): ``MlflowClient.search_runs`` page by page.

The SQL reads only the tables ``experiments``, ``runs``, ``tags``, ``params`` and
``latest_metrics`` of the MLflow schema, and only the keys asked for.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence
from urllib.parse import unquote, urlsplit

import polars as pl

from study import schema

STORE_FILE = "mlflow.db"

# Tags read for every run: the run-record schema of docs/architecture.md §6.
RUN_TAGS: tuple[str, ...] = (
    schema.ROLE, schema.HPARAMS, schema.TASK, schema.VARIANT, schema.SEED, schema.N_SEEDS,
    schema.STATUS, schema.CODE_VERSION, schema.TABLES, schema.CELL,
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
            if not db.exists():
                raise ReportsError(
                    f"{str(path)!r} holds no {STORE_FILE}: it is not a study directory, "
                    "or the study has not started any run yet"
                )
        return f"sqlite:///{db.resolve()}", name
    if tracking_uri is None:
        raise ReportsError("give a study directory, or --tracking-uri together with --study NAME")
    if not study:
        raise ReportsError("--tracking-uri needs --study NAME (the MLflow experiment name)")
    return tracking_uri, study


def _redact(uri: str) -> str:
    parts = urlsplit(uri)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return uri.replace(parts.netloc, netloc)
    return uri


def _sqlite_path(uri: str) -> Path:
    # sqlite:////abs/path -> /abs/path ; sqlite:///rel/path -> rel/path
    rest = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else uri[len("sqlite://"):]
    return Path(unquote(rest.split("?", 1)[0]))


# ---------------------------------------------------------------------------------------------
# SQL access


class SQLReader:
    """Minimal query runner over sqlite3 (fast path) or SQLAlchemy (other databases)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        if uri.startswith("sqlite:"):
            path = _sqlite_path(uri)
            if not path.exists():
                raise ReportsError(f"SQLite store {str(path)!r} does not exist")
            self._conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            self._engine = None
        else:
            import sqlalchemy  # installed with mlflow

            try:
                self._engine = sqlalchemy.create_engine(uri)
                self._conn = self._engine.connect()
            except Exception as exc:  # driver missing, server down
                raise ReportsError(f"cannot open tracking store {_redact(uri)}: {exc}") from exc

    def query(self, sql: str, params: dict[str, object]) -> list[tuple]:
        try:
            if self._engine is None:
                return self._conn.execute(sql, params).fetchall()
            import sqlalchemy

            return [tuple(r) for r in self._conn.execute(sqlalchemy.text(sql), params)]
        except (sqlite3.DatabaseError,) as exc:
            raise ReportsError(
                f"{_redact(self.uri)} is not a readable MLflow store ({exc})"
            ) from exc

    def close(self) -> None:
        self._conn.close()
        if self._engine is not None:
            self._engine.dispose()


def _in_clause(name: str, values: Sequence[str]) -> tuple[str, dict[str, object]]:
    params = {f"{name}{i}": v for i, v in enumerate(values)}
    return ", ".join(f":{k}" for k in params), params


def _read_sql(
    uri: str, study: str, metric_keys: Sequence[str] | None, param_keys: Sequence[str],
    metric_prefixes: Sequence[str],
) -> RunSet:
    db = SQLReader(uri)
    try:
        try:
            exps = db.query(
                "SELECT experiment_id, name FROM experiments WHERE lifecycle_stage = 'active'", {}
            )
        except Exception as exc:
            raise ReportsError(f"{_redact(uri)} is not an MLflow tracking store ({exc})") from exc
        ids = [e for e, n in exps if n == study]
        if not ids:
            names = sorted(n for _, n in exps if n != "Default")
            raise ReportsError(
                f"study {study!r} not found in {_redact(uri)}; studies there: "
                + (", ".join(names) if names else "(none)")
            )
        exp = {"exp": ids[0]}
        run_filter = "r.experiment_id = :exp AND r.lifecycle_stage = 'active'"
        runs = db.query(
            "SELECT r.run_uuid, r.status, r.start_time, r.end_time FROM runs r "
            f"WHERE {run_filter}", exp,
        )
        tag_in, tag_params = _in_clause("t", RUN_TAGS)
        tags = db.query(
            "SELECT t.run_uuid, t.key, t.value FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid "
            f"WHERE {run_filter} AND t.key IN ({tag_in})", {**exp, **tag_params},
        )
        params: list[tuple] = []
        if param_keys:
            p_in, p_params = _in_clause("p", param_keys)
            params = db.query(
                "SELECT p.run_uuid, p.key, p.value FROM params p "
                "JOIN runs r ON r.run_uuid = p.run_uuid "
                f"WHERE {run_filter} AND p.key IN ({p_in})", {**exp, **p_params},
            )
        conds: list[str] = []
        m_params: dict[str, object] = {}
        if metric_keys is not None:
            if metric_keys:
                m_in, m_params = _in_clause("m", metric_keys)
                conds.append(f"m.key IN ({m_in})")
            for i, prefix in enumerate(metric_prefixes):
                m_params[f"pre{i}"] = prefix + "%"
                conds.append(f"m.key LIKE :pre{i}")
        where = f" AND ({' OR '.join(conds)})" if conds else ""
        if metric_keys is not None and not conds:
            metrics: list[tuple] = []
        else:
            metrics = db.query(
                "SELECT m.run_uuid, m.key, m.value, CASE WHEN m.is_nan THEN 1 ELSE 0 END FROM latest_metrics m "
                f"JOIN runs r ON r.run_uuid = m.run_uuid WHERE {run_filter}{where}",
                {**exp, **m_params},
            )
    finally:
        db.close()

    runs_df = pl.DataFrame(
        runs, schema={"run_id": pl.String, "mlflow_status": pl.String,
                      "start_time": pl.Int64, "end_time": pl.Int64},
        orient="row",
    )
    tags_df = pl.DataFrame(tags, schema={"run_id": pl.String, "key": pl.String, "value": pl.String},
                           orient="row")
    params_df = pl.DataFrame(params, schema={"run_id": pl.String, "key": pl.String,
                                             "value": pl.String}, orient="row")
    metrics_df = pl.DataFrame(
        metrics, schema={"run_id": pl.String, "key": pl.String, "value": pl.Float64,
                         "is_nan": pl.Int64}, orient="row",
    ).with_columns(
        pl.when(pl.col("is_nan") == 1).then(float("nan")).otherwise(pl.col("value")).alias("value")
    ).drop("is_nan")
    return assemble_runs(study, _redact(uri), runs_df, tags_df, params_df, metrics_df, param_keys)


# ---------------------------------------------------------------------------------------------
# MLflow server (REST) access


def _read_rest(
    uri: str, study: str, metric_keys: Sequence[str] | None, param_keys: Sequence[str],
    metric_prefixes: Sequence[str],
) -> RunSet:
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    try:
        exp = client.get_experiment_by_name(study)
    except Exception as exc:
        raise ReportsError(f"cannot reach the MLflow server at {_redact(uri)}: {exc}") from exc
    if exp is None:
        names = sorted(e.name for e in client.search_experiments() if e.name != "Default")
        raise ReportsError(
            f"study {study!r} not found on {_redact(uri)}; studies there: "
            + (", ".join(names) if names else "(none)")
        )
    wanted_tags = set(RUN_TAGS)
    wanted_params = set(param_keys)
    keyset = set(metric_keys) if metric_keys is not None else None
    runs, tags, params, metrics = [], [], [], []
    token = None
    while True:
        page = client.search_runs(
            [exp.experiment_id], run_view_type=ViewType.ACTIVE_ONLY, max_results=1000,
            page_token=token,
        )
        for r in page:
            rid = r.info.run_id
            runs.append((rid, r.info.status, r.info.start_time, r.info.end_time))
            tags.extend((rid, k, v) for k, v in r.data.tags.items() if k in wanted_tags)
            params.extend((rid, k, v) for k, v in r.data.params.items() if k in wanted_params)
            for k, v in r.data.metrics.items():
                if keyset is None or k in keyset or any(k.startswith(p) for p in metric_prefixes):
                    metrics.append((rid, k, float(v)))
        token = page.token
        if not token:
            break
    return runs_from_rows(study, _redact(uri), runs, tags, params, metrics, param_keys)


# ---------------------------------------------------------------------------------------------


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
                pl.col("mlflow_status").str.to_lowercase().replace(
                    {"killed": schema.STATUS_FAILED, "scheduled": schema.STATUS_RUNNING}
                ),
            ).alias("status"),
        )
        .sort("run_id")
    )
    return RunSet(study=study, source=source, runs=frame,
                  metrics=metrics.sort(["run_id", "key"]))


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
    scheme = urlsplit(tracking_uri).scheme
    if scheme in ("http", "https"):
        return _read_rest(tracking_uri, study, metric_keys, param_keys, metric_prefixes)
    if scheme in ("", "file"):
        raise ReportsError(
            f"tracking URI {tracking_uri!r} is a file store; reports reads SQL stores "
            "(sqlite:///..., postgresql://...) or an MLflow server (http://...)"
        )
    return _read_sql(tracking_uri, study, metric_keys, param_keys, metric_prefixes)
