"""locattn plugin: Luong et al. (2015) local-m attention, written as plain PyTorch.

This module registers and imports no torch, so ``locattn list``, a spec check and ``study
--help`` read the names without building anything; the attender
(:mod:`locattn_localm.attention`, an ordinary ``nn.Module``) loads lazily from its
``"module:attr"`` target. Everything the plugin adds is registered here: the attender, the
variant, a metric (token accuracy, :mod:`locattn_localm.metrics`) and a table that shows it.
"""

from __future__ import annotations

from typing import Any, Mapping

import locattn
from locattn.table_defs import Column, ColumnGroup, Panel, TableDef

DEFAULT_WINDOW = 2


def check_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``model.attention.options`` of ``localm``: ``window`` D (int >= 0, default 2), the
    half-width of the window [p_t - D, p_t + D] around p_t = t (Luong et al. 2015, sec. 3.2)."""
    unknown = sorted(set(options) - {"window"})
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r}; valid: ['window']")
    window = options.get("window", DEFAULT_WINDOW)
    if isinstance(window, str) and window.isdigit():  # from the command line: --set ...window=3
        window = int(window)
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise ValueError(f"window must be an integer >= 0, got {window!r}")
    return {"window": window}


# An ordinary nn.Module: no flag. Solo runs and packs (`pack: [seeds]`) run it through torch.func.
locattn.register_attender(
    "localm", "locattn_localm.attention:LocalM", label="Local-m",
    doc="Luong et al. (2015) local-m attention: the general score h^T W_a e (nn.Linear, on a "
        "LayerNorm-ed query) softmaxed within the window [p_t - D, p_t + D] around the monotonic "
        "alignment p_t = t.",
    options=check_options,
)
locattn.register_variant(
    "localm", label="Local-m", parent="content",
    delta={"attention.family": "localm", "attention.options": {"window": DEFAULT_WINDOW}},
    doc="Local-m attention (Luong et al. 2015) on the base BiGRU model, window D = 2.",
)

# A metric of its own: the trainer computes it on every test split of every seq2seq run and
# records it as test.<split>.token_acc (study status and the tables show it).
locattn.register_metric(
    "token_acc", "locattn_localm.metrics:token_acc", label="Token accuracy",
    direction="max", scale="percent",
    tolerance=locattn.registry.Tolerance("points", 5.0, "within 5 points (token accuracy in %)"),
    doc="Fraction of target tokens the greedy output has at the same position.",
)

# A table of its own, for any spec to name (tables: [localm_token_acc]): rows are variants,
# columns a task's test splits, the metric above. A study that names it records its definition,
# so a report builds it without this plugin.
locattn.register_table(
    "localm_token_acc",
    TableDef(
        id="localm_token_acc", source="the locattn-localm example",
        title="Token accuracy (%) of local-m beside the content and OneStepAttn baselines on Copy",
        sections=((None, ("content", "onestep", "localm")),),
        panels=(Panel(header="", groups=(ColumnGroup(label="Copy", columns=tuple(
            Column(label=label, tasks=("copy",), splits=(split,))
            for split, label in (("iid", "IID"), ("len15", "15"), ("len30", "30"), ("len100", "100"))
        )),)),),
        metric="token_acc", direction="max",
    ),
    label="locattn-localm example", doc="Token accuracy of local-m beside the baselines on Copy.",
)
