"""Does ``train_path=compiled`` train a (task, variant), and how far are its losses from eager's?

    python benchmarks/check_compiled.py copy/onestep_no_step2 copy/mix_onestep_pr [--epochs 2]

Per case: a tiny run (64 training examples, batch 16, one thread) on each path, in a fresh
inductor cache unless ``TORCHINDUCTOR_CACHE_DIR`` says otherwise, printing the wall time (the
compiled one includes compiling) and each epoch's training loss, then the largest difference.
A case whose compiled run fails prints the error and the check goes on. Exit status 1 when any
case failed. ``test_compiled.py`` holds the tolerances for Copy/OneStepAttn; this script is
how further variants were checked (README, "Performance").
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from locattn.config import make_run_config  # noqa: E402
from locattn.train import train  # noqa: E402

TINY = {"task.train_size": 64, "task.dev_size": 16, "task.test_size": 16,
        "optim.batch_size": 16, "optim.dev_batch_size": 16, "num_threads": 1}


def losses(task: str, variant: str, path: str, epochs: int, folder: Path) -> list[float]:
    """Training loss per epoch of a tiny run on ``path`` (eager or compiled)."""
    over = {**TINY, "optim.epochs": epochs, "cache_dir": str(folder / "cache"), "train_path": path}
    if task in ("lookup", "reverse_lookup"):  # fixed test files: cap them instead of sizing them
        del over["task.test_size"]
        over["task.test_limit"] = 16
    cfg = make_run_config(task=task, variant=variant, seed=0, overrides=over)
    return [h["train_loss"] for h in train(cfg, folder / path).history]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("cases", nargs="+", metavar="TASK/VARIANT", help="e.g. copy/mix_onestep_pr")
    ap.add_argument("--epochs", type=int, default=2, help="epochs per run (default 2)")
    args = ap.parse_args(argv)
    bad = [c for c in args.cases if c.count("/") != 1]
    if bad:
        ap.error(f"cases are TASK/VARIANT, got {', '.join(bad)}")
    failed = 0
    for case in args.cases:
        task, variant = case.split("/")
        folder = Path(tempfile.mkdtemp(prefix="check_compiled-"))
        got: dict[str, list[float]] = {}
        for path in ("eager", "compiled"):
            t0 = time.time()
            try:
                got[path] = losses(task, variant, path, args.epochs, folder)
            except Exception as exc:  # noqa: BLE001 - report the case and go on to the next
                failed += 1
                print(f"{case} {path}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                break
            print(f"{case} {path}: {time.time() - t0:.0f} s wall, losses "
                  f"{' '.join(repr(x) for x in got[path])}", flush=True)
        if len(got) == 2:
            diffs = [abs(a - b) for a, b in zip(got["eager"], got["compiled"])]
            print(f"{case}: |loss eager - compiled| per epoch {' '.join(f'{d:.2e}' for d in diffs)}",
                  flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
