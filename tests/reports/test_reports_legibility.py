"""Figures and LaTeX a reader can use: identical curves stay distinguishable, titles use the
papers' labels, a heatmap's ticks stay readable at length 100, captions read like the papers'
and floats stay together."""

from __future__ import annotations

from pathlib import Path


def test_identical_curves_stay_distinguishable_and_titles_use_paper_labels(tmp_path: Path,
                                                                           monkeypatch) -> None:
    import reports.figures as F
    from reports.build import paper_label
    from reports.synth import SynthRun, write_bulk_sql

    # OneStepAttn and -Sigmoid with identical results: the curves coincide.
    runs = [SynthRun(task="reverse_copy", variant=v, seed=s, n_seeds=2,
                     metrics={"best_selection_score": 1.0, "test.iid.seq_acc": 1.0, "test.len30.seq_acc": 1.0,
                              "test.len100.seq_acc": 0.5, "test.iid.seq_acc_be": 1.0,
                              "test.len30.seq_acc_be": 1.0, "test.len100.seq_acc_be": 0.5})
            for v in ("onestep", "onestep_no_sigmoid") for s in (0, 1)]
    write_bulk_sql(tmp_path / "mlflow.db", "figs", runs)
    titles: list[str] = []
    figures: list = []
    real = F.length_curves

    def spy(frames, *, title="", label=lambda k: k):
        titles.append(title)
        fig = real(frames, title=title, label=label)
        figures.append(fig)
        return fig

    monkeypatch.setattr(F, "length_curves", spy)
    monkeypatch.setattr(F, "save_figure", lambda fig, stem: [Path(stem).with_suffix(".png")])
    written = F.study_figures(str(tmp_path / "mlflow.db"), "figs", tmp_path / "out")
    assert [p.name for p in written] == ["length_reverse_copy.png"]
    assert titles == ["Reverse Copy"]
    ax = figures[0].axes[0]
    lines = [ln for ln in ax.get_lines() if ln.get_label() in (paper_label("onestep"),
                                                              paper_label("onestep_no_sigmoid"))]
    assert len(lines) == 2
    (a, b) = lines
    assert list(a.get_ydata()) == list(b.get_ydata())  # the same values ...
    assert a.get_marker() != b.get_marker() and a.get_linestyle() != b.get_linestyle()
    assert b.get_zorder() > a.get_zorder() and b.get_markersize() < a.get_markersize()
    legend = figures[0].legends[0]  # one legend below the panels, hiding no curve
    assert [t.get_text() for t in legend.get_texts()] == [paper_label("onestep"),
                                                          paper_label("onestep_no_sigmoid"), F.IQR_LABEL]
    assert len({F.curve_style(i)["marker"] for i in range(len(F.CURVE_STYLES))}) == len(F.CURVE_STYLES)


def test_heatmap_ticks_stay_readable_at_length_100(tmp_path: Path) -> None:
    from locattn.plot import axis_ticks, draw_attention

    src = [str(i % 10) for i in range(100)]
    cols = ["START", *src, "END"]
    pos, labels, numbered = axis_ticks(cols, offset=1)
    assert numbered
    assert pos == [1, 11, 21, 31, 41, 51, 61, 71, 81, 91, 101]
    assert labels == ["0", "10", "20", "30", "40", "50", "60", "70", "80", "90", "END"]
    short = ["START", "4", "2", "END"]
    assert axis_ticks(short, offset=1) == ([0, 1, 2, 3], short, False)
    rows = [*src, "<eos>"]
    pos, labels, _ = axis_ticks(rows)
    assert labels[0] == "0" and labels[-1] == "<eos>" and len(labels) == 11
    import numpy as np

    w = np.eye(101, 102, k=1).tolist()
    png = draw_attention({"weights": w, "src": src, "pred": src, "source_offset": 1,
                          "mu": [i / 101 for i in range(101)], "sigma": [0.01] * 101},
                         tmp_path / "att.png", title="Copy / OneStepAttn: len100 #0")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_latex_captions_read_like_the_papers_and_floats_stay_together() -> None:
    from reports.aggregate import aggregate
    from reports.build import paper_label, provenance
    from reports.render import render_latex
    from reports.synth import SynthRun, runset_from_synth
    from reports.tables import get_table

    runs = [SynthRun(task="copy", variant=v, seed=s, n_seeds=2,
                     metrics={"best_selection_score": 0.9, "test.len15.seq_acc": 0.5})
            for v in ("onestep", "content") for s in (0, 1)]
    rs = runset_from_synth("s", runs, tables=["rc_table2"])
    tex = render_latex(aggregate(rs, get_table("rc_table2")), provenance(rs), paper_label)
    assert "rc\\_table2." not in tex.split("\\label")[0]  # no internal id in the caption
    caption = next(ln for ln in tex.splitlines() if ln.startswith("\\caption"))
    title = get_table("rc_table2").title.replace("%", "\\%")
    assert caption.startswith(f"\\caption[{{{title}}}]{{{title}, as in Table 2 of Ray Chowdhury")
    assert "\\begin{table}[!htbp]" in tex and "\\begin{table}[t]" not in tex
    assert "\\clearpage" not in tex
