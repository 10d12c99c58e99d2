"""An independent recount of the agreement summary from the committed CSVs alone.

    python results/analysis/recount.py

agreement_summary.py judges the cells it aggregates from the records' stores. This script
reads none of that: it takes each cell's per-seed values, statistic and published number from
the committed tables (results/<record>/<table>.csv, every table the manifest lists), pools the
seeds of a campaign's records itself, applies each metric's tolerance as written in
reports.agreement.TOLERANCE_RULES, picks each cell's largest budget, and counts. Only the
declarations are shared: which records make a campaign (agreement_summary.QUICK, POOLED,
SUPERSEDED), the records' budgets (their study.json), and which table shows an accuracy.
``tests/paper/test_writeup.py`` checks that both give the same counts and Holm families.

Prints one line per table and column: ``table column nt_within/nt within/compared``, then each
table's Holm family size.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

import agreement_summary as agr  # the declarations only (campaigns, budgets), beside this script
from reports.tables import TABLES

RESULTS = Path(__file__).resolve().parents[1]


def read_cells(record: str, table: str) -> dict[tuple[str, str], dict]:
    """(row, column) -> the CSV row of a cell that has seeds, from results/<record>/<table>.csv."""
    path = RESULTS / record / f"{table}.csv"
    if not path.exists():
        return {}
    with path.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    out = {}
    for r in rows:
        seeds = json.loads(r["seeds"] or "[]")
        if seeds:
            out[(r["row"], r["column"])] = {**r, "seeds": {int(s): float(v) for s, v in seeds}}
    return out


def ours(cell: dict, pooled: bool) -> float | None:
    """The cell's number: the CSV's statistic, or the median of the pooled seeds."""
    if pooled:
        return statistics.median(cell["seeds"].values())
    if cell["stat"] in ("mean", "mean_std"):
        return float(cell["mean"]) if cell["mean"] else None
    if cell.get("greyed") == "1":
        return float(cell["accuracy_median"]) if cell["accuracy_median"] else None
    return float(cell["median"]) if cell["median"] else None


def agrees(table: str, column_label: str, mine: float, paper: float, greyed: bool) -> bool:
    """Each metric's tolerance, as TOLERANCE_RULES words it."""
    t = TABLES[table]
    if t.kind == "epochs_or_accuracy" and not greyed:
        return max(mine, paper) <= 1.5 * min(mine, paper)
    if t.metric == "edit_distance":
        return abs(mine - paper) <= (0.1 * float(column_label) if column_label.isdigit() else 10)
    if t.metric == "attn_loss":
        return abs(mine - paper) <= 0.25 * abs(paper)
    return abs(mine - paper) <= 10


def campaign_cells(records: tuple[str, ...], table: str) -> dict[tuple[str, str], tuple[dict, list[str]]]:
    """(row, column) -> (the cell, pooled over the campaign's records by seed, and the records)."""
    out: dict[tuple[str, str], tuple[dict, list[str]]] = {}
    for record in records:
        for key, cell in read_cells(record, table).items():
            if key not in out:
                out[key] = (dict(cell, seeds=dict(cell["seeds"])), [record])
                continue
            have, names = out[key]
            for seed, v in cell["seeds"].items():
                if seed in have["seeds"] and have["seeds"][seed] != v:
                    raise SystemExit(f"{record}: {table} {key} seed {seed} differs from {names}")
                have["seeds"].setdefault(seed, v)
            names.append(record)
    return out


def recount() -> tuple[dict[str, dict[str, tuple[int, int, int, int]]], dict[str, int]]:
    """Per table and column (quick, best, paper): (nt_within, nt, within, compared); and per
    table, the size of its Holm family."""
    pooled = {r for g in agr.POOLED for r in g}
    campaigns = [tuple(g) for g in agr.POOLED] + [
        (p.name,) for p in sorted((RESULTS / "record").iterdir())
        if p.name not in pooled and p.name not in agr.SUPERSEDED and not agr.is_arm(p.name)]
    campaigns.sort(key=lambda c: " + ".join(c))
    counts, families = {}, {}
    for table in agr.TABLES_JUDGED:
        accuracy = agr.is_accuracy_metric(TABLES[table])
        judged: dict[str, dict] = {"quick": {}, "best": {}}
        best_rank: dict = {}
        for records in [agr.QUICK[table]] + campaigns:
            is_quick_column = records is agr.QUICK[table]
            for key, (cell, names) in campaign_cells(records, table).items():
                if not cell["paper_value"]:
                    continue
                paper = float(cell["paper_value"])
                greyed, paper_greyed = cell.get("greyed") == "1", cell.get("paper_greyed") == "1"
                if TABLES[table].kind == "epochs_or_accuracy" and greyed != paper_greyed:
                    ok = False
                else:
                    mine = ours(cell, len(names) > 1)
                    if mine is None or not cell["diff"]:
                        continue
                    ok = agrees(table, cell["column_label"], mine, paper, paper_greyed)
                entry = (ok, accuracy and paper > 10, cell, names)
                if is_quick_column:
                    judged["quick"][key] = entry
                    continue
                b = agr.budget(names[0])
                rank = (b.train_size, b.epochs, len(cell["seeds"]), tuple(records) == agr.QUICK[table],
                        any(agr.study_json(r).get("profile") == "paper" for r in names))
                if key not in best_rank or rank > best_rank[key]:
                    best_rank[key] = rank
                    judged["best"][key] = entry
        judged["paper"] = {k: e for k, e in judged["best"].items() if agr.budget(e[3][0]).paper}
        counts[table] = {col: (sum(ok and nt for ok, nt, _, _ in js.values()), sum(nt for _, nt, _, _ in js.values()),
                               sum(ok for ok, _, _, _ in js.values()), len(js)) for col, js in judged.items()}
        if accuracy:
            fam = [k for k, (ok, nt, cell, names) in judged["paper"].items()
                   if len(cell["seeds"]) >= 5 and abs(ours(cell, len(names) > 1) - float(cell["paper_value"])) > 10]
            if fam:
                families[table] = len(fam)
    return counts, families


def main() -> int:
    counts, families = recount()
    for table, cols in counts.items():
        for col, (a, b, c, d) in cols.items():
            print(f"{table} {col} {a}/{b} {c}/{d}")
    for table, n in families.items():
        print(f"{table} Holm family {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
