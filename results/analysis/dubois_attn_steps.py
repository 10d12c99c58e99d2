"""Which decoding steps Dubois Table 3's attnLoss scores, and what that does to the table.

    python results/analysis/dubois_attn_steps.py /work/studies/dubois_table3-quick

Re-scores the best checkpoint (``runs/<key>/best_model.pt``) of every run of a
``dubois_table3`` study on the Table 3 test files two ways:

- ``emitted``: what the study recorded. The greedy decoder stops at its own ``<eos>``, so only
  the steps it emitted are scored (README, Deviations).
- ``gold_length``: what Dubois's evaluation does. The decoder runs free (fed its own greedy
  predictions) for as many steps as the gold target has, ``<eos>`` step included, whatever it
  predicts, and every one of those steps is scored.

It prints, per variant and column: the share of gold steps the emitted decode scores, and both
losses. Aggregation is the table's: per seed the mean over the three tasks, then the mean over
seeds. It needs the run folders (``runs/``), which are not committed with the record; they are
left by ``study launch`` in the study directory. Takes a few CPU-minutes for the quick profile.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import torch

from locattn.config import run_config_from_dict
from locattn.metrics import attn_loss_terms
from locattn.models import build_model
from locattn.tasks import load_task
from locattn.training.data import EncodedSplit

COLUMNS = {"Interp.": ("heldout_inputs", "heldout_compositions"),
           **{f"Long {i}": (f"longer_seen_{i}",) for i in range(1, 6)}}


@torch.no_grad()
def score(model: torch.nn.Module, split: EncodedSplit, batch_size: int = 256) -> dict[str, float]:
    """Squared-error sums and step counts of both scorings over one split."""
    sums = {"emitted": [0.0, 0], "gold_length": [0.0, 0], "gold_steps": 0}
    offset = int(getattr(model, "source_offset", 0))
    for index in split.sorted_batches(batch_size):
        b = split.batch(index)
        gold = split.attn[b.index]  # (B, T) gold source index per target step, -1 = none
        T = int((gold >= 0).sum(1).max())
        state = model.start(b.src, b.src_len)
        prev = torch.full((b.src.shape[0],), model.sos_id, dtype=torch.long)
        ended = torch.zeros_like(prev, dtype=torch.bool)
        lengths = torch.zeros_like(prev)
        weights = []
        for _ in range(T):  # free-running for the gold length, never stopping at <eos>
            logits, state, attn = model.step(state, prev)
            tok = logits.argmax(-1)
            lengths += (~ended).long()  # the recorded decode would have emitted this step
            ended |= tok == model.eos_id
            weights.append(attn.weights)
            prev = tok
        w = torch.stack(weights, dim=1)
        for name, lens in (("emitted", lengths), ("gold_length", None)):
            total, n = attn_loss_terms(w, gold, source_offset=offset, lengths=lens)
            sums[name][0] += total
            sums[name][1] += n
        sums["gold_steps"] += int((gold >= 0).sum())
    return {"emitted_sse": sums["emitted"][0], "emitted_n": sums["emitted"][1],
            "gold_sse": sums["gold_length"][0], "gold_n": sums["gold_length"][1],
            "gold_steps": sums["gold_steps"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study_dir", type=Path)
    ap.add_argument("--out", type=Path, help="also write the per-run numbers here (JSON)")
    args = ap.parse_args()
    runs = args.study_dir / "runs"
    if not runs.is_dir():
        ap.error(f"{runs} does not exist: this needs the study's run folders (checkpoints), which "
                 f"`study launch` leaves in the study directory; a committed record "
                 f"(results/record/<study>) does not hold them")
    torch.set_num_threads(1)
    per_run = []
    data_cache: dict[str, object] = {}
    for run_dir in sorted(runs.iterdir()):
        if not (run_dir / "best_model.pt").is_file():
            continue
        cfg = run_config_from_dict(json.loads((run_dir / "config.json").read_text()))
        key = json.dumps(cfg.task.__dict__, sort_keys=True, default=str)
        data = data_cache.setdefault(key, load_task(cfg.task))
        vocab = data.vocab
        ids = dict(pad_id=vocab.pad_id, sos_id=vocab.sos_id, eos_id=vocab.eos_id)
        model = build_model(cfg.model, len(vocab), **ids)
        model.load_state_dict(torch.load(run_dir / "best_model.pt", weights_only=True))
        model.eval()
        row = {"variant": cfg.variant, "task": cfg.task.name, "seed": cfg.seed, "columns": {}}
        for column, splits in COLUMNS.items():
            parts = [score(model, EncodedSplit(data.splits[s], vocab, **ids)) for s in splits]
            tot = {k: sum(p[k] for p in parts) for k in parts[0]}
            row["columns"][column] = {
                "emitted": tot["emitted_sse"] / tot["emitted_n"],
                "gold_length": tot["gold_sse"] / tot["gold_n"],
                "scored_share": tot["emitted_n"] / tot["gold_steps"],
            }
        per_run.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(per_run, indent=1))
    # the table's aggregation: per (variant, seed) the mean over tasks, then over seeds
    cells: dict[tuple[str, str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in per_run:
        for column, vals in row["columns"].items():
            for what, v in vals.items():
                cells[(row["variant"], column, what)][row["seed"]].append(v)
    variants = sorted({r["variant"] for r in per_run})
    for what in ("scored_share", "emitted", "gold_length"):
        print(f"\n{what}\n| Model | " + " | ".join(COLUMNS) + " |")
        for variant in variants:
            vals = []
            for column in COLUMNS:
                seeds = cells[(variant, column, what)]
                per_seed = [sum(v) / len(v) for v in seeds.values()]
                vals.append(sum(per_seed) / len(per_seed))
            print(f"| {variant} | " + " | ".join(f"{v:.2f}" for v in vals) + " |")


if __name__ == "__main__":
    main()
