"""Aggregation rules and renderer snapshots on small fixed run sets (no store involved).

Snapshots live in tests/data/reports/; regenerate them with
``REPORTS_UPDATE_SNAPSHOTS=1 python -m pytest tests/reports/test_reports_render.py`` and review the diff.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from reports.aggregate import holm_adjust, aggregate, wilcoxon_pair
from reports.build import paper_label, provenance, with_seed_records
from reports.paper import load_paper_numbers
from reports.render import render_csv, render_latex, render_markdown, standalone_latex
from reports.synth import SynthRun, runset_from_synth
from reports.tables import TABLES, get_table

DATA = Path(__file__).parents[1] / "data" / "reports"
UPDATE = os.environ.get("REPORTS_UPDATE_SNAPSHOTS") == "1"


def _acc(**splits: float) -> dict[str, float]:
    return {f"test.{s}.seq_acc": v for s, v in splits.items()}


def _runs_table4() -> list[SynthRun]:
    """OneStep ablations on copy and recopy: ties, an incomplete cell, a missing cell."""
    runs = []
    spec = {
        # variant: per-seed (len15, len30, len100) on copy
        "onestep": [(1.0, 1.0, 1.0)] * 5,
        "onestep_no_step2": [(1.0, 0.014, 0.0), (1.0, 0.02, 0.0), (0.99, 0.01, 0.0),
                             (1.0, 0.03, 0.0), (1.0, 0.0, 0.0)],
        "onestep_no_step3": [(0.069, 0.0, 0.0), (0.05, 0.0, 0.0), (0.1, 0.0, 0.0)],  # 3 of 5
        "onestep_no_sigmoid": [(1.0, 1.0, 0.998), (1.0, 1.0, 0.99), (1.0, 1.0, 1.0),
                               (1.0, 1.0, 0.997), (1.0, 1.0, 0.999)],
    }
    for v, seeds in spec.items():
        for s, (a, b, c) in enumerate(seeds):
            runs.append(SynthRun(task="copy", variant=v, seed=s, hparams={"optim.lr": 0.001},
                                 metrics={"best_selection_score": 0.9, **_acc(len15=a, len30=b, len100=c)}))
    runs.append(SynthRun(task="copy", variant="onestep_no_step3", seed=3, status="running",
                         hparams={"optim.lr": 0.001}))
    runs.append(SynthRun(task="copy", variant="onestep_no_step3", seed=4, status="failed",
                         hparams={"optim.lr": 0.001}))
    for v in ("onestep", "onestep_no_sigmoid"):
        for s in range(5):
            runs.append(SynthRun(task="recopy", variant=v, seed=s, hparams={"optim.lr": 0.001},
                                 metrics={"best_selection_score": 0.5,
                                          **_acc(len15=0.5 + 0.1 * s, len30=0.2, len100=0.0)}))
    return runs


def _runs_table3() -> list[SynthRun]:
    runs = []
    vals = {"content": [0.15, 0.2, 0.18, 0.16, 0.19], "mix_onestep": [0.3, 0.2, 0.4, 0.25, 0.33],
            "birelative": [0.08, 0.09, 0.07, 0.1, 0.08]}
    for v, xs in vals.items():
        for s, x in enumerate(xs):
            runs.append(SynthRun(task="scan", variant=v, seed=s,
                                 metrics={"best_selection_score": 0.9, "test.test.seq_acc": x}))
        for s, x in enumerate(xs[:3]):
            runs.append(SynthRun(task="cfq", variant=v, seed=s, n_seeds=3,
                                 metrics={"best_selection_score": 0.9, "test.test.seq_acc": 0.6 - x / 10}))
    return runs


def _runs_raffel() -> list[SynthRun]:
    runs = []
    for s in range(3):
        for t0, ep in (("50", 1), ("100", 2 + s)):
            runs.append(SynthRun(task="raffel_add", variant="ffattn", seed=s, n_seeds=3,
                                 params={"task.t0": t0},
                                 metrics={"best_selection_score": 1.0, "epochs_to_100": ep,
                                          "test.test.accuracy": 1.0}))
        # Unweighted mean: reaches 100 % at T0=50 for two seeds, never at T0=100.
        m = {"best_selection_score": 0.9, "test.test.accuracy": 0.9 + 0.01 * s}
        if s < 2:
            m50 = {"best_selection_score": 1.0, "epochs_to_100": 3 + s, "test.test.accuracy": 1.0}
        else:
            m50 = m
        runs.append(SynthRun(task="raffel_add", variant="mean", seed=s, n_seeds=3,
                             params={"task.t0": "50"}, metrics=m50))
        runs.append(SynthRun(task="raffel_add", variant="mean", seed=s, n_seeds=3,
                             params={"task.t0": "100"}, metrics=m))
    return runs


def _runs_dubois() -> list[SynthRun]:
    runs = []
    interp = ("heldout_inputs", "heldout_compositions", "heldout_tables", "new_compositions")
    for v, base in (("dubois_mix", 2.0), ("dubois_additive", 3.0)):
        for ti, task in enumerate(("lookup", "reverse_lookup", "noisy_lookup")):
            for s in range(2):
                m = {"best_selection_score": 0.9}
                for j, sp in enumerate(interp):
                    m[f"test.{sp}.attn_loss"] = base + ti + 0.1 * j + s
                for i in range(1, 6):
                    m[f"test.longer_seen_{i}.attn_loss"] = base * i + ti + s
                runs.append(SynthRun(task=task, variant=v, seed=s, n_seeds=2, metrics=m))
    return runs


CASES = {
    "rc_table4": (_runs_table4, ()),
    "rc_table3": (_runs_table3, ()),
    "raffel_table1": (_runs_raffel, ("task.t0",)),
    "dubois_table3": (_runs_dubois, ()),
}


def _result(tid: str):
    make, params = CASES[tid]
    rs = runset_from_synth("snap", make(), tables=[tid], param_keys=params)
    return rs, with_seed_records(aggregate(rs, get_table(tid)), rs)


def _prov(rs):
    return provenance(rs)


@pytest.mark.parametrize("tid", sorted(CASES))
@pytest.mark.parametrize("fmt", ["md", "tex", "csv"])
def test_renderer_snapshot(tid: str, fmt: str) -> None:
    rs, res = _result(tid)
    fn = {"md": render_markdown, "tex": render_latex, "csv": render_csv}[fmt]
    paper = load_paper_numbers(res.table)
    text = fn(res, _prov(rs), paper_label, paper if tid != "rc_table3" else None)
    snap = DATA / f"{tid}.{fmt}"
    if UPDATE or not snap.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        snap.write_text(text, encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"snapshot {snap} was missing and has been written; review and rerun")
    assert text == snap.read_text(encoding="utf-8")


def test_bold_ties_and_direction() -> None:
    _, res = _result("rc_table4")
    # Copy 15: onestep 100, no_step2 median 100, no_sigmoid 100 -> all three bold (tie).
    col = "copy:len15"
    best = {r for r in res.table.rows if res.cell(r, col).best}
    assert best == {"onestep", "onestep_no_step2", "onestep_no_sigmoid"}
    # Copy 100: onestep 100.0 vs no_sigmoid median 99.8 -> only onestep.
    assert [r for r in res.table.rows if res.cell(r, "copy:len100").best] == ["onestep"]
    assert res.cell("onestep_no_sigmoid", "copy:len100").median == pytest.approx(99.8)
    # Lower is better: edit distance picks the minimum.
    runs = [SynthRun(task="copy", variant=v, seed=s, metrics={"best_selection_score": 1.0,
            "test.len15.edit_distance": d + 0.01 * s}) for v, d in (("content", 6.0), ("relative", 0.0))
            for s in range(3)]
    r9 = aggregate(runset_from_synth("t", runs), get_table("rc_table9"))
    assert r9.cell("relative", "copy:len15").best and not r9.cell("content", "copy:len15").best
    assert r9.cell("content", "copy:len15").median == pytest.approx(6.01)


def test_completeness_marks_and_missing() -> None:
    rs, res = _result("rc_table4")
    c = res.cell("onestep_no_step3", "copy:len15")
    assert (c.n, c.n_expected, c.n_running, c.n_failed) == (3, 5, 1, 1)
    assert c.incomplete and not c.missing
    assert res.cell("onestep_no_step2", "recopy:len15").missing
    md = render_markdown(res, _prov(rs), paper_label)
    assert "6.9†" in md
    assert "-Step 3 / Copy 15: 3 of 5 (1 running, 1 failed)" in md
    # 24 columns x 4 rows, 12 copy + 6 recopy cells filled -> 78 missing cells.
    assert len(res.missing_cells) == 24 * 4 - 12 - 6


def test_hparams_chosen_by_dev_not_test() -> None:
    runs = []
    for s in range(3):
        # lr 0.01: better dev, worse test.  lr 0.001: worse dev, perfect test.
        runs.append(SynthRun(task="copy", variant="onestep", seed=s, hparams={"optim.lr": 0.01},
                             metrics={"best_selection_score": 0.9, **_acc(len15=0.2)}))
        runs.append(SynthRun(task="copy", variant="onestep", seed=s, hparams={"optim.lr": 0.001},
                             metrics={"best_selection_score": 0.5, **_acc(len15=1.0)}))
    rs = runset_from_synth("t", runs)
    res = aggregate(rs, get_table("rc_table4"))
    c = res.cell("onestep", "copy:len15")
    assert c.median == pytest.approx(20.0)
    assert c.hparams == ('{"optim.lr": 0.01}',)
    assert c.n_hparam_choices == 2
    md = render_markdown(res, _prov(rs), paper_label)
    assert 'never by test): {"optim.lr": 0.01} for OneStepAttn' in md


def test_dev_ties_go_to_the_hparams_that_reached_them_sooner() -> None:
    runs = []
    for s in range(3):
        # Both learning rates reach 100 % dev; 0.003 gets there at epoch 4, 0.0003 at epoch 30.
        runs.append(SynthRun(task="copy", variant="onestep", seed=s, hparams={"optim.lr": 0.0003},
                             metrics={"best_selection_score": 1.0, "best_epoch": 30.0, **_acc(len15=0.5)}))
        runs.append(SynthRun(task="copy", variant="onestep", seed=s, hparams={"optim.lr": 0.003},
                             metrics={"best_selection_score": 1.0, "best_epoch": 4.0, **_acc(len15=0.9)}))
    res = aggregate(runset_from_synth("t", runs), get_table("rc_table4"))
    assert res.cell("onestep", "copy:len15").hparams == ('{"optim.lr": 0.003}',)


def test_holm_and_wilcoxon() -> None:
    assert holm_adjust([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm_adjust([0.5]) == [0.5]
    # 5 seeds, all differences positive: exact two-sided p = 2/32.
    p, nz = wilcoxon_pair({i: 1.0 for i in range(5)}, {i: 0.0 + 0.01 * i for i in range(5)})
    assert (p, nz) == (pytest.approx(0.0625), 5)
    p, nz = wilcoxon_pair({0: 1.0, 1: 1.0}, {0: 1.0, 1: 1.0})
    assert (p, nz) == (1.0, 0)
    assert wilcoxon_pair({0: 1.0}, {1: 1.0}) == (None, 0)


def test_significance_marks_only_testable_ties() -> None:
    rng = np.random.default_rng(0)
    runs = []
    n = 8
    noise = rng.normal(0, 0.01, n)
    for s in range(n):
        runs.append(SynthRun(task="copy", variant="onestep", seed=s, n_seeds=n,
                             metrics={"best_selection_score": 1, **_acc(len15=0.8 + 0.02 * s)}))
        # Clearly worse on every seed -> significant, no mark.
        runs.append(SynthRun(task="copy", variant="onestep_no_step2", seed=s, n_seeds=n,
                             metrics={"best_selection_score": 1, **_acc(len15=0.5 + 0.02 * s)}))
        # Same up to noise of both signs -> not significant, marked as a tie.
        runs.append(SynthRun(task="copy", variant="onestep_no_step3", seed=s, n_seeds=n,
                             metrics={"best_selection_score": 1, **_acc(len15=0.8 + 0.02 * s + noise[s])}))
    res = aggregate(runset_from_synth("t", runs), get_table("rc_table4"))
    best = [r for r in res.table.rows if res.cell(r, "copy:len15").best]
    worse = res.cell("onestep_no_step2", "copy:len15")
    tied = res.cell("onestep_no_step3", "copy:len15")
    assert len(best) == 1
    assert worse.n_pairs == n and worse.p_holm < 0.05 and not worse.tie
    assert tied.p_holm >= 0.05 and tied.tie
    assert (res.n_tests, res.n_testable) == (2, 2)
    # With 5 seeds the same pattern can never be significant: nothing is marked.
    few = [r for r in runs if r.seed < 5]
    res5 = aggregate(runset_from_synth("t", few), get_table("rc_table4"))
    assert res5.n_testable == 0
    assert not any(c.tie for c in res5.cells.values())
    assert res5.cell("onestep_no_step2", "copy:len15").p_value == pytest.approx(0.0625)


def test_raffel_epochs_or_greyed_accuracy() -> None:
    _, res = _result("raffel_table1")
    assert res.cell("ffattn", "raffel_add:t0=100").median == 3  # epochs 2, 3, 4
    m50 = res.cell("mean", "raffel_add:t0=50")  # epochs 3, 4, inf -> median 4
    assert not m50.greyed and m50.median == 4
    m100 = res.cell("mean", "raffel_add:t0=100")  # never reached -> accuracy 91 %
    assert m100.greyed and m100.accuracy_median == pytest.approx(91.0)
    assert res.cell("ffattn", "raffel_add:t0=100").best and not m100.best
    assert res.cell("ffattn", "raffel_add:t0=50").best and not m50.best


def test_raffel_epochs_are_counted_in_the_papers_1000_updates() -> None:
    """A run of 250-update epochs that reached 100 % after e of them shows ceil(e / 4), the
    first 1,000-update mark at which the paper's once-per-epoch test would have seen it; an
    epoch of 0 (the default, 1,000 updates) or 1,000 updates is left as it is."""
    def runs(updates: str) -> list[SynthRun]:
        return [SynthRun(task="raffel_add", variant="ffattn", seed=s, n_seeds=3,
                         params={"task.t0": "50", "optim.updates_per_epoch": updates},
                         metrics={"best_selection_score": 1.0, "epochs_to_100": e, "test.test.accuracy": 1.0})
                for s, e in enumerate((3, 4, 5))]

    keys = ("task.t0", "optim.updates_per_epoch")
    for updates, median in (("250", 1), ("500", 2), ("0", 4), ("1000", 4)):
        rs = runset_from_synth("u", runs(updates), tables=["raffel_table1"], param_keys=keys)
        cell = aggregate(rs, get_table("raffel_table1")).cell("ffattn", "raffel_add:t0=50")
        assert cell.median == median, updates  # 250: 1, 1, 2; 500: 2, 2, 3


def test_dubois_mean_over_tasks_and_splits() -> None:
    _, res = _result("dubois_table3")
    c = res.cell("dubois_mix", "interp")
    # seed s: mean over tasks ti=0..2 and the Interp. splits j=0..1 (heldout_inputs,
    # heldout_compositions; j=2,3 are not in the column) of 2 + ti + 0.1 j + s = 3.05 + s
    assert dict(c.seeds) == {0: pytest.approx(3.05), 1: pytest.approx(4.05)}
    assert c.mean == pytest.approx(3.55)
    assert res.cell("dubois_mix", "long1").best


def test_paper_numbers_load_for_every_table() -> None:
    counts = {tid: len(load_paper_numbers(t)) for tid, t in TABLES.items()}
    assert counts == {
        "rc_table2": 144, "rc_table3": 12, "rc_table4": 96, "rc_table6": 40, "rc_table7": 288,
        "rc_table8": 12, "rc_table9": 144, "dubois_table3": 36, "raffel_table1": 24,
        "dubois_interp": 0,  # Dubois §7.1 reports the sanity check in words, not a table
        "raffel_variable": 4,
    }
    v = load_paper_numbers(get_table("raffel_variable"))
    assert {k: p.value for k, p in v.items()} == {
        ("ffattn", "raffel_add:variable"): 99.9, ("ffattn", "raffel_mul:variable"): 99.4,
        ("mean", "raffel_add:variable"): 77.4, ("mean", "raffel_mul:variable"): 55.5}
    t2 = load_paper_numbers(get_table("rc_table2"))
    assert t2[("mono", "lookup:longer_seen_3")].value == 98
    assert t2[("locattn", "inv_reverse_recopy:len30")].value == 0.3
    r = load_paper_numbers(get_table("raffel_table1"))
    assert r[("mean", "raffel_mul:t0=5000")].greyed and r[("mean", "raffel_mul:t0=5000")].value == 89.8
    assert r[("ffattn", "raffel_mul:t0=5000")].value == 15
    t3 = load_paper_numbers(get_table("rc_table3"))
    assert (t3[("content", "cfq:test")].value, t3[("content", "cfq:test")].std) == (62.14, 0.88)


needs_pdflatex = pytest.mark.skipif(
    shutil.which("pdflatex") is None,
    reason="pdflatex not installed (apt-get install texlive-latex-base texlive-latex-recommended)")


def assert_compiles(doc: str, tmp_path: Path) -> None:
    """``doc`` compiles with pdflatex into a PDF of more than a kilobyte."""
    (tmp_path / "t.tex").write_text(doc, encoding="utf-8")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "t.tex"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (tmp_path / "t.pdf").stat().st_size > 1000


@needs_pdflatex
@pytest.mark.parametrize("tid", sorted(CASES))
def test_latex_compiles(tid: str, tmp_path: Path) -> None:
    rs, res = _result(tid)
    body = render_latex(res, _prov(rs), paper_label, load_paper_numbers(res.table))
    doc = ("\\documentclass{article}\n\\usepackage[T1]{fontenc}\n"
           "\\usepackage{booktabs,graphicx,xcolor}\n\\begin{document}\n" + body
           + "\\end{document}\n")
    assert_compiles(doc, tmp_path)


# --------------------------------------------------------------------------- --standalone


def test_standalone_latex_is_a_whole_document_that_fits_wide_tables_without_shrinking_them() -> None:
    rs, res = _result("rc_table4")
    res = dataclasses.replace(res, solved_at=90.0)
    fragment = render_latex(res, _prov(rs), paper_label, load_paper_numbers(res.table))
    doc = standalone_latex(fragment)
    lines = doc.splitlines()
    head = [ln for ln in fragment.splitlines() if ln.startswith("%")]
    assert lines[:len(head)] == head  # the provenance comments stay first
    assert lines[len(head)] == r"\documentclass{article}" and lines[-1] == r"\end{document}"
    assert r"\begin{document}" in lines and r"\resizebox{\linewidth}{!}{%" not in doc
    assert doc.count(r"\fitwidth{%") == fragment.count(r"\resizebox{\linewidth}{!}{%") > 0
    assert "(3/5)" in doc or "(5/5)" in doc  # the --solved counts are in it


@needs_pdflatex
@pytest.mark.parametrize("tid", sorted(CASES))
def test_standalone_latex_compiles_alone(tid: str, tmp_path: Path) -> None:
    rs, res = _result(tid)
    res = dataclasses.replace(res, solved_at=90.0)
    assert_compiles(standalone_latex(render_latex(
        res, _prov(rs), paper_label, load_paper_numbers(res.table))), tmp_path)


@needs_pdflatex
def test_a_solved_fragment_keeps_its_numbers_legible_on_a_portrait_line(tmp_path: Path) -> None:
    """A --solved (k/n) table, as the fragment to \\input in an article (345 pt line, \\small):
    wide panels are split at their column groups, at most 6 columns each, and each is shrunk only
    when wider than the line, to no less than 0.7 of its size (Table 4's 12 columns were scaled
    to the line whole: 0.41, under 4 pt). Widths are read from pdflatex itself."""
    from reports.render import SHRINK_IF_WIDER

    rs, res = _result("rc_table4")
    res = dataclasses.replace(res, solved_at=90.0)
    fragment = render_latex(res, _prov(rs), paper_label)
    assert "(3/5)" in fragment or "(5/5)" in fragment
    specs = [ln for ln in fragment.splitlines() if ln.startswith(r"\begin{tabular}")]
    assert specs and all(ln.count("c") <= 6 for ln in specs), specs
    assert r"\resizebox{\linewidth}{!}{%" not in fragment  # never scaled up, nor down unless wider
    probe = r"}\typeout{BOX \the\wd0\space LINE \the\linewidth}\usebox0"
    body = fragment.replace(SHRINK_IF_WIDER, probe)
    doc = ("\\documentclass{article}\n\\usepackage[T1]{fontenc}\n"
           "\\usepackage{booktabs,graphicx,xcolor}\n\\begin{document}\n" + body + "\\end{document}\n")
    assert_compiles(doc, tmp_path)
    log = (tmp_path / "t.log").read_text(errors="replace")
    sizes = [(float(b), float(w)) for b, w in re.findall(r"BOX ([\d.]+)pt\s*LINE ([\d.]+)pt", log)]
    assert len(sizes) == len(specs)
    assert min(min(1.0, w / b) for b, w in sizes) >= 0.7, sizes
