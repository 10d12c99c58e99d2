"""Run names for the MLflow UI: what tells runs apart, first.

The UI shows a run's name in a narrow column and cuts it after about 30 characters, so the
name leads with the parts that differ between the runs of a study: the abbreviated variant,
task and seed (``mix-1step-pr·inv-rev-recopy·s9``: every variant x task pair of ``ablations/``
fits in 30 characters), then the hyperparameters and any further grid axis
(``1step·copy·s0·lr=1e-3``). The full identity stays in the tags (``locattn.cell``,
``locattn.hparams``, ``locattn.run_key``), so a name is never read back and a record's runs
keep the names they were given.
Pure functions, standard library only.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

SEP = "·"
#: Word abbreviations of variant and task keys, applied to their ``_``-separated words in order.
WORDS = {"dubois": "", "onestep": "1step", "locattn": "loc", "reverse": "rev",
         "sigmoid": "sig"}
#: MLflow's limit on a run name.
MAX_RUN_NAME = 250


def short_key(path: str) -> str:
    """The last part of a dotted config path: ``optim.lr`` -> ``lr``."""
    return path.rsplit(".", 1)[-1]


def short_value(value: Any) -> str:
    """A compact value: ``0.001`` -> ``1e-3``, ``3e-4`` -> ``3e-4``, ``0.5`` -> ``0.5``,
    ``100`` -> ``100``, ``[15, 30]`` -> ``15,30``, ``True`` -> ``true``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(short_value(v) for v in value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        if value.is_integer() and abs(value) < 1e6:
            return str(int(value))
        if value != 0 and (abs(value) < 0.01 or abs(value) >= 1e6):
            mantissa, exp = f"{value:.2e}".split("e")
            return f"{mantissa.rstrip('0').rstrip('.')}e{int(exp)}"
        return f"{value:.4g}"
    return str(value)


def split_cell(cell: str) -> dict[str, str]:
    """``task=copy,variant=onestep,task.t0=(50,100)`` -> its axes (commas inside brackets kept)."""
    axes: dict[str, str] = {}
    depth, start = 0, 0
    parts = []
    for i, ch in enumerate(cell):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(cell[start:i])
            start = i + 1
    parts.append(cell[start:])
    for part in parts:
        key, sep, value = part.partition("=")
        if sep and key:
            axes[key] = value
    return axes


def abbreviate(key: str) -> str:
    """A variant or task key, short: its words through :data:`WORDS`, joined by ``-``
    (``mix_onestep_pr`` -> ``mix-1step-pr``, ``dubois_transformer_xl`` -> ``transformer-xl``,
    ``inv_reverse_recopy`` -> ``inv-rev-recopy``); an ablation ``<base>_no_<part>`` is
    ``-<part>``, as the papers label it (``onestep_no_step2`` -> ``-step2``)."""
    base, no, part = key.partition("_no_")
    if no and part:
        return "-" + abbreviate(part)
    words = [WORDS.get(w, w) for w in key.split("_")]
    return "-".join(w for w in words if w) or key


def cell_name(task: str, variant: str, cell: str = "") -> str:
    """The UI name of a cell's run: :func:`run_name` without seed and hyperparameters
    (``1step·copy``, ``ffattn·raffel-add·t0=50``)."""
    parts = [abbreviate(variant), abbreviate(task)]
    parts += [f"{short_key(p)}={v}" for p, v in split_cell(cell).items() if p not in ("task", "variant")]
    return SEP.join(parts)[:MAX_RUN_NAME]


def run_name(*, task: str, variant: str, seed: int, hparams: Mapping[str, Any] | None = None,
             cell: str = "") -> str:
    """The UI name of one trial run: ``variant·task·s<seed>[·<hparam>=<value>]...[·<axis>=<value>]...``
    with variant and task abbreviated (:func:`abbreviate`). Hyperparameters and extra grid axes
    (from ``cell``) go by their last dotted part, hyperparameters sorted by path."""
    parts = [abbreviate(variant), abbreviate(task), f"s{seed}"]
    for path, value in sorted((hparams or {}).items()):
        parts.append(f"{short_key(path)}={short_value(value)}")
    for path, value in split_cell(cell).items():
        if path not in ("task", "variant"):
            parts.append(f"{short_key(path)}={value}")
    return SEP.join(parts)[:MAX_RUN_NAME]
