"""The write-up's numbers, generated from the committed records: README.md's "What we found",
results/README.md's agreement summary and list of runs from uncommitted code, and
docs/findings.md's counts, verdicts and cell-by-cell table.

    python results/analysis/writeup.py --check    # exit 1 naming each block that differs
    python results/analysis/writeup.py --write    # rewrite the blocks in place

A generated block sits between ``<!-- generated:NAME -->`` and ``<!-- /generated -->`` in one of
:data:`FILES` (on one line, or over several); everything between the two markers is this
script's output for NAME (:func:`blocks`), and everything outside them is left alone. Every
number in a block comes from results/analysis/agreement_summary.py's judgement of the committed
records; a count that includes a cell resting on runs from uncommitted code carries **[+dirty]**
and says how many of its cells do. The verdict words are decided in one place,
``agreement_summary.cell_verdict``.

results/analysis/regenerate.py runs it last, after every committed table and analysis is
rebuilt; ``tests/paper/test_writeup.py`` fails when a block differs from this script's output.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import polars as pl

import agreement_summary as agr  # results/analysis/agreement_summary.py, beside this script
from reports.agreement import ALPHA, VERDICTS, best_rows
from reports.row_labels import paper_label
from reports.tables import TABLES

ROOT = Path(__file__).resolve().parents[2]
FILES = (ROOT / "README.md", ROOT / "results" / "README.md", ROOT / "docs" / "findings.md")
BLOCK = re.compile(r"<!-- generated:(?P<name>[a-z0-9-]+) -->(?P<body>.*?)<!-- /generated -->", re.S)
OPEN = re.compile(r"<!-- generated:([a-z0-9-]+) -->")
#: How the write-up names each judged table.
TABLE_NAMES = {
    "rc_table2": "Table 2", "rc_table9": "Table 9", "rc_table4": "Table 4", "rc_table7": "Table 7",
    "rc_table6": "Table 6", "rc_table3": "Table 3", "rc_table8": "Table 8",
    "dubois_table3": "Dubois Table 3", "raffel_table1": "Raffel & Ellis Table 1",
    "raffel_variable": "Raffel & Ellis §2.3",
}
#: What the numbers of one row cannot say by themselves (no number in these sentences).
NOTES = {
    ("rc_table7", "mix_onestep"): ("This is Mix as the paper describes it, mixing; the released "
                                   "code's Mix OneStepAttn never mixes. Mixing, the gate learns "
                                   "to attend by location."),
}
#: The paper's own words for Dubois et al.'s Table 3 claim (§7.4 of the paper).
DUBOIS_CLAIM = "the Mix Attender performs on average the best across all settings"
SOLVED = 90.0


def column_label(table: str, key: str) -> str:
    t = TABLES[table]
    return next(f"{g.label} {c.label}".strip() for p in t.panels for g in p.groups
                for c in g.columns if c.key == key)


def seeds_text(n: int) -> str:
    return f"{n} seed{'s' if n != 1 else ''}"


def either(values: list[int]) -> str:
    """``[5, 10, 20]`` -> ``5, 10 or 20``."""
    v = sorted(set(values))
    return str(v[0]) if len(v) == 1 else ", ".join(map(str, v[:-1])) + f" or {v[-1]}"


def span(values: list[float], unit: str = "") -> str:
    lo, hi = min(values), max(values)
    return f"{lo:,.0f}{unit}" if lo == hi else f"{lo:,.0f}–{hi:,.0f}{unit}"


def records_text(j: agr.Judged) -> str:
    return " + ".join(f"`{r}`" for r in j.records) + agr.dirty_mark(dirty=j.dirty)


def dirty_count(c: agr.Count, nontrivial: bool) -> str:
    """`` **[+dirty]** (k of n rest on runs from uncommitted code)`` or ""."""
    k, n = (c.nt_dirty, c.nt) if nontrivial else (c.dirty, c.compared)
    return f" **[+dirty]** ({k} of the {n} rest on runs from uncommitted code)" if k else ""


# ---------------------------------------------------------------------------------------------
# Groups of cells: one row of one table on one task, judged against one campaign


def and_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}"


def columns_text(table: str, keys: list[str]) -> str:
    """``Copy 15 and 30, Reverse Copy 15``: the columns of one row, by task."""
    by: dict[str, list[str]] = {}
    for k in keys:
        label = column_label(table, k)
        task, _, col = label.rpartition(" ")
        by.setdefault(task or label, []).append(col if task else "")
    return ", ".join(f"{task} {and_list(cols)}".strip() for task, cols in by.items())


@dataclass
class Group:
    """Cells of one row judged against the same records, in one or more tables."""

    tables: list[str]
    row: str
    cells: list[agr.Judged]

    def where(self) -> str:
        j = self.cells[0]
        names = [TABLE_NAMES[t] for t in sorted(self.tables, key=list(agr.TABLES_JUDGED).index)]
        tables = names[0] if len(names) == 1 else "Tables " + and_list([n.split()[-1] for n in names])
        return (f"{paper_label(self.row)} on {columns_text(j.table, [c.key[1] for c in self.cells])} "
                f"({tables}; {records_text(j)}, {j.budget.text()})")


def groups(cells: list[agr.Judged], *, across_tables: bool = False) -> list[Group]:
    """Cells grouped by row and records (and table, unless ``across_tables``: then a cell that
    two tables publish, one run for both, is named once with both tables)."""
    out: dict[tuple, Group] = {}
    order = {c.key: i for t in TABLES.values() for i, c in enumerate(t.columns)}
    for j in cells:
        t = TABLES[j.table]
        k = (j.key[0], j.records, j.cell.n, j.dirty, t.metric) + (() if across_tables else (j.table,))
        g = out.setdefault(k, Group([], j.key[0], []))
        if j.table not in g.tables:
            g.tables.append(j.table)
        if all(c.key != j.key for c in g.cells):
            g.cells.append(j)
    for g in out.values():
        g.cells.sort(key=lambda j: order[j.key[1]])
    return list(out.values())


def solved_text(cells: list[agr.Judged]) -> str:
    tests = [j.test() for j in cells]
    medians = and_list([f"{j.paper.value:g}" for j in cells])
    if len({(t.k, t.n) for t in tests}) == 1:
        each = " in each" if len(cells) > 1 else ""
        return (f"{tests[0].k} of {tests[0].n} seeds reach {SOLVED:g} %{each}, where the paper's "
                f"median{'s are' if len(cells) > 1 else ' is'} {medians}")
    return (", ".join(f"{t.k} of {t.n}" for t in tests) + f" seeds reach {SOLVED:g} %, where the "
            f"paper's medians are {medians}")


def low_p(s: agr.Summary) -> list[agr.Tested]:
    return [x for f in s.families.values() for x in f if x.p < ALPHA]


def holm_sentence(s: agr.Summary, tested: list[agr.Tested]) -> str:
    """One sentence per group of cells below 0.05 before Holm."""
    by = {id(x.judged): x for x in tested}
    out = []
    for g in groups([x.judged for x in tested]):
        xs = [by[id(j)] for j in g.cells]
        fam = len(s.families[g.tables[0]])
        ps = sorted({f"{x.p:.2g}" for x in xs})
        hs = sorted({f"{x.holm_p:.2g}" for x in xs})
        word = "contradicted" if all(x.survives for x in xs) else "not contradicted"
        looks = [r.split(" (")[0] for r in s.repeated if any(r.startswith(rec + " ") for rec in g.cells[0].records)]
        each = " each" if len(xs) > 1 else ""
        out.append(
            f"{g.where()}: {solved_text(g.cells)} (one-sided Fisher p = {and_list(ps)}{each if len(ps) == 1 else ''}; "
            f"Holm p = {and_list(hs)} over the table's {fam} paper-budget tests: {word}"
            + (f"; `{looks[0]}` was added after a first look at the other seeds, which the p-values "
               "do not correct for" if looks else "") + ")."
            + (f" {NOTES[(g.tables[0], g.row)]}" if (g.tables[0], g.row) in NOTES else ""))
    return " ".join(out)


def verdict_counts(s: agr.Summary, column: str) -> dict[str, int]:
    out = {v: 0 for v in VERDICTS}
    for t in agr.TABLES_JUDGED:
        for j in s.judged[column][t]:
            out[s.verdict(j, column)] += 1
    return out


def paper_orderings(s: agr.Summary) -> list[tuple[str, agr.Campaign, list]]:
    """The ordering of each ORDERING table at its paper-budget campaigns."""
    out = []
    for table in agr.ORDERING:
        for c in s.campaigns:
            m = agr.merged(c, table)
            if m and m.origin and all(agr.budget(r).paper for r in c.records):
                out.append((table, c, best_rows(m.result, agr.published(table))))
    return out


# ---------------------------------------------------------------------------------------------
# The blocks


def quick_budget_text(s: agr.Summary) -> str:
    seeds = [j.cell.n for t in agr.TABLES_JUDGED for j in s.judged["quick"][t]]
    return f"{span(seeds)} seeds"


def other_quick_epochs() -> str:
    records = sorted({r for rs in agr.QUICK.values() for r in rs
                      if agr.budget(r).train_size == float("inf")})
    return span([agr.budget(r).epochs for r in records])


def paper_epochs_text(s: agr.Summary) -> str:
    """The epochs of the paper-budget cells, per paper (``100 for Ray Chowdhury & Caragea, 50 for
    Dubois et al.``)."""
    by: dict[str, set[int]] = {}
    for t in agr.TABLES_JUDGED:
        for j in s.judged["paper"][t]:
            who = ("Dubois et al." if t.startswith("dubois") else
                   "Raffel & Ellis" if t.startswith("raffel") else "Ray Chowdhury & Caragea")
            by.setdefault(who, set()).add(j.budget.epochs)
    return ", ".join(f"{either(sorted(e))} for {who}" for who, e in by.items())


def rc_quick_text() -> str:
    """The quick budget of Ray Chowdhury & Caragea's tables that train on part of the data."""
    records = sorted({r for t, rs in agr.QUICK.items() if t.startswith("rc_") for r in rs})
    small = [agr.budget(r) for r in records if agr.budget(r).train_size != float("inf")]
    paper = {int(agr.study_json(r)["raw"].get("profiles", {}).get("paper", {}).get("overrides", {})
                 .get("optim.epochs", 100)) for r in records}
    return (f"{span([b.train_size for b in small])} training examples instead of the full data, and "
            f"{span([b.epochs for b in small])} of the paper's {either(sorted(paper))} epochs")


def agreement_sentence(s: agr.Summary) -> str:
    q, b, p = (s.total(k) for k in agr.COLUMNS)
    paper_seeds = [j.cell.n for t in agr.TABLES_JUDGED for j in s.judged["paper"][t] if j.nontrivial]
    return (
        f"Of the {q.nt} accuracy cells where a paper reports more than 10 %, {q.nt_within} are within "
        f"10 points of ours at the quick budget{dirty_count(q, True)}, {b.nt_within} with the "
        f"largest-budget campaign of each cell{dirty_count(b, True)}, and {p.nt_within} of the {p.nt} "
        f"run at the paper's budget with {either(paper_seeds)} seeds{dirty_count(p, True)}. By each "
        f"metric's tolerance, {q.within}, {b.within} and {p.within} of {q.compared}, {b.compared} and "
        f"{p.compared} compared cells agree{' **[+dirty]**' if q.dirty or b.dirty or p.dirty else ''} "
        f"({q.dirty}, {b.dirty} and {p.dirty} of them rest on runs from uncommitted code), of "
        f"{sum(s.n_published.values())} transcribed.")


def vocabulary_sentence(s: agr.Summary) -> str:
    n = verdict_counts(s, "paper")[VERDICTS[2]]
    return ("A cell is *reproduced* when ours is within its metric's tolerance of the paper's "
            "number, and *contradicted* only at the paper's budget, with at least 5 seeds and p < "
            "0.05 (one-sided Fisher on the success rates) after Holm over the table's family of "
            "paper-budget tests; every other disagreement is *not reproduced at this budget* "
            "(`verdict_word` in `results/analysis/agreement_summary.py`). "
            + ("No cell meets the rule today." if n == 0 else f"{n} cells meet it today."))


def paper_budget_lines(s: agr.Summary) -> list[str]:
    counts = verdict_counts(s, "paper")
    total = sum(counts.values())
    missed = [j for t in agr.TABLES_JUDGED for j in s.judged["paper"][t]
              if s.verdict(j, "paper") != VERDICTS[0]]
    lines = [f"- **At the paper's budget** {total} cells are compared{dirty_count(s.total('paper'), False)}: "
             f"{counts[VERDICTS[0]]} reproduced, {counts[VERDICTS[1]]} not reproduced at this budget "
             f"and {counts[VERDICTS[2]]} contradicted. Those not reproduced (a cell two tables "
             "publish is one run, named once):"]
    for g in groups(missed, across_tables=True):
        t = TABLES[g.cells[0].table]
        metric = "" if agr.is_accuracy_metric(t) else f", {t.title.split(' (')[0].lower()}"
        lines.append(f"  - {g.where()}{metric}: ours " + ", ".join(
            f"{j.cell.median:.{max(t.decimals, 1)}f}" for j in g.cells)
            + ", the paper's " + ", ".join(f"{j.paper.value:g}" for j in g.cells) + ".")
    return lines


def ordering_line(s: agr.Summary) -> str:
    """Dubois Table 3's claim, an ordering, at the quick and the paper's budget."""
    parts, held = [], True
    for table, c, rows in s.orderings + paper_orderings(s):
        if any(theirs and not agr.merged(c, table).result.cells.get((theirs, col), None) or
               not agr.merged(c, table).result.cell(theirs, col).seeds for col, theirs, _ in rows):
            continue  # the campaign has not run the paper's best row
        same = sum(theirs == ours for _, theirs, ours in rows)
        m = agr.merged(c, table)
        models = sorted({paper_label(r) for (r, _), cell in m.result.cells.items() if cell.seeds})
        b = agr.budget(c.records[0])
        parts.append(f"{same} of {len(rows)} columns with `{c.name}` ({', '.join(models)}; {b.text()})")
        held = held and same == len(rows) if b.paper else held
    verdict = "reproduced" if held else "not reproduced at the paper's budget"
    return (f"- **Dubois Table 3's ordering.** Dubois et al. (§7.4) write that \"{DUBOIS_CLAIM}\". "
            "Mix has the lowest attention loss of our rows in " + "; in ".join(parts) + f": *{verdict}*.")


def readme_found(s: agr.Summary) -> str:
    lines = [
        "Every number in this section is written by `python results/analysis/writeup.py --write` "
        "from the studies committed under `results/record/` (a test fails when one differs); each "
        "names its seeds and budget. [results/README.md](results/README.md) has every table, its "
        "cost and the evidence per cell; [Findings](docs/findings.md) has every cell judged above "
        "the quick budget. " + vocabulary_sentence(s) + " **[+dirty]** marks a number that rests on "
        "runs trained from uncommitted code "
        "([which](results/README.md#runs-trained-from-uncommitted-code-dirty)).", "",
        f"- **Agreement.** {agreement_sentence(s)} The quick budget is {quick_budget_text(s)} per "
        f"cell; for Ray Chowdhury & Caragea's tables on generated data, {rc_quick_text()}.",
    ]
    tested = low_p(s)
    if tested:
        lines.append("- **Below p = 0.05 before Holm, not after:** " + holm_sentence(s, tested))
    lines += paper_budget_lines(s)
    lines.append(ordering_line(s))
    return "\n".join(lines)


def results_columns(s: agr.Summary) -> str:
    q, b, p = (s.total(k) for k in agr.COLUMNS)
    paper_seeds = [j.cell.n for t in agr.TABLES_JUDGED for j in s.judged["paper"][t]]
    return "\n".join([
        f"- **quick**: the newest quick campaign of each table ({rc_quick_text()} for Ray Chowdhury "
        f"& Caragea's generated tasks; the full data at {other_quick_epochs()} epochs for SCAN, Dubois and "
        f"Raffel & Ellis; {quick_budget_text(s)} per cell): **{q.nt_within} of {q.nt}** non-trivial cells within 10 "
        f"points{dirty_count(q, True)}, {q.within} of {q.compared} cells agree{dirty_count(q, False)}.",
        "- **best budget**: per cell, the committed campaign with the largest training budget that "
        "has it (the full data above 2,000 examples, then epochs, then the cell's seeds; a campaign "
        "of several records, such as `rc_table4-paper` with `rc_table4-gpu_seeds20`, merged by run "
        f"identity): **{b.nt_within} of {b.nt}**{dirty_count(b, True)}, {b.within} of {b.compared}"
        f"{dirty_count(b, False)}.",
        "- **paper budget**: only the best-budget cells whose campaign ran at the paper's budget "
        f"(full data and at least the paper's epochs: {paper_epochs_text(s)}; "
        f"{either(paper_seeds)} seeds per cell): **{p.nt_within} of {p.nt}**{dirty_count(p, True)}, "
        f"{p.within} of {p.compared}{dirty_count(p, False)}.",
    ])


def results_verdicts(s: agr.Summary) -> str:
    tested = low_p(s)
    fams = and_list([f"{len(f)} tests in {TABLE_NAMES[t]}" for t, f in s.families.items()])
    text = (vocabulary_sentence(s) + f" The families: {fams}. "
            + (f"{len(tested)} cells reach p < 0.05 before Holm: " + holm_sentence(s, tested)
               if tested else "No cell reaches p < 0.05 before Holm."))
    return text


def dirty_rows(s: agr.Summary) -> str:
    lines = ["| record | +dirty trial runs | code versions | rows (variants) | published cells resting on them, every table: quick / best / paper |",
             "|---|---|---|---|---|"]
    for path in sorted(agr.RECORDS.iterdir()):
        runs = agr.trial_runs(path.name)
        d = runs.filter(pl.col("dirty"))
        if not d.height:
            continue
        versions = ", ".join(sorted(set(d["code_version"].drop_nulls().to_list())))
        rows = ", ".join(f"{paper_label(v)} {n}" for v, n in sorted(
            d.group_by("variant").len().iter_rows(), key=lambda r: r[0]))
        fed = []
        for k in agr.COLUMNS:
            fed.append(str(sum(1 for t in agr.TABLES_JUDGED for j in s.judged[k][t]
                               if path.name in j.records and j.merged.dirty.get(j.key)
                               and any(j.merged.origin[j.key][seed] == path.name for seed in j.merged.dirty[j.key]))))
        superseded = " (superseded)" if path.name in agr.SUPERSEDED else (" (an arm)" if agr.is_arm(path.name) else "")
        lines.append(f"| `{path.name}`{superseded} | {d.height} of {runs.height} | {versions} | {rows} | "
                     f"{' / '.join(fed)} |")
    return "\n".join(lines)


def table_quick(s: agr.Summary, table: str, what: str) -> str:
    """A table's quick count (non-trivial: ``nt``, else every compared cell), marked
    **[+dirty]** with how many of its cells rest on runs from uncommitted code."""
    c = s.counts[table]["quick"]
    if what == "nt":
        return f"{c.nt_within} of {c.nt}" + (f" **[+dirty]** ({c.nt_dirty} of {c.nt})" if c.nt_dirty else "")
    return f"{c.within} of {c.compared}" + (f" **[+dirty]** ({c.dirty} of {c.compared})" if c.dirty else "")


def findings_intro(s: agr.Summary) -> str:
    records = sorted(p.name for p in agr.RECORDS.iterdir())
    paper = [r for r in records if agr.budget(r).paper]
    full_below = [r for r in records if not agr.budget(r).paper and agr.budget(r).train_size == float("inf")
                  and not agr.study_json(r).get("profile", "").startswith("quick")]
    return (
        f"Of the {len(records)} committed records, {len(paper)} ran at a paper's budget by the "
        "project's rule (the task's full data and at least the epochs of the spec's `paper` "
        "profile): " + ", ".join(f"`{r}`" for r in paper) + ". "
        + ("; ".join(f"`{r}` ran on the full data for {agr.budget(r).epochs} epochs "
                     f"({seeds_text(agr.budget(r).seeds)})" for r in full_below)
           + ", below the paper's epochs. " if full_below else "")
        + "The rest ran at a *quick* budget. " + vocabulary_sentence(s))


def findings_agreement(s: agr.Summary) -> str:
    per = "; ".join(f"{TABLE_NAMES[t]} {table_quick(s, t, 'nt')}"
                    for t in agr.TABLES_JUDGED if s.counts[t]["quick"].nt)
    return (f"- **Agreement, non-trivial cells first.** {agreement_sentence(s)} At the quick budget, "
            f"per table: {per}. `python results/analysis/agreement_summary.py` prints every column "
            "per table, and `reports build --compare` prints the quick line per table.")


def findings_holm(s: agr.Summary) -> str:
    tested = low_p(s)
    if not tested:
        return "- No cell reaches p < 0.05 before Holm."
    return "- **Below p = 0.05 before Holm, not after:** " + holm_sentence(s, tested)


def findings_cells(s: agr.Summary) -> str:
    lines = []
    for t in agr.TABLES_JUDGED:
        rows = {r: i for i, r in enumerate(TABLES[t].rows)}
        cols = {c.key: i for i, c in enumerate(TABLES[t].columns)}
        cells = sorted((j for j in s.judged["best"][t] if not set(j.records) <= set(agr.QUICK[t])),
                       key=lambda j: (rows[j.key[0]], cols[j.key[1]]))
        if not cells:
            continue
        acc = agr.is_accuracy_metric(TABLES[t])
        lines += ["", f"**{TABLE_NAMES[t]}** ({TABLES[t].title.split(' (')[0].lower()})", "",
                  "| model | column | ours | paper | " + ("solved | " if acc else "") + "records, budget | verdict |",
                  "|---|---|---|---|" + ("---|" if acc else "") + "---|---|"]
        for j in cells:
            column = "paper" if j.budget.paper else "best"
            solved = f"{j.test().k}/{j.test().n} | " if acc else ""
            ours = j.cell.median if j.cell.median is not None else float("nan")
            lines.append(f"| {paper_label(j.key[0])} | {column_label(t, j.key[1])} | {ours:.{max(TABLES[t].decimals, 1)}f} | "
                         f"{j.paper.value:g} | {solved}{records_text(j)}: {j.budget.text()} | {s.verdict(j, column)} |")
    return "\n".join(lines).strip("\n")


def wrap(text: str, width: int = 100) -> str:
    """Paragraphs and list items of ``text`` wrapped at ``width`` (tables and headings kept)."""
    out = []
    for line in text.split("\n"):
        if not line.strip() or line.lstrip().startswith(("|", "#")):
            out.append(line)
            continue
        lead = line[:len(line) - len(line.lstrip())]
        bullet = re.match(r"(- |\d+\. )", line.lstrip())
        rest = " " * (len(lead) + (len(bullet.group(1)) if bullet else 0))
        out.append(textwrap.fill(line, width, initial_indent="", subsequent_indent=rest,
                                 break_long_words=False, break_on_hyphens=False))
    return "\n".join(out)


def table2_quick(s: agr.Summary) -> str:
    c = s.counts["rc_table2"]["quick"]
    return (f"At the quick budget (3 seeds), of the {c.nt} cells where the paper reports more than "
            f"10 %, {c.nt_within} are within 10 points of ours{dirty_count(c, True)}; over all "
            f"{c.compared} accuracy cells, {c.within}{dirty_count(c, False)}. {table_quick(s, 'rc_table9', 'all')} "
            "edit-distance cells of Table 9 are within 10 % of the column's target length")


#: Block name -> the function that writes it from the summary.
BLOCKS = {
    "readme-found": readme_found,
    "results-columns": results_columns,
    "results-agreement": lambda s: "\n".join(agr.markdown(s)),
    "results-verdicts": results_verdicts,
    "results-dirty": dirty_rows,
    "results-table2-quick": table2_quick,
    "findings-intro": findings_intro,
    "findings-agreement": findings_agreement,
    "findings-holm": findings_holm,
    "findings-cells": findings_cells,
}
#: Blocks that sit inside a sentence: never wrapped.
INLINE = ("results-table2-quick",)


def blocks() -> dict[str, str]:
    """Block name -> its generated Markdown (paragraphs wrapped at 100 characters)."""
    s = agr.summarise()
    return {k: f(s) if k in INLINE else wrap(f(s)) for k, f in BLOCKS.items()}


# ---------------------------------------------------------------------------------------------
# Checking and writing


def render(text: str, made: dict[str, str], where: str) -> tuple[str, list[str]]:
    """``text`` with every generated block replaced by its output, and the names of the blocks
    that differed. Raises SystemExit naming the file and block for an unknown or unclosed one."""
    opened = OPEN.findall(text)
    closed = BLOCK.findall(text)
    if len(opened) != len(closed):
        raise SystemExit(f"{where}: a <!-- generated:NAME --> block without its <!-- /generated -->")
    differ: list[str] = []

    def sub(m: re.Match) -> str:
        name, body = m["name"], m["body"]
        if name not in made:
            raise SystemExit(f"{where}: unknown generated block {name!r}; valid: {', '.join(sorted(made))}")
        inline = "\n" not in body
        new = made[name] if inline else f"\n{made[name]}\n"
        if inline and "\n" in made[name]:
            new = f"\n{made[name]}\n"
        if body != new:
            differ.append(name)
        return f"<!-- generated:{name} -->{new}<!-- /generated -->"

    return BLOCK.sub(sub, text), differ


def check(files: tuple[Path, ...] = FILES, made: dict[str, str] | None = None) -> list[str]:
    """One line per block whose text differs from the generator's, and per generated block that
    no file holds."""
    made = blocks() if made is None else made
    out, seen = [], set()
    for f in files:
        text = f.read_text(encoding="utf-8")
        _, differ = render(text, made, str(f))
        seen.update(OPEN.findall(text))
        out += [f"{f.relative_to(ROOT) if f.is_relative_to(ROOT) else f}: block {n!r} differs from "
                "`python results/analysis/writeup.py --write`" for n in differ]
    out += [f"no file holds the generated block {n!r}" for n in sorted(set(made) - seen)]
    return out


def write(files: tuple[Path, ...] = FILES) -> list[Path]:
    made = blocks()
    changed = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        new, differ = render(text, made, str(f))
        if differ:
            f.write_text(new, encoding="utf-8")
            changed.append(f)
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()), allow_abbrev=False)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 naming each block that differs")
    mode.add_argument("--write", action="store_true", help="rewrite the blocks in place")
    mode.add_argument("--print", dest="name", metavar="BLOCK", help="print one block's text")
    args = ap.parse_args(argv)
    if args.name:
        if args.name not in BLOCKS:
            print(f"writeup.py: unknown block {args.name!r}; valid: {', '.join(sorted(BLOCKS))}", file=sys.stderr)
            return 2
        try:
            print(blocks()[args.name], flush=True)
        except BrokenPipeError:  # `| head`: the rest is not wanted
            sys.stdout = None
        return 0
    if args.write:
        for f in write():
            print(f"wrote {f.relative_to(ROOT)}")
        return 0
    problems = check()
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
