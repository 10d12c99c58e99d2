"""Agreement with the papers over every committed record and all 800 transcribed cells: at the
quick budget, at the best budget each cell has, and at the paper's budget, side by side; and
which disagreements survive Holm over each table's family of tests.

    python results/analysis/agreement_summary.py

**What a record stands for.** A record's runs fill every published table whose rows and
columns they fall in (:func:`tables_filled`), not only the tables its ``study.json`` names: a
Table 2 record's OneStepAttn runs are Table 4's OneStepAttn row too, and an RMonoAttn run of a
Table 2 record is a Table 7 cell. A record that sets a task parameter some table's columns are
defined by (``task.variable_length``) fills only the tables whose columns name it.

**Campaigns.** A campaign is the list of records that stand for one table at one budget
(:data:`QUICK`; :data:`POOLED`, from the campaign files under results/campaigns/; every other
record is a campaign of its own). Its records are
read as one by ``reports.build.collect`` (:func:`merged`), which merges runs by identity (cell,
hparams, seed): one held by two records is taken once when equal and refused when not; every
cell keeps which record each of its seeds came from.

**Columns.** Each cell is judged by its table metric's tolerance
(reports.agreement.TOLERANCE_RULES: accuracy within 10 points; edit distance within 10 % of the
target length; attnLoss within 25 %; Raffel & Ellis's epochs within a factor of 1.5, and a cell
that reached 100 % on one side only is a disagreement), counted first among the accuracy cells
(:func:`is_accuracy_metric`) where the paper reports more than 10 %, then among every compared
cell. A table whose claim is an ordering (Dubois Table 3: the best row of each column) is judged
on that ordering too.

- **quick**: the newest quick-budget campaign of each table (:data:`QUICK`).
- **best budget**: per published cell, the campaign with the largest training budget that has
  a result for it (:class:`Budget`: training examples first, the task's full data above any
  ``task.train_size``; then epochs; then the seeds the cell has; ties go to the table's quick campaign, then to
  the profile named ``paper``, then to the campaign first in name order). Ablation arms (a
  ``model.*`` override) and superseded records (:data:`SUPERSEDED`) never stand for a cell.
- **paper budget**: the best-budget cells whose campaign ran at the paper's budget: the task's
  full data and at least the epochs of the spec's ``paper`` profile (100 for Ray Chowdhury &
  Caragea, 50 for Dubois et al.).

**Verdicts** (:func:`verdict_word`, the one place the words are decided): *reproduced* within
the tolerance; *contradicted* only at the paper's budget, with at least 5 seeds, and a one-sided
Fisher test of the success rates (reports.agreement.success_test) below 0.05 after Holm's
step-down over the table's family: every accuracy cell of that table scored at the paper's
budget with >= 5 seeds that disagrees by more than 10 points. Every other disagreement is *not
reproduced at this budget*. Holm holds under any dependence between the tests, so cells that
share runs (one model scored at two lengths, a run that fills two tables) are separate tests,
which is conservative. A campaign whose records were created one after another over the same
cells is named as a repeated look: its p-values are not corrected for it.

**[+dirty]**: a cell rests on runs from uncommitted code when any seed it uses comes from a run
whose code version ends in ``+dirty`` (or is tagged ``locattn.dirty``); every count that
includes such a cell says how many of its cells do.

Prints Markdown, as quoted in results/README.md (results/analysis/writeup.py puts it there).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl
import yaml

from locattn import registry
from reports.aggregate import Cell, TableResult, holm_adjust
from reports.agreement import (ALPHA, NONTRIVIAL, PAPER_SEEDS, TOLERANCE,
                               TOLERANCE_RULES, VERDICTS, SuccessTest, best_rows, cell_agreement,
                               success_test, verdict)
from reports.build import Built, collect, used_runs
from reports.paper import PaperValue, load_paper_numbers
from reports.render import paper_diff
from reports.runset import RecordConflict, read_runs, resolve_source
from reports.tables import TABLES, TableDef

RECORDS = Path(__file__).resolve().parents[1] / "record"

#: Table -> the campaign that stands for it at the quick budget: its newest quick records
#: (where two, they hold disjoint cells of the table).
QUICK: dict[str, tuple[str, ...]] = {
    "rc_table2": ("rc_table2-quick-v2",),
    "rc_table9": ("rc_table2-quick-v2",),
    "rc_table4": ("rc_table4-quick-v3",),
    "rc_table7": ("rc_table7-quick", "rc_table7-quick_rest"),  # Copy family; the six other tasks
    "rc_table6": ("rc_table6-quick",),
    "rc_table3": ("rc_table3_scan-quick",),
    "rc_table8": ("rc_table8-quick", "rc_table8-quick_rest"),  # 6 rows each
    "dubois_table3": ("dubois_table3-quick-v2",),
    "raffel_table1": ("raffel_table1-quick",),
    "raffel_variable": ("raffel_variable-quick",),  # Raffel & Ellis §2.3: 4 cells
}
CAMPAIGNS = Path(__file__).resolve().parents[1] / "campaigns"


def campaign_files() -> list[Path]:
    """results/campaigns/*.yaml: the campaign files of the committed results."""
    return sorted(CAMPAIGNS.glob("*.yaml"))


def campaign_records(path: Path) -> tuple[str, ...]:
    """The record names a campaign file lists (each a folder under results/record/; SystemExit
    naming the file and entry otherwise)."""
    entries = (yaml.safe_load(path.read_text()) or {}).get("records") or []
    out = []
    for e in entries:
        where = (path.parent / (e if isinstance(e, str) else e.get("path", ""))).resolve()
        if where.parent != RECORDS.resolve() or not (where / "study.json").is_file():
            raise SystemExit(f"{path}: records: {e!r} is not a committed record under {RECORDS}")
        out.append(where.name)
    return tuple(out)


#: Records that stand together for their tables at one budget, one campaign file each
#: (results/campaigns/): seeds of the same runs split over records (the ``gpu_seeds20``
#: profiles: seeds 5-19 of the ``paper``/``gpu`` runs), and records of disjoint cells at that
#: budget.
POOLED: tuple[tuple[str, ...], ...] = tuple(campaign_records(p) for p in campaign_files())
#: Records of protocols fixed since (results/README.md): never a table's cell.
SUPERSEDED = ("rc_table2-quick", "rc_table4-quick", "rc_table4-quick-v2", "dubois_table3-quick")
#: Tables whose claim is an ordering: judged on the best row of each column as well.
ORDERING = ("dubois_table3",)
#: Every table with published numbers, in the order of :data:`QUICK`.
TABLES_JUDGED = tuple(QUICK)
COLUMNS = ("quick", "best", "paper")


def is_accuracy_metric(table: TableDef) -> bool:
    """Whether ``table`` shows an accuracy in percent, higher is better (the non-trivial count
    and the success-rate test apply): a split table whose metric the metric registry marks an
    accuracy (locattn.registry.is_accuracy), as reports.agreement.is_accuracy decides."""
    return table.kind == "split" and table.direction == "max" and registry.is_accuracy(table.metric)


# ---------------------------------------------------------------------------------------------
# Records, their budgets and the tables their runs fill


@dataclass(frozen=True, order=True)
class Budget:
    """A campaign's training budget, ordered: examples, then epochs, then seeds."""

    train_size: float
    """``task.train_size``; ``inf`` when the task's full data (the paper's) is used."""
    epochs: int
    seeds: int
    """Seeds planned (a record's); of a cell, the seeds it has."""
    paper: bool
    """The task's full data and at least the epochs of the spec's ``paper`` profile."""

    def text(self) -> str:
        data = "full data" if math.isinf(self.train_size) else f"{self.train_size:,.0f} examples"
        return f"{data}, {self.epochs} epochs, {self.seeds} seed{'s' if self.seeds > 1 else ''}"


@functools.cache
def study_json(record: str) -> dict:
    return json.loads((RECORDS / record / "study.json").read_text())


@functools.cache
def budget(record: str) -> Budget:
    """The training budget of a committed record, from its study.json."""
    study = study_json(record)
    over, raw = study["resolved"]["overrides"], study["raw"]
    epochs = int(over.get("optim.epochs", raw.get("overrides", {}).get("optim.epochs", 100)))
    paper_epochs = int(raw.get("profiles", {}).get("paper", {}).get("overrides", {}).get(
        "optim.epochs", raw.get("overrides", {}).get("optim.epochs", 100)))
    train = float(over["task.train_size"]) if "task.train_size" in over else math.inf
    return Budget(train, epochs, len(study["resolved"]["seeds"]),
                  math.isinf(train) and epochs >= paper_epochs)


def is_arm(record: str) -> bool:
    """An ablation arm: the record overrides a model field, so it is not the paper's model."""
    return any(k.startswith("model.") for k in study_json(record)["resolved"]["overrides"])


@functools.cache
def published(table: str) -> dict[tuple[str, str], PaperValue]:
    return load_paper_numbers(TABLES[table])


def _column_params() -> set[str]:
    return {k for t in TABLES_JUDGED for c in TABLES[t].columns for k, _ in c.params}


@functools.cache
def trial_runs(record: str) -> pl.DataFrame:
    """The record's trial runs: task, variant, seed, hparams, the column parameters, and
    ``dirty`` (True for a run trained from uncommitted code)."""
    uri, name = resolve_source(RECORDS / record)
    runs = read_runs(uri, name, metric_keys=[], param_keys=sorted(_column_params())).runs
    dirty = pl.col("code_version").fill_null("").str.ends_with("+dirty")
    if "dirty" in runs.columns:
        dirty = dirty | (pl.col("dirty").fill_null("") == "true")
    return (runs.filter(pl.col("role").fill_null("trial") != "study")
            .with_columns(dirty.alias("dirty"), pl.col("hparams").fill_null("{}")))


def _matches(runs: pl.DataFrame, params: tuple[tuple[str, str], ...]) -> pl.DataFrame:
    for k, v in params:
        runs = runs.filter(pl.col(k).cast(pl.Utf8) == v) if k in runs.columns else runs.clear()
    return runs


def candidate_tables(record: str) -> tuple[str, ...]:
    """The judged tables with a row and column the record's trial runs fall in: a run of one of
    the table's tasks and rows whose parameters match one of its columns. A record that sets a
    ``task.*`` parameter named by some table's columns is a candidate only for tables whose
    columns name it (``task.variable_length`` runs are Raffel & Ellis §2.3's, not Table 1's)."""
    runs = trial_runs(record)
    set_keys = {k for k in study_json(record)["resolved"]["overrides"] if k in _column_params()}
    out = []
    for tid in TABLES_JUDGED:
        t = TABLES[tid]
        if not set_keys <= {k for c in t.columns for k, _ in c.params}:
            continue
        mine = runs.filter(pl.col("variant").is_in(list(t.rows)))
        if any(_matches(mine.filter(pl.col("task").is_in(list(c.tasks))), c.params).height
               for c in t.columns):
            out.append(tid)
    return tuple(out)


@functools.cache
def record_built(record: str) -> Built | None:
    """The record read once, with every table it may fill (:func:`candidate_tables`)."""
    tables = candidate_tables(record)
    return collect(RECORDS / record, tables=list(tables)) if tables else None


def record_results(record: str) -> dict[str, TableResult]:
    """The record's results of every table it fills (:func:`tables_filled`)."""
    built = record_built(record)
    return {r.table.id: r for r in (built.results if built else []) if any(c.seeds for c in r.cells.values())}


def tables_filled(record: str) -> tuple[str, ...]:
    """The judged tables where the record's runs give a cell a value: of the
    :func:`candidate_tables`, those with a cell that has a finished seed with the table's metric
    (Dubois's figure records train Table 3's rows but log no attnLoss)."""
    return tuple(record_results(record))


# ---------------------------------------------------------------------------------------------
# Campaigns: the records that stand for one table at one budget, merged by run identity


@dataclass(frozen=True)
class Campaign:
    """Records that stand together for their tables at one budget."""

    records: tuple[str, ...]

    @property
    def name(self) -> str:
        return " + ".join(self.records)

    @property
    def created(self) -> list[float]:
        return [study_json(r)["created"] for r in self.records]


@dataclass(frozen=True)
class Merged:
    """One table of a campaign: the cells of its records merged by run identity."""

    campaign: Campaign
    result: TableResult
    origin: dict[tuple[str, str], dict[int, str]]
    """Per cell: seed -> the record its run came from."""
    dirty: dict[tuple[str, str], set[int]]
    """Per cell: seeds whose run ran uncommitted code."""

    def budget(self, key: tuple[str, str]) -> Budget:
        """The budget of one cell: that of the records its seeds came from (one budget, checked
        by :func:`merged`), with the seeds the cell has."""
        records = sorted(set(self.origin[key].values()))
        return replace(budget(records[0]), seeds=len(self.origin[key]))


def merged(campaign: Campaign, table: str) -> Merged | None:
    """The campaign's cells of ``table`` (None when no record of it fills the table): its records
    read as one by reports.build.collect, which merges runs by identity (cell, hparams, seed; an
    identity two records hold is taken once when equal, refused when not). Each cell keeps the
    record each seed came from (``Cell.seed_records``) and which seeds ran uncommitted code
    (reports.build.used_runs). A cell whose seeds ran at different budgets is refused
    (SystemExit)."""
    names = [r for r in campaign.records if table in tables_filled(r)]
    if not names:
        return None
    try:
        built = record_built(names[0]) if len(names) == 1 else collect([RECORDS / r for r in names], tables=[table])
    except RecordConflict as e:
        raise SystemExit(f"campaign {campaign.name}: {e}") from None
    result = next(r for r in built.results if r.table.id == table)
    origin = {key: dict(cell.seed_records) for key, cell in result.cells.items() if cell.seeds}
    dirty: dict[tuple[str, str], set[int]] = {}
    for row, column, seed in used_runs(result, built.runset).filter(pl.col("dirty")).select(
            "row", "column", "seed").iter_rows():
        dirty.setdefault((row, column), set()).add(int(seed))
    for key, seen in origin.items():
        budgets = {(budget(r).train_size, budget(r).epochs, budget(r).paper) for r in set(seen.values())}
        if len(budgets) > 1:
            raise SystemExit(f"campaign {campaign.name}: the seeds of {table} cell {key} ran at "
                             f"different budgets {sorted(budgets)}")
    return Merged(campaign, result, origin, dirty)


def campaigns() -> list[Campaign]:
    """Every campaign that may stand for a published cell: the :data:`POOLED` groups and each
    other record on its own; superseded records and ablation arms left out."""
    pooled = {r for group in POOLED for r in group}
    out = [Campaign(group) for group in POOLED]
    for path in sorted(RECORDS.iterdir()):
        r = path.name
        if r in pooled or r in SUPERSEDED or is_arm(r) or not tables_filled(r):
            continue
        out.append(Campaign((r,)))
    return sorted(out, key=lambda c: c.name)


# ---------------------------------------------------------------------------------------------
# Judging cells


@dataclass(frozen=True)
class Judged:
    """One published cell judged against one campaign's result."""

    table: str
    key: tuple[str, str]
    paper: PaperValue
    merged: Merged
    agrees: bool
    nontrivial: bool
    """An accuracy cell where the paper reports more than :data:`reports.agreement.NONTRIVIAL` %."""
    diff: float | None
    """Ours minus the paper's (None where not comparable as a number)."""

    @property
    def cell(self) -> Cell:
        return self.merged.result.cell(*self.key)

    @property
    def dirty(self) -> bool:
        """Some seed of the cell ran uncommitted code."""
        return bool(self.merged.dirty.get(self.key))

    @property
    def budget(self) -> Budget:
        return self.merged.budget(self.key)

    @property
    def records(self) -> tuple[str, ...]:
        """The records the cell's seeds came from, in campaign order."""
        used = set(self.merged.origin.get(self.key, {}).values())
        return tuple(r for r in self.merged.campaign.records if r in used)

    def test(self) -> SuccessTest | None:
        """The success-rate test of an accuracy cell (None for other metrics)."""
        if not is_accuracy_metric(self.merged.result.table):
            return None
        return success_test([v for _, v in self.cell.seeds], self.paper.value)


def judge(m: Merged, table: str) -> list[Judged]:
    """Every published cell of ``table`` that ``m`` has a comparable result for."""
    paper = published(table)
    accuracy = is_accuracy_metric(m.result.table)
    out = []
    for key, (ok, _) in sorted(cell_agreement(m.result, paper).items()):
        d = paper_diff(m.result.table, m.result.stat, m.result.cell(*key), paper[key])
        out.append(Judged(table, key, paper[key], m, ok, accuracy and paper[key].value > NONTRIVIAL, d))
    return out


def verdict_word(diff: float, test: SuccessTest, *, paper_budget: bool, holm_p: float | None) -> str:
    """The word a write-up uses for one accuracy cell (one of reports.agreement.VERDICTS), the
    one place it is decided: the project's rule (reports.agreement.verdict) applied to the
    Holm-adjusted p-value of the cell's family (``holm_p``). A cell in no family (``holm_p``
    None: a per-record analysis, a cell below the paper's budget) is never "contradicted"."""
    return verdict(diff, replace(test, p_value=1.0 if holm_p is None else holm_p), paper_budget=paper_budget)


def cell_verdict(j: Judged, *, paper_budget: bool, holm_p: float | None) -> str:
    """:func:`verdict_word` of a judged cell; a cell of another metric (edit distance,
    attnLoss, epochs) is reproduced or not by its tolerance alone."""
    test = j.test()
    if j.diff is None or test is None:
        return VERDICTS[0] if j.agrees else VERDICTS[1]
    return verdict_word(j.diff, test, paper_budget=paper_budget, holm_p=holm_p)


@dataclass
class Count:
    """Agreement counts of one column: non-trivial within / non-trivial, agree / compared, and
    of each, the cells resting on runs from uncommitted code."""

    nt_within: int = 0
    nt: int = 0
    within: int = 0
    compared: int = 0
    nt_dirty: int = 0
    dirty: int = 0

    def add(self, j: Judged) -> None:
        self.within += j.agrees
        self.compared += 1
        self.nt_within += j.agrees and j.nontrivial
        self.nt += j.nontrivial
        self.nt_dirty += j.nontrivial and j.dirty
        self.dirty += j.dirty

    def __iadd__(self, other: "Count") -> "Count":
        for f in ("nt_within", "nt", "within", "compared", "nt_dirty", "dirty"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        return self

    def text(self, accuracy: bool) -> str:
        nt = f"{self.nt_within} of {self.nt}; " if accuracy else ""
        return f"{nt}{self.within} of {self.compared}"

    def dirty_text(self, accuracy: bool) -> str:
        nt = f"{self.nt_dirty} of {self.nt}; " if accuracy else ""
        return f"{nt}{self.dirty} of {self.compared}"


@dataclass(frozen=True)
class Tested:
    """A cell of a table's Holm family."""

    judged: Judged
    p: float
    holm_p: float

    @property
    def survives(self) -> bool:
        return self.holm_p < ALPHA


@dataclass
class Summary:
    """Everything the summary prints, for the write-up generator."""

    judged: dict[str, dict[str, list[Judged]]]
    """Column (quick, best, paper) -> table -> judged cells."""
    counts: dict[str, dict[str, Count]]
    """Table -> column -> counts."""
    n_published: dict[str, int]
    families: dict[str, list[Tested]]
    """Table -> its Holm family (paper-budget accuracy cells, >= 5 seeds, beyond 10 points)."""
    orderings: list[tuple[str, Campaign, list[tuple[str, str, str]]]]
    repeated: list[str]
    campaigns: list[Campaign] = field(default_factory=list)

    def total(self, column: str) -> Count:
        tot = Count()
        for table in self.counts:
            tot += self.counts[table][column]
        return tot

    def holm(self, j: Judged) -> float | None:
        return next((t.holm_p for t in self.families.get(j.table, []) if t.judged is j), None)

    def verdict(self, j: Judged, column: str) -> str:
        return cell_verdict(j, paper_budget=column == "paper", holm_p=self.holm(j) if column == "paper" else None)


def family_of(cells: list[Judged]) -> list[Tested]:
    """The Holm family of one table's paper-budget cells: accuracy cells with at least
    :data:`PAPER_SEEDS` seeds that disagree by more than :data:`TOLERANCE` points, each with its
    one-sided Fisher p and its Holm-adjusted p over the family."""
    tested = [(j, j.test().p_value) for j in cells
              if j.test() is not None and j.cell.n >= PAPER_SEEDS and j.diff is not None
              and abs(j.diff) > TOLERANCE]
    adjusted = holm_adjust([p for _, p in tested])
    return [Tested(j, p, ph) for (j, p), ph in zip(tested, adjusted)]


def holm_verdicts(tested: dict[str, list[tuple[str, float]]], alpha: float = ALPHA) -> dict[str, list[tuple[str, float, float]]]:
    """Per table, from its family of (cell, p): the cells below ``alpha`` before correction as
    (cell, p, Holm-adjusted p over the whole family); a cell is contradicted when its Holm p is
    below ``alpha`` too."""
    out = {}
    for table, family in tested.items():
        adjusted = holm_adjust([p for _, p in family])
        out[table] = [(cell, p, ph) for (cell, p), ph in zip(family, adjusted) if p < alpha]
    return out


def repeated_looks(judged: list[Judged]) -> list[str]:
    """Records of a campaign created after another record of it that holds the same cells:
    seeds added after a first look."""
    pairs: dict[tuple[str, str], None] = {}
    for j in judged:
        rs = j.records
        if len(rs) < 2:
            continue
        first = min(rs, key=lambda r: study_json(r)["created"])
        for r in rs:
            if study_json(r)["created"] > study_json(first)["created"]:
                pairs[(r, first)] = None
    out = []
    for later, first in pairs:
        a, b = (study_json(r)["resolved"]["seeds"] for r in (later, first))
        out.append(f"{later} (seeds {a[0]}–{a[-1]}) added after a first look at {first} "
                   f"(seeds {b[0]}–{b[-1]})")
    return out


@functools.cache
def summarise() -> Summary:
    """Judge every published cell in the three columns (cached: the committed records are read
    once per process)."""
    judged: dict[str, dict[str, list[Judged]]] = {k: {t: [] for t in TABLES_JUDGED} for k in COLUMNS}
    every = campaigns()
    merged_of = {(c, t): merged(c, t) for c in every for t in TABLES_JUDGED}
    orderings = []
    for table in TABLES_JUDGED:
        quick = merged(Campaign(QUICK[table]), table)
        judged["quick"][table] = judge(quick, table)
        if table in ORDERING:
            orderings.append((table, quick.campaign, best_rows(quick.result, published(table))))
        best: dict[tuple[str, str], tuple[tuple, Judged]] = {}
        for c in every:
            m = merged_of[(c, table)]
            if m is None:
                continue
            for j in judge(m, table):
                b = j.budget
                rank = (b.train_size, b.epochs, b.seeds, c.records == QUICK[table],
                        any(study_json(r).get("profile") == "paper" for r in j.records))
                if j.key not in best or rank > best[j.key][0]:
                    best[j.key] = (rank, j)
        judged["best"][table] = [j for _, (_, j) in sorted(best.items())]
        judged["paper"][table] = [j for j in judged["best"][table] if j.budget.paper]
    counts = {t: {k: Count() for k in COLUMNS} for t in TABLES_JUDGED}
    for k in COLUMNS:
        for t in TABLES_JUDGED:
            for j in judged[k][t]:
                counts[t][k].add(j)
    families = {t: f for t in TABLES_JUDGED if (f := family_of(judged["paper"][t]))}
    repeated = repeated_looks([j for t in TABLES_JUDGED for j in judged["best"][t]])
    return Summary(judged, counts, {t: len(published(t)) for t in TABLES_JUDGED}, families,
                   orderings, repeated, every)


# ---------------------------------------------------------------------------------------------
# Markdown


def dirty_mark(count: Count | None = None, *, dirty: bool | None = None) -> str:
    """`` **[+dirty]**`` when the count (or cell) rests on runs from uncommitted code, else ""."""
    if dirty is None:
        dirty = bool(count and count.dirty)
    return " **[+dirty]**" if dirty else ""


def cell_name(j: Judged) -> str:
    return f"{j.key[0]} {j.key[1]}"


def markdown(s: Summary) -> list[str]:
    """The summary as Markdown lines (results/README.md quotes them)."""
    lines = ["Each column: accuracy cells where the paper reports more than 10 % within 10 points; "
             "then every compared cell that agrees by its metric's tolerance. **[+dirty]**: some of "
             "the cells counted rest on runs from uncommitted code (how many: the next table).", "",
             "| table | quick | best budget | paper budget | published cells |", "|---|---|---|---|---|"]
    acc = {t: is_accuracy_metric(TABLES[t]) for t in TABLES_JUDGED}
    for t in TABLES_JUDGED:
        lines.append(f"| {t} | " + " | ".join(s.counts[t][k].text(acc[t]) + dirty_mark(s.counts[t][k])
                                             for k in COLUMNS) + f" | {s.n_published[t]} |")
    lines.append("| **all** | " + " | ".join(f"**{s.total(k).text(True)}**{dirty_mark(s.total(k))}" for k in COLUMNS)
                 + f" | {sum(s.n_published.values())} |")
    lines += ["", "Of those, the cells resting on runs from uncommitted code (**[+dirty]**: a seed "
              "of the cell ran it), counted the same way:", "",
              "| table | quick | best budget | paper budget |", "|---|---|---|---|"]
    for t in TABLES_JUDGED:
        if any(s.counts[t][k].dirty for k in COLUMNS):
            lines.append(f"| {t} | " + " | ".join(s.counts[t][k].dirty_text(acc[t]) for k in COLUMNS) + " |")
    lines.append("| **all** | " + " | ".join(f"**{s.total(k).dirty_text(True)}**" for k in COLUMNS) + " |")
    lines += ["", "Quick campaigns: " + "; ".join(
        f"{t}: {Campaign(QUICK[t]).name}{dirty_mark(s.counts[t]['quick'])}" for t in TABLES_JUDGED) + ".",
        "", "Best-budget campaigns (cells each; the records a cell's seeds came from):"]
    for t in TABLES_JUDGED:
        used: dict[tuple[str, str, bool, bool], int] = {}
        for j in s.judged["best"][t]:
            b = j.budget
            k = (" + ".join(j.records), b.text(), b.paper, j.dirty)
            used[k] = used.get(k, 0) + 1
        lines.append(f"- {t}: " + "; ".join(
            f"{names}{dirty_mark(dirty=dirty)} ({'**paper budget**: ' if paper else ''}{text}): {n}"
            for (names, text, paper, dirty), n in sorted(used.items(), key=lambda kv: (-kv[1], kv[0]))))
    lines += ["", "Tolerances:"] + [f"- {t}: {TOLERANCE_RULES.get(TABLES[t].metric, '')}" for t in TABLES_JUDGED]
    for table, c, rows in s.orderings:
        same = sum(theirs == ours for _, theirs, ours in rows)
        lines.append(f"- ordering: {table} ({c.name}): the paper's best row is ours in {same} of "
                     f"{len(rows)} columns (" + "; ".join(
                         f"{col}: paper {theirs}, ours {ours or '–'}" for col, theirs, ours in rows) + ")")
    lines += ["", "Contradicted (paper budget, >= 5 seeds, one-sided Fisher p < 0.05 after Holm over "
              "the table's family: its paper-budget accuracy cells with >= 5 seeds that disagree by "
              "more than 10 points); the cells below 0.05 before Holm:"]
    for t, family in s.families.items():
        m = len(family)
        low = [x for x in family if x.p < ALPHA]
        lines.append(f"- {t}: family of {m} (Holm's first threshold {ALPHA / m:.2g}); "
                     + ("; ".join(f"{cell_name(x.judged)} ({' + '.join(x.judged.records)}"
                                  f"{dirty_mark(dirty=x.judged.dirty)}, {x.judged.cell.n} seeds): "
                                  f"p = {x.p:.3g}, Holm p = {x.holm_p:.3g}, "
                                  f"{'contradicted' if x.survives else 'not contradicted'}" for x in low)
                        or "no cell below 0.05"))
    lines += [f"- repeated look: {line}" for line in s.repeated]
    return lines


def main() -> int:
    print("\n".join(markdown(summarise())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
