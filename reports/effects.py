"""Ablation effects: what removing a part does, per column, over the seeds both arms share.

For a base variant (OneStepAttn, a Mix attender) and its ablations (−Step 2, −Step 3, −Sigmoid;
a Mix attender's parts), per table column (task and test split) with shared seeds:

- the paired differences d_s = ablation_s − base_s over the shared seeds s, in the table's
  cell units (accuracy points for a seqAcc table), and their mean (the difference of the two
  arms' means over those seeds) with a 95 % percentile bootstrap interval over the pairs
  (:func:`reports.intervals.bootstrap_interval`: 10,000 resamples, seed 0); their median too;
- the probability of improvement: the share of shared seeds where the ablation does better
  than the base (by the table's direction), ties counting one half (rliable's P(X > Y) of
  Agarwal et al. 2021, on paired seeds);
- a two-sided Wilcoxon signed-rank test of the paired differences
  (:func:`reports.aggregate.wilcoxon_pair`, the tables' test), Holm-corrected over every test of
  the effects table (:func:`reports.aggregate.holm_adjust`): one family per command.

Cells come from :class:`reports.aggregate.TableResult`\\ s (one or several tables with the same
metric, e.g. rc_table7's Mix rows against rc_table4's OneStepAttn), so the effects follow the
tables' hyperparameter choice and seed sets. Renderers (Markdown, LaTeX, CSV) are pure.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from reports.build import collect
from reports.aggregate import ALPHA, MIN_TESTABLE_PAIRS, Cell, TableResult, holm_adjust, wilcoxon_pair
from reports.row_labels import paper_label
from reports.intervals import BOOTSTRAP_SEED, CONFIDENCE, RESAMPLES, bootstrap_interval
from reports.render import LATEX_PLACEMENT, MISSING, Labeler, Provenance, latex_escape
from reports.runset import ReportsError


@dataclass(frozen=True, kw_only=True)
class Effect:
    """One ablation against the base in one column, over their shared seeds."""

    variant: str
    """The ablation's variant key."""
    column: str
    """Column key (``copy:len15``)."""
    column_label: str
    """``Copy 15``."""
    seeds: tuple[int, ...]
    """Shared seeds, sorted."""
    diffs: tuple[float, ...]
    """ablation − base per shared seed (cell units)."""
    base_median: float
    variant_median: float
    """Medians over the shared seeds."""
    mean: float
    """Mean paired difference."""
    ci_low: float | None
    ci_high: float | None
    """Its bootstrap interval; None with one shared seed."""
    median: float
    """Median paired difference."""
    p_improve: float
    """Share of shared seeds where the ablation is better (ties 1/2)."""
    p_value: float
    """Two-sided Wilcoxon signed-rank p (1.0 when every difference is 0)."""
    p_holm: float
    """Holm-adjusted over every test of the effects table."""
    n_nonzero: int
    """Non-zero paired differences (the test's n)."""

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def testable(self) -> bool:
        """Enough non-zero differences for p < alpha to be possible (6; 5 seeds cannot)."""
        return self.n_nonzero >= MIN_TESTABLE_PAIRS


@dataclass(frozen=True, kw_only=True)
class EffectsResult:
    """Every effect of one base against its ablations."""

    base: str
    variants: tuple[str, ...]
    """The ablations, in table order."""
    tables: tuple[str, ...]
    """Table ids the cells came from."""
    source: str
    """``Ray Chowdhury & Caragea (2023), Table 4``: the first table's source."""
    metric: str
    direction: str
    decimals: int
    effects: tuple[Effect, ...]
    """In variant order, then column order."""
    skipped: tuple[tuple[str, str], ...] = ()
    """(variant, column label) where one arm has seeds and the other has none in common."""

    @property
    def n_testable(self) -> int:
        return sum(e.testable for e in self.effects)


def pooled_cells(results: Sequence[TableResult]) -> tuple[dict[tuple[str, str], Cell], dict[str, str], list[str]]:
    """(cells by (variant, column key), column label by key, variant order) over ``results``
    (tables of one metric, direction and scale: rc_table7's Mix rows with rc_table4's
    OneStepAttn). A (variant, column) with seeds in two tables is taken once when the seeds are
    equal; different seeds are refused (:class:`ReportsError`, one line): build the tables from
    one merged read of the records (:func:`reports.build.collect` with several sources)."""
    if not results:
        raise ReportsError("no table to take effects from")
    first = results[0].table
    cells: dict[tuple[str, str], Cell] = {}
    where: dict[tuple[str, str], str] = {}
    labels: dict[str, str] = {}
    rows: dict[str, None] = {}
    for res in results:
        t = res.table
        name = t.id
        if (t.metric, t.direction, t.scale, t.kind) != (first.metric, first.direction, first.scale, first.kind):
            raise ReportsError(f"tables {first.id} and {t.id} measure different things "
                               f"({first.metric} and {t.metric}): effects compare one metric")
        for p in t.panels:
            for g in p.groups:
                for c in g.columns:
                    labels.setdefault(c.key, f"{g.label} {c.label}".strip())
        for r in t.rows:
            rows[r] = None
        for key, cell in res.cells.items():
            if cell.missing:
                continue
            if key in cells and cells[key].seeds != cell.seeds:
                raise ReportsError(
                    f"{key[0]} / {labels[key[1]]} has other seeds in {name} than in {where[key]}: "
                    "pool its records into one table first")
            cells.setdefault(key, cell)
            where.setdefault(key, name)
    return cells, labels, list(rows)


def effect(variant: str, column: str, label: str, base: Cell, other: Cell, direction: str) -> Effect | None:
    """The effect of ``other`` (row ``variant``) against ``base`` in one column, over their
    shared seeds; None when they share none. p values are filled by :func:`effects`."""
    b, o = dict(base.seeds), dict(other.seeds)
    shared = sorted(set(b) & set(o))
    if not shared:
        return None
    d = np.array([o[s] - b[s] for s in shared], dtype=float)
    better = d > 0 if direction == "max" else d < 0
    ci = bootstrap_interval(d, "mean")
    p, nz = wilcoxon_pair(o, b)
    return Effect(variant=variant, column=column, column_label=label, seeds=tuple(shared),
                  diffs=tuple(float(x) for x in d), base_median=float(np.median([b[s] for s in shared])),
                  variant_median=float(np.median([o[s] for s in shared])), mean=float(d.mean()),
                  ci_low=None if ci is None else ci[0], ci_high=None if ci is None else ci[1],
                  median=float(np.median(d)), p_improve=float((better.sum() + 0.5 * (d == 0).sum()) / d.size),
                  p_value=float(p), p_holm=float(p), n_nonzero=nz)


def effects(results: Sequence[TableResult], base: str, variants: Sequence[str] | None = None) -> EffectsResult:
    """The effects of ``variants`` (default: every other row of ``results``' tables) against
    ``base``, per column where both have shared seeds, with Holm over all of them. Raises
    :class:`ReportsError` (one line) for a base or variant no table has as a row, a table of
    epoch counts, or a base that shares no seed with any variant."""
    cells, labels, rows = pooled_cells(results)
    t = results[0].table
    if t.kind != "split":
        raise ReportsError(f"table {t.id}: effects compare per-split metrics, not epoch counts")
    for v in [base, *(variants or ())]:
        if v not in rows:
            raise ReportsError(f"variant {v!r} is no row of {', '.join(dict.fromkeys(r.table.id for r in results))}; "
                               f"valid: {', '.join(rows)}")
    others = [v for v in (variants or rows) if v != base]
    found: list[Effect] = []
    skipped: list[tuple[str, str]] = []
    for v in others:
        for col, label in labels.items():
            bc, oc = cells.get((base, col)), cells.get((v, col))
            if bc is None or oc is None:
                continue
            e = effect(v, col, label, bc, oc, t.direction)
            if e is None:
                skipped.append((v, label))
            else:
                found.append(e)
    if not found:
        raise ReportsError(f"{base} shares no seed with {', '.join(others) or 'any other row'} in any column "
                           f"of {', '.join(dict.fromkeys(r.table.id for r in results))}")
    adjusted = holm_adjust([e.p_value for e in found])
    found = [replace(e, p_holm=ph) for e, ph in zip(found, adjusted)]
    used = [v for v in others if any(e.variant == v for e in found)]
    return EffectsResult(base=base, variants=tuple(used), tables=tuple(dict.fromkeys(r.table.id for r in results)),
                         source=t.source, metric=t.metric, direction=t.direction, decimals=max(t.decimals, 1),
                         effects=tuple(found), skipped=tuple(skipped))


# ---------------------------------------------------------------------------------------------
# Text


def _n(v: float | None, d: int, sign: bool = False) -> str:
    if v is None:
        return MISSING
    text = f"{v:+.{d}f}" if sign else f"{v:.{d}f}"
    return f"{0.0:.{d}f}" if float(text) == 0.0 else text  # -0.04 shows 0.0, not -0.0


def caption(res: EffectsResult, label: Labeler) -> str:
    """The effects table's caption: what each number is and how it was made."""
    better = "higher" if res.direction == "max" else "lower"
    return (f"Effects against {label(res.base)} ({res.source}; {', '.join(res.tables)}), per column over "
            f"the seeds both arms share (the medians too). Δ: the mean of the paired differences (variant − "
            f"{label(res.base)}, in the table's units), with its {100 * CONFIDENCE:g} % percentile bootstrap "
            f"interval over the pairs ({RESAMPLES:,} resamples, seed {BOOTSTRAP_SEED}). P(better): the share "
            f"of shared seeds where the variant scored {better}, ties one half. p: two-sided Wilcoxon "
            f"signed-rank test of the paired differences, Holm-corrected over the {len(res.effects)} tests "
            f"of this table; with fewer than {MIN_TESTABLE_PAIRS} non-zero differences p cannot reach "
            f"{ALPHA}: {res.n_testable} of {len(res.effects)} tests could.")


HEAD = ("Variant", "Column", "Seeds", "Base median", "Variant median", "Δ [95 % CI]", "P(better)",
        "p (Holm)")


def effect_cells(res: EffectsResult, e: Effect, label: Labeler) -> list[str]:
    """One effect's text cells, in :data:`HEAD`'s order."""
    d = res.decimals
    ci = f" [{_n(e.ci_low, d, True)}, {_n(e.ci_high, d, True)}]" if e.ci_low is not None else ""
    return [label(e.variant), e.column_label, str(e.n), _n(e.base_median, d), _n(e.variant_median, d),
            _n(e.mean, d, True) + ci, f"{e.p_improve:.2f}", f"{e.p_value:.3g} ({e.p_holm:.3g})"]


def render_effects_markdown(res: EffectsResult, provenance: Sequence[Provenance], label: Labeler) -> str:
    out = ["<!--", *(f"  {ln}" for p in provenance for ln in p.lines()), "-->", "", caption(res, label), "",
           "| " + " | ".join(HEAD) + " |", "|:--|:--|" + "|".join("--:" for _ in HEAD[2:]) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in effect_cells(res, e, label)) + " |"
            for e in res.effects]
    if res.skipped:
        out += ["", f"- {skipped_note(res, label)}"]
    return "\n".join(out) + "\n"


def skipped_note(res: EffectsResult, label: Labeler) -> str:
    """The note naming the (variant, column)s whose two arms have seeds but share none."""
    return (f"No seed shared with {label(res.base)}: "
            + "; ".join(f"{label(v)} / {c}" for v, c in res.skipped) + ".")


def render_effects_latex(res: EffectsResult, provenance: Sequence[Provenance], label: Labeler) -> str:
    out = [f"% {ln}" for p in provenance for ln in p.lines()]
    out += [r"% requires \usepackage{booktabs,graphicx}", rf"\begin{{table}}[{LATEX_PLACEMENT}]",
            r"\centering", r"\small", rf"\caption{{{latex_escape(caption(res, label))}}}",
            rf"\label{{tab:effects_{res.tables[0]}_{res.base}}}", r"\resizebox{\linewidth}{!}{%",
            r"\begin{tabular}{ll" + "r" * (len(HEAD) - 2) + "}", r"\toprule",
            " & ".join(latex_escape(h) for h in HEAD) + r" \\", r"\midrule"]
    out += [" & ".join(latex_escape(c) for c in effect_cells(res, e, label)) + r" \\" for e in res.effects]
    out += [r"\bottomrule", r"\end{tabular}", "}"]
    if res.skipped:
        out += [r"\par\smallskip", r"{\footnotesize " + latex_escape(skipped_note(res, label)) + "}"]
    out.append(r"\end{table}")
    return "\n".join(out) + "\n"


CSV_FIELDS = ("base", "variant", "variant_label", "column", "column_label", "n", "seeds", "base_median",
              "variant_median", "mean_diff", "ci_low", "ci_high", "median_diff", "p_improve", "p_value",
              "p_holm", "n_nonzero", "testable", "diffs")
"""The effects CSV's columns: one row per (ablation, column); differences are ablation − base."""


def render_effects_csv(res: EffectsResult, provenance: Sequence[Provenance], label: Labeler) -> str:
    buf = io.StringIO()
    buf.writelines(f"# {ln}\n" for p in provenance for ln in p.lines())
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    r = lambda v: "" if v is None else repr(round(v, 10))  # noqa: E731
    for e in res.effects:
        w.writerow([res.base, e.variant, label(e.variant), e.column, e.column_label, e.n, json.dumps(list(e.seeds)),
                    r(e.base_median), r(e.variant_median), r(e.mean), r(e.ci_low), r(e.ci_high), r(e.median),
                    r(e.p_improve), r(e.p_value), r(e.p_holm), e.n_nonzero, int(e.testable),
                    json.dumps([round(x, 10) for x in e.diffs])])
    return buf.getvalue()


RENDERERS = {"md": (render_effects_markdown, "md"), "latex": (render_effects_latex, "tex"),
             "csv": (render_effects_csv, "csv")}


# ---------------------------------------------------------------------------------------------
# The command


def build_effects(sources: Sequence[str | Path], base: str, variants: Sequence[str] | None = None, *,
                  tables: Sequence[str] | None = None, formats: Sequence[str] = ("md", "latex", "csv"),
                  out_dir: str | Path, figure: bool = True) -> list[Path]:
    """Write ``<out_dir>/effects-<base>.<md|tex|csv>`` (and, with ``figure``, the forest plot
    ``<out_dir>/figures/effects-<base>.png|pdf``) for ``base`` against ``variants`` over the
    tables of ``sources`` (study directories, merged by run identity by
    :func:`reports.build.collect`: the tables their parent runs declare, or ``tables``); returns
    the written paths. Raises :class:`ReportsError` (one line, nothing
    written) for an unknown format, table or variant, or cells that do not pool."""
    bad = [f for f in formats if f not in RENDERERS]
    if bad:
        raise ReportsError(f"unknown format(s) {', '.join(bad)}; valid: {', '.join(RENDERERS)}")
    # several records merge by run identity into one table, as in `reports build A B`
    built = collect(list(sources), tables=list(tables) if tables else None)
    results = [r for r in built.results if r.table.kind == "split" or tables]
    res = effects(results, base, variants)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in formats:
        fn, ext = RENDERERS[fmt]
        path = out / f"effects-{base}.{ext}"
        path.write_text(fn(res, [built.provenance], paper_label), encoding="utf-8")
        written.append(path)
    if figure:
        from reports.figures import forest_plot, save_figure  # matplotlib only when a figure is drawn

        written += save_figure(forest_plot(res, label=paper_label), out / "figures" / f"effects-{base}")
    return written


def run_effects(args: argparse.Namespace) -> int:
    """``reports effects``: parsed ``sources``, ``base``, ``vs``, ``table``, ``format``, ``out``,
    ``no_figure``; prints the written paths; returns the exit status (2 on bad input)."""
    split = lambda s: [x.strip() for x in s.split(",") if x.strip()]  # noqa: E731
    for source in args.sources:
        if not Path(source).is_dir():
            print(f"reports effects: study directory {source!r} does not exist", file=sys.stderr)
            return 2
    out = args.out or f"{str(args.sources[0]).rstrip('/')}/reports"
    try:
        paths = build_effects(args.sources, args.base, split(args.vs) if args.vs else None,
                              tables=[t for a in args.table for t in split(a)] if args.table else None,
                              formats=split(args.format), out_dir=out, figure=not args.no_figure)
    except ReportsError as exc:
        print(f"reports effects: {exc}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0
