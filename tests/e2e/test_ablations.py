"""Every spec in ablations/: it validates, it asks for what the paper reports, and its smoke profile
runs through the real launcher (real local Ray, real MLflow SQLite store, real training).

One Ray instance and one MLflow SQLite store are shared by the whole module (each study is its own
experiment in it). The CFQ spec is the exception: with no data it must fail with the CFQ loader's
message naming the files to supply, and with (tiny, fake) files supplied it must run.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from pathlib import Path

import pytest
import yaml

from record import schema
from study.spec import StudySpec, load_spec

ROOT = Path(__file__).resolve().parents[2]
ABLATIONS = ROOT / "ablations"
SPECS = sorted(ABLATIONS.glob("*.yaml"))
CFQ_SPEC = ABLATIONS / "rc_table3_cfq.yaml"
CFQ_MESSAGE = "put the CFQ length split (query_complexity_split) in TaskConfig.data_dir"

RC_LR = [0.001]
# What the papers report, per spec (paper profile): rows, tasks, seeds, learning rates, and the
# test splits the table or figure reads.
LOOKUP_SPLITS = ["heldout_inputs", "heldout_compositions", "heldout_tables", "new_compositions",
                 *(f"longer_seen_{i}" for i in range(1, 6))]
RC_TASKS = ["copy", "reverse_copy", "lookup", "reverse_lookup", "recopy", "reverse_recopy",
            "inv_recopy", "inv_reverse_recopy"]
PAPER = {
    "rc_table3_scan": dict(
        tasks=["scan"], seeds=5, lr=RC_LR, splits=["test"],
        variants=["content", "relative", "mix_locattn", "birelative", "mix_onestep", "mix_mono"]),
    "rc_table3_cfq": dict(
        tasks=["cfq"], seeds=3, lr=RC_LR, splits=["test"],
        variants=["content", "relative", "mix_locattn", "birelative", "mix_onestep", "mix_mono"]),
    "rc_table6": dict(
        tasks=["dedupe", "posretrieve"], seeds=5, lr=RC_LR,
        splits=["iid", "len15", "len30", "len100"],
        variants=["content", "birelative", "locattn", "onestep", "mono"]),
    "rc_table7": dict(
        tasks=RC_TASKS, seeds=5, lr=RC_LR, splits=["len15", "len30", "len100"],
        variants=["birope", "mix_locattn", "locattn_s", "mix_locattn_s", "mix_locattn_s_pr",
                  "mix_onestep", "mix_onestep_pr", "mix_mono", "mix_mono_pr", "rmono",
                  "mix_rmono", "mix_rmono_pr"]),
    "rc_table8": dict(
        tasks=["scan"], seeds=5, lr=RC_LR, splits=["test"],
        variants=["birope", "locattn", "locattn_s", "mix_locattn_s", "mix_locattn_s_pr",
                  "onestep", "mix_onestep_pr", "mono", "mix_mono_pr", "rmono", "mix_rmono",
                  "mix_rmono_pr"]),
    "rc_table9": dict(
        tasks=RC_TASKS, seeds=5, lr=RC_LR, splits=["len15", "len30", "len100"],
        variants=["content", "relative", "locattn", "birelative", "onestep", "mono"]),
    "dubois_fig6": dict(tasks=["lookup"], seeds=10, lr=[0.001], splits=LOOKUP_SPLITS,
                        variants=["dubois_location", "dubois_transformer"], epochs=50),
    "dubois_fig7": dict(tasks=["lookup"], seeds=10, lr=[0.001], splits=LOOKUP_SPLITS,
                        variants=["dubois_location", "dubois_transformer"], epochs=50),
    "dubois_fig8": dict(tasks=["reverse_lookup", "noisy_lookup"], seeds=5, lr=[0.001],
                        splits=LOOKUP_SPLITS, variants=["dubois_mix", "dubois_transformer"],
                        epochs=50),
    "dubois_interp": dict(
        tasks=["lookup", "reverse_lookup", "noisy_lookup"], seeds=5, lr=[0.001],
        splits=LOOKUP_SPLITS, epochs=50,
        variants=["dubois_scaled_dot", "dubois_multiplicative", "dubois_additive",
                  "dubois_transformer", "dubois_transformer_xl", "dubois_location", "dubois_mix"]),
    "dubois_table3": dict(
        tasks=["lookup", "reverse_lookup", "noisy_lookup"], seeds=5, lr=[0.001],
        splits=LOOKUP_SPLITS, epochs=50,
        variants=["dubois_scaled_dot", "dubois_multiplicative", "dubois_additive",
                  "dubois_transformer", "dubois_transformer_xl", "dubois_mix"]),
    "raffel_table1": dict(tasks=["raffel_add", "raffel_mul"], seeds=1, splits=["test"],
                          lr=[0.0003, 0.001, 0.003, 0.01], variants=["ffattn", "mean"],
                          epochs=100, t0=[50, 100, 500, 1000, 5000, 10000]),
    "raffel_variable": dict(tasks=["raffel_add", "raffel_mul"], seeds=1, splits=["test"],
                            lr=[0.0003, 0.001, 0.003, 0.01], variants=["ffattn", "mean"],
                            epochs=100),
}
# Specs written by the study package's author; they are smoke-run here too.
OTHER = {"rc_table2", "rc_table4", "search_lr"}
# Qualitative exhibits (reports/exhibits.py; tests/reports/test_exhibits.py checks what they build).
OTHER |= {"rc_table10", "dubois_fig9"}


def _ids(p: Path) -> str:
    return p.stem


def _make_cfg(spec: StudySpec, cell):
    from locattn.config import make_run_config

    hp = spec.hparam_points()[0]
    return make_run_config(task=cell.task, variant=cell.variant, overrides={**cell.overrides, **hp})


def _test_splits(cfg) -> list[str]:
    """The test split names a run of ``cfg`` scores (without building the data)."""
    from locattn.tasks import algorithmic, lookup

    name = cfg.task.name
    if name in algorithmic.RULES:
        return algorithmic.test_splits(cfg.task)
    if name in ("lookup", "reverse_lookup", "noisy_lookup"):
        return list(lookup.TEST_SPLITS)
    return ["test"]


def _needed_splits(spec: StudySpec, want: dict, task: str) -> list[str]:
    """Test splits of ``task`` that the spec's tables read (figures: ``want["splits"]``)."""
    from reports.tables import TABLES

    if not spec.tables:
        return want["splits"]
    return [s for t in spec.tables for c in TABLES[t].columns if task in c.tasks for s in c.splits]


# ------------------------------------------------------------------------------ validation


def test_every_spec_is_covered() -> None:
    stems = {p.stem for p in SPECS}
    assert stems == set(PAPER) | OTHER, sorted(stems ^ (set(PAPER) | OTHER))


@pytest.mark.parametrize("path", SPECS, ids=_ids)
def test_spec_validates_in_every_profile(path: Path) -> None:
    from reports.tables import EXHIBITS, TABLES

    for profile in ("smoke", "quick", "paper"):
        spec = load_spec(path, profile)
        assert spec.profile == profile and spec.n_trials() >= 1
        for table in spec.tables:
            assert table in TABLES or table in EXHIBITS, f"{path.name}: unknown table id {table!r}"
        for cell in spec.cells:  # every trial config resolves
            _make_cfg(spec, cell)
    smoke = load_spec(path, "smoke")
    assert len(smoke.cells) <= 3 and len(smoke.seeds) <= 2 and smoke.n_runs() <= 6
    for cell in smoke.cells:
        assert _make_cfg(smoke, cell).optim.epochs <= 2


@pytest.mark.parametrize("stem", sorted(PAPER))
def test_paper_profile_is_the_published_setting(stem: str) -> None:
    want = PAPER[stem]
    spec = load_spec(ABLATIONS / f"{stem}.yaml", "paper")
    assert sorted({c.task for c in spec.cells}) == sorted(want["tasks"])
    assert sorted({c.variant for c in spec.cells}) == sorted(want["variants"])
    assert len(spec.seeds) == want["seeds"]
    assert spec.hparams == {"optim.lr": want["lr"]}
    t0s = sorted({_make_cfg(spec, c).task.t0 for c in spec.cells})
    if "t0" in want:
        assert t0s == want["t0"]
    for cell in spec.cells:
        cfg = _make_cfg(spec, cell)
        assert cfg.optim.epochs == want.get("epochs", 100), cell.cell
        missing = set(_needed_splits(spec, want, cell.task)) - set(_test_splits(cfg))
        assert not missing, f"{stem} {cell.cell}: no test split {sorted(missing)}"
        if stem == "rc_table3_cfq":  # the paper's CFQ size on every cell
            m = cfg.model
            assert (m.num_layers, m.embedding_size, m.hidden_size, m.value_size, m.dropout,
                    cfg.optim.batch_size) == (2, 128, 256, 512, 0.4, 128)
        elif cfg.model.kind == "seq2seq" and not stem.startswith("dubois"):
            assert (cfg.model.num_layers, cfg.model.hidden_size, cfg.optim.batch_size) == (1, 128, 32)
        if stem == "raffel_variable":
            assert cfg.task.variable_length
        if stem.startswith("raffel"):
            assert (cfg.optim.batch_size, cfg.optim.updates_per_epoch, cfg.task.test_size) == (
                100, 1000, 1000)


def test_table9_repeats_table2() -> None:
    for profile in ("quick", "paper"):
        t2 = load_spec(ABLATIONS / "rc_table2.yaml", profile)
        t9 = load_spec(ABLATIONS / "rc_table9.yaml", profile)
        assert [c.cell for c in t2.cells] == [c.cell for c in t9.cells]
        assert [c.overrides for c in t2.cells] == [c.overrides for c in t9.cells]
        assert t2.seeds == t9.seeds


def test_cfq_spec_points_at_the_missing_data() -> None:
    from locattn.tasks import load_task

    spec = load_spec(CFQ_SPEC, "paper")
    for cell in spec.cells:
        cfg = _make_cfg(spec, cell)
        with pytest.raises(FileNotFoundError, match=r"put the CFQ length split"):
            load_task(cfg.task)


# ------------------------------------------------------------------------------ smoke runs


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One local Ray (loopback) and one MLflow SQLite store for every smoke study."""
    pytest.importorskip("ray")
    pytest.importorskip("mlflow")
    from tests.study_helpers import start_private_ray

    import ray

    started = start_private_ray()  # init_ray, retried under load
    base = tmp_path_factory.mktemp("ablations")
    yield {"root": base / "studies", "uri": f"sqlite:///{base / 'mlflow.db'}", "db": base / "mlflow.db"}
    if started:
        ray.shutdown()


def trial_runs(db: Path, experiment: str) -> list[dict]:
    """Trial runs of one experiment: {status, tags, metrics: {key: last value}}."""
    con = sqlite3.connect(db, timeout=30)
    try:
        (exp_id,) = con.execute("SELECT experiment_id FROM experiments WHERE name = ?",
                                (experiment,)).fetchone()
        runs: dict[str, dict] = {}
        for run_id, status in con.execute(
            "SELECT run_uuid, status FROM runs WHERE experiment_id = ? AND lifecycle_stage = 'active'",
            (exp_id,),
        ):
            runs[run_id] = {"status": status, "tags": {}, "metrics": {}}
        for run_id, k, v in con.execute("SELECT run_uuid, key, value FROM tags"):
            if run_id in runs:
                runs[run_id]["tags"][k] = v
        for run_id, k, v in con.execute(
            "SELECT run_uuid, key, value FROM metrics ORDER BY step, timestamp"
        ):
            if run_id in runs:
                runs[run_id]["metrics"][k] = v
    finally:
        con.close()
    return [r for r in runs.values() if r["tags"].get(schema.ROLE) == schema.ROLE_TRIAL]


def _launch(shared: dict, path: Path, **kw) -> dict:
    from study.driver.launch import launch

    return launch(path, profile="smoke", root=shared["root"], tracking_uri=shared["uri"],
                  progress_seconds=60.0, **kw)


# Per figure/experiment without a table id: the metric its plot reads, on one split.
FIGURE_METRIC = {
    "dubois_fig6": "test.longer_seen_1.seq_acc",
    "dubois_fig7": "test.longer_seen_1.seq_acc_be",
    "dubois_fig8": "test.longer_seen_1.seq_acc_be",
    "raffel_variable": "test.test.accuracy",
    "search_lr": "test.len15.seq_acc",
}


@pytest.mark.parametrize("path", [p for p in SPECS if p != CFQ_SPEC], ids=_ids)
def test_smoke_profile_runs(shared: dict, path: Path) -> None:
    spec = load_spec(path, "smoke")
    summary = _launch(shared, path)
    name = f"{spec.name}-smoke"
    assert summary.errors == 0 and summary.trials == spec.n_trials(), summary
    runs = trial_runs(shared["db"], name)
    assert len(runs) == spec.n_runs()
    assert all(r["status"] == "FINISHED" and r["tags"][schema.STATUS] == schema.STATUS_FINISHED
               for r in runs), [r["tags"].get(schema.ERROR) for r in runs]
    assert {r["tags"][schema.CELL] for r in runs} == {c.cell for c in spec.cells}
    for r in runs:  # the per-cell selection axis is recorded for the reports' dev selection
        assert set(spec.hparams) <= set(json.loads(r["tags"][schema.HPARAMS]))
        assert math.isfinite(r["metrics"]["best_selection_score"])
    if spec.tables:
        from reports.build import collect

        built = collect(shared["uri"], name, list(spec.tables))
        for result in built.results:
            filled = [c for c in result.cells.values() if not c.missing]
            assert filled, f"{result.table.id}: every cell is missing"
            for c in filled:
                value = c.accuracy_median if c.greyed else c.median  # Raffel: % when never 100 %
                assert value is not None and math.isfinite(value)
                if result.table.metric in ("seq_acc",):
                    assert 0.0 <= value <= 100.0
    else:
        key = FIGURE_METRIC[spec.name]
        values = [r["metrics"].get(key) for r in runs]
        assert all(v is not None and 0.0 <= v <= 1.0 for v in values), (key, values)


def test_cfq_fails_clearly_without_data_and_runs_with_it(shared: dict, tmp_path: Path) -> None:
    from study.spec import SpecError

    # Refused before anything starts: no study directory, no run.
    with pytest.raises(SpecError, match=re.escape(CFQ_MESSAGE)) as info:
        _launch(shared, CFQ_SPEC)
    assert str(CFQ_SPEC) in str(info.value) and "task=cfq,variant=mix_onestep" in str(info.value)
    assert f"set task.data_dir under `overrides:` in {CFQ_SPEC}" in str(info.value)
    assert not (shared["root"] / "rc_table3_cfq-smoke").exists()
    if shared["db"].exists():  # no experiment (so no run) was created for it
        con = sqlite3.connect(shared["db"])
        try:
            assert con.execute("SELECT COUNT(*) FROM experiments WHERE name = ?",
                               ("rc_table3_cfq-smoke",)).fetchone() == (0,)
        finally:
            con.close()

    # A user supplies the files (tiny and fake here) and sets task.data_dir: the same spec runs.
    data = tmp_path / "cfq"
    data.mkdir()
    rows = [("Did M0 direct M1 ?", "SELECT count(*) WHERE { M0 directed M1 }"),
            ("Who edited M0 ?", "SELECT DISTINCT ?x0 WHERE { ?x0 edited M0 }"),
            ("Was M1 a film ?", "SELECT count(*) WHERE { M1 a film }")]
    for split, n in (("train", 24), ("dev", 6), ("test", 6)):
        (data / f"{split}.tsv").write_text("".join(f"{q}\t{s}\n" for q, s in (rows * n)[:n]))
    raw = yaml.safe_load(CFQ_SPEC.read_text())
    raw["overrides"]["task.data_dir"] = str(data)
    copy = tmp_path / "rc_table3_cfq.yaml"
    copy.write_text(yaml.safe_dump(raw))
    summary = _launch(shared, copy, name="rc_table3_cfq-supplied")
    assert summary.errors == 0 and summary.trials == 1, summary
    (run,) = trial_runs(shared["db"], "rc_table3_cfq-supplied")
    assert run["tags"][schema.STATUS] == schema.STATUS_FINISHED
    assert 0.0 <= run["metrics"]["test.test.seq_acc"] <= 1.0
    assert run["tags"][schema.TASK] == "cfq"
