"""The qualitative exhibits (issue 18 item 7): rc_table10, dubois_fig9, dubois_interp.

Unit parts: the first wrong position, the building-block weights of the trace (they must give
back the traced mu), and the run's examples.json. End to end: each exhibit's smoke spec runs
through the real launcher (local Ray, SQLite MLflow), then ``reports build`` writes the exhibit
from the store and the artifacts the runs logged.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import torch

from locattn.training.examples import first_error

ROOT = Path(__file__).resolve().parents[2]
ABLATIONS = ROOT / "ablations"


# ------------------------------------------------------------------------------ unit


@pytest.mark.parametrize("pred, gold, ended, want", [
    (["1", "2", "3"], ["1", "2", "3"], True, None),      # right
    (["1", "2", "3"], ["1", "2", "3"], False, 3),        # right tokens, never ended
    (["1", "9", "3"], ["1", "2", "3"], True, 1),         # first wrong token
    (["1", "2"], ["1", "2", "3"], True, 2),              # stopped early: <eos> at 2
    (["1", "2", "3", "4"], ["1", "2", "3"], True, 3),    # ran past the gold
    ([], ["1"], True, 0),                                # <eos> at once
])
def test_first_error_hand_cases(pred, gold, ended, want) -> None:
    assert first_error(pred, gold, ended) == want


@pytest.mark.parametrize("variant", ["dubois_mix", "locattn", "onestep", "locattn_s"])
def test_building_block_weights_give_back_mu(variant: str) -> None:
    """mu_t = clamp(w0·stepsize + w1·pa_{t-1} + w2) with the traced weights (no clamp for
    OneStep), pa_{t-1} recomputed from the traced attention of the previous step."""
    from locattn.config import make_run_config
    from locattn.models import build_model
    from locattn.models.functional import leaky_clamp

    torch.manual_seed(0)
    cfg = make_run_config(task="copy", variant=variant)
    model = build_model(cfg.model, 14, pad_id=0, sos_id=1, eos_id=2).eval()
    src = torch.randint(4, 14, (3, 9))
    src_len = torch.tensor([9, 6, 4])
    tr = model.greedy(src, src_len, 7, trace=True).trace
    assert tr.blocks is not None and tr.blocks.shape == (*tr.mu.shape, 3)
    L = (src_len + 2 * model.source_offset).double()  # START/END around the source
    positions = torch.arange(tr.weights.shape[-1]).double() / (L - 1).unsqueeze(1)  # (B, L)
    positions = positions * (torch.arange(tr.weights.shape[-1]) < L.unsqueeze(1))
    pa_weights = tr.location_weights if cfg.model.attention.pa_from == "location" else tr.weights
    pa = (pa_weights.double() * positions.unsqueeze(1)).sum(-1)  # (B, T): pa_t
    pa_prev = torch.cat([torch.zeros(3, 1, dtype=torch.double), pa[:, :-1]], dim=1)
    w = tr.blocks.double()
    mu = w[..., 0] / (L - 1).unsqueeze(1) + w[..., 1] * pa_prev + w[..., 2]
    if cfg.model.attention.reference != "previous":
        mu = leaky_clamp(mu)
    assert torch.allclose(mu, tr.mu.double(), atol=1e-5), (mu - tr.mu.double()).abs().max()
    if variant == "dubois_mix":  # its two halves recombine into the final attention
        m = tr.mix_gate.unsqueeze(-1)
        mixed = m * tr.location_weights + (1 - m) * tr.content_weights
        assert torch.allclose(mixed, tr.weights, atol=1e-6)
    else:
        assert tr.content_weights is None


def test_run_saves_examples_and_the_chosen_trace(tmp_path: Path) -> None:
    from locattn.config import make_run_config
    from locattn.train import train

    cfg = make_run_config(task="inv_recopy", variant="onestep", overrides={
        "task.train_size": 32, "task.dev_size": 16, "task.test_size": 12,
        "task.test_lengths": [20], "optim.epochs": 1,
        "outputs.trace_split": "len20", "outputs.trace_index": 3, "outputs.n_wrong": 4,
        "outputs.n_right": 1,
    })
    result = train(cfg, tmp_path)
    saved = json.loads((tmp_path / "examples.json").read_text())
    assert set(saved) == {"iid", "len20"}
    for split, d in saved.items():
        assert d["n"] == 12 and d["n_wrong"] == round((1 - result.test[split]["seq_acc"]) * 12)
        assert len(d["wrong"]) == min(4, d["n_wrong"]) and len(d["right"]) == min(1, 12 - d["n_wrong"])
        for e in d["wrong"]:
            assert e["first_error"] == first_error(e["pred"], e["gold"], e["ended"]) is not None
            assert len(e["gold"]) == (20 if split == "len20" else len(e["gold"]))
    trace = json.loads((tmp_path / "attention.json").read_text())
    assert (trace["split"], trace["index"]) == ("len20", 3)
    assert len(trace["blocks"]) == len(trace["weights"]) and len(trace["blocks"][0]) == 3
    # the output fields are operational: the run identity ignores them
    from locattn.config import run_identity

    plain = make_run_config(task="inv_recopy", variant="onestep", overrides={
        "task.train_size": 32, "task.dev_size": 16, "task.test_size": 12,
        "task.test_lengths": [20], "optim.epochs": 1})
    assert run_identity(plain) == run_identity(cfg)


def test_bad_trace_choice_is_refused_before_training(tmp_path: Path) -> None:
    from locattn.config import make_run_config
    from locattn.train import train

    base = {"task.train_size": 16, "task.dev_size": 8, "task.test_size": 4,
            "task.test_lengths": [15], "optim.epochs": 1}
    with pytest.raises(ValueError, match=r"outputs.trace_split='len7'.*valid: \['iid', 'len15'\]"):
        train(make_run_config(task="copy", overrides={**base, "outputs.trace_split": "len7"}), tmp_path)
    assert not (tmp_path / "checkpoint").exists()
    with pytest.raises(ValueError, match=r"outputs.trace_index=4 is out of range.*0..3"):
        train(make_run_config(task="copy", overrides={**base, "outputs.trace_split": "len15",
                                                      "outputs.trace_index": 4}), tmp_path)
    with pytest.raises(ValueError, match=r"OutputsConfig.n_wrong must be an integer >= 0, got -1"):
        make_run_config(task="copy", overrides={"outputs.n_wrong": -1})


def test_exhibit_registry_matches_its_definitions() -> None:
    from reports.exhibits import DEFS
    from reports.tables import EXHIBITS, TABLES

    assert set(DEFS) == set(EXHIBITS) and not set(EXHIBITS) & set(TABLES)


# ------------------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    """The three smoke studies, launched once through the real launcher on one local Ray."""
    pytest.importorskip("ray")
    pytest.importorskip("mlflow")
    import ray

    from study.driver.launch import launch

    from tests.study_helpers import start_private_ray

    started = start_private_ray()  # init_ray, retried under load
    root = tmp_path_factory.mktemp("exhibits") / "studies"
    out = {}
    for stem in ("rc_table10", "dubois_fig9", "dubois_interp"):
        summary = launch(ABLATIONS / f"{stem}.yaml", profile="smoke", root=root,
                         progress_seconds=60.0)
        assert summary.errors == 0, summary
        out[stem] = root / f"{stem}-smoke"
    yield out
    if started:
        ray.shutdown()


def _run_examples(study_dir: Path) -> dict[str, dict]:
    """examples.json of each run directory of a study, by task/variant from its config."""
    out = {}
    for run in sorted((study_dir / "runs").iterdir()):
        cfg = json.loads((run / "config.json").read_text())
        out[(cfg["task"]["name"], cfg["variant"])] = json.loads((run / "examples.json").read_text())
    return out


def test_rc_table10_from_the_store(studies) -> None:
    from reports.build import build_reports

    study = studies["rc_table10"]
    out = study / "reports"
    paths = build_reports(study, out_dir=out)  # the exhibit id comes from the study's tag
    assert sorted(p.name for p in paths) == ["rc_table10.csv", "rc_table10.md", "rc_table10.tex"]
    runs = _run_examples(study)
    wrong = runs[("inv_recopy", "onestep")]["len20"]["wrong"]
    assert wrong, "a 1-epoch tiny model should get some len20 example wrong"
    rows = list(csv.DictReader(io.StringIO((out / "rc_table10.csv").read_text())))
    # the CSV rows are the run's first two wrong len20 predictions, verbatim
    assert [(r["variant"], r["task"], r["split"]) for r in rows] == [
        ("onestep", "inv_recopy", "len20")] * min(2, len(wrong))
    for r, e in zip(rows, wrong):
        assert r["input"].split() == e["src"] and r["gold"].split() == e["gold"]
        assert r["prediction"].split() == e["pred"] and int(r["first_error"]) == e["first_error"]
        assert len(e["gold"]) == 20
    md = (out / "rc_table10.md").read_text()
    assert md.count("| OneStepAttn | inv_recopy | Input: ") == len(rows)
    assert "| MonoAttn | reverse_lookup | – (no finished run of this cell) |" in md
    assert "16 of 16" in md or f"{runs[('inv_recopy', 'onestep')]['len20']['n_wrong']} of 16" in md
    tex = (out / "rc_table10.tex").read_text()
    assert r"\begin{tabular}" in tex and r"\colorbox{red!25}" in tex and r"\bottomrule" in tex
    # byte-identical on a rebuild
    again = build_reports(study, tables=["rc_table10"], out_dir=study / "again")
    assert [p.read_bytes() for p in sorted(again)] == [
        (out / p.name).read_bytes() for p in sorted(again)]


def test_dubois_fig9_from_the_store(studies) -> None:
    from reports.build import build_reports

    study = studies["dubois_fig9"]
    paths = build_reports(study, out_dir=study / "reports")
    names = sorted(p.name for p in paths)
    assert names == ["dubois_fig9.md", "dubois_fig9.pdf", "dubois_fig9.png"]
    png = study / "reports" / "dubois_fig9.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    from PIL import Image

    with Image.open(png) as im:  # two rows of panels (final / variables, content / location)
        assert im.width > 800 and im.height > 400
        assert len(im.convert("L").getcolors(maxcolors=1 << 16) or []) > 50  # not a blank canvas
    (run,) = sorted((study / "runs").iterdir())
    trace = json.loads((run / "attention.json").read_text())
    assert trace["split"] == "longer_seen_4" and trace["index"] == 0
    for key in ("mu", "sigma", "mix_gate", "blocks", "content_weights", "location_weights"):
        assert trace[key] is not None and len(trace[key]) == len(trace["weights"]), key
    caption = (study / "reports" / "dubois_fig9.md").read_text()
    assert "example 0 of longer_seen_4" in caption and "Mix on noisy_lookup, seed 0" in caption


def test_dubois_interp_from_the_store(studies) -> None:
    from reports.build import build_reports

    study = studies["dubois_interp"]
    shown = build_reports(study, out_dir=study / "shown", formats=("csv",))
    shown_rows = list(csv.DictReader(io.StringIO("".join(
        ln for ln in shown[0].read_text().splitlines(keepends=True) if not ln.startswith("#")))))
    assert [(r["row"], r["column"]) for r in shown_rows] == [("dubois_location", "reverse_lookup:interp")]
    # the paper's whole frame on request: every row and column, the one run in its cell
    paths = build_reports(study, out_dir=study / "reports", formats=("csv", "md"), full_frame=True)
    assert sorted(p.name for p in paths) == ["dubois_interp.csv", "dubois_interp.md"]
    text = (study / "reports" / "dubois_interp.csv").read_text()
    rows = list(csv.DictReader(io.StringIO("".join(
        ln for ln in text.splitlines(keepends=True) if not ln.startswith("#")))))  # provenance
    assert {r["row"] for r in rows} == {
        "dubois_scaled_dot", "dubois_multiplicative", "dubois_additive", "dubois_transformer",
        "dubois_transformer_xl", "dubois_location", "dubois_mix", "dubois_location_code"}
    assert {r["column"] for r in rows} == {"lookup:interp", "reverse_lookup:interp",
                                           "noisy_lookup:interp"}
    (filled,) = [r for r in rows if r["n"] not in ("", "0")]
    assert (filled["row"], filled["column"]) == ("dubois_location", "reverse_lookup:interp")
    # the cell is the mean seqAcc over the interpolation files the run scored
    from reports.tables import get_table

    (run,) = sorted((study / "runs").iterdir())
    test = json.loads((run / "result.json").read_text())["test"]
    splits = get_table("dubois_interp").columns[1].splits
    want = 100 * sum(test[s]["seq_acc"] for s in splits) / len(splits)
    assert float(filled["mean"]) == pytest.approx(want, abs=1e-9)


def test_a_moved_record_reads_its_artifacts_from_its_own_folder(tmp_path: Path) -> None:
    """A committed record's store names the folder it was recorded in; the exhibits read the
    artifacts beside the store whenever they hold the run's folder (issue 41: a moved or copied
    folder reads its own files), and the recorded path only where the folder lacks them."""
    import sqlite3

    from record.store import sqlite_uri
    from reports.exhibits import artifact_uris

    gone = tmp_path / "elsewhere" / "artifacts"
    record = tmp_path / "record"
    (record / "artifacts" / "r1" / "artifacts").mkdir(parents=True)
    con = sqlite3.connect(record / "mlflow.db")
    con.execute("CREATE TABLE experiments (experiment_id INTEGER, artifact_location TEXT)")
    con.execute("CREATE TABLE runs (run_uuid TEXT, artifact_uri TEXT, experiment_id INTEGER)")
    con.execute("INSERT INTO experiments VALUES (1, ?)", (gone.as_uri(),))
    con.execute("INSERT INTO runs VALUES ('r1', ?, 1)", (f"{gone.as_uri()}/r1/artifacts",))
    con.commit()
    con.close()
    uri = sqlite_uri(record / "mlflow.db")
    here = (record / "artifacts").resolve().as_uri()
    assert artifact_uris(uri, ["r1"]) == {"r1": f"{here}/r1/artifacts"}
    gone.mkdir(parents=True)  # the recorded folder exists again: a copy still reads its own files
    assert artifact_uris(uri, ["r1"]) == {"r1": f"{here}/r1/artifacts"}
    (record / "artifacts" / "r1" / "artifacts").rmdir()  # ... unless it does not hold the run's
    assert artifact_uris(uri, ["r1"]) == {"r1": f"{gone.as_uri()}/r1/artifacts"}
