"""Run identities stay stable across code versions unless what a run computes changed.

``tests/data/identity_v1.json`` holds identity dicts and hashes computed by the code of commit
cdbba16, before any field of ``LEGACY_VALUES`` existed. A record made then must keep its run
identities under today's code exactly when its runs compute the same thing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from locattn.config import LEGACY_VALUES, identity_dict, make_run_config, run_identity
from locattn.tasks.config import DATA_VERSIONS

V1 = json.loads((Path(__file__).parents[1] / "data" / "identity_v1.json").read_text())

# Defaults that changed value since cdbba16 (a changed default is a different run, on purpose).
CHANGED_DEFAULTS = {"optim.tie_tolerance": 1e-3}


def _legacy_overrides(cfg_flat: dict) -> dict:
    over = dict(CHANGED_DEFAULTS)
    for key, (legacy, applies) in LEGACY_VALUES.items():
        if key in cfg_flat and (applies is None or applies(cfg_flat)):  # data_version: derived
            over[key] = legacy
    return over


@pytest.mark.parametrize("entry", V1["configs"], ids=lambda e: f"{e['task']}-{e['variant']}")
def test_an_old_record_keeps_its_identity_under_legacy_values(entry):
    from locattn.config import config_to_dict, flatten

    cfg = make_run_config(task=entry["task"], variant=entry["variant"], seed=0)
    over = _legacy_overrides(flatten(config_to_dict(cfg)))
    if entry["variant"] == "mono":
        over["model.attention.mono_gate_init"] = 0.0  # the preset's value at cdbba16
    old = make_run_config(task=entry["task"], variant=entry["variant"], seed=0, overrides=over)
    ident = identity_dict(old)
    if DATA_VERSIONS[entry["task"]] > 1:  # the task's data changed since: a different run
        assert ident.pop("task.data_version") == DATA_VERSIONS[entry["task"]]
        assert ident == entry["identity"]
        assert run_identity(old) != entry["run_identity"]
        return
    assert ident == entry["identity"]
    assert run_identity(old) == entry["run_identity"]


@pytest.mark.parametrize("entry", V1["configs"], ids=lambda e: f"{e['task']}-{e['variant']}")
def test_todays_reference_defaults_are_different_runs(entry):
    cfg = make_run_config(task=entry["task"], variant=entry["variant"], seed=0)
    assert run_identity(cfg) != entry["run_identity"]  # tie tolerance (at least) changed


def test_every_field_added_since_v1_has_a_legacy_value():
    v1_keys = set(V1["configs"][0]["identity"])
    for task, variant in [("copy", "mono"), ("lookup", "onestep"), ("raffel_add", "ffattn")]:
        cfg = make_run_config(task=task, variant=variant, seed=0)
        from locattn.config import OPERATIONAL_FIELDS, config_to_dict, flatten

        keys = set(flatten(config_to_dict(cfg))) - set(OPERATIONAL_FIELDS)
        unlisted = sorted(keys - v1_keys - set(LEGACY_VALUES))
        assert not unlisted, (
            f"identity fields added without a LEGACY_VALUES entry: {unlisted}; add each with the "
            "value that reproduces the behaviour before it existed (locattn/config.py)")


def test_a_non_legacy_value_is_part_of_the_identity():
    base = make_run_config(task="lookup", variant="onestep", seed=0,
                           overrides={"task.dev_from_long1": 0})
    moved = make_run_config(task="lookup", variant="onestep", seed=0)
    assert "task.dev_from_long1" not in identity_dict(base)
    assert identity_dict(moved)["task.dev_from_long1"] == 500
    # a field that does not apply never enters the identity (rho_init for content attention)
    assert "model.attention.rho_init" not in identity_dict(make_run_config(task="copy", variant="content", seed=0))


def test_a_data_change_is_a_different_run():
    from locattn.tasks import algorithmic, raffel
    from locattn.tasks.config import DATA_VERSIONS

    assert DATA_VERSIONS["dedupe"] == algorithmic.GENERATOR_VERSION
    assert DATA_VERSIONS["raffel_add"] == DATA_VERSIONS["raffel_mul"] == raffel.GENERATOR_VERSION
    dedupe = identity_dict(make_run_config(task="dedupe", variant="mono", seed=0))
    assert dedupe["task.data_version"] == 3  # the reference's generator, not the old one
    copy = identity_dict(make_run_config(task="copy", variant="mono", seed=0))
    assert "task.data_version" not in copy  # version 1: identities made before it existed hold


# Identities computed at e9ee357, before the evaluation fields moved from ``optim`` to ``eval``:
# the dubois_table3 spec's overrides (attn_loss_decode: gold_length) on one of its cells, the
# same with attn_loss_steps: before_eos, and a Raffel regressor under raffel_protocol: paper.
_DUBOIS = {"optim.epochs": 50, "optim.batch_size": 64, "optim.select_on": "dev_loss",
           "optim.schedule_from_epoch": 1, "optim.patience": 6, "task.dev_from_long1": 0,
           "optim.lr": 0.001}
_RAFFEL = {"optim.epochs": 20, "optim.updates_per_epoch": 250, "task.t0": 50, "optim.lr": 0.001}


@pytest.mark.parametrize("task, variant, base, moved, identity", [
    ("lookup", "dubois_mix", _DUBOIS, {"attn_loss_decode": "gold_length"}, "9dbe8bf438e87e91"),
    ("lookup", "dubois_mix", _DUBOIS,
     {"attn_loss_decode": "gold_length", "attn_loss_steps": "before_eos"}, "ba946cd570aeb319"),
    ("raffel_add", "ffattn", _RAFFEL, {"raffel_protocol": "paper"}, "ea06c00448131ecd"),
    ("raffel_add", "ffattn", _RAFFEL, {"raffel_protocol": "dev"}, "99eb81b641ca619e"),
])
def test_a_moved_field_keeps_the_identities_made_before_it_moved(task, variant, base, moved, identity):
    from locattn.config import RENAMED_FIELDS

    old = {f"optim.{k}": v for k, v in moved.items()}
    new = {RENAMED_FIELDS[k]: v for k, v in old.items()}
    by_old = make_run_config(task=task, variant=variant, seed=0, overrides={**base, **old})
    by_new = make_run_config(task=task, variant=variant, seed=0, overrides={**base, **new})
    assert run_identity(by_old) == run_identity(by_new) == identity
    keys = set(identity_dict(by_new))
    assert not keys & set(RENAMED_FIELDS.values())  # the identity names the former paths
    if moved != {"raffel_protocol": "dev"}:  # dev: the legacy value, left out
        assert set(old) <= keys
