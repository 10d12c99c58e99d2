"""Pure renderers: an aggregated table -> Markdown, LaTeX (booktabs) or CSV text.

Nothing here reads the store, the clock or the environment: the same inputs give the same
bytes. Provenance is passed in.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
from dataclasses import dataclass
from typing import Callable, Mapping

from locattn import registry
from record.store import portable_uri
from reports.aggregate import (ALPHA, DEFAULT_SOLVED, MIN_TESTABLE_PAIRS, Cell, CellSummary,
                               TableResult, hparam_summary)
from reports.intervals import Solved, bootstrap_interval, method_sentence, rate_interval, solved_rate
from reports.paper import PaperValue
from reports.tables import SUMMARY_ID, Panel, TableDef

MISSING = "–"
#: Between our number and the paper's in a side-by-side cell (``--side-by-side``).
SIDE_SEP = " / "
#: Layouts of ``--compare``: three tables (ours, paper, difference) or "ours / paper" in one cell.
LAYOUTS = ("tables", "cells")
DAGGER = "†"
TIE = "≈"
GREY = "°"

STAT_TEXT = {
    "median": "the median over seeds",
    "mean": "the mean over seeds",
    "mean_std": "mean ± std (sample std) over seeds",
    "iqr": "the median over seeds [25th, 75th percentile]",
    "n": "the number of finished seeds",
}


@dataclass(frozen=True, kw_only=True)
class RecordProvenance:
    """One record of a table built from several (``reports build A B``, a campaign file)."""

    name: str
    """The record's name in cells (its study, unless two records share one)."""
    source: str
    """Its tracking store URI (password redacted)."""
    n_runs: int
    """Its runs in the table's run set (an equal copy of another record's run is not counted)."""
    n_trials: int = 0
    """Of those, trial runs."""
    n_dirty: int = 0
    """Of those, trial runs trained from uncommitted code."""


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """Where a table's numbers came from."""

    study: str
    """Study (MLflow experiment) name."""
    source: str
    """Tracking store URI (password redacted)."""
    n_runs: int
    """All runs of the study in the store (parent, finished, running, failed)."""
    runs_hash: str
    """sha256 over the sorted (run id, MLflow status, locattn status, end time) of every run."""
    run_code_versions: tuple[str, ...]
    """Distinct ``locattn.code_version`` tags of the runs."""
    data_time: str
    """End time of the newest run in the store (UTC): the time stamp of the data."""
    n_dirty: int = 0
    """Trial runs trained from uncommitted code (a ``+dirty`` code version or a ``locattn.dirty``
    tag)."""
    n_trials: int | None = None
    """Trial runs (all runs but the study's parent); None: every run is one."""
    records: tuple[RecordProvenance, ...] = ()
    """With two or more, the records the runs were read from (the counts above cover them all)."""
    n_shared: int = 0
    """Runs held equal by two or more ``records``, each counted once."""

    @property
    def trials(self) -> int:
        """Trial runs: :attr:`n_trials`, or every run when it is None."""
        return self.n_runs if self.n_trials is None else self.n_trials

    def dirty_text(self) -> str:
        """The mark of a table built from runs of uncommitted code; empty when there is none."""
        if not self.n_dirty:
            return ""
        where = ""
        if len(self.records) > 1:
            where = " (" + ", ".join(f"{r.n_dirty} in {r.name}" for r in self.records if r.n_dirty) + ")"
        return (f"UNCOMMITTED CODE: {self.n_dirty} of {self.trials} trial runs{where} were trained from a "
                "working tree whose code differed from its commit (+dirty): no commit holds the code "
                "behind their numbers")

    def record_lines(self) -> list[str]:
        """Where the runs are: the study and its store; for a run set read from several records,
        a line saying how they were merged and one line per record."""
        if len(self.records) < 2:
            return [f"study: {self.study} ({portable_uri(self.source)})"]
        return [f"records: {len(self.records)}, runs merged by cell, hparams and seed "
                f"({self.n_shared} held equal by several records, each taken once)",
                *(f"record {r.name} ({portable_uri(r.source)}): {r.n_runs} runs, {r.n_trials} trial runs"
                  + (f", {r.n_dirty} from uncommitted code" if r.n_dirty else "") for r in self.records)]

    def runs_text(self) -> str:
        """What the header counts: ``4 trial runs and 1 study parent run`` (the trial runs are
        those ``study runs``, ``study status`` and ``study resume`` count; the parent run
        summarises the study and trains nothing)."""
        parents = self.n_runs - self.trials
        text = f"{self.trials} trial run{'s' if self.trials != 1 else ''}"
        return text + (f" and {parents} study parent run{'s' if parents != 1 else ''}" if parents else "")

    def lines(self) -> list[str]:
        vers = ", ".join(self.run_code_versions) if self.run_code_versions else "unknown"
        return [
            *self.record_lines(),
            f"runs: {self.runs_text()}; sha256 of (run id, status, end time) of these {self.n_runs}: "
            f"{self.runs_hash}",
            f"runs trained by code version(s) {vers}",
            *([self.dirty_text()] if self.n_dirty else []),
            f"data time: {self.data_time} (end time of the newest run in the store, "
            "not the wall clock, so that the same runs give byte-identical files)",
        ]


Labeler = Callable[[str], str]


# ---------------------------------------------------------------------------------------------
# Cell text


def _num(v: float, decimals: int) -> str:
    return f"{v:.{decimals}f}"


def _epochs(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.1f}"


def cell_value_text(table: TableDef, stat: str, cell: Cell) -> str:
    """The number(s) of a cell as plain text, without markup or marks."""
    if cell.missing:
        return MISSING
    d = table.decimals
    if table.kind == "epochs_or_accuracy":
        if cell.greyed:
            return f"{cell.accuracy_median:.1f}%" if cell.accuracy_median is not None else MISSING
        return _epochs(cell.median)
    if stat == "median":
        return _num(cell.median, d)
    if stat == "mean":
        return _num(cell.mean, d)
    if stat == "mean_std":
        std = _num(cell.std, d) if cell.std is not None else MISSING
        return f"{_num(cell.mean, d)} ± {std}"
    if stat == "iqr":
        return f"{_num(cell.median, d)} [{_num(cell.q25, d)}, {_num(cell.q75, d)}]"
    if stat == "n":
        return str(cell.n)
    raise ValueError(f"unknown stat {stat!r}")


def shows_solved(result: TableResult) -> bool:
    """Whether the table's cells carry (k/n) (:func:`solved_text`): ``--solved`` was asked for
    and the metric is an accuracy where higher is better."""
    return result.solved_at is not None and solved_applies(result.table)


def solved_text(result: TableResult, cell: Cell) -> str:
    """`` (k/n)``: seeds of the cell at or above ``result.solved_at``; empty when not asked for,
    for lower-is-better metrics, and for empty cells. With ``result.ci``: `` (k/n, 7–65 %)``,
    the rate's interval (:func:`cell_solved`)."""
    if not shows_solved(result) or cell.missing:
        return ""
    k = sum(1 for _, v in cell.seeds if v >= result.solved_at)
    if result.ci:
        s = cell_solved(result, cell)
        return f" ({k}/{cell.n}, {100 * s.low:.0f}–{100 * s.high:.0f} %)"
    return f" ({k}/{cell.n})"


def solved_applies(table: TableDef) -> bool:
    """Whether a table's cells have a solved rate: a per-split accuracy in percent, higher is
    better: the accuracy flag the table keeps for its metric (a study's own or a plugin's table,
    recorded with the study: :attr:`locattn.table_defs.TableDef.accuracy`), else the registry's
    (:func:`locattn.registry.is_accuracy`), as :func:`reports.agreement.is_accuracy` reads it."""
    accuracy = registry.is_accuracy(table.metric) if table.accuracy is None else table.accuracy
    return table.direction == "max" and table.kind == "split" and bool(accuracy)


def cell_solved(result: TableResult, cell: Cell) -> Solved | None:
    """The cell's :class:`reports.intervals.Solved` at ``result.solved_at`` (else
    :data:`reports.aggregate.DEFAULT_SOLVED`); None for an empty cell or a table without a
    solved rate (:func:`solved_applies`)."""
    if cell.missing or not solved_applies(result.table):
        return None
    at = DEFAULT_SOLVED if result.solved_at is None else result.solved_at
    return solved_rate([v for _, v in cell.seeds], at)


def interval_stat(result: TableResult) -> str:
    """The statistic a table's intervals are of: ``mean`` for a ``mean`` or ``mean_std`` table
    (SCAN, CFQ, the Dubois et al. tables), else ``median``."""
    mean = result.stat in ("mean", "mean_std") and result.table.kind != "epochs_or_accuracy"
    return "mean" if mean else "median"


def cell_interval(result: TableResult, cell: Cell) -> tuple[float, float] | None:
    """The 95 % bootstrap interval of a cell's :func:`interval_stat` over its seeds: the
    median's is the aggregate's (``Cell.ci_low``, ``ci_high``), the mean's is computed here
    (:func:`reports.intervals.bootstrap_interval`); None for an empty cell or fewer than 2
    seeds."""
    if cell.missing:
        return None
    if interval_stat(result) == "mean":
        return bootstrap_interval([v for _, v in cell.seeds], "mean")
    return None if cell.ci_low is None else (cell.ci_low, cell.ci_high)


def interval_text(result: TableResult, cell: Cell) -> str:
    """`` [87.2, 100.0]``: the cell's interval (:func:`cell_interval`) with ``--ci``, else empty."""
    shown = result.ci and result.stat != "n" and not cell.greyed  # not beside a count or an accuracy
    ci = cell_interval(result, cell) if shown else None
    if ci is None:
        return ""
    if result.table.kind == "epochs_or_accuracy":
        return f" [{_epochs_or_inf(ci[0])}, {_epochs_or_inf(ci[1])}]"
    d = result.table.decimals
    return f" [{_num(ci[0], d)}, {_num(ci[1], d)}]"


def _epochs_or_inf(v: float) -> str:
    return "never" if math.isinf(v) else _epochs(v)


def cell_marks(cell: Cell) -> str:
    marks = ""
    if cell.greyed:
        marks += GREY
    if cell.incomplete:
        marks += DAGGER
    if cell.tie:
        marks += TIE
    return marks


# ---------------------------------------------------------------------------------------------
# The frame shown: the rows and columns of the paper's table that the study ran


def holds_result(cell: Cell) -> bool:
    """Whether a cell has a run of the study to show: a finished seed with its metric, or runs
    still running, failed or diverged (a cell whose finished runs lack its split, e.g. a smoke
    profile tested on ``len15`` only, has none)."""
    return not cell.missing or bool(cell.n_running or cell.n_failed or cell.n_diverged)


def frame_sentence(shown: tuple[int, int], full: tuple[int, int]) -> str:
    """The caption's sentence of a cut frame: ``shown`` and ``full`` as (rows, columns)."""
    return (f"Shown: the {shown[0]} of {full[0]} rows and {shown[1]} of {full[1]} columns of the "
            "paper's table that hold a run of this study (--full-frame: all of them).")


def shown_frame(result: TableResult) -> TableResult:
    """``result`` cut to the rows and the columns that hold a result (:func:`holds_result`), and
    to the columns of a task none of whose columns holds one but whose finished runs lack the
    metric (a data problem its note names; a task tested on some of its splits only shows
    those): row sections, panels and column groups left empty go, the cells, their data
    warnings and the caption (a :func:`frame_sentence` added to the table's note) follow.
    Unchanged when every row and column is kept, or none would be. The statistics are those of
    the whole table (a cut row or column had nothing to rank or test)."""
    t = result.table
    cells = result.cells
    cols = {c for (_, c), cell in cells.items() if holds_result(cell)}
    for g in (g for p in t.panels for g in p.groups):
        if not any(c.key in cols for c in g.columns):
            cols |= {c.key for c in g.columns if any(cells[(r, c.key)].n_missing_metric for r in t.rows)}
    rows = {r for (r, c), cell in cells.items()
            if c in cols and (holds_result(cell) or cell.n_missing_metric)}
    if not rows or (len(rows) == len(t.rows) and len(cols) == len(t.columns)):
        return result
    sections = tuple((label, kept) for label, vs in t.sections
                     if (kept := tuple(v for v in vs if v in rows)))
    panels = []
    for panel in t.panels:
        groups = tuple(dataclasses.replace(g, columns=kept) for g in panel.groups
                       if (kept := tuple(c for c in g.columns if c.key in cols)))
        if groups:
            panels.append(dataclasses.replace(panel, groups=groups))
    sentence = frame_sentence((len(rows), len(cols)), (len(t.rows), len(t.columns)))
    table = dataclasses.replace(t, sections=sections, panels=tuple(panels),
                                note=f"{t.note} {sentence}".strip())
    return dataclasses.replace(
        result, table=table,
        cells={k: c for k, c in result.cells.items() if k[0] in rows and k[1] in cols},
        warnings=tuple(w for w in result.warnings if w[0] in rows and w[1] in cols))


# ---------------------------------------------------------------------------------------------
# Caption and notes (shared by Markdown and LaTeX)


def _direction_text(table: TableDef) -> str:
    return "higher is better" if table.direction == "max" else "lower is better"


def caption_sentences(result: TableResult, label: Labeler) -> list[str]:
    t = result.table
    s = [f"{t.title}. Layout of {t.source}."]
    if t.kind == "epochs_or_accuracy":
        s.append("Cells show the median over seeds.")
    else:
        s.append(f"Cells show {STAT_TEXT[result.stat]}.")
    if shows_solved(result):
        s.append(f"(k/n): of the n finished seeds, k reached {result.solved_at:g} or more.")
    if result.ci:
        s.append(method_sentence(solved=shows_solved(result), statistic=interval_stat(result)))
    if t.note:
        s.append(t.note)
    s.append(f"Bold: best in its column ({_direction_text(t)}); equal values at the shown "
             "precision are all bold.")
    return s


def notes(result: TableResult, label: Labeler) -> list[str]:
    """Footnotes: completeness, hyperparameter choice, significance, data problems."""
    t = result.table
    col_label = {c.key: f"{g.label} {c.label}".strip() for p in t.panels for g in p.groups
                 for c in g.columns}
    out: list[str] = []
    inc = result.incomplete_cells
    if inc:
        parts = []
        for r, c in inc:
            cell = result.cell(r, c)
            extra = []
            if cell.n_running:
                extra.append(f"{cell.n_running} running")
            if cell.n_failed:
                extra.append(f"{cell.n_failed} failed")
            if cell.n_missing_metric:
                extra.append(f"{cell.n_missing_metric} missing the metric")
            if cell.n_diverged:  # non-finite values (record.summary's rule)
                extra.append(f"{cell.n_diverged} diverged")
            tail = f" ({', '.join(extra)})" if extra else ""
            parts.append(f"{label(r)} / {col_label[c]}: {cell.n} of {cell.n_expected}{tail}")
        out.append(f"{DAGGER} Fewer finished seeds than the study expects: " + "; ".join(parts) + ".")
    miss = result.missing_cells
    if miss:
        out.append(f"{MISSING} No finished run with this metric: {len(miss)} cell(s).")
    hs = hparam_summary(result)
    if not hs:
        pass
    elif all(h == "{}" for h, _ in hs):
        out.append("No hyperparameter was searched in this study.")
    else:
        any_choice = max((c.n_hparam_choices for c in result.cells.values()), default=0)
        txt = "; ".join(f"{h} for {', '.join(label(v) for v in vs)}" for h, vs in hs)
        if any_choice <= 1:
            how = "fixed, no alternative was run"
        elif result.selection == "test":  # Raffel & Ellis's protocol: no dev set
            how = ("chosen per cell by the test result, as the paper: fewest median epochs to "
                   "100 %, then the highest median test accuracy")
        else:
            how = "chosen per cell by the best median best_selection_score over seeds, never by test"
        out.append(f"Hyperparameters ({how}): {txt}.")
    if t.kind != "epochs_or_accuracy" and result.stat != "n":
        if result.n_tests == 0:
            out.append("Significance: no paired comparison was possible (fewer than two rows "
                       "with shared seeds in every column).")
        else:
            out.append(
                f"Significance: two-sided Wilcoxon signed-rank test of each row against the "
                f"column's bold row over their shared seeds, Holm-corrected per column; "
                f"{TIE} marks a row not significantly different from the best (p ≥ {ALPHA}). "
                f"With fewer than {MIN_TESTABLE_PAIRS} non-zero paired differences the test "
                f"cannot reach p < {ALPHA} (with 5 seeds the smallest possible p is 0.0625), "
                f"so such pairs are left unmarked: {result.n_testable} of {result.n_tests} "
                "comparisons in this table were testable."
            )
    grouped: dict[tuple[str, str], list[str]] = {}
    for row, col, msg in result.warnings:
        grouped.setdefault((row, msg), []).append(col_label[col])
    for (row, msg), cols in grouped.items():
        out.append(f"Data: {label(row)} / {', '.join(cols)}: {msg}.")
    return out


# ---------------------------------------------------------------------------------------------
# Markdown


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|")


def _md_panel(result: TableResult, panel: Panel, label: Labeler,
              text: Callable[[str, str], tuple[str, bool]],
              tail: Callable[[str, str], str] | None = None) -> list[str]:
    t = result.table
    cols = panel.columns
    head = ["Model"]
    for g in panel.groups:
        for c in g.columns:
            head.append(_md_escape(f"{g.label} {c.label}".strip()))
    lines = ["| " + " | ".join(head) + " |",
             "|:--|" + "|".join("--:" for _ in cols) + "|"]
    for section, rows in t.sections:
        if section:
            lines.append(f"| *{_md_escape(section)}* |" + "|".join(" " for _ in cols) + "|")
        for r in rows:
            cells = []
            for c in cols:
                s, bold = text(r, c.key)
                s = _md_escape(s)
                s = f"**{s}**" if bold and s != MISSING else s
                cells.append(s + (_md_escape(SIDE_SEP + tail(r, c.key)) if tail else ""))
            lines.append("| " + " | ".join([_md_escape(label(r)), *cells]) + " |")
    return lines


def _ours_text(result: TableResult) -> Callable[[str, str], tuple[str, bool]]:
    def f(r: str, c: str) -> tuple[str, bool]:
        cell = result.cell(r, c)
        base = cell_value_text(result.table, result.stat, cell)
        return base + cell_marks(cell) + interval_text(result, cell) + solved_text(result, cell), cell.best

    return f


def _paper_text(table: TableDef, paper: Mapping[tuple[str, str], PaperValue]):
    def f(r: str, c: str) -> tuple[str, bool]:
        p = paper.get((r, c))
        if p is None:
            return MISSING, False
        if p.greyed:
            return f"{p.value:g}%{GREY}", False
        if p.std is not None:
            return f"{p.value:g} ± {p.std:g}", False
        return f"{p.value:g}", False

    return f


def _paper_tail(table: TableDef, paper: Mapping[tuple[str, str], PaperValue]) -> Callable[[str, str], str]:
    text = _paper_text(table, paper)
    return lambda r, c: text(r, c)[0]


def side_by_side_sentence(table: TableDef) -> str:
    """The caption's sentence for the side-by-side layout (``layout="cells"``)."""
    return (f"Each cell: ours{SIDE_SEP}published in {table.source} ({MISSING}: not reported); "
            "bold marks our best.")


def paper_diff(table: TableDef, stat: str, cell: Cell, p: PaperValue | None) -> float | None:
    """Ours minus paper for one cell (None when not comparable)."""
    if p is None or cell.missing:
        return None
    if table.kind == "epochs_or_accuracy":
        if cell.greyed != p.greyed:
            return None
        ours = cell.accuracy_median if cell.greyed else cell.median
        return None if ours is None else ours - p.value
    ours = cell.mean if stat in ("mean", "mean_std") else cell.median
    if stat == "n" or ours is None:
        return None
    return ours - p.value


def _diff_text(result: TableResult, paper: Mapping[tuple[str, str], PaperValue]):
    def f(r: str, c: str) -> tuple[str, bool]:
        d = paper_diff(result.table, result.stat, result.cell(r, c), paper.get((r, c)))
        if d is None:
            return MISSING, False
        return f"{d:+.{max(result.table.decimals, 1)}f}", False

    return f


def render_markdown(result: TableResult, provenance: Provenance, label: Labeler,
                    paper: Mapping[tuple[str, str], PaperValue] | None = None,
                    layout: str = "tables") -> str:
    """GitHub-flavoured Markdown: a provenance comment, caption, one table per panel, notes.
    With ``paper``: the published numbers and the differences as two more tables, or with
    ``layout="cells"`` beside ours in each cell ("ours / paper")."""
    t = result.table
    side = paper is not None and layout == "cells"
    out = ["<!--", *(f"  {ln}" for ln in provenance.lines()), "-->", ""]
    if provenance.n_dirty:  # visible, not only in the comment
        out += [f"**{provenance.dirty_text()}.**", ""]
    sentences = caption_sentences(result, label)
    if side:
        sentences.append(side_by_side_sentence(t))
    out.append(f"**{lead_sentence(t)}** " + " ".join(sentences[1:]))
    out.append("")
    tail = _paper_tail(t, paper) if side else None
    for panel in t.panels:
        out.extend(_md_panel(result, panel, label, _ours_text(result), tail))
        out.append("")
    ns = notes(result, label)
    if ns:
        out.extend(f"- {n}" for n in ns)
        out.append("")
    if paper is not None and not side:
        out.append(f"**Published numbers** ({t.source}; {MISSING}: not reported).")
        out.append("")
        for panel in t.panels:
            out.extend(_md_panel(result, panel, label, _paper_text(t, paper)))
            out.append("")
        out.append("**Difference** (ours − paper, same statistic as the paper).")
        out.append("")
        for panel in t.panels:
            out.extend(_md_panel(result, panel, label, _diff_text(result, paper)))
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


# ---------------------------------------------------------------------------------------------
# LaTeX

_LATEX_CHARS = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
    "±": r"$\pm$", "−": r"$-$", "†": r"$^\dagger$", "–": r"--", "≈": r"$^{\approx}$",
    "≥": r"$\geq$", "<": r"$<$", ">": r"$>$", "°": "", "×": r"$\times$", "μ": r"$\mu$", "σ": r"$\sigma$", "Δ": r"$\Delta$",
}


def latex_escape(s: str) -> str:
    """Escape text for LaTeX (ASCII output; a few Unicode signs become math)."""
    return "".join(_LATEX_CHARS.get(ch, ch) for ch in s)


def _latex_panel(result: TableResult, panel: Panel, label: Labeler,
                 text: Callable[[str, str], tuple[str, bool]], greyed: Callable[[str, str], bool],
                 tail: Callable[[str, str], str] | None = None) -> list[str]:
    t = result.table
    cols = panel.columns
    spec = "l" + "".join(" " + "c" * len(g.columns) for g in panel.groups)
    lines = [rf"\begin{{tabular}}{{{spec}}}", r"\toprule"]
    has_groups = any(g.label for g in panel.groups)
    if has_groups:
        head = ["Model"]
        rules = []
        start = 2
        for g in panel.groups:
            n = len(g.columns)
            head.append(rf"\multicolumn{{{n}}}{{c}}{{{latex_escape(g.label)}}}")
            rules.append(rf"\cmidrule(lr){{{start}-{start + n - 1}}}")
            start += n
        lines.append(" & ".join(head) + r" \\")
        lines.append(" ".join(rules))
        lines.append(" & ".join([latex_escape(panel.header)]
                                + [latex_escape(c.label) for c in cols]) + r" \\")
    else:
        lines.append(" & ".join(["Model"] + [latex_escape(c.label) for c in cols]) + r" \\")
    lines.append(r"\midrule")
    for i, (section, rows) in enumerate(t.sections):
        if section:
            if i:
                lines.append(r"\midrule")
            lines.append(rf"\multicolumn{{{len(cols) + 1}}}{{l}}{{\textit{{{latex_escape(section)}}}}} \\")
        for r in rows:
            cells = []
            for c in cols:
                s, bold = text(r, c.key)
                s = latex_escape(s)
                if bold and s != latex_escape(MISSING):
                    s = rf"\textbf{{{s}}}"
                if greyed(r, c.key):
                    s = rf"\textcolor{{gray}}{{{s}}}"
                cells.append(s + (latex_escape(SIDE_SEP + tail(r, c.key)) if tail else ""))
            lines.append(" & ".join([latex_escape(label(r)), *cells]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return lines


#: Float placement of the tables: here if it fits, else top, bottom or a float page, with
#: LaTeX's float limits relaxed ("!"), so consecutive tables stay together instead of each
#: waiting for a page of its own.
LATEX_PLACEMENT = "!htbp"


#: Most columns of one LaTeX tabular whose cells are long (``--solved``'s ``95.6 (3/5)``, or
#: ``--side-by-side``'s ``ours / paper``): a wider panel is split at its column groups.
WIDE_CELL_COLUMNS = 6


#: Closes ``\sbox0{%<tabular>``: the box at its natural size, or scaled down to the line when
#: wider (LaTeX's scratch box 0; no package beyond graphicx), never scaled up.
SHRINK_IF_WIDER = r"}\ifdim\wd0>\linewidth\resizebox{\linewidth}{!}{\usebox0}\else\usebox0\fi"


def latex_panels(panel: Panel, most: int = WIDE_CELL_COLUMNS) -> tuple[Panel, ...]:
    """``panel`` as consecutive panels of at most ``most`` columns each, split between its column
    groups (a group wider than ``most`` stays whole), each with the row labels again. A
    ``--solved`` panel of Table 2's 12 columns, scaled to the line whole, came out near 4 pt; as
    two panels of 6, each shrunk only if wider than the line (:data:`SHRINK_IF_WIDER`), it keeps
    its natural size on a wide page and about twice that on a portrait line."""
    chunks: list[list] = [[]]
    for g in panel.groups:
        if chunks[-1] and sum(len(x.columns) for x in chunks[-1]) + len(g.columns) > most:
            chunks.append([])
        chunks[-1].append(g)
    return tuple(Panel(groups=tuple(c), header=panel.header) for c in chunks)


def _latex_table(result: TableResult, label: Labeler, caption: str, tag: str,
                 text, greyed, footnotes: list[str], short: str | None = None,
                 tail: Callable[[str, str], str] | None = None, wide_cells: bool = False) -> list[str]:
    t = result.table
    head = rf"\caption[{{{latex_escape(short)}}}]" if short else r"\caption"
    out = [rf"\begin{{table}}[{LATEX_PLACEMENT}]", r"\centering", r"\small",
           rf"{head}{{{latex_escape(caption)}}}", rf"\label{{tab:{tag}}}"]
    panels = [p for panel in t.panels for p in (latex_panels(panel) if wide_cells else (panel,))]
    for i, panel in enumerate(panels):
        if i:
            out.append(r"\par\medskip")
        if wide_cells:
            out.append(r"\sbox0{%")
            out.extend(_latex_panel(result, panel, label, text, greyed, tail))
            out.append(SHRINK_IF_WIDER)
            continue
        out.append(r"\resizebox{\linewidth}{!}{%" if len(panel.columns) > 8 else "{%")
        out.extend(_latex_panel(result, panel, label, text, greyed, tail))
        out.append("}")
    if footnotes:
        out.append(r"\par\smallskip")
        out.append(r"\begin{minipage}{\linewidth}\footnotesize")
        for n in footnotes:
            out.append(latex_escape(n) + r"\par")
        out.append(r"\end{minipage}")
    out.append(r"\end{table}")
    return out


#: The pages a standalone table may take, narrowest first: (``geometry`` options, line width in
#: pt). :func:`standalone_latex` takes the first whose line holds its widest tabular
#: (:func:`tabular_width`): a portrait A4 page unless the table needs more.
STANDALONE_PAGES = (
    ("a4paper,margin=2cm", 483.7),             # 170 mm of line
    ("a4paper,landscape,margin=2cm", 731.3),   # 257 mm
    ("a3paper,landscape,margin=1.5cm", 1109.6),  # 390 mm: Table 2's 24 columns side by side
)

#: What :func:`standalone_latex` wraps a table in (``<page>``: the options of one of
#: :data:`STANDALONE_PAGES`): a ``\fitwidth`` that shrinks a table only when it is wider than
#: the line, where the fragment's ``\resizebox`` always scales wide tables to a portrait line
#: (a ``--solved`` table's numbers came out near 4 pt).
STANDALONE_PREAMBLE = (
    r"\documentclass{article}",
    r"\usepackage[<page>]{geometry}",
    r"\usepackage[T1]{fontenc}",
    r"\usepackage{booktabs,graphicx,xcolor}",
    r"\newsavebox{\fitbox}",
    r"\newcommand{\fitwidth}[1]{\sbox{\fitbox}{#1}\ifdim\wd\fitbox>\linewidth"
    r"\resizebox{\linewidth}{!}{\usebox{\fitbox}}\else\usebox{\fitbox}\fi}",
    r"\pagestyle{empty}",
    r"\begin{document}",
)

#: Width estimate of typeset text in a ``\small`` tabular (pt): a character (Computer Modern at
#: 9 pt: digits 4.5 pt, bold ones 5.2 pt; an upper bound for the numbers and labels of a table)
#: and the space between two columns (``2\tabcolsep``).
CHAR_PT = 5.2
COLSEP_PT = 12.0


def _visible(cell: str) -> str:
    """The characters a LaTeX table cell prints, about: markup dropped, a math sign one."""
    text = re.sub(r"\\(?:textcolor|multicolumn\{\d+\}|cmidrule)\{[^}]*\}", "", cell)
    text = re.sub(r"\$[^$]*\$", "x", text)
    text = re.sub(r"\\[a-zA-Z]+", "", text).replace("--", "-")
    return re.sub(r"[\\{}%]", "", text).strip()


def tabular_width(fragment: str) -> float:
    r"""An upper estimate, in pt, of the widest ``tabular`` of a LaTeX fragment at its natural
    size: per column the longest cell (:data:`CHAR_PT` a character) plus :data:`COLSEP_PT`.
    Cells spanning columns (``\multicolumn``) are left out: their headers are narrower than the
    columns under them."""
    widest = 0.0
    for body in re.findall(r"\\begin\{tabular\}\{[^}]*\}(.*?)\\end\{tabular\}", fragment, re.S):
        cols: list[int] = []
        for line in body.splitlines():
            if not line.endswith(r"\\") or r"\multicolumn" in line:
                continue
            for i, cell in enumerate(line[:-2].split(" & ")):
                n = len(_visible(cell))
                if i < len(cols):
                    cols[i] = max(cols[i], n)
                else:
                    cols.append(n)
        widest = max(widest, sum(cols) * CHAR_PT + len(cols) * COLSEP_PT)
    return widest


def standalone_page(fragment: str) -> str:
    r"""The ``geometry`` options of the narrowest page of :data:`STANDALONE_PAGES` whose line
    holds the fragment's widest tabular (:func:`tabular_width`); the widest page when none
    does (``\fitwidth`` then shrinks it to the line)."""
    need = tabular_width(fragment)
    return next((page for page, line in STANDALONE_PAGES if need <= line), STANDALONE_PAGES[-1][0])


def standalone_latex(fragment: str) -> str:
    r"""A LaTeX table fragment (:func:`render_latex`, :func:`render_summary`) as a document that
    ``pdflatex`` compiles alone: its provenance comments first, then
    :data:`STANDALONE_PREAMBLE` on the page it needs (:func:`standalone_page`: portrait A4
    unless the table is wider), the tables (each ``\resizebox{\linewidth}`` made a
    ``\fitwidth``) and ``\end{document}``."""
    lines = fragment.rstrip("\n").split("\n")
    head = 0
    while head < len(lines) and lines[head].startswith("%"):
        head += 1
    body = [ln.replace(r"\resizebox{\linewidth}{!}{%", r"\fitwidth{%") for ln in lines[head:]]
    page = standalone_page(fragment)
    preamble = [ln.replace("<page>", page) for ln in STANDALONE_PREAMBLE]
    return "\n".join([*lines[:head], *preamble, *body, r"\end{document}"]) + "\n"


def lead_sentence(t: TableDef) -> str:
    """A caption's first sentence, as the papers write it: what the numbers are, then whose
    table it reproduces (no internal table id)."""
    authors, _, exhibit = t.source.rpartition(", ")
    return f"{t.title}, as in {exhibit} of {authors}." if authors else f"{t.title}, as in {t.source}."


def render_latex(result: TableResult, provenance: Provenance, label: Labeler,
                 paper: Mapping[tuple[str, str], PaperValue] | None = None,
                 layout: str = "tables") -> str:
    """A LaTeX ``table`` float using booktabs (needs ``\\usepackage{booktabs,graphicx,xcolor}``);
    with ``paper``, two more floats (published, difference) or, with ``layout="cells"``, the
    published number beside ours in each cell."""
    t = result.table
    side = paper is not None and layout == "cells"
    out = [f"% {ln}" for ln in provenance.lines()]
    out.append(r"% requires \usepackage{booktabs,graphicx,xcolor}")
    # LaTeX numbers the table itself ("Table 3:"); the caption reads like the paper's: what the
    # numbers are first, then whose layout, with no internal table id.
    sentences = caption_sentences(result, label)
    sentences[0] = lead_sentence(t)
    if side:
        sentences.append(side_by_side_sentence(t))
    caption = " ".join(sentences)
    if t.kind == "epochs_or_accuracy":
        caption = caption.replace("marked with °", "greyed")
    out += _latex_table(
        result, label, caption, t.id, _ours_text(result),
        lambda r, c: result.cell(r, c).greyed, notes(result, label), short=t.title,
        tail=_paper_tail(t, paper) if side else None,
        wide_cells=side or shows_solved(result) or result.ci,
    )
    if paper is not None and not side:
        out.append("")
        out += _latex_table(
            result, label, f"Published numbers of {t.source} (--: not reported).",
            f"{t.id}_paper", _paper_text(t, paper),
            lambda r, c: bool(paper.get((r, c)) and paper[(r, c)].greyed), [],
        )
        out.append("")
        out += _latex_table(
            result, label, f"Difference to {t.source} (ours minus paper, same statistic as the "
            "paper).", f"{t.id}_diff", _diff_text(result, paper), lambda r, c: False, [],
        )
    return "\n".join(out).replace("°", "") + "\n"


# ---------------------------------------------------------------------------------------------
# CSV

CSV_FIELDS = (
    "table", "row", "row_label", "column", "group", "column_label", "tasks", "splits", "stat",
    "text", "median", "mean", "std", "q25", "q75", "ci_stat", "ci_low", "ci_high", "n", "n_expected",
    "n_running", "n_failed", "n_missing_metric", "complete", "best", "tie", "p_value", "p_holm",
    "n_pairs", "greyed", "accuracy_median", "solved_at", "solved_k", "solved_n", "solved_low",
    "solved_high", "hparams", "seeds", "records",
)
"""The CSV's columns. ``ci_low``, ``ci_high``: the 95 % bootstrap interval of the ``ci_stat``
(``median``, or ``mean`` for a table of means; :func:`cell_interval`; empty below 2 seeds). ``solved_*``: of ``solved_n`` seeds,
``solved_k`` reached ``solved_at`` (``--solved``, else 90), with the rate's Clopper-Pearson
interval as fractions; empty for a table whose metric has no solved rate."""


def _f(v: float | None) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return repr(round(float(v), 10))


def _interval_fields(result: TableResult, cell: Cell) -> list:
    """``ci_stat``, ``ci_low``, ``ci_high`` of one cell (:func:`cell_interval`)."""
    ci = cell_interval(result, cell)
    return [interval_stat(result), "", ""] if ci is None else [interval_stat(result), _f(ci[0]), _f(ci[1])]


def _solved_fields(result: TableResult, cell: Cell) -> list:
    """``solved_at``, ``solved_k``, ``solved_n``, ``solved_low``, ``solved_high`` of one cell."""
    s = cell_solved(result, cell)
    return ["", "", "", "", ""] if s is None else [_f(s.threshold), s.k, s.n, _f(s.low), _f(s.high)]


def records_json(cell: Cell) -> str:
    """The CSV's ``records`` of a cell: ``{"<record>": [seeds...]}``, the seeds each record gave
    it (JSON, records sorted; ``{}`` for a missing cell)."""
    by: dict[str, list[int]] = {}
    for seed, record in cell.seed_records:
        by.setdefault(record, []).append(seed)
    return json.dumps({r: sorted(set(s)) for r, s in sorted(by.items())})


def render_csv(result: TableResult, provenance: Provenance, label: Labeler,
               paper: Mapping[tuple[str, str], PaperValue] | None = None,
               layout: str = "tables") -> str:
    """One row per cell with every statistic; ``#`` comment lines carry the provenance (one
    layout: the paper's value and the difference are columns)."""
    t = result.table
    buf = io.StringIO()
    for ln in provenance.lines():
        buf.write(f"# {ln}\n")
    fields = list(CSV_FIELDS)
    if paper is not None:
        fields += ["paper_value", "paper_std", "paper_greyed", "diff"]
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(fields)
    for p in t.panels:
        for g in p.groups:
            for c in g.columns:
                for r in t.rows:
                    cell = result.cell(r, c.key)
                    rec = [
                        t.id, r, label(r), c.key, g.label, c.label, "+".join(c.tasks),
                        "+".join(c.splits), result.stat,
                        cell_value_text(t, result.stat, cell) + cell_marks(cell)
                        + interval_text(result, cell) + solved_text(result, cell),
                        _f(cell.median), _f(cell.mean), _f(cell.std), _f(cell.q25), _f(cell.q75),
                        *_interval_fields(result, cell), cell.n, "" if cell.n_expected is None else cell.n_expected,
                        cell.n_running, cell.n_failed, cell.n_missing_metric,
                        int(not cell.incomplete and not cell.missing), int(cell.best),
                        int(cell.tie), _f(cell.p_value), _f(cell.p_holm), cell.n_pairs,
                        int(cell.greyed), _f(cell.accuracy_median), *_solved_fields(result, cell),
                        json.dumps(list(cell.hparams)),
                        json.dumps([[s, v if not math.isinf(v) else "inf"] for s, v in cell.seeds]),
                        records_json(cell),
                    ]
                    if paper is not None:
                        pv = paper.get((r, c.key))
                        d = paper_diff(t, result.stat, cell, pv)
                        rec += [_f(pv.value) if pv else "", _f(pv.std) if pv else "",
                                int(pv.greyed) if pv else "", _f(d)]
                    w.writerow(rec)
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------
# Per-cell summary (a study without a paper table, e.g. a learning-rate search)



def hparams_text(hparams: str) -> str:
    """``{"optim.lr": 0.00031}`` -> ``lr=3.1e-04``; ``{}`` -> ``–``."""
    try:
        point = json.loads(hparams)
    except (TypeError, ValueError):
        return hparams
    if not point:
        return MISSING
    return ", ".join(f"{k.rsplit('.', 1)[-1]}={v:.2g}" if isinstance(v, float) else
                     f"{k.rsplit('.', 1)[-1]}={v}" for k, v in sorted(point.items()))


def dev_text(dev: float) -> str:
    """A median dev score in % as text. Under ``optim.select_on=dev_loss`` the score is the
    negated dev loss (always < 0), shown as the loss itself rather than as a negative %."""
    return f"loss {-dev / 100:.2g}" if dev < 0 else f"{dev:.1f}"


def summary_rows(summaries: list[CellSummary], keys: list[str]) -> tuple[list[str], list[list[str]]]:
    """Header and text rows of the summary: cell, chosen point, dev median, points tried, then
    per headline key the median over seeds with (k/n) seeds solved."""
    head = ["Cell", "Chosen hparams", "Dev %", "Points", *(k.removeprefix("test.") for k in keys)]
    rows = []
    for s in summaries:
        row = [s.cell, hparams_text(s.hparams), MISSING if s.dev is None else dev_text(s.dev),
               str(s.n_points)]
        rows.append(row + [seeds_text(s, k) for k in keys])
    return head, rows


def seeds_text(s: CellSummary, key: str, unit: str = "") -> str:
    """One summary number: ``50.0 (1/2)``, the median of ``key`` (%) with (k/n) seeds solved,
    n the seeds with a finite value, and ``, 1 diverged`` when some had none
    (:mod:`record.summary`'s rule); :data:`MISSING` without a median. ``unit`` follows the
    median (``" %"``: ``50.0 % (1/2)``)."""
    if key not in s.medians:
        return MISSING
    tail = f", {s.diverged[key]} diverged" if s.diverged.get(key) else ""
    return f"{s.medians[key]:.1f}{unit} ({s.solved[key]}/{s.n - s.diverged.get(key, 0)}{tail})"


#: Per headline key, after every key's median and solved count: the median's 95 % bootstrap
#: interval (%) and the solved rate's Clopper-Pearson interval (fractions) over ``solved_n`` seeds.
SUMMARY_INTERVAL_FIELDS = ("ci_low", "ci_high", "solved_n", "solved_low", "solved_high")


def summary_interval_fields(s: CellSummary, key: str) -> list:
    """:data:`SUMMARY_INTERVAL_FIELDS` of one summary cell and headline key (empty strings where
    there is no value)."""
    ci = s.intervals.get(key)
    n = s.n - s.diverged.get(key, 0)
    if key not in s.solved or n <= 0:
        return [*(("", "") if ci is None else (_f(ci[0]), _f(ci[1]))), "", "", ""]
    low, high = rate_interval(s.solved[key], n)
    return [*(("", "") if ci is None else (_f(ci[0]), _f(ci[1]))), n, _f(low), _f(high)]


def summary_caption(study: str, solved_at: float) -> str:
    return (f"Study {study}, per cell: the hyperparameters with the best median best_selection_score "
            f"over seeds (never chosen by test), that median, the points tried, and the median "
            f"over the chosen point's finished seeds of each test split; (k/n): k of n seeds "
            f"reached {solved_at:g} % or more.")


def render_summary(summaries: list[CellSummary], keys: list[str], provenance: Provenance,
                   fmt: str, solved_at: float) -> str:
    """The summary as Markdown, LaTeX or CSV text."""
    head, rows = summary_rows(summaries, keys)
    caption = summary_caption(provenance.study, solved_at)
    if fmt == "csv":
        buf = io.StringIO()
        buf.writelines(f"# {ln}\n" for ln in provenance.lines())
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["cell", "hparams", "dev", "n_points", "n", "n_expected",
                    *(f"{k}.{x}" for k in keys for x in ("median", "solved")),
                    *(f"{k}.{x}" for k in keys for x in SUMMARY_INTERVAL_FIELDS)])
        for s in summaries:
            w.writerow([s.cell, s.hparams, _f(s.dev), s.n_points, s.n,
                        "" if s.n_expected is None else s.n_expected,
                        *(v for k in keys for v in (_f(s.medians.get(k)), s.solved.get(k, ""))),
                        *(v for k in keys for v in summary_interval_fields(s, k))])
        return buf.getvalue()
    return text_table(head, rows, provenance, caption, SUMMARY_ID, fmt, n_left=2)


def text_table(head: list[str], rows: list[list[str]], provenance: Provenance, caption: str,
               tag: str, fmt: str, *, n_left: int) -> str:
    """Header and text rows (:func:`summary_rows`, :func:`reports.variant_grid.grid_rows`) as LaTeX
    (``fmt`` ``latex``: labelled ``tab:<tag>``, scaled to the line) or else Markdown, after the
    provenance comments: the first ``n_left`` columns left-aligned, the others right-aligned."""
    if fmt == "latex":
        out = [f"% {ln}" for ln in provenance.lines()]
        out += [rf"\begin{{table}}[{LATEX_PLACEMENT}]", r"\centering", r"\small",
                rf"\caption{{{latex_escape(caption)}}}", rf"\label{{tab:{tag}}}",
                r"\resizebox{\linewidth}{!}{%",
                rf"\begin{{tabular}}{{{'l' * n_left}{'r' * (len(head) - n_left)}}}", r"\toprule",
                " & ".join(latex_escape(h) for h in head) + r" \\", r"\midrule"]
        out += [" & ".join(latex_escape(c) for c in row) + r" \\" for row in rows]
        out += [r"\bottomrule", r"\end{tabular}", "}", r"\end{table}"]
        return "\n".join(out) + "\n"
    out = ["<!--", *(f"  {ln}" for ln in provenance.lines()), "-->", "", caption, "",
           "| " + " | ".join(_md_escape(h) for h in head) + " |",
           "|" + ":--|" * n_left + "|".join("--:" for _ in head[n_left:]) + "|"]
    out += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


RENDERERS = {"md": (render_markdown, "md"), "latex": (render_latex, "tex"), "csv": (render_csv, "csv")}
