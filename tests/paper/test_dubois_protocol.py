"""Dubois et al.'s protocol (docs/dubois_protocol.md): the Table 3 "Interp." column and the
Dubois specs' settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from reports.aggregate import aggregate
from reports.synth import SynthRun, runset_from_synth
from reports.tables import get_table

ROOT = Path(__file__).resolve().parents[2]
INTERP = ("heldout_inputs", "heldout_compositions")
TASKS = ("lookup", "reverse_lookup", "noisy_lookup")


def _runs(split_values: dict[str, float], seeds: int = 2) -> list[SynthRun]:
    """dubois_mix runs whose attn_loss on each split is split_values[split] + seed."""
    runs = []
    for task in TASKS:
        for s in range(seeds):
            m = {"best_selection_score": 0.9}
            m.update({f"test.{sp}.attn_loss": v + s for sp, v in split_values.items()})
            runs.append(SynthRun(task=task, variant="dubois_mix", seed=s, n_seeds=seeds, metrics=m))
    return runs


def _interp(split_values: dict[str, float]):
    rs = runset_from_synth("t3", _runs(split_values), tables=["dubois_table3"])
    return aggregate(rs, get_table("dubois_table3")).cell("dubois_mix", "interp")


def test_interp_column_reads_exactly_heldout_inputs_and_compositions() -> None:
    cols = {c.key: c for p in get_table("dubois_table3").panels for g in p.groups for c in g.columns}
    assert cols["interp"].splits == INTERP
    assert cols["interp"].tasks == TASKS
    assert [cols[f"long{i}"].splits for i in range(1, 6)] == [(f"longer_seen_{i}",) for i in range(1, 6)]


def test_interp_rows_come_from_the_chosen_files_only() -> None:
    # hand-computed: seed s value = mean(1 + s, 3 + s) = 2 + s; mean over seeds 0, 1 = 2.5.
    # heldout_tables / new_compositions carry huge values: any leak moves the cell.
    cell = _interp({"heldout_inputs": 1.0, "heldout_compositions": 3.0,
                    "heldout_tables": 100.0, "new_compositions": 1000.0})
    assert dict(cell.seeds) == {0: pytest.approx(2.0), 1: pytest.approx(3.0)}
    assert cell.mean == pytest.approx(2.5)
    # the held-out-table files alone do not make an Interp. value
    empty = _interp({"heldout_tables": 100.0, "new_compositions": 1000.0})
    assert not empty.seeds


def test_table_note_names_the_interp_files() -> None:
    note = get_table("dubois_table3").note
    assert "heldout_inputs and heldout_compositions" in note and "2,892" in note


def test_select_on_dev_loss_keeps_the_lowest_dev_loss(tmp_path: Path) -> None:
    """optim.select_on=dev_loss (Dubois's code): the kept checkpoint is the epoch of the lowest
    dev loss and best_selection_score is minus that loss; dev_acc keeps the best dev accuracy."""
    from locattn.config import make_run_config
    from locattn.train import train

    base = {"task.train_size": 120, "task.dev_size": 30, "task.test_size": 8,
            "task.test_lengths": (15,), "optim.epochs": 3, "optim.batch_size": 16,
            "optim.schedule_from_epoch": 1, "num_threads": 1, "cache_dir": str(tmp_path / "c")}
    for select_on in ("dev_loss", "dev_acc"):
        cfg = make_run_config(task="copy", variant="content", seed=0,
                              overrides={**base, "optim.select_on": select_on})
        res = train(cfg, tmp_path / select_on)
        hist = res.history
        if select_on == "dev_loss":
            best = min(h["dev_loss"] for h in hist)
            assert res.best_selection_score == pytest.approx(-best)
            assert hist[res.best_epoch - 1]["dev_loss"] == pytest.approx(best)
        else:
            best = max(h["dev_score"] for h in hist)
            assert res.best_selection_score == pytest.approx(best) and res.best_selection_score >= 0
            assert hist[res.best_epoch - 1]["dev_score"] == pytest.approx(best)


@pytest.mark.parametrize("stem", ["dubois_table3", "dubois_fig6", "dubois_fig7", "dubois_fig8",
                                  "dubois_fig9", "dubois_interp"])
def test_dubois_specs_follow_dubois_code(stem: str) -> None:
    """Every cell of the paper and quick profiles trains with Dubois's code's protocol."""
    from locattn.config import make_run_config
    from study.spec import load_spec

    for profile in ("paper", "quick"):
        spec = load_spec(ROOT / "ablations" / f"{stem}.yaml", profile)
        hp = spec.hparam_points()[0]
        for cell in spec.cells:
            cfg = make_run_config(task=cell.task, variant=cell.variant,
                                  overrides={**cell.overrides, **hp})
            o = cfg.optim
            assert (o.lr, o.weight_decay, o.batch_size, o.clip) == (1e-3, 0.0, 64, 5.0), cell.cell
            assert (o.select_on, o.schedule_from_epoch, o.patience) == ("dev_loss", 1, 6), cell.cell
            assert (o.plateau_patience, o.plateau_factor) == (4, 0.5)
            assert cfg.eval.attn_loss_steps == "with_eos"
            assert cfg.task.dev_from_long1 == 0, cell.cell
            if profile == "paper":
                assert o.epochs == 50
    text = yaml.safe_load((ROOT / "ablations" / f"{stem}.yaml").read_text())["description"]
    assert "Dubois's text" in text and "Dubois's code" in text
    assert "Ray Chowdhury" not in text
