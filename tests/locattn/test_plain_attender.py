"""A plugin attender written as an ordinary ``nn.Module`` (``nn.Linear``, ``nn.LayerNorm``,
buffers) trains solo and packed: a pack runs it per replica through ``torch.func``
(:mod:`locattn.models.attention.replicas`), and each replica equals its solo run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from locattn import registry
from locattn.config import make_run_config
from locattn.models.attention import AttnStep
from locattn.packed import check_packable, train_packed
from locattn.train import train
from tests.locattn.test_packed import Stop, StopAtEpoch, without_time

ROOT = Path(__file__).resolve().parents[2]
LOCALM = ROOT / "examples" / "locattn-localm"
TINY = {"task.train_size": 96, "task.dev_size": 24, "task.test_size": 8, "task.test_lengths": (15,),
        "optim.epochs": 2, "num_threads": 1}
DEVICES = ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")])]


@pytest.fixture
def localm(monkeypatch):
    """The worked example's local-m attender (examples/locattn-localm), registered."""
    monkeypatch.syspath_prepend(str(LOCALM))
    import locattn_localm  # noqa: F401 - registers `localm` (a no-op where CI installed it)

    return "localm"


class Counting(nn.Module):
    """A content attender that counts its training steps in a buffer (a schedule's counter), with
    an ``nn.Linear`` query map, ``nn.LayerNorm`` and no ``prepare`` of its own."""

    def __init__(self, cfg, *, query_size, key_size, dim, total_batches=1):
        super().__init__()
        self.query = nn.Linear(query_size, key_size)
        self.norm = nn.LayerNorm(key_size)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, query, memory, cache, state, t):
        if self.training:
            self.steps += 1
        scores = torch.einsum("bld,bd->bl", memory.keys, self.norm(self.query(query)))
        return AttnStep(weights=torch.softmax(scores + memory.score_bias, dim=-1)), state


@pytest.fixture(scope="module")
def counting():
    if not registry.has("attender", "plain_counting"):
        registry.register_attender("plain_counting", Counting, label="Counting")
        registry.register_variant("plain_counting", label="Counting", parent="content",
                                  delta={"attention.family": "plain_counting"})
    return "plain_counting"


def configs(tmp: Path, variant: str, seeds=(0, 1, 2), **extra):
    over = {**TINY, "cache_dir": str(tmp / "cache"), **extra}
    return [make_run_config(task="copy", variant=variant, seed=s, overrides=over) for s in seeds]


def assert_close_runs(solo, packed, tol: float = 1e-5) -> None:
    assert packed.run_identity == solo.run_identity and packed.epochs_run == solo.epochs_run
    for a, b in zip(solo.history, packed.history):
        for key in ("train_loss", "dev_loss", "dev_seq_acc"):
            assert b[key] == pytest.approx(a[key], rel=tol, abs=tol), key


def assert_close_models(a: Path, b: Path, tol: float = 1e-5) -> dict[str, torch.Tensor]:
    solo = torch.load(a / "best_model.pt", weights_only=True)
    packed = torch.load(b / "best_model.pt", weights_only=True)
    assert solo.keys() == packed.keys()
    for k in solo:
        if solo[k].is_floating_point():
            torch.testing.assert_close(packed[k], solo[k], rtol=tol, atol=tol, msg=k)
        else:
            assert torch.equal(packed[k], solo[k]), k
    return solo


@pytest.mark.parametrize("device", DEVICES)
def test_an_ordinary_module_attender_trains_packed_equal_to_solo(tmp_path, localm, device):
    """Three seeds of local-m (nn.Linear, nn.LayerNorm, a buffer) as one pack: each replica's
    losses, dev scores and final parameters match its solo run to fp32 tolerance."""
    cfgs = configs(tmp_path, localm, device=device)
    check_packable(cfgs)  # an ordinary module packs; nothing declared
    solos = [train(c, tmp_path / f"solo{c.seed}") for c in cfgs]
    packed = train_packed(cfgs, [tmp_path / f"pack{c.seed}" for c in cfgs])
    for s, p in zip(solos, packed):
        assert_close_runs(s, p)
    assert len({round(r.history[-1]["train_loss"], 6) for r in packed}) == 3  # three different runs
    for seed in (0, 1, 2):
        state = assert_close_models(tmp_path / f"solo{seed}", tmp_path / f"pack{seed}")
        assert {"attender.w_a.weight", "attender.norm.weight", "attender.norm.bias",
                "attender.scale"} <= set(state)
        assert state["attender.w_a.weight"].dim() == 2  # saved unstacked: the solo format


def test_a_plugin_buffer_is_per_replica_and_a_pack_resumes_exactly(tmp_path, counting):
    """A buffer the attender updates in training is each replica's own (the packed counts equal
    the solo ones, though replicas run in groups of equal batch shapes), and an interrupted pack
    resumes from its checkpoints to the bit of the uninterrupted one."""
    cfgs = configs(tmp_path, counting, seeds=(0, 1))
    solos = [train(c, tmp_path / f"solo{c.seed}") for c in cfgs]
    full = train_packed(cfgs, [tmp_path / f"full{c.seed}" for c in cfgs])
    for s, p in zip(solos, full):
        assert_close_runs(s, p)
    for seed in (0, 1):
        state = assert_close_models(tmp_path / f"solo{seed}", tmp_path / f"full{seed}")
        assert int(state["attender.steps"]) > 0
    outs = [tmp_path / f"cut{c.seed}" for c in cfgs]
    with pytest.raises(Stop):
        train_packed(cfgs, outs, [None, StopAtEpoch()])
    resumed = train_packed(cfgs, outs)
    for a, b in zip(full, resumed):
        assert without_time(b.history) == without_time(a.history) and b.test == a.test
    for seed in (0, 1):
        a = torch.load(tmp_path / f"full{seed}" / "best_model.pt", weights_only=True)
        b = torch.load(tmp_path / f"cut{seed}" / "best_model.pt", weights_only=True)
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_graphed_step_trains_an_ordinary_module_packed_equal_to_solo(tmp_path, localm):
    """``optim.train_step: graphed`` (uncaptured on a CPU; captured where a GPU is lent, the
    gpu tier of test_an_ordinary_module_attender_trains_packed_equal_to_solo covers the eager
    step there): a graphed pack of two local-m seeds equals their graphed solo runs."""
    cfgs = configs(tmp_path, localm, seeds=(0, 1), **{"optim.train_step": "graphed"})
    solos = [train(c, tmp_path / f"solo{c.seed}") for c in cfgs]
    packed = train_packed(cfgs, [tmp_path / f"pack{c.seed}" for c in cfgs])
    for s, p in zip(solos, packed):
        assert_close_runs(s, p)
    for seed in (0, 1):
        assert_close_models(tmp_path / f"solo{seed}", tmp_path / f"pack{seed}")



class Carry:
    """A state class of a plugin's own (not a dataclass): its tensors cross a replicated call."""

    def __init__(self, previous, count):
        self.previous, self.count = previous, count


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.query = nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def initial_state(self, memory):
        return Carry(torch.zeros_like(memory.lengths), 0)

    def forward(self, query, memory, cache, state, t):
        self.calls += 1
        scores = torch.einsum("bld,bd->bl", memory.keys, self.query(query)) + state.previous[:, None]
        weights = torch.softmax(scores + memory.score_bias, dim=-1)
        return AttnStep(weights=weights, mu=weights.max(-1).values), Carry(weights[:, 0], state.count + 1)


def test_a_replicated_call_runs_each_replica_on_its_own_rows_weights_and_state():
    """call_replicas: replica k of a (K, ...) stack, on rows k*B .. k*B + B - 1, computes what
    the module alone computes on those rows, its own state object and buffer included."""
    from locattn.models.attention.check import dry_memory
    from locattn.models.attention.replicas import call_replicas, join_rows

    torch.manual_seed(0)
    solo = [Recurrent() for _ in range(3)]
    mems = [dry_memory(4, seed=k) for k in range(3)]
    queries = [torch.randn(2, 4) for _ in range(3)]
    pack = Recurrent()
    params, buffers = torch.func.stack_module_state(solo)
    for name, value in {**params, **buffers}.items():
        *path, leaf = name.split(".")
        owner = pack.get_submodule(".".join(path))
        setattr(owner, leaf, nn.Parameter(value) if name in params else value.clone())
    rows = type(mems[0])(**{f: torch.cat([getattr(m, f) for m in mems]) for f in mems[0].__dataclass_fields__})
    q = torch.cat(queries)
    state = call_replicas(pack, "initial_state", (rows,))
    states = [m.initial_state(mem) for m, mem in zip(solo, mems)]
    for t in range(3):
        attn, state = call_replicas(pack, "forward", (q, rows), (None, state), (t,))
        outs = [m(qk, mem, None, st, t) for m, qk, mem, st in zip(solo, queries, mems, states)]
        states = [o[1] for o in outs]
        joined = join_rows(attn)
        torch.testing.assert_close(joined.weights, torch.cat([o[0].weights for o in outs]))
        torch.testing.assert_close(joined.mu, torch.cat([o[0].mu for o in outs]))
        assert isinstance(state, Carry) and state.count == t + 1 and state.previous.shape == (3, 2)
    assert pack.calls.tolist() == [3, 3, 3] and all(int(m.calls) == 3 for m in solo)


@pytest.mark.slow
@pytest.mark.timeout(2400)  # a cold compile under load, as tests/locattn/test_compiled.py's
def test_train_path_compiled_trains_an_ordinary_module_packed_equal_to_solo(tmp_path, localm):
    """``train_path: compiled``: torch.compile traces the per-replica vmap of local-m inside the
    step's one graph (fullgraph); a pack of two seeds equals their compiled solo runs. (Slow:
    inductor compiles the graphs, minutes on a loaded 2-core machine.)"""
    from locattn.training.epoch import prepare_compile

    try:
        prepare_compile()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    cfgs = configs(tmp_path, localm, seeds=(0, 1), train_path="compiled")
    solos = [train(c, tmp_path / f"solo{c.seed}") for c in cfgs]
    packed = train_packed(cfgs, [tmp_path / f"pack{c.seed}" for c in cfgs])
    assert solos[0].history[0]["compiles"] >= 1  # it compiled (the second seed reuses the graph)
    for s, p in zip(solos, packed):
        assert_close_runs(s, p)
    for seed in (0, 1):
        assert_close_models(tmp_path / f"solo{seed}", tmp_path / f"pack{seed}")
