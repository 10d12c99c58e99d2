"""Our ``dubois_code`` attender against the attender of Dubois's code, step by step.

    python results/analysis/dubois_code_parity.py --code DIR

DIR is a checkout of YannDubs/specialized-attention-mini at branch ``nips`` (c2c489f), outside
this project; its ``seq2seq`` package is imported from there (its ``ipdb`` import is stubbed).
Both attenders get the same weights (ours copied from theirs), the same keys and decoder
queries, and the same batch count (the schedule's position), built with the arguments the
code's ``get_seq2seq_model`` passes (5 % preparation, rounding temperature over 10 %, mixing by
location confidence, no gating). For each case the script prints the largest difference between
the two attention weights over 8 decoding steps, on the valid source positions. Training cases
with soft-Concrete rounding seed torch's generator identically before each step of each side.

With ``--padded`` the batch mixes source lengths: the code's content softmax then also covers
the padded positions (ours masks them), and the weights differ by design
(docs/dubois_protocol.md).
"""

from __future__ import annotations

import argparse
import sys
import types

import torch
from torch import nn

from locattn.models.attention.base import SourceMemory
from locattn.models.attention.dubois_code import DuboisCodeAttender, schedule_batches

H, C, TOTAL, STEPS = 128, 64, 100, 8
CASES = [("eval", 0, False), ("eval", 3, False), ("eval", 50, False), ("train", 2, False),
         ("train", 7, True), ("train", 40, True)]


def their_attender(code_dir: str, prepare: int, anneal: int) -> nn.Module:
    sys.path.insert(0, code_dir)
    sys.modules.setdefault("ipdb", types.SimpleNamespace(set_trace=lambda *a, **k: None))
    from seq2seq.attention.attender import Attender  # their package, from DIR

    rounder = {"name": "softConcrete", "n_steps_interpolate": anneal, "start_step": prepare}
    mu = dict(rounder_mu_kwargs=rounder, is_reg_clamp_mu=True, clipping_step=3,
              rounder_perc_kwargs={"name": None}, is_plateau_step=True, is_plateau_bias=True, mu_noise=0.0)
    location = dict(n_steps_prepare_pos=prepare, pdf="gaussian", Generator=nn.Linear, mu_kwargs=mu,
                    gating=None, is_recurrent=False, hidden_size=C, sigma_kwargs=dict(is_force_sigma=False))
    mixer = dict(Generator=nn.Linear, mode="loc_conf", n_steps_wait=prepare,
                 rounder_perc_kwargs={"name": None}, dflt_perc_loc=0.7)
    return Attender(H, max_len=50, loc_query_size=C, content_kwargs=dict(scorer="scaledot"),
                    location_kwargs=location, mixer_kwargs=mixer)


def copy_weights(theirs: nn.Module, ours: DuboisCodeAttender) -> None:
    loc = theirs.location_attender
    g = loc.weighter
    pairs = [(ours.resize.weight, theirs.resizer.weight), (ours.resize.bias, theirs.resizer.bias),
             (ours.weighter.weight_ih, g.weight_ih_l0), (ours.weighter.weight_hh, g.weight_hh_l0),
             (ours.weighter.bias_ih, g.bias_ih_l0), (ours.weighter.bias_hh, g.bias_hh_l0),
             (ours.hidden0, loc.hidden0.view(-1)),
             (ours.blocks.weight, loc.mu_generator.mu_weights_generator.weight),
             (ours.blocks.bias, loc.mu_generator.mu_weights_generator.bias),
             (ours.sigma.weight, loc.sigma_generator.sigma_generator.weight),
             (ours.sigma.bias, loc.sigma_generator.sigma_generator.bias)]
    with torch.no_grad():
        for mine, theirs_p in pairs:
            mine.copy_(theirs_p)
        # raise sigma above its hard minimum for part of the batch, so the learned sigma is compared
        ours.sigma.bias.add_(0.6)
        loc.sigma_generator.sigma_generator.bias.add_(0.6)


def set_count(theirs: nn.Module, ours: DuboisCodeAttender, count: int, prepare: int) -> None:
    """Both schedules at ``count`` training batches seen."""
    ours.calls.fill_(count)
    loc = theirs.location_attender
    for m in theirs.modules():
        if hasattr(m, "n_training_calls"):
            m.n_training_calls = count
    loc.sigma_generator.get_sigma.n_training_calls = count
    loc.mu_generator.get_clamping_eps.n_training_calls = count
    loc.mu_generator.rounder_mu.get_temperature.n_training_calls = max(0, count - prepare + 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", required=True, metavar="DIR",
                        help="a checkout of YannDubs/specialized-attention-mini at branch nips")
    parser.add_argument("--padded", action="store_true", help="mix source lengths in the batch")
    args = parser.parse_args()
    prepare, anneal = schedule_batches(TOTAL)
    torch.manual_seed(0)
    theirs = their_attender(args.code, prepare, anneal)
    ours = DuboisCodeAttender(query_size=H, key_size=H, controller_size=C, total_batches=TOTAL)
    copy_weights(theirs, ours)

    lengths = [9, 6, 3, 7] if args.padded else [9, 9, 9, 9]
    B, L = len(lengths), max(lengths)
    g = torch.Generator().manual_seed(1)
    keys = torch.randn(B, L, H, generator=g)
    mask = torch.arange(L).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    keys = keys * mask.unsqueeze(-1)  # the code's encoder pads its outputs with zeros
    queries = torch.randn(STEPS, B, H, generator=g)
    n = torch.tensor(lengths, dtype=torch.float)
    positions = torch.arange(L).float().unsqueeze(0) / (n - 1).unsqueeze(1) * mask
    memory = SourceMemory(keys=keys, values=keys, mask=mask, positions=positions, lengths=n,
                          stepsize=1 / (n - 1), score_bias=torch.zeros(B, L).masked_fill(~mask, float("-inf")))

    print(f"prepare {prepare} batches, rounding anneal {anneal}; lengths {lengths}")
    print("| mode | batches seen | max abs difference of the attention weights |")
    print("|---|---:|---:|")
    for mode, count, seeded in CASES:
        training = mode == "train"
        theirs.train(training)
        ours.train(training)
        # a training batch counts itself before its first step (the code: Seq2seq.forward)
        set_count(theirs, ours, count - 1 if training else count, prepare)
        if training:
            for m in theirs.modules():
                if isinstance(m, nn.Module) and hasattr(m, "n_training_calls"):
                    m.n_training_calls += 1
        state, cache = ours.initial_state(memory), ours.prepare(memory)
        worst = 0.0
        with torch.no_grad():
            for t in range(STEPS):
                if seeded:
                    torch.manual_seed(100 + t)
                a = theirs(keys, queries[t].unsqueeze(1), source_lengths=(lengths, n), step=t,
                           controller=queries[t].unsqueeze(1)).squeeze(1)
                if seeded:
                    torch.manual_seed(100 + t)
                o, state = ours(queries[t], memory, cache, state, t)
                worst = max(worst, float(((a - o.weights) * mask).abs().max()))
        print(f"| {mode} | {count} | {worst:.1e} |")


if __name__ == "__main__":
    main()
