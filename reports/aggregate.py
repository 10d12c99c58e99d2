"""Aggregate a study's runs into the cells of a paper table.

Per cell (row variant x column):

1. Hyperparameter selection. The runs of one (task, variant[, column params]) are grouped by
   their ``locattn.hparams``; the group with the highest median ``best_selection_score`` over its
   finished seeds is chosen; ties go to the smaller median ``best_epoch`` (the same dev score
   reached sooner: for Raffel & Ellis, fewer epochs to 100 %), then to the lexicographically
   smallest hparams JSON. Test metrics are never looked at here, with one exception: a Raffel &
   Ellis table whose runs followed the paper's protocol (``eval.regression_protocol=paper``, which
   has no dev set) picks, as the paper does, the group with the best test result: the smallest
   median epochs to 100 % (never reached counts as infinite), then the highest median test
   accuracy, then the smallest hparams JSON. The caption says which rule was used.
2. Per-seed values of the chosen group: ``test.<split>.<metric>`` (mean over the column's splits
   and tasks when it lists several; a seed counts only when every part is present).
3. Statistics over seeds: median, mean, std (sample, ddof = 1), IQR, n, and a 95 % percentile
   bootstrap interval of the median (:func:`reports.intervals.bootstrap_interval`: 10,000
   resamples, seed 0). The solved rate and its interval are the renderers' (they depend on
   ``--solved``; :func:`reports.intervals.solved_rate`).
4. Completeness: finished seeds against ``locattn.n_seeds``; running and failed runs are not
   aggregated but counted.
   Non-finite values (NaN, ±inf: a diverged run) follow :mod:`record.summary`'s one rule: they
   are left out of every median, statistic, ranking and test, and a cell counts such seeds as
   diverged (``Cell.n_diverged``, "2 of 3 (1 diverged)" in the notes).
5. Best per column honouring the metric's direction (ties at display precision all best, but
   a column whose rows are all equal has none), and
   paired Wilcoxon signed-rank tests of every other row against the best row over their shared
   seeds, Holm-corrected within the column.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from reports.intervals import bootstrap_interval
from reports.runset import ReportsError, RunSet
from reports.tables import LEGACY_PROTOCOL, TEST_SELECTED_PROTOCOL, Column, TableDef
from record import schema
from record.summary import BEST_EPOCH_KEY, HEADLINE_METRICS, SELECTION_KEY, is_measurement

ALPHA = 0.05
# Two-sided exact Wilcoxon signed-rank: the smallest attainable p is 2 / 2**n, which is below
# 0.05 only from n = 6 non-zero paired differences on.
MIN_TESTABLE_PAIRS = 6


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One aggregated cell."""

    row: str
    """Variant key."""
    column: str
    """Column key."""
    seeds: tuple[tuple[int, float], ...] = ()
    """(seed, scaled value) of the finished seeds used, sorted by seed."""
    n_expected: int | None = None
    """Seeds the study expects (tag ``locattn.n_seeds``), None when unknown."""
    n_running: int = 0
    """Runs of the chosen hyperparameters still running."""
    n_failed: int = 0
    """Runs of the chosen hyperparameters that failed."""
    n_missing_metric: int = 0
    """Finished runs of the chosen hyperparameters that lack a metric this cell needs."""
    n_diverged: int = 0
    """Finished runs of the chosen hyperparameters whose value for this cell is not finite
    (NaN, ±inf): not in ``seeds`` (:mod:`record.summary`'s rule)."""
    hparams: tuple[str, ...] = ()
    """Chosen hyperparameters (JSON) per task of the column."""
    n_hparam_choices: int = 0
    """How many hyperparameter settings competed (max over the column's tasks)."""
    median: float | None = None
    mean: float | None = None
    std: float | None = None
    q25: float | None = None
    q75: float | None = None
    ci_low: float | None = None
    """Low end of the median's bootstrap interval over seeds (cell units; ``inf``: an epoch count
    never reached), :func:`reports.intervals.bootstrap_interval`; None with fewer than 2 seeds."""
    ci_high: float | None = None
    """High end of that interval."""
    accuracy_median: float | None = None
    """Raffel & Ellis: median test accuracy (%) when the median seed never reached 100 %."""
    greyed: bool = False
    """Raffel & Ellis: the cell shows an accuracy, not an epoch count."""
    best: bool = False
    """Best in its column (bold)."""
    p_value: float | None = None
    """Wilcoxon p against the column's best row (raw)."""
    p_holm: float | None = None
    """Holm-corrected p."""
    n_pairs: int = 0
    """Non-zero paired differences the test used."""
    tie: bool = False
    """Not significantly different from the best (a testable pair with Holm p >= alpha)."""
    seed_records: tuple[tuple[int, str], ...] = ()
    """(seed, record) for each seed of ``seeds``, sorted: the record (study) its run was read from
    (``reports.build.collect``, which reads one or several records, fills it; a seed of a column
    over several tasks whose runs sit in several records appears once per record)."""

    @property
    def records(self) -> tuple[str, ...]:
        """The records the cell's seeds came from, sorted."""
        return tuple(sorted({r for _, r in self.seed_records}))

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def missing(self) -> bool:
        return self.n == 0

    @property
    def incomplete(self) -> bool:
        return self.n > 0 and self.n_expected is not None and self.n < self.n_expected


@dataclass(frozen=True, kw_only=True)
class TableResult:
    """A table definition with its aggregated cells."""

    table: TableDef
    stat: str
    """The statistic shown."""
    cells: dict[tuple[str, str], Cell]
    """(variant, column key) -> cell."""
    n_tests: int = 0
    """Paired tests run."""
    n_testable: int = 0
    """Paired tests with enough non-zero differences to reach p < alpha."""
    warnings: tuple[tuple[str, str, str], ...] = ()
    """Problems found in the data: (variant, column key, message)."""
    solved_at: float | None = None
    """Show per cell how many seeds reached this value (cell units, e.g. 90 for 90 % seqAcc) as
    ``(k/n)``; None shows no count. Applies to tables whose metric is higher-is-better."""
    ci: bool = False
    """Markdown and LaTeX show each cell's interval (``--ci``); the CSV always carries it."""
    selection: str = "dev"
    """How hyperparameters were chosen per cell: ``dev`` (median dev score) or ``test`` (the
    test result, Raffel & Ellis's protocol)."""

    def cell(self, row: str, column: str) -> Cell:
        return self.cells[(row, column)]

    @property
    def missing_cells(self) -> list[tuple[str, str]]:
        return [k for k, c in self.cells.items() if c.missing]

    @property
    def incomplete_cells(self) -> list[tuple[str, str]]:
        return [k for k, c in self.cells.items() if c.incomplete]


def sort_value(table: TableDef, stat: str, cell: Cell) -> float | None:
    """The number a cell is ranked by (smaller is better after this transform)."""
    if cell.missing:
        return None
    if table.kind == "epochs_or_accuracy":
        # Any epoch count beats any accuracy; accuracies rank by higher = better.
        if cell.greyed:
            return 1e12 - (cell.accuracy_median or 0.0)
        return float(cell.median)
    v = cell.mean if stat in ("mean", "mean_std") else cell.median
    if stat == "n":
        v = float(cell.n)
        return -v
    v = round(float(v), table.decimals)
    return -v if table.direction == "max" else v


def holm_adjust(pvalues: list[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the input order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def wilcoxon_pair(a: dict[int, float], b: dict[int, float]) -> tuple[float | None, int]:
    """Two-sided Wilcoxon signed-rank p over the seeds shared by ``a`` and ``b``.

    Returns (p, number of non-zero paired differences). p is 1.0 when every shared difference
    is zero, and None when there are no shared seeds.
    """
    from scipy.stats import wilcoxon  # scipy only where statistics are asked for

    shared = sorted(set(a) & set(b))
    if not shared:
        return None, 0
    d = np.array([a[s] - b[s] for s in shared], dtype=float)
    nz = int(np.count_nonzero(d))
    if nz == 0:
        return 1.0, 0
    d = d[d != 0]
    # The test depends on the differences only through the signed ranks of |d|, so the p-value
    # is computed (by scipy) once per signed-rank pattern and reused.
    order = np.argsort(np.abs(d), kind="stable")
    ranks = np.empty(nz)
    ranks[order] = np.arange(1, nz + 1)
    absd = np.abs(d)
    for v in np.unique(absd):  # average ranks of ties
        m = absd == v
        if m.sum() > 1:
            ranks[m] = ranks[m].mean()
    key = tuple(sorted((np.sign(d) * ranks).tolist()))
    p = _P_CACHE.get(key)
    if p is None:
        res = wilcoxon(np.asarray(key), zero_method="wilcox", alternative="two-sided")
        p = _P_CACHE[key] = float(res.pvalue)
    return p, nz


_P_CACHE: dict[tuple[float, ...], float] = {}


def _stats(values: list[float]) -> dict[str, float | None]:
    arr = np.asarray(values, dtype=float)
    q25, med, q75 = np.percentile(arr, (25, 50, 75)).tolist()
    return {
        "median": med,
        "mean": float(arr.mean()),
        "std": float(arr.std(ddof=1)) if arr.size > 1 else None,
        "q25": q25,
        "q75": q75,
        **_median_interval(values),
    }


def _median_interval(values: list[float]) -> dict[str, float | None]:
    """``ci_low``, ``ci_high``: the median's bootstrap interval (None, None below 2 seeds)."""
    ci = bootstrap_interval(values, "median")
    return {"ci_low": None, "ci_high": None} if ci is None else {"ci_low": ci[0], "ci_high": ci[1]}


@dataclass
class _Unit:
    """Selection result of one (task, variant, params)."""

    hparams: str | None = None
    n_choices: int = 0
    n_expected: int | None = None
    n_running: int = 0
    n_failed: int = 0
    values: dict[int, dict[str, float]] = field(default_factory=dict)
    diverged: dict[int, set[str]] = field(default_factory=dict)
    """seed -> metric keys whose value is not finite."""
    n_missing_metric: int = 0


def _param_cols(table: TableDef) -> list[str]:
    names: dict[str, None] = {}
    for c in table.columns:
        for k, _ in c.params:
            names[k] = None
    return list(names)


def _table_runs(runset: RunSet, table: TableDef) -> pl.DataFrame:
    """The trial runs of ``table``'s tasks and rows."""
    return runset.runs.filter(
        (pl.col("role").fill_null(schema.ROLE_TRIAL) != schema.ROLE_STUDY)
        & pl.col("task").is_in(list(table.tasks))
        & pl.col("variant").is_in(list(table.rows))
    ).with_columns(pl.col("hparams").fill_null("{}"))


def table_protocol(runset: RunSet, table: TableDef) -> str | None:
    """The protocol recorded by ``table``'s runs (its ``protocol_param``), None for a table
    without one. Runs without the param count as ``LEGACY_PROTOCOL``; runs of different
    protocols in one table are refused (one study per protocol)."""
    if not table.protocol_param:
        return None
    runs = _table_runs(runset, table)
    if table.protocol_param in runs.columns:
        found = set(runs[table.protocol_param].fill_null(LEGACY_PROTOCOL).to_list())
    else:
        found = {LEGACY_PROTOCOL}
    if not found:
        return LEGACY_PROTOCOL
    known = dict(table.protocol_titles)
    unknown = sorted(found - set(known))
    if unknown:
        raise ReportsError(f"table {table.id}: runs with {table.protocol_param}={unknown[0]!r}; "
                           f"valid: {sorted(known)}")
    if len(found) > 1:
        raise ReportsError(
            f"table {table.id}: the runs mix {table.protocol_param} values {sorted(found)}; a "
            f"table reports one protocol, so build it from a study of one protocol")
    return found.pop()


def _ranked_choices(finished: pl.DataFrame, runset: RunSet, group: list[str],
                    ranking: Sequence[tuple[str, bool, float | None]]) -> pl.DataFrame:
    """Per (group, hparams) the median over seeds of each ranking metric, sorted so that each
    group's first row is its chosen hyperparameters.

    ``ranking`` lists (metric key, higher is better, value of a run missing it) in order of
    precedence; a missing value of None leaves the run out of that median, and a group whose
    median is null ranks last. Non-finite values are left out (:func:`finite_metrics`), so a run
    with one counts as missing that metric. Ties left after every metric go to the smallest hparams
    JSON, so the choice never depends on row order.
    """
    names = [f"rank{i}" for i in range(len(ranking))]
    table = finished
    measured = finite_metrics(runset.metrics)
    for name, (key, _, missing) in zip(names, ranking):
        values = measured.filter(pl.col("key") == key).select("run_id", pl.col("value").alias(name))
        table = table.join(values, on="run_id", how="left")
        if missing is not None:
            table = table.with_columns(pl.col(name).fill_null(missing))
    return (
        table.group_by([*group, "hparams"])
        .agg([pl.col(n).median() for n in names])
        .with_columns([pl.col(n).fill_nan(None) for n in names])
        .sort([*group, *names, "hparams"],
              descending=[*([False] * len(group)), *(hi for _, hi, _ in ranking), False], nulls_last=True)
    )


def finite_metrics(metrics: pl.DataFrame) -> pl.DataFrame:
    """The rows of a metrics frame (``RunSet.metrics``: run_id, key, value) whose value is a
    measurement: :func:`record.summary.is_measurement` in polars (no null, NaN or ±inf), applied
    before any median or ranking (polars sorts NaN above every number)."""
    return metrics.filter(pl.col("value").is_finite())


def refuse_merged_cells(runs: pl.DataFrame, table: TableDef, group: Sequence[str]) -> None:
    """No silent merge: the runs of one cell of ``table`` (its ``group`` of task, variant and
    column params) must come from one grid cell of the study. A grid axis the table has no rows
    or columns for (an ``ablation``, a dotted config path) would pool its arms' seeds into one
    number; :class:`ReportsError` (one line, naming ``--table summary``) instead."""
    if "cell" not in runs.columns:
        return
    merged = (runs.filter(pl.col("cell").is_not_null()).group_by(list(group))
              .agg(pl.col("cell").unique().sort().alias("cells"))
              .filter(pl.col("cells").list.len() > 1).sort(list(group)))
    if merged.height == 0:
        return
    row = merged.row(0, named=True)
    shared = set.intersection(*(set(c.split(",")) for c in row["cells"]))
    arms = ["|".join(p for p in c.split(",") if p not in shared) for c in row["cells"]]
    raise ReportsError(
        f"table {table.id}: the runs of {row['task']} / {row['variant']} come from "
        f"{len(arms)} grid cells ({', '.join(arms)}) that the table has no rows or columns for, "
        f"and would merge into one number; show every cell with --table summary")


def _test_result_choice(finished: pl.DataFrame, runset: RunSet, table: TableDef,
                        group: list[str]) -> pl.DataFrame:
    """Raffel & Ellis under their protocol: hparams groups ranked by the test result (smallest
    median epochs to 100 %, never reached = inf; then highest median test accuracy)."""
    acc_key = f"test.{table.columns[0].splits[0]}.accuracy"
    return _ranked_choices(finished, runset, group, [("epochs_to_100", False, math.inf), (acc_key, True, None)])


def in_paper_epochs(runset: RunSet, table: TableDef) -> RunSet:
    """``runset`` with ``epochs_to_100`` in the paper's epochs of ``table.epoch_updates``
    updates: a run whose epochs have u updates and that reached 100 % after e of them shows
    ceil(e * u / epoch_updates), the first of the paper's epoch ends at which it would have been
    seen at 100 %. Unchanged when the table has no ``epoch_param`` or every run's epoch is the
    paper's."""
    if not table.epoch_param or table.epoch_param not in runset.runs.columns:
        return runset
    updates = runset.runs.select(
        "run_id",
        pl.col(table.epoch_param).cast(pl.Float64, strict=False).fill_null(0.0).alias("_u"),
    ).with_columns(
        pl.when(pl.col("_u") > 0).then(pl.col("_u")).otherwise(float(table.epoch_updates)).alias("_u")
    )
    metrics = runset.metrics.join(updates, on="run_id", how="left").with_columns(
        pl.when(pl.col("key") == "epochs_to_100")
        .then((pl.col("value") * pl.col("_u").fill_null(float(table.epoch_updates))
               / table.epoch_updates - 1e-9).ceil())
        .otherwise(pl.col("value"))
        .alias("value")
    ).drop("_u")
    return replace(runset, metrics=metrics)


def _units(runset: RunSet, table: TableDef) -> dict[tuple, _Unit]:
    """Select hyperparameters and collect per-seed metric values per (task, variant, params)."""
    pcols = _param_cols(table)
    for p in pcols:
        if p not in runset.runs.columns:
            raise ValueError(f"table {table.id} needs run param {p!r}; read it with param_keys")
    group = ["task", "variant", *pcols]
    runs = _table_runs(runset, table)
    if runs.height == 0:
        return {}
    refuse_merged_cells(runs, table, group)
    finished = runs.filter(pl.col("status") == schema.STATUS_FINISHED)
    if table_protocol(runset, table) == TEST_SELECTED_PROTOCOL:
        choice = _test_result_choice(finished, runset, table, group)
    else:
        # best median selection score, then the earliest median best epoch
        choice = _ranked_choices(finished, runset, group,
                                 [(SELECTION_KEY, True, None), (BEST_EPOCH_KEY, False, None)])
    n_choices = runs.group_by(group).agg(pl.col("hparams").n_unique().alias("n_choices"))
    chosen = choice.group_by(group, maintain_order=True).first().select([*group, "hparams"])

    out: dict[tuple, _Unit] = {}
    for row in n_choices.iter_rows(named=True):
        key = tuple(row[g] for g in group)
        out[key] = _Unit(n_choices=row["n_choices"])
    expected = runs.group_by(group).agg(pl.col("n_seeds").max())
    for row in expected.iter_rows(named=True):
        out[tuple(row[g] for g in group)].n_expected = row["n_seeds"]
    for row in chosen.iter_rows(named=True):
        out[tuple(row[g] for g in group)].hparams = row["hparams"]

    # Runs of the chosen hparams (or of every hparams when nothing finished yet).
    chosen_runs = runs.join(chosen, on=[*group, "hparams"], how="inner")
    unfinished_units = runs.join(chosen.select(group), on=group, how="anti")
    counted = pl.concat([chosen_runs, unfinished_units], how="vertical_relaxed")
    counts = counted.group_by(group).agg(
        (pl.col("status") == schema.STATUS_RUNNING).sum().alias("running"),
        (pl.col("status") == schema.STATUS_FAILED).sum().alias("failed"),
    )
    for row in counts.iter_rows(named=True):
        u = out[tuple(row[g] for g in group)]
        u.n_running, u.n_failed = int(row["running"]), int(row["failed"])

    wanted = list(table.metric_keys())
    fin = chosen_runs.filter(pl.col("status") == schema.STATUS_FINISHED)
    vals = fin.select(["run_id", "seed", *group]).join(
        runset.metrics.filter(pl.col("key").is_in(wanted)), on="run_id", how="left"
    )
    for row in vals.iter_rows(named=True):
        u = out[tuple(row[g] for g in group)]
        seed = row["seed"] if row["seed"] is not None else -1
        d = u.values.setdefault(seed, {})
        if row["key"] is None or row["value"] is None:
            continue
        if is_measurement(row["value"]):
            d[row["key"]] = row["value"]
        else:
            u.diverged.setdefault(seed, set()).add(row["key"])
    return out


def _column_units(table: TableDef, col: Column, variant: str, units: dict[tuple, _Unit]):
    pvals = tuple(v for _, v in col.params)
    pcols = _param_cols(table)
    res = []
    for task in col.tasks:
        if pcols:
            wanted = dict(col.params)
            key = (task, variant, *[wanted.get(p) for p in pcols])
        else:
            key = (task, variant)
        res.append(units.get(key))
    del pvals
    return res


def _seed_value(table: TableDef, col: Column, metrics: dict[str, float]) -> tuple | None:
    """The seed's raw value for ``col`` from one task's metrics; None when a part is missing."""
    if table.kind == "epochs_or_accuracy":
        acc_key = f"test.{col.splits[0]}.accuracy"
        if "epochs_to_100" in metrics:
            return (metrics["epochs_to_100"], metrics.get(acc_key))
        if acc_key in metrics:
            return (math.inf, metrics[acc_key])
        return None
    parts = []
    for s in col.splits:
        k = f"test.{s}.{table.metric}"
        if k not in metrics:
            return None
        parts.append(metrics[k])
    return (float(np.mean(parts)),)


def aggregate(runset: RunSet, table: TableDef, *, stat: str | None = None) -> TableResult:
    """Aggregate ``runset`` into the cells of ``table`` (``stat`` overrides the table default).

    A table with a ``protocol_param`` comes back with the title of the protocol its runs
    followed (``TableResult.table.title``) and ``TableResult.selection`` saying how the cells'
    hyperparameters were chosen.
    """
    stat = stat or table.stat
    protocol = table_protocol(runset, table)
    selection = "test" if protocol == TEST_SELECTED_PROTOCOL else "dev"
    if protocol is not None:
        table = _replace_table(table, title=dict(table.protocol_titles)[protocol])
    units = _units(in_paper_epochs(runset, table), table)
    cells: dict[tuple[str, str], Cell] = {}
    warnings: list[tuple[str, str, str]] = []
    for col in table.columns:
        for variant in table.rows:
            cell = aggregate_cell(table, col, variant, _column_units(table, col, variant, units))
            if cell.n_missing_metric:
                warnings.append((variant, col.key, f"{cell.n_missing_metric} finished run(s) lack the metric"))
            cells[(variant, col.key)] = cell
    n_tests, n_testable = mark_best(table, stat, cells)
    return TableResult(table=table, stat=stat, cells=cells, n_tests=n_tests,
                       n_testable=n_testable, warnings=tuple(warnings), selection=selection)


def aggregate_cell(table: TableDef, col: Column, variant: str, us: list) -> Cell:
    """One cell of ``table``: row ``variant``, column ``col``, from its units ``us`` (one per
    task of the column, None where a task has none): the seeds every task has, their statistics,
    and the counts of expected, running, failed, diverged seeds and seeds lacking the metric."""
    present = [u for u in us if u is not None]
    if not present:
        return Cell(row=variant, column=col.key)
    per_task: list[dict[int, tuple]] = []
    n_missing = n_diverged = 0
    for u in us:
        got: dict[int, tuple] = {}
        if u is not None:
            for seed, m in u.values.items():
                v = _seed_value(table, col, m)
                if v is not None:
                    got[seed] = v
                elif _seed_value(table, col, m | dict.fromkeys(u.diverged.get(seed, ()), 0.0)):
                    n_diverged += 1  # its value is there, but not finite
                else:
                    n_missing += 1
        per_task.append(got)
    shared = sorted(set.intersection(*(set(d) for d in per_task))) if per_task else []
    expected = [u.n_expected for u in present if u.n_expected is not None]
    common = dict(
        row=variant, column=col.key,
        n_expected=max(expected) if expected else None,
        n_running=sum(u.n_running for u in present),
        n_failed=sum(u.n_failed for u in present),
        n_missing_metric=n_missing,
        n_diverged=n_diverged,
        hparams=tuple(u.hparams or "{}" for u in present),
        n_hparam_choices=max(u.n_choices for u in present),
    )
    if not shared:
        return Cell(**common)
    if table.kind == "epochs_or_accuracy":
        ep = {s: per_task[0][s][0] for s in shared}
        acc = {s: per_task[0][s][1] for s in shared}
        med = float(np.median(list(ep.values())))
        greyed = math.isinf(med)
        accs = [a * 100.0 for a in acc.values() if a is not None]
        seeds = tuple((s, float(ep[s])) for s in shared)
        finite = all(math.isfinite(v) for _, v in seeds)
        st = _stats([v for _, v in seeds]) if finite else {
            "median": med, "mean": None, "std": None, "q25": None, "q75": None,
            **_median_interval([v for _, v in seeds])}
        return Cell(**common, seeds=seeds, greyed=greyed,
                    accuracy_median=float(np.median(accs)) if accs else None, **st)
    seeds = tuple(
        (s, float(np.mean([d[s][0] for d in per_task])) * table.scale) for s in shared
    )
    return Cell(**common, seeds=seeds, **_stats([v for _, v in seeds]))


def mark_best(table: TableDef, stat: str, cells: dict[tuple[str, str], Cell]) -> tuple[int, int]:
    """Mark each column's best cells (by ``stat``) in ``cells``, in place, and test every other
    cell against the first best one (Wilcoxon signed-rank over shared seeds, Holm-adjusted per
    column); returns (tests made, tests with enough pairs to be testable)."""
    n_tests = n_testable = 0
    for col in table.columns:
        col_cells = [cells[(v, col.key)] for v in table.rows]
        ranked = [(sort_value(table, stat, c), c) for c in col_cells]
        ranked = [(k, c) for k, c in ranked if k is not None]
        if not ranked:
            continue
        best_key = min(k for k, _ in ranked)
        best_rows = [c.row for k, c in ranked if k == best_key]
        if len(ranked) > 1 and len(best_rows) == len(ranked):
            continue  # every row equal (a column of 0.0): no best, nothing to test
        for r in best_rows:
            cells[(r, col.key)] = _replace(cells[(r, col.key)], best=True)
        if table.kind == "epochs_or_accuracy" or stat == "n":
            continue
        ref = dict(cells[(best_rows[0], col.key)].seeds)
        tested: list[tuple[str, float, int]] = []
        for k, c in ranked:
            if c.row in best_rows:
                continue
            p, nz = wilcoxon_pair(ref, dict(c.seeds))
            if p is not None:
                tested.append((c.row, p, nz))
        if not tested:
            continue
        adj = holm_adjust([p for _, p, _ in tested])
        for (row, p, nz), ph in zip(tested, adj):
            n_tests += 1
            testable = nz >= MIN_TESTABLE_PAIRS
            n_testable += testable
            cells[(row, col.key)] = _replace(
                cells[(row, col.key)], p_value=p, p_holm=ph, n_pairs=nz,
                tie=bool(testable and ph >= ALPHA),
            )
    return n_tests, n_testable


def _replace_table(table: TableDef, **kw) -> TableDef:
    return replace(table, **kw)


def _replace(cell: Cell, **kw) -> Cell:
    return replace(cell, **kw)


def hparam_summary(result: TableResult) -> list[tuple[str, list[str]]]:
    """[(chosen hparams JSON, [variant keys ...])] for the cells that had a choice to make."""
    by: dict[str, set[str]] = {}
    for c in result.cells.values():
        if c.missing:
            continue
        for h in c.hparams:
            by.setdefault(_canon(h), set()).add(c.row)
    return [(h, sorted(v, key=result.table.rows.index)) for h, v in sorted(by.items())]


def _canon(h: str) -> str:
    try:
        return json.dumps(json.loads(h), sort_keys=True)
    except (TypeError, ValueError):
        return h


# ---------------------------------------------------------------------------------------------
# Per-cell summary of any study (a search study, a study that declares no paper table)


@dataclass(frozen=True, kw_only=True)
class CellSummary:
    """One grid cell: its chosen hyperparameters and the medians over that point's seeds."""

    cell: str
    """The cell id, ``task=copy,variant=onestep``."""
    hparams: str
    """Canonical JSON of the chosen point (``{}``: nothing searched)."""
    n_points: int
    """Hyperparameter points with at least one finished run."""
    dev: float | None
    """Median ``best_selection_score`` (%) over the chosen point's finished seeds."""
    medians: dict[str, float]
    """Headline metric key (``test.len15.seq_acc``) -> median (%) over those seeds."""
    solved: dict[str, int]
    """Headline metric key -> seeds at or above the solved threshold."""
    n: int
    """Finished seeds of the chosen point."""
    n_expected: int | None
    """Seeds the spec expects per point."""
    diverged: dict[str, int] = field(default_factory=dict)
    """Headline metric key -> finished seeds of the chosen point whose value is not finite
    (left out of the median and of ``solved``: :mod:`record.summary`'s rule)."""
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Headline metric key -> the median's 95 % bootstrap interval (%) over those seeds
    (:func:`reports.intervals.bootstrap_interval`; absent below 2 seeds)."""


def _split_order(key: str) -> tuple:
    """``test.len100.seq_acc`` after ``test.len15.seq_acc``: numbers inside names by value."""
    split = key.split(".")[1] if key.count(".") >= 2 else key
    digits = "".join(ch for ch in split if ch.isdigit())
    return (split.rstrip("0123456789"), int(digits) if digits else -1, split)


def headline_keys(runset: RunSet) -> list[str]:
    """The study's test-split keys of its headline metric, in split order."""
    keys = runset.metrics["key"].unique().to_list()
    for metric in HEADLINE_METRICS:
        found = [k for k in keys if k.startswith("test.") and k.endswith(f".{metric}")]
        if found:
            return sorted(found, key=_split_order)
    return []


#: A seed "solved" a cell at this accuracy (%) or more, unless ``--solved`` says otherwise.
DEFAULT_SOLVED = 90.0


def cell_summaries(runset: RunSet, *, solved_at: float = DEFAULT_SOLVED) -> list[CellSummary]:
    """Per cell (in the study's order of first appearance): the hyperparameters with the best
    median ``best_selection_score`` over seeds (then the earliest median best epoch, as the tables
    choose), and the medians of the headline metric over that point's finished seeds."""
    runs = runset.runs.filter(
        (pl.col("role").fill_null(schema.ROLE_TRIAL) != schema.ROLE_STUDY) & pl.col("cell").is_not_null()
    ).with_columns(pl.col("hparams").fill_null("{}"))
    if runs.height == 0:
        return []
    finished = runs.filter(pl.col("status") == schema.STATUS_FINISHED)
    ranked = _ranked_choices(finished, runset, ["cell"],
                             [(SELECTION_KEY, True, None), (BEST_EPOCH_KEY, False, None)])
    firsts = ranked.group_by("cell", maintain_order=True).first()
    chosen = {row["cell"]: row for row in firsts.iter_rows(named=True)}
    points = dict(ranked.group_by("cell").agg(pl.len()).iter_rows())
    keys = headline_keys(runset)
    out = []
    for cell in runs["cell"].unique(maintain_order=True).to_list():
        pick = chosen.get(cell)
        expected = runs.filter(pl.col("cell") == cell)["n_seeds"].max()
        if pick is None:
            out.append(CellSummary(cell=cell, hparams="{}", n_points=0, dev=None, medians={},
                                   solved={}, n=0, n_expected=expected))
            continue
        ids = finished.filter((pl.col("cell") == cell) & (pl.col("hparams") == pick["hparams"]))["run_id"]
        vals = runset.metrics.filter(pl.col("run_id").is_in(ids.to_list()) & pl.col("key").is_in(keys)
                                     & pl.col("value").is_not_null())
        measured = finite_metrics(vals)
        medians, solved, n_diverged, intervals = {}, {}, {}, {}
        for key in keys:
            v = measured.filter(pl.col("key") == key)["value"].to_numpy() * 100
            if n_bad := vals.filter(pl.col("key") == key).height - len(v):
                n_diverged[key] = n_bad
            if len(v):
                medians[key] = float(np.median(v))
                solved[key] = int((v >= solved_at).sum())
            if (ci := bootstrap_interval(v, "median")) is not None:
                intervals[key] = ci
        dev = pick["rank0"]
        out.append(CellSummary(cell=cell, hparams=_canon(pick["hparams"]), n_points=int(points[cell]),
                               dev=None if dev is None else 100 * float(dev), medians=medians,
                               solved=solved, n=ids.len(), n_expected=expected, diverged=n_diverged,
                               intervals=intervals))
    return out
