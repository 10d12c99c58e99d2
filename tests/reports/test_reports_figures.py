"""Figures: real matplotlib output, checked by content (pixels, sizes, data) and byte identity."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from reports.figures import (
    attention_figure, attention_figure_from_json, length_curves, length_frame,
    raffel_accuracy_curves, raffel_frame, save_figure, split_position,
)
from reports.synth import SynthRun, runset_from_synth


def _runs() -> list[SynthRun]:
    runs = []
    for v, acc in (("onestep", 1.0), ("content", 0.3)):
        for s in range(3):
            m = {"best_selection_score": 0.9}
            for sp, x in (("iid", 1.0), ("len15", acc), ("len30", acc / 2), ("len100", 0.0)):
                m[f"test.{sp}.seq_acc"] = x
                m[f"test.{sp}.seq_acc_be"] = min(1.0, x + 0.1 * s)
            runs.append(SynthRun(task="copy", variant=v, seed=s, metrics=m))
    for v, acc in (("ffattn", 1.0), ("mean", 0.8)):
        for t0 in ("50", "500", "5000"):
            runs.append(SynthRun(task="raffel_add", variant=v, seed=0, params={"task.t0": t0},
                                 metrics={"best_selection_score": 1.0, "test.test.accuracy": acc}))
    return runs


def test_length_frame_values() -> None:
    rs = runset_from_synth("f", _runs(), param_keys=("task.t0",))
    df = length_frame(rs, "copy", "seq_acc")
    assert df.height == 2 * 3 * 4
    d = df.filter((df["variant"] == "content") & (df["split"] == "len30"))
    assert d["value"].to_list() == pytest.approx([15.0, 15.0, 15.0])
    assert split_position("longer_seen_3") == (3.0, "long 3")
    assert split_position("len100") == (100.0, "100")
    assert split_position("dev") is None


def test_figures_written_and_deterministic(tmp_path: Path) -> None:
    rs = runset_from_synth("f", _runs(), param_keys=("task.t0",))
    frames = {"seqAcc": length_frame(rs, "copy", "seq_acc"),
              "seqAccBE": length_frame(rs, "copy", "seq_acc_be")}
    a = save_figure(length_curves(frames, title="copy"), tmp_path / "a" / "len")
    b = save_figure(length_curves(frames, title="copy"), tmp_path / "b" / "len")
    assert [p.suffix for p in a] == [".png", ".pdf"]
    for pa, pb in zip(a, b):
        assert pa.read_bytes() == pb.read_bytes()
        assert pa.stat().st_size > 5000
    r = raffel_frame(rs)
    assert sorted(r["t0"].unique().to_list()) == [50.0, 500.0, 5000.0]
    paths = save_figure(raffel_accuracy_curves(r), tmp_path / "raffel")
    assert all(p.stat().st_size > 3000 for p in paths)


def test_attention_figure_heatmap_and_traces(tmp_path: Path) -> None:
    import matplotlib.image as mpimg

    T, L = 4, 6
    w = np.zeros((T, L))
    w[np.arange(T), np.arange(1, T + 1)] = 1.0  # diagonal over the source tokens
    rec = {"split": "len15", "index": 0, "src": list("abcd"), "pred": list("abcd"),
           "source_offset": 1, "weights": w.tolist(), "mu": [0.2, 0.4, 0.6, 0.8],
           "sigma": [0.05] * T, "step": [1.0] * T, "mix_gate": None}
    path = tmp_path / "attention.json"
    path.write_text(json.dumps(rec))
    fig = attention_figure_from_json(path)
    heat = fig.axes[0]
    assert [t.get_text() for t in heat.get_xticklabels()] == ["START", "a", "b", "c", "d", "END"]
    assert heat.images[0].get_array().shape == (T, L)
    side = fig.axes[1]  # [heatmap, traces, colorbar]
    assert [l.get_label() for l in side.get_lines()] == ["μ", "σ", "step"]
    png, _ = save_figure(fig, tmp_path / "attn")
    img = mpimg.imread(png)
    assert img.shape[0] > 100 and img.std() > 0.05  # not a blank canvas
    with pytest.raises(ValueError, match="trace σ must have shape"):
        attention_figure(w, list("abcd"), list("abcd"), sigma=[0.1, 0.2])
    with pytest.raises(ValueError, match="attention record lacks weights"):
        attention_figure_from_json({"src": ["a"]})


def test_interp_point_uses_the_tables_two_interpolation_sets() -> None:
    """The figures' interp. point averages the same files as Table 3's Interp. column."""
    from reports.figures import split_position
    from reports.tables import DUBOIS_INTERP_SPLITS

    assert DUBOIS_INTERP_SPLITS == ("heldout_inputs", "heldout_compositions")
    for split in DUBOIS_INTERP_SPLITS:
        assert split_position(split) == (0.0, "interp.")
    for split in ("heldout_tables", "new_compositions"):  # involve the held-out tables t7/t8
        assert split_position(split) is None
