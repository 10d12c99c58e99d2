"""The built-in metrics' names, labels and options, registered without torch.

:mod:`locattn.metrics` holds the functions (numpy, torch); this module registers each of them
lazily (:func:`locattn.register_metric`) and holds the attnLoss options the config layer needs,
so that :mod:`locattn.config` imports no torch.
"""

from __future__ import annotations

from typing import Literal

from locattn import registry

#: Which gold steps attnLoss scores: ``with_eos`` every step with a gold index, the ``<eos>``
#: step included (Dubois et al.'s metric code: the files give one index per target token plus
#: one for ``<eos>``); ``before_eos`` drops each row's last gold step, the ``<eos>`` one (the
#: paper's wording, "before <eos>").
AttnLossSteps = Literal["with_eos", "before_eos"]

#: Which decode attnLoss reads: ``emitted``, the test decode itself (greedy until its own
#: ``<eos>``, so a model that stops early is scored on fewer steps); ``gold_length``, a second
#: free-running greedy decode that runs exactly the gold target's length (its ``<eos>`` step
#: included) whatever it predicts, as Dubois et al.'s evaluation does, so every gold step is
#: scored.
AttnLossDecode = Literal["emitted", "gold_length"]

for _name, _label, _doc in (
    ("seq_acc", "Accuracy", "Sequence accuracy: the greedy output equals the gold target up to "
     "<eos> (Ray Chowdhury & Caragea 2023)."),
    ("seq_acc_be", "Accuracy (before eos)", "Sequence accuracy on the tokens before <eos>, "
     "ignoring whether <eos> was emitted."),
    ("edit_distance", "Edit distance", "Mean Levenshtein distance between output and target."),
    ("attn_loss", "attnLoss", "Mean squared error between attention weights and the gold "
     "alignment (Dubois et al. 2020)."),
    ("raffel_accuracy", "Accuracy (Raffel & Ellis)", "Fraction of regression outputs within "
     "0.04 of the target (Raffel & Ellis 2016)."),
    ("epochs_to_100", "Epochs to 100 %", "The first epoch with 100 % accuracy (Raffel & Ellis 2016)."),
    ("accuracy_by_length", "Accuracy by length", "Sequence accuracy per output length."),
):
    registry.register_metric(_name, f"locattn.metrics:{_name}", label=_label, doc=_doc)

__all__ = ["AttnLossDecode", "AttnLossSteps"]
