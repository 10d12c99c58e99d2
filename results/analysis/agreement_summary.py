"""Agreement with the papers over every committed table and all 800 transcribed cells: at the
quick budget, at the best budget each cell has, and at the paper's budget, side by side; and
which "contradicted" verdicts survive Holm over each table's family of tests.

    python results/analysis/agreement_summary.py

Each cell is judged by its table metric's tolerance (reports.agreement.TOLERANCE_RULES:
accuracy within 10 points; edit distance within 10 % of the target length; attnLoss within
25 %; Raffel & Ellis's epochs within a factor of 1.5, and a cell that reached 100 % on one side
only is a disagreement), counted first among the accuracy cells where the paper reports more
than 10 %, then among every compared cell. A table whose claim is an ordering (Dubois Table 3:
the best row of each column) is judged on that ordering too. Three columns:

- **quick**: the newest quick-budget record of each table (CURRENT).
- **best budget**: per published cell, the committed record with the largest training budget
  that has a result for it (:func:`budget`: training examples first, the task's full data above
  any ``task.train_size``; then epochs; then seeds; ties go to a CURRENT record, then to the
  profile named ``paper``, then to the record name first in order). Records that add seeds to
  another's runs (EXTENDS) are pooled into it; ablation arms (a ``model.*`` override) and
  superseded records (SUPERSEDED) never stand for a published cell.
- **paper budget**: the best-budget cells whose record ran at the paper's budget: the task's
  full data and at least the epochs of the spec's ``paper`` profile (100 for Ray Chowdhury &
  Caragea, 50 for Dubois et al.).

"Contradicted" (reports.agreement.verdict: paper budget, >= 5 seeds, one-sided Fisher p < 0.05)
is then corrected by Holm's step-down (reports.aggregate.holm_adjust) over each table's family:
every accuracy cell of that table scored at the paper's budget with >= 5 seeds that disagrees
by more than 10 points (the cells where the verdict could be reached). Holm holds under any
dependence between the tests, so cells that share runs (one model scored at two lengths) are
counted as separate tests, which is conservative. Records whose seeds were added after a first
look at the base record (an EXTENDS record created later) are named: their p-values are not
corrected for that repeated look.

A record with runs trained from uncommitted code is marked **[+dirty]** wherever it is named.
Prints Markdown, as quoted in results/README.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from reports.aggregate import TableResult, holm_adjust
from reports.agreement import (ALPHA, PAPER_SEEDS, TOLERANCE, TOLERANCE_RULES, best_rows,
                               cell_agreement, is_accuracy, success_test)
from reports.build import collect
from reports.paper import load_paper_numbers
from reports.render import paper_diff
from success_rates import pool_seeds  # results/analysis/success_rates.py, beside this script

RECORDS = Path(__file__).resolve().parents[1] / "record"
#: (record, table ids): the newest quick record of each table; older generations are superseded.
CURRENT = (
    ("rc_table2-quick-v2", ("rc_table2", "rc_table9")),
    ("rc_table4-quick-v3", ("rc_table4",)),
    ("rc_table7-quick", ("rc_table7",)),
    ("rc_table7-quick_rest", ("rc_table7",)),  # the six other tasks: disjoint cells, summed
    ("rc_table6-quick", ("rc_table6",)),
    ("rc_table3_scan-quick", ("rc_table3",)),
    ("rc_table8-quick", ("rc_table8",)),
    ("rc_table8-quick_rest", ("rc_table8",)),  # the other 6 rows: disjoint cells, summed
    ("dubois_table3-quick-v2", ("dubois_table3",)),
    ("raffel_table1-quick", ("raffel_table1",)),
    ("raffel_variable-quick", ("raffel_variable",)),  # Raffel & Ellis §2.3: 4 cells
)
#: Records of protocols fixed since (results/README.md): never a table's cell.
SUPERSEDED = ("rc_table2-quick", "rc_table4-quick", "rc_table4-quick-v2", "dubois_table3-quick")
#: Record -> the record whose runs it adds seeds to (pooled, as success_rates.py --with does).
EXTENDS = {"rc_table4-gpu_seeds20": "rc_table4-gpu", "rc_table7-gpu_seeds20": "rc_table7-gpu"}
#: Tables whose claim is an ordering: judged on the best row of each column as well.
ORDERING = ("dubois_table3",)
TABLES = tuple(dict.fromkeys(t for _, tables in CURRENT for t in tables))
#: Record -> its trial runs trained from uncommitted code (``+dirty``), its EXTENDS records' included.
DIRTY: dict[str, int] = {}


def named(record: str) -> str:
    """The record's name, marked **[+dirty]** when runs of it came from uncommitted code."""
    return f"{record} **[+dirty]**" if DIRTY.get(record) else record


def built(record: str, tables: list[str]) -> list[TableResult]:
    """The record's tables; notes its uncommitted-code runs (and its EXTENDS records') in DIRTY."""
    b = collect(RECORDS / record, tables=tables)
    DIRTY[record] = b.provenance.n_dirty + sum(
        collect(RECORDS / r, tables=tables).provenance.n_dirty for r, base in EXTENDS.items() if base == record)
    return b.results


@dataclass(frozen=True, order=True)
class Budget:
    """A record's training budget, ordered: examples, then epochs, then seeds."""

    train_size: float
    """``task.train_size``; ``inf`` when the task's full data (the paper's) is used."""
    epochs: int
    seeds: int
    """Seeds of the record; where another record's seeds are pooled in, the most any cell has."""
    paper: bool
    """The task's full data and at least the epochs of the spec's ``paper`` profile."""

    def text(self) -> str:
        data = "full data" if math.isinf(self.train_size) else f"{self.train_size:,.0f} examples"
        return f"{data}, {self.epochs} epochs, {self.seeds} seed{'s' if self.seeds > 1 else ''}"


def budget(record: Path, seeds: int | None = None) -> Budget:
    """The training budget of a committed record, from its study.json (``seeds``: the pooled
    count where seeds of other records were added)."""
    study = json.loads((record / "study.json").read_text())
    over, raw = study["resolved"]["overrides"], study["raw"]
    epochs = int(over.get("optim.epochs", raw.get("overrides", {}).get("optim.epochs", 100)))
    paper_epochs = int(raw.get("profiles", {}).get("paper", {}).get("overrides", {}).get(
        "optim.epochs", raw.get("overrides", {}).get("optim.epochs", 100)))
    train = float(over["task.train_size"]) if "task.train_size" in over else math.inf
    return Budget(train, epochs, seeds or len(study["resolved"]["seeds"]),
                  math.isinf(train) and epochs >= paper_epochs)


def candidates() -> list[tuple[str, Budget, TableResult]]:
    """Every (record, budget, table result) that may stand for a published cell, seeds of
    EXTENDS records pooled into their base."""
    out = []
    for path in sorted(RECORDS.iterdir()):
        study = json.loads((path / "study.json").read_text())
        tables = [t for t in study["resolved"].get("tables", []) if t in TABLES]
        if (not tables or path.name in SUPERSEDED or path.name in EXTENDS
                or any(k.startswith("model.") for k in study["resolved"]["overrides"])):
            continue
        pooled = tuple(RECORDS / r for r, base in EXTENDS.items() if base == path.name)
        for result in built(path.name, tables):
            pool_seeds(result, path, pooled)
            seeds = max(len(c.seeds) for c in result.cells.values()) if pooled else None
            out.append((path.name, budget(path, seeds), result))
    return out


def repeated_looks() -> list[str]:
    """EXTENDS records created after their base: seeds added after a first look."""
    out = []
    for extra, base in EXTENDS.items():
        a, b = (json.loads((RECORDS / r / "study.json").read_text()) for r in (extra, base))
        if a["created"] > b["created"]:
            out.append(f"{extra} (seeds {a['resolved']['seeds'][0]}–{a['resolved']['seeds'][-1]}) "
                       f"added after a first look at {base} (seeds {b['resolved']['seeds'][0]}–"
                       f"{b['resolved']['seeds'][-1]})")
    return out


def holm_verdicts(tested: dict[str, list[tuple[str, float]]], alpha: float = ALPHA) -> dict[str, list[tuple[str, float, float]]]:
    """Per table, from its family of (cell, p): the cells "contradicted" before correction
    (p < ``alpha``) as (cell, p, Holm-adjusted p over the whole family); a verdict survives
    when its Holm p is below ``alpha`` too."""
    out = {}
    for table, family in tested.items():
        adjusted = holm_adjust([p for _, p in family])
        out[table] = [(cell, p, ph) for (cell, p), ph in zip(family, adjusted) if p < alpha]
    return out


@dataclass
class Count:
    """Agreement counts of one column: non-trivial within / non-trivial, agree / compared."""

    nt_within: int = 0
    nt: int = 0
    within: int = 0
    compared: int = 0

    def add(self, ok: bool, nontrivial: bool) -> None:
        self.within += ok
        self.compared += 1
        self.nt_within += ok and nontrivial
        self.nt += nontrivial

    def text(self, accuracy: bool) -> str:
        nt = f"{self.nt_within} of {self.nt}; " if accuracy else ""
        return f"{nt}{self.within} of {self.compared}"


def summary() -> tuple[list[str], dict[str, dict[str, Count]], dict[str, int]]:
    """The Markdown lines, the counts per table and column (quick, best, paper), and the
    published cells per table."""
    quick = {t: [] for t in TABLES}
    for record, tables in CURRENT:
        for result in built(record, list(tables)):
            quick[result.table.id].append((record, result))
    pool = candidates()
    counts = {t: {k: Count() for k in ("quick", "best", "paper")} for t in TABLES}
    published, used, accuracy, tested, orderings = {}, {}, {}, {}, []
    for table in TABLES:
        paper = load_paper_numbers(quick[table][0][1].table)
        published[table] = len(paper)
        accuracy[table] = is_accuracy(quick[table][0][1])
        for _, result in quick[table]:
            for ok, nt in cell_agreement(result, paper).values():
                counts[table]["quick"].add(ok, nt)
        best = {}  # cell -> (rank, record, budget, result, (ok, nontrivial))
        current = {r for r, ts in CURRENT if table in ts}
        for record, b, result in pool:
            if result.table.id != table:
                continue
            rank = (b.train_size, b.epochs, b.seeds, record in current, "paper" in record.split("-")[-1:])
            for cell, verdict in cell_agreement(result, paper).items():
                if cell not in best or rank > best[cell][0]:
                    best[cell] = (rank, record, b, result, verdict)
        family = []
        for cell, (_, record, b, result, (ok, nt)) in sorted(best.items()):
            counts[table]["best"].add(ok, nt)
            used.setdefault(table, {}).setdefault((record, b.text(), b.paper), 0)
            used[table][(record, b.text(), b.paper)] += 1
            if not b.paper:
                continue
            counts[table]["paper"].add(ok, nt)
            seeds = [v for _, v in result.cell(*cell).seeds]
            p = paper[cell]
            d = paper_diff(result.table, result.stat, result.cell(*cell), p)
            if accuracy[table] and len(seeds) >= PAPER_SEEDS and d is not None and abs(d) > TOLERANCE:
                family.append((f"{cell[0]} {cell[1]} ({named(record)}, {len(seeds)} seeds)",
                               success_test(seeds, p.value).p_value))
        if family:
            tested[table] = family
        if table in ORDERING:
            for record, result in quick[table]:
                rows = best_rows(result, paper)
                same = sum(theirs == ours for _, theirs, ours in rows)
                orderings.append(f"{table} ({named(record)}): the paper's best row is ours in {same} of "
                                 f"{len(rows)} columns (" + "; ".join(
                                     f"{c}: paper {theirs}, ours {ours or '–'}" for c, theirs, ours in rows) + ")")
    lines = ["Each column: accuracy cells where the paper reports more than 10 % within 10 points; "
             "then every compared cell that agrees by its metric's tolerance.", "",
             "| table | quick | best budget | paper budget | published cells |", "|---|---|---|---|---|"]
    tot = {k: Count() for k in ("quick", "best", "paper")}
    for table in TABLES:
        for k in tot:
            c = counts[table][k]
            tot[k].nt_within += c.nt_within
            tot[k].nt += c.nt
            tot[k].within += c.within
            tot[k].compared += c.compared
        lines.append(f"| {table} | " + " | ".join(counts[table][k].text(accuracy[table]) for k in tot)
                     + f" | {published[table]} |")
    lines.append("| **all** | " + " | ".join(f"**{tot[k].text(True)}**" for k in tot)
                 + f" | {sum(published.values())} |")
    lines += ["", "Quick records: " + "; ".join(f"{t}: {', '.join(named(r) for r, _ in quick[t])}" for t in TABLES)
              + ".", "", "Best-budget records (cells each):"]
    for table, records in used.items():
        lines.append(f"- {table}: " + "; ".join(
            f"{named(r)} ({'**paper budget**: ' if paper else ''}{text}): {n}"
            for (r, text, paper), n in sorted(records.items(), key=lambda kv: -kv[1])))
    lines += ["", "Tolerances:"] + [f"- {t}: {TOLERANCE_RULES.get(quick[t][0][1].table.metric, '')}" for t in TABLES]
    lines += [f"- ordering: {line}" for line in orderings]
    lines += ["", "Contradicted (paper budget, >= 5 seeds, one-sided Fisher p < 0.05), then Holm "
              "over each table's family (its paper-budget accuracy cells with >= 5 seeds that "
              "disagree by more than 10 points):"]
    for table, hits in holm_verdicts(tested).items():
        m = len(tested[table])
        lines.append(f"- {table}: family of {m} (Holm's first threshold {ALPHA / m:.2g}); "
                     + ("; ".join(f"{c}: p = {p:.3g}, Holm p = {ph:.3g}, "
                                  f"{'survives' if ph < ALPHA else 'does not survive'}"
                                  for c, p, ph in hits) or "no cell below 0.05"))
    lines += [f"- repeated look: {line}" for line in repeated_looks()]
    return lines, counts, published


def main() -> int:
    print("\n".join(summary()[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
