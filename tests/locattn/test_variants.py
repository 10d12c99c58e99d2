"""Variant registry: labels, declared deltas, lookup errors, config validation."""

from __future__ import annotations

import pytest

from locattn import registry
from locattn.models.config import (
    AttentionConfig,
    ModelConfig,
    SIZE_PRESETS,
    apply_size,
    derive,
    flat_fields,
)
from locattn.variants import (
    LOCATION_FAMILY,
    PAPER_LABELS,
    VARIANT_DELTAS,
    VARIANT_PARENTS,
    get_variant,
    list_variants,
)

EXPECTED_LABELS = {
    "content": "Content", "relative": "Relative", "birelative": "Bi-Relative",
    "birope": "Bi-ROPE", "locattn": "LocAttn", "locattn_s": "LocAttn S",
    "onestep": "OneStepAttn", "mono": "MonoAttn", "rmono": "RMonoAttn",
    "mono_eq19": "MonoAttn (eq. 19)",
    "onestep_no_step2": "-Step 2", "onestep_no_step3": "-Step 3", "onestep_no_sigmoid": "-Sigmoid",
    "mix_locattn": "Mix LocAttn", "mix_locattn_pr": "Mix LocAttn PR",
    "mix_locattn_s": "Mix LocAttn S", "mix_locattn_s_pr": "Mix LocAttn S PR",
    "mix_onestep": "Mix OneStepAttn", "mix_onestep_pr": "Mix OneStepAttn PR",
    "mix_mono": "Mix MonoAttn", "mix_mono_pr": "Mix MonoAttn PR",
    "mix_rmono": "Mix RMonoAttn", "mix_rmono_pr": "Mix RMonoAttn PR",
    "dubois_additive": "Additive", "dubois_multiplicative": "Multiplicative",
    "dubois_scaled_dot": "Scaled Dot", "dubois_transformer": "Transformer",
    "dubois_transformer_xl": "TransformerXL", "dubois_location": "Location", "dubois_mix": "Mix",
    "dubois_location_code": "Location (his code)",
    "ffattn": "Feed-forward attention", "mean": "Unweighted mean",
}


def builtin(labels: dict) -> dict:
    """The package's own entries of a variant listing: an installed plugin (.ci/run installs
    examples/locattn-localp) adds its own after them."""
    own = registry.entries("variant")
    return {k: v for k, v in labels.items() if own[k].builtin}


def test_paper_labels_are_exactly_the_issue_table():
    assert builtin(dict(PAPER_LABELS)) == EXPECTED_LABELS


@pytest.mark.parametrize("key", list(PAPER_LABELS))
def test_preset_differs_from_parent_only_in_declared_delta(key):
    parent = VARIANT_PARENTS[key]
    base = ModelConfig() if parent is None else get_variant(parent)
    mine, theirs = flat_fields(get_variant(key)), flat_fields(base)
    changed = {k: v for k, v in mine.items() if theirs[k] != v}
    assert changed == dict(VARIANT_DELTAS[key])


def test_every_parent_is_a_registered_variant_and_acyclic():
    for key, parent in VARIANT_PARENTS.items():
        seen = {key}
        while parent is not None:
            assert parent in PAPER_LABELS, (key, parent)
            assert parent not in seen
            seen.add(parent)
            parent = VARIANT_PARENTS[parent]


def test_list_variants_patterns():
    assert list(list_variants("mix_*_pr")) == [f"mix_{x}_pr" for x in LOCATION_FAMILY]
    assert list_variants("onestep*") == {
        "onestep": "OneStepAttn", "onestep_no_step2": "-Step 2",
        "onestep_no_step3": "-Step 3", "onestep_no_sigmoid": "-Sigmoid",
    }
    assert len(builtin(list_variants())) == 33
    assert list_variants("nothing*") == {}


def test_unknown_variant_lists_valid_keys_and_suggests():
    with pytest.raises(KeyError) as info:
        get_variant("onestpe")
    msg = str(info.value)
    assert "Did you mean 'onestep'" in msg
    for key in ("content", "mix_rmono_pr", "ffattn"):
        assert key in msg
    with pytest.raises(ValueError):  # also a ValueError, for callers that catch those
        get_variant("nope")


def test_mix_variants_really_mix():
    for key in list_variants("mix_*"):
        assert get_variant(key).attention.mode == "mix"
    assert get_variant("dubois_mix").attention.mode == "mix"
    for key in ("locattn", "onestep", "mono", "rmono", "locattn_s"):
        assert get_variant(key).attention.mode == "location"


def test_pr_only_on_mix_variants():
    for key in PAPER_LABELS:
        att = get_variant(key).attention
        assert (att.pa_from == "location") == key.endswith("_pr")


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"family": "location", "pa_from": "location"}, "attention.pa_from"),
        ({"family": "content", "step": "relu"}, "attention.step"),
        ({"family": "content", "direction": "mixed"}, "attention.direction"),
        ({"family": "positional", "mode": "mix"}, "attention.mode"),
        ({"family": "location", "step": "relu", "mono_gate_init": 20.0}, "attention.mono_gate_init"),
        ({"family": "location", "step": "relu", "mono_gate_on": "sigmoid"}, "attention.mono_gate_on"),
        ({"family": "content", "location_norm": "softmax"}, "attention.location_norm"),
        ({"family": "content", "rho_init": "per_row"}, "attention.rho_init"),
        ({"family": "location", "controller_size": 32}, "attention.controller_size"),
        ({"family": "location", "mix_temperature": 1.0}, "attention.mix_temperature"),
        ({"step": "bogus"}, "attention.step"),
        ({"family": "location", "sigma_min": 0.0}, "attention.sigma_min"),
    ],
)
def test_invalid_attention_combinations_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        AttentionConfig(**kwargs)


def test_invalid_literal_lists_choices():
    with pytest.raises(ValueError, match=r"valid: \['sigmoid', 'softstair', 'raw', 'mono', 'relu'\]"):
        AttentionConfig(step="steppy")


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"kind": "regressor"}, "attention.family"),
        ({"attention": AttentionConfig(family="mean")}, "attention.family"),
        ({"hidden_size": 127}, "hidden_size"),
        ({"dropout": 1.0}, "dropout"),
        ({"num_layers": 0}, "num_layers"),
        ({"encoder": "lstm"}, "encoder"),
    ],
)
def test_invalid_model_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ModelConfig(**kwargs)


def test_derive_rejects_unknown_path_with_suggestion():
    with pytest.raises(ValueError, match="did you mean 'attention'"):
        derive(ModelConfig(), {"attentoin.step": "relu"})


def test_apply_size_cfq_and_unknown():
    cfg = apply_size(get_variant("mix_onestep"), "cfq")
    assert (cfg.num_layers, cfg.embedding_size, cfg.hidden_size, cfg.value_size, cfg.dropout) == (
        2, 128, 256, 512, 0.4)
    assert cfg.attention == get_variant("mix_onestep").attention
    assert apply_size(cfg, "base") == get_variant("mix_onestep")
    assert set(SIZE_PRESETS) == {"base", "cfq", "cfq_paper_text"}
    with pytest.raises(ValueError, match=r"valid: \['base', 'cfq', 'cfq_paper_text'\]"):
        apply_size(cfg, "huge")


def test_run_config_round_trip_for_every_variant():
    from locattn.config import config_to_dict, make_run_config, run_config_from_dict

    for key in PAPER_LABELS:
        cfg = make_run_config(variant=key)
        assert cfg.model == get_variant(key)
        assert run_config_from_dict(config_to_dict(cfg)) == cfg


def test_dotted_override_reaches_attention_and_is_validated():
    from locattn.config import make_run_config

    cfg = make_run_config(variant="onestep", overrides={"model.attention.step": "relu"})
    assert cfg.model == get_variant("rmono")
    with pytest.raises(ValueError, match="attention.pa_from"):
        make_run_config(variant="onestep", overrides={"model.attention.pa_from": "location"})
