"""Dubois's location attender: the initialisation and constants our Dubois presets take from his code.

Numbers below are derived by hand from Dubois's code (YannDubs/specialized-attention-mini, branch
``nips``; docs/dubois_protocol.md, "Location attender initialisation"):

* ``seq2seq/util/initialization.py::weights_init`` initialises every ``nn.Linear`` weight
  Xavier-uniform, bound sqrt(6/(fan_in + fan_out)), and every GRU by gate block: input weights
  Xavier-uniform, recurrent weights orthogonal, the reset-gate biases -1 (``init_gru``); the other
  biases keep PyTorch's U(-1/sqrt(h), 1/sqrt(h)).
* ``seq2seq/attention/location.py::_discrete_truncated_gaussian`` normalises with
  ``F.normalize(p=1)``: g / max(sum g, 1e-12).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from locattn.models.attention import build_attender
from locattn.models.attention.location import LocationAttender
from locattn.variants import get_variant

QUERY = 128  # decoder state size of the Dubois presets
C = 64  # Dubois's location_size


def _attender(variant: str, seed: int = 0) -> LocationAttender:
    torch.manual_seed(seed)
    return build_attender(get_variant(variant).attention, query_size=QUERY, key_size=QUERY, dim=QUERY)


@pytest.mark.parametrize("variant", ["dubois_location", "dubois_mix"])
def test_dubois_presets_take_dubois_values(variant: str) -> None:
    a = get_variant(variant).attention
    assert (a.controller, a.controller_size, a.controller_init, a.location_norm) == (
        "gru", 64, "dubois", "l1"
    )


@pytest.mark.parametrize("variant", ["locattn", "onestep", "mono", "mix_onestep"])
def test_other_presets_keep_their_init(variant: str) -> None:
    a = get_variant(variant).attention
    assert a.controller_init == "torch" and a.location_norm == "sum"


def test_resize_layer_is_xavier_uniform() -> None:
    w = _attender("dubois_location").resize.weight  # (64, 128)
    bound = math.sqrt(6.0 / (128 + 64))  # 0.17678
    assert w.abs().max() <= bound
    # PyTorch's default bound would be 1/sqrt(128) = 0.0884; 8192 draws reach far beyond it
    assert w.abs().max() > 0.17
    b = _attender("dubois_location").resize.bias
    assert b.abs().max() <= 1 / math.sqrt(128)


def test_weighter_gru_blocks() -> None:
    g = _attender("dubois_location").weighter
    assert g.hidden_size == C
    xavier = math.sqrt(6.0 / (C + C))  # 0.21651, per (64, 64) gate block
    for i in range(3):
        ih = g.weight_ih[i * C:(i + 1) * C]
        hh = g.weight_hh[i * C:(i + 1) * C]
        assert ih.abs().max() <= xavier and ih.abs().max() > 0.2  # default bound is 1/8
        torch.testing.assert_close(hh @ hh.T, torch.eye(C), atol=1e-5, rtol=0)
    for bias in (g.bias_ih, g.bias_hh):
        assert torch.equal(bias[:C], torch.full((C,), -1.0))  # reset gate
        assert bias[C:].abs().max() <= 1 / math.sqrt(C)  # update and new gates: PyTorch default


def test_torch_init_is_unchanged_for_a_gru_controller() -> None:
    from locattn.models.config import derive

    cfg = derive(get_variant("dubois_location"), {"attention.controller_init": "torch"}).attention
    torch.manual_seed(0)
    a = build_attender(cfg, query_size=QUERY, key_size=QUERY, dim=QUERY)
    assert a.weighter.weight_hh.abs().max() <= 1 / 8 and a.resize.weight.abs().max() <= 1 / math.sqrt(128)
    assert a.weighter.bias_ih[:C].abs().max() <= 1 / 8


def test_l1_normalisation() -> None:
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    mem = SimpleNamespace(mask=mask)
    # normal sum: plain division, exactly as "sum" up to its 1e-20 per position
    log_d = torch.log(torch.tensor([[0.5, 0.25, 0.25, 0.7]]))
    torch.testing.assert_close(LocationAttender._norm_l1(log_d, mem), torch.tensor([[0.5, 0.25, 0.25, 0.0]]))
    # sum 4e-13 < 1e-12: divided by 1e-12, so lambda sums to 0.4 (the "sum" norm would give 1)
    log_d = torch.log(torch.tensor([[1e-13, 2e-13, 1e-13, 1.0]], dtype=torch.float64))
    out = LocationAttender._norm_l1(log_d, SimpleNamespace(mask=mask.double()))
    torch.testing.assert_close(out, torch.tensor([[0.1, 0.2, 0.1, 0.0]], dtype=torch.float64))
    out_sum = LocationAttender._norm_sum(log_d, SimpleNamespace(mask=mask.double()))
    assert out_sum.sum().item() == pytest.approx(1.0)
