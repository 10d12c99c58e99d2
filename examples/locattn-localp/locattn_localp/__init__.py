"""locattn plugin: Luong et al. (2015) local-p attention and multi-digit addition.

Registration only, and no torch: ``locattn list``, a spec check and ``study --help`` read these
names without building anything. The attender (:mod:`locattn_localp.attention`) and the task's
data (:mod:`locattn_localp.addition`) load lazily, from their ``"module:attr"`` targets.
"""

from __future__ import annotations

from typing import Any, Mapping

import locattn

DEFAULT_WINDOW = 3


def check_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``model.attention.options`` of ``localp``: ``window`` D (int >= 1, default 3), the
    half-width of the window [p_t - D, p_t + D]; sigma = D / 2 (Luong et al. 2015, sec. 3.2)."""
    unknown = sorted(set(options) - {"window"})
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r}; valid: ['window']")
    window = options.get("window", DEFAULT_WINDOW)
    if isinstance(window, str) and window.isdigit():  # from the command line: --set ...window=5
        window = int(window)
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    return {"window": window}


locattn.register_attender(
    "localp", "locattn_localp.attention:LocalP", label="Local-p",
    doc="Luong et al. (2015) local-p attention: a multiplicative content score times a Gaussian "
        "(sigma = D/2) around a predicted position p_t = S sigmoid(v^T tanh(W h)), within "
        "[p_t - D, p_t + D].",
    options=check_options, stacked=True,  # written for stacked (K, ...) parameters: the fast path
)
locattn.register_variant(
    "localp", label="Local-p", parent="content",
    delta={"attention.family": "localp", "attention.options": {"window": DEFAULT_WINDOW}},
    doc="Local-p attention (Luong et al. 2015) on the base BiGRU model, window D = 3.",
)
locattn.register_task(
    "addition", "locattn_localp.addition:load", label="Addition",
    doc="Multi-digit addition a+b -> the digits of a+b, most significant first; train on "
        "operands of 5-10 digits, test on longer ones (a length split).",
)
