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

# Tags read for every run: the run-record schema (:mod:`record.schema`).
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
    records: tuple["RecordRef", ...] = ()
    """The records read (:func:`read_records`), in the order given; empty for a run set built
    otherwise (then every run is of ``study``). With several records ``runs`` has a ``record``
    column (the :attr:`RecordRef.name` each run was read from) and ``run_id`` is
    ``<record name>/<run id>`` (two stores may use one run id)."""
    n_shared: int = 0
    """Runs that two or more of ``records`` hold equal (one run identity, the same config and
    results), each taken once."""

    def runs_with_record(self) -> pl.DataFrame:
        """``runs`` with the ``record`` column: the record each run was read from (for a run set
        of one record, its name, else ``study``)."""
        if "record" in self.runs.columns:
            return self.runs
        name = self.records[0].name if self.records else self.study
        return self.runs.with_columns(pl.lit(name).alias("record"))

    def tidy(self) -> pl.DataFrame:
        """One row per run x metric, with the run's columns beside ``key`` and ``value``."""
        return self.metrics.join(self.runs, on="run_id", how="inner")

    def recorded_labels(self) -> list[str]:
        """The ``locattn.labels`` tags of the study's parent runs, as recorded at launch (none in
        a store from before); :meth:`reports.row_labels.StudyLabels.from_tags` reads them."""
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


# ---------------------------------------------------------------------------------------------
# Several records: one run set from many stores, merged by run identity

#: Keys of a campaign file: ``records`` (required) lists the records, ``name`` names the merged
#: run set in captions, ``tables`` the table ids built by default.
CAMPAIGN_KEYS = ("records", "name", "tables")
#: Keys of a ``records:`` entry written as a mapping (``path`` or ``uri``; ``study`` with a URI).
CAMPAIGN_RECORD_KEYS = ("path", "uri", "study")
#: A source argument ending so is a campaign file.
CAMPAIGN_SUFFIXES = (".yaml", ".yml")
#: Metrics that time a run rather than measure it: two records' copies of one run may differ in
#: them and still be equal.
TIMING_METRICS = frozenset({"epoch_seconds", "compile_seconds", "compiles", "wall_seconds"})


class RecordConflict(ReportsError):
    """Two records hold one run identity (cell, hparams, seed) with a different config or result."""


@dataclass(frozen=True)
class RecordSource:
    """One record to read. ``location``: a study directory (``results/record/<name>/``, holding
    ``mlflow.db`` or ``mlflow.db.xz``), its store file, or a tracking URI (``sqlite:///``,
    ``postgresql://``, ``http://``). ``study``: the MLflow experiment; default the directory's
    name (required with a URI)."""

    location: str | Path
    study: str | None = None


@dataclass(frozen=True)
class RecordRef:
    """A record as read. ``name``: what cells and provenance call it (its study name, or
    ``study@location`` when two records given share a study name); ``study``: its MLflow
    experiment; ``source``: its tracking URI, password redacted."""

    name: str
    study: str
    source: str


@dataclass(frozen=True)
class Campaign:
    """A campaign file (YAML): the records a table is built from, paths relative to the file.

    ``records: [../record/rc_table4-gpu, {uri: "postgresql://...", study: NAME}]``, optional
    ``name`` (the run set's name in captions) and ``tables`` (ids built when none is asked for).
    """

    path: Path
    records: tuple[RecordSource, ...]
    name: str | None = None
    tables: tuple[str, ...] | None = None


Source = str | Path | RecordSource


def is_campaign(source: Source) -> bool:
    """Whether ``source`` names a campaign file (a ``.yaml``/``.yml`` path)."""
    return not isinstance(source, RecordSource) and Path(str(source)).suffix in CAMPAIGN_SUFFIXES


def load_campaign(path: str | Path) -> Campaign:
    """Read a campaign file; :class:`ReportsError` in one line naming the file and the key (a
    missing or unreadable file, a key not in :data:`CAMPAIGN_KEYS`, an entry naming no record
    that exists)."""
    import yaml  # a campaign file only: a plain build never parses YAML

    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportsError(f"campaign file {str(path)!r}: cannot read it ({exc.__class__.__name__}: "
                           f"{getattr(exc, 'strerror', None) or exc})") from None
    except yaml.YAMLError as exc:
        raise ReportsError(f"campaign file {str(path)!r}: not YAML ({' '.join(str(exc).split())})") from None
    where = f"campaign file {str(path)!r}"
    if not isinstance(doc, dict):
        raise ReportsError(f"{where}: expected a mapping with the keys {', '.join(CAMPAIGN_KEYS)}")
    unknown = [k for k in doc if k not in CAMPAIGN_KEYS]
    if unknown:
        raise ReportsError(f"{where}: unknown key {unknown[0]!r}; valid: {', '.join(CAMPAIGN_KEYS)}")
    entries = doc.get("records")
    if not isinstance(entries, list) or not entries:
        raise ReportsError(f"{where}: 'records' must list one or more records (study directories, "
                           f"store files, or {{uri: URI, study: NAME}})")
    records = tuple(_campaign_record(where, path.parent, i, e) for i, e in enumerate(entries))
    name = doc.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ReportsError(f"{where}: 'name' must be a non-empty string, got {name!r}")
    tables = doc.get("tables")
    if isinstance(tables, str):
        tables = [t.strip() for t in tables.split(",") if t.strip()]
    if tables is not None and (not isinstance(tables, list) or not tables
                               or not all(isinstance(t, str) and t for t in tables)):
        raise ReportsError(f"{where}: 'tables' must list table ids, got {doc.get('tables')!r}")
    return Campaign(path=path, records=records, name=name.strip() if name else None,
                    tables=tuple(tables) if tables else None)


def _campaign_record(where: str, base: Path, i: int, entry: object) -> RecordSource:
    """``records[i]`` of a campaign file as a :class:`RecordSource` (paths joined to ``base``)."""
    at = f"{where}: records[{i}]"
    if isinstance(entry, str):
        entry = {"uri": entry} if "://" in entry else {"path": entry}
    if not isinstance(entry, dict):
        raise ReportsError(f"{at}: expected a path or a mapping with {', '.join(CAMPAIGN_RECORD_KEYS)}, "
                           f"got {entry!r}")
    unknown = [k for k in entry if k not in CAMPAIGN_RECORD_KEYS]
    if unknown:
        raise ReportsError(f"{at}: unknown key {unknown[0]!r}; valid: {', '.join(CAMPAIGN_RECORD_KEYS)}")
    if ("path" in entry) == ("uri" in entry):
        raise ReportsError(f"{at}: give exactly one of 'path' (a study directory or store file) and 'uri'")
    study = entry.get("study")
    if study is not None and not isinstance(study, str):
        raise ReportsError(f"{at}: 'study' must be a string, got {study!r}")
    if "uri" in entry:
        uri = entry["uri"]
        if not isinstance(uri, str) or "://" not in uri:
            raise ReportsError(f"{at}: 'uri' must be a tracking URI (sqlite:///..., postgresql://..., "
                               f"http://host:port), got {uri!r}")
        if not study:
            raise ReportsError(f"{at}: 'uri' {redact(uri)!r} needs 'study' (the MLflow experiment name)")
        return RecordSource(uri, study)
    if not isinstance(entry["path"], str) or not entry["path"]:
        raise ReportsError(f"{at}: 'path' must be a path, got {entry['path']!r}")
    location = base / entry["path"]
    if not location.exists():
        raise ReportsError(f"{at}: {entry['path']!r} does not exist (looked for {str(location)!r}; "
                           f"paths are relative to the campaign file)")
    if is_campaign(location):
        raise ReportsError(f"{at}: {entry['path']!r} is a campaign file; list its records instead")
    return RecordSource(location, study)


def expand_sources(sources: Source | Sequence[Source], study: str | None = None
                   ) -> tuple[list[RecordSource], list[Campaign]]:
    """The records named by ``sources`` (study directories, store files, URIs with ``study``,
    :class:`RecordSource`, campaign files, or a sequence of them), campaign files expanded in
    place; and the campaigns read. ``study`` names the experiment of a single source only."""
    items = [sources] if isinstance(sources, (str, Path, RecordSource)) else list(sources)
    if not items:
        raise ReportsError("no record given: give a study directory, a store, or a campaign file")
    if study is not None and len(items) > 1:
        raise ReportsError("--study names the experiment of one source; with several, write a campaign "
                           "file whose records say {path: DIR, study: NAME}")
    records: list[RecordSource] = []
    campaigns: list[Campaign] = []
    for item in items:
        if is_campaign(item):
            campaigns.append(load_campaign(item))
            records += campaigns[-1].records
        elif isinstance(item, RecordSource):
            records.append(item)
        else:
            records.append(RecordSource(item, study))
    return records, campaigns


def resolve_record(src: RecordSource) -> tuple[str, str]:
    """(tracking URI, study name) of one record (:func:`resolve_source`)."""
    loc = str(src.location)
    if "://" in loc:
        return resolve_source(tracking_uri=loc, study=src.study)
    return resolve_source(loc, study=src.study)


def record_refs(sources: Sequence[RecordSource]) -> list[tuple[RecordRef, str]]:
    """Each distinct record of ``sources`` (a store and study given twice is read once) with its
    tracking URI, named by its study, or ``study@location`` where two share a study name."""
    seen: dict[tuple[str, str], RecordSource] = {}
    for src in sources:
        seen.setdefault(resolve_record(src), src)
    names = [study for _, study in seen]
    out = []
    for (uri, study), src in seen.items():
        name = study if names.count(study) == 1 else f"{study}@{src.location}"
        out.append((RecordRef(name=name, study=study, source=redact(uri)), uri))
    return out


def read_records(
    sources: Sequence[RecordSource],
    *,
    name: str | None = None,
    metric_keys: Sequence[str] | None = None,
    metric_prefixes: Sequence[str] = (),
    param_keys: Sequence[str] = (),
) -> RunSet:
    """One :class:`RunSet` of the runs of every record in ``sources`` (:func:`read_runs` each).

    A trial run's identity is its cell, hparams and seed (its ``locattn.run_key`` without the
    study's name). An identity held by several records is taken once, from the first, when every
    record holds it equal: the same ``locattn.status``, the same params but those that never
    change what a run computes (``locattn.config.OPERATIONAL_FIELDS``) and the same latest
    metrics but :data:`TIMING_METRICS`; else :class:`RecordConflict` names both records, the
    identity and the first field that differs. ``name``: the run set's study name (default the
    records' names joined by ``+``). One record: its run set as :func:`read_runs` reads it.
    """
    refs = record_refs(sources)
    sets = [read_runs(uri, ref.study, metric_keys=metric_keys, metric_prefixes=metric_prefixes,
                      param_keys=param_keys) for ref, uri in refs]
    if len(sets) == 1:
        return RunSet(study=name or sets[0].study, source=sets[0].source, runs=sets[0].runs,
                      metrics=sets[0].metrics, records=(refs[0][0],))
    runs = pl.concat([rs.runs.with_columns(pl.lit(ref.name).alias("record"), pl.lit(i).alias("_rec"))
                      for i, (rs, (ref, _)) in enumerate(zip(sets, refs))], how="vertical_relaxed")
    runs = runs.with_columns(_identity())
    shared = (runs.filter(pl.col("_identity").is_not_null())
              .group_by("_identity").agg(pl.col("_rec").n_unique().alias("k"))
              .filter(pl.col("k") > 1)["_identity"])
    dup = runs.filter(pl.col("_identity").is_in(shared.implode())).sort("_rec", "run_id")
    drop = _taken_once(dup, refs)
    qualified = pl.col("record") + "/" + pl.col("run_id")
    kept = runs.filter(~pl.format("{}/{}", pl.col("_rec"), pl.col("run_id")).is_in(sorted(drop)))
    metrics = pl.concat([rs.metrics.with_columns(pl.lit(i).alias("_rec")) for i, rs in enumerate(sets)])
    metrics = (metrics.join(kept.select("_rec", "run_id", "record"), on=["_rec", "run_id"], how="inner")
               .with_columns(qualified.alias("run_id")).drop("_rec", "record").sort("run_id", "key"))
    kept = kept.with_columns(qualified.alias("run_id")).drop("_rec", "_identity").sort("run_id")
    return RunSet(study=name or "+".join(ref.name for ref, _ in refs),
                  source=", ".join(ref.source for ref, _ in refs), runs=kept, metrics=metrics,
                  records=tuple(ref for ref, _ in refs), n_shared=len(drop))


def _identity() -> pl.Expr:
    """``_identity``: ``<cell> hparams <json> seed <n>`` of a trial run (null for a parent, or a run with no
    seed); a run from before the cell tag stands for ``task=...,variant=...``."""
    cell = pl.coalesce(pl.col("cell"), pl.format("task={},variant={}", pl.col("task"), pl.col("variant")))
    trial = (pl.col("role").fill_null(schema.ROLE_TRIAL) != schema.ROLE_STUDY) & pl.col("seed").is_not_null()
    return (pl.when(trial).then(pl.format("{} hparams {} seed {}", cell, pl.col("hparams").fill_null("{}"),
                                          pl.col("seed")))
            .alias("_identity"))


def _taken_once(dup: pl.DataFrame, refs: Sequence[tuple[RecordRef, str]]) -> set[str]:
    """Of the runs ``dup`` (an identity held by several records), the ``<record index>/<run id>``
    of those dropped as equal copies of the first record's run; raises :class:`RecordConflict`
    at the first that is not equal."""
    from locattn.config import OPERATIONAL_FIELDS  # the config's own list of what a run does not compute

    full: dict[int, dict[str, dict[str, object]]] = {}
    dropped: set[str] = set()
    for ident, group in dup.group_by("_identity", maintain_order=True):
        rows = group.sort("_rec").select("_rec", "run_id").rows()
        first_rec, first_id = rows[0]
        for rec, run_id in rows[1:]:
            if rec == first_rec:
                continue  # one record's own runs are never merged here
            for r in (first_rec, rec):
                if r not in full:
                    ref, uri = refs[r]
                    full[r] = _fields_of_runs(uri, ref, OPERATIONAL_FIELDS)
            diff = _first_difference(full[first_rec].get(first_id, {}), full[rec].get(run_id, {}))
            if diff is not None:
                a, b = refs[first_rec][0].name, refs[rec][0].name
                field, (va, vb) = diff[0], (repr(v) if v is not None else "absent" for v in diff[1:])
                raise RecordConflict(
                    f"records {a} and {b} both hold run {ident[0]} and differ in {field} "
                    f"({va} in {a}, {vb} in {b}); a run two records hold is taken once only when "
                    f"equal: drop one of the records, or build from records that do not overlap")
            dropped.add(f"{rec}/{run_id}")
    return dropped


def _fields_of_runs(uri: str, ref: RecordRef, operational: frozenset[str]) -> dict[str, dict[str, object]]:
    """run id -> the fields compared between records: ``locattn.status``, every param but the
    ``operational`` ones, every latest metric but :data:`TIMING_METRICS`."""
    try:
        rows = read_rows(uri, ref.study, tag_keys=[schema.STATUS], metric_keys=None, param_keys=None)
    except StoreError as exc:
        raise ReportsError(str(exc)) from exc
    out: dict[str, dict[str, object]] = {}
    for run_id, key, value in rows.tags:
        out.setdefault(run_id, {})[key] = value
    for run_id, key, value in rows.params:
        if key not in operational:
            out.setdefault(run_id, {})[f"param {key}"] = value
    for run_id, key, value in rows.metrics:
        if key not in TIMING_METRICS:
            out.setdefault(run_id, {})[f"metric {key}"] = value
    return out


def _first_difference(a: dict[str, object], b: dict[str, object]) -> tuple[str, object, object] | None:
    """The first field (status, then params, then metrics, each by name) where ``a`` and ``b``
    differ, with both values (None: absent); None when equal (NaN equals NaN)."""
    order = {"locattn": 0, "param": 1, "metric": 2}
    for field in sorted(set(a) | set(b), key=lambda f: (order.get(f.split(" ")[0].split(".")[0], 3), f)):
        va, vb = a.get(field), b.get(field)
        if va == vb or (isinstance(va, float) and isinstance(vb, float) and va != va and vb != vb):
            continue
        return field, va, vb
    return None
