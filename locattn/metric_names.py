"""The built-in metrics, registered without torch: each one's single registration.

:mod:`locattn.metrics` holds the functions (numpy, torch); this module registers each of them
lazily (:func:`locattn.register_metric`: how it is computed and recorded, its direction, scale,
accuracy flag and agreement tolerance), and holds the attnLoss options the config layer needs,
so that :mod:`locattn.config` imports no torch. Adding a built-in metric is one
``register_metric`` call here (its function in :mod:`locattn.metrics` or beside the call);
the trainer, ``study status`` and the reports' tables and tolerances read the registry.
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

_ACCURACY = registry.Tolerance("points", 10.0, "within 10 points (accuracy in %)")

# Each built-in metric is one call here: how the trainer computes it (``computed_by``), where it
# is recorded, its direction, scale, whether it is an accuracy and its agreement tolerance.
registry.register_metric(
    "seq_acc", "locattn.metrics:seq_acc", label="Accuracy", accuracy=True, tolerance=_ACCURACY,
    doc="Sequence accuracy: the greedy output equals the gold target up to <eos> "
        "(Ray Chowdhury & Caragea 2023).")
registry.register_metric(
    "seq_acc_be", "locattn.metrics:seq_acc_be", label="Accuracy (before eos)", accuracy=True,
    tolerance=_ACCURACY,
    doc="Sequence accuracy on the tokens before <eos>, ignoring whether <eos> was emitted.")
registry.register_metric(
    "edit_distance", "locattn.metrics:edit_distance", label="Edit distance", direction="min",
    scale="raw",
    tolerance=registry.Tolerance(
        "per_token", 0.1, fallback=10.0,
        rule=("within 10 % of the column's target length in tokens (1.5 at length 15, 0.7 at "
              "Lookup's 7): the token-level counterpart of 10 points of accuracy")),
    doc="Mean Levenshtein distance between output and target.")
registry.register_metric(
    "attn_loss", "locattn.metrics:attn_loss", label="attnLoss", direction="min", scale="raw",
    computed_by="trainer",  # pooled over the decoder's attention: locattn.training.decode
    tolerance=registry.Tolerance(
        "relative", 0.25,
        rule=("within 25 % of the paper's value; the table's claim, an ordering (the best row of "
              "each column), is judged on its own")),
    doc="Mean squared error between attention weights and the gold alignment (Dubois et al. 2020).")
registry.register_metric(
    "raffel_accuracy", "locattn.metrics:raffel_accuracy", label="Accuracy (Raffel & Ellis)",
    key="accuracy", task_kind="regression", computed_by="trainer", accuracy=True,
    tolerance=_ACCURACY,
    doc="Fraction of regression outputs within 0.04 of the target (Raffel & Ellis 2016); "
        "recorded as test.<split>.accuracy.")
registry.register_metric(
    "epochs_to_100", "locattn.metrics:epochs_to_100", label="Epochs to 100 %", direction="min",
    scale="raw", task_kind="regression", record="run", computed_by="trainer",
    tolerance=registry.Tolerance(
        "factor", 1.5,
        rule=("within a factor of 1.5 of the paper's epoch count (an integer count from 1 up: a "
              "tolerance in epochs is all of a small count and none of a large one); a cell where "
              "one side never reached 100 % and the other did is a disagreement; shown accuracies "
              "within 10 points")),
    doc="The first epoch with 100 % accuracy (Raffel & Ellis 2016).")
registry.register_metric(
    "accuracy_by_length", "locattn.metrics:accuracy_by_length", label="Accuracy by length",
    accuracy=True, record="artifact", computed_by="trainer", tolerance=_ACCURACY,
    doc="Sequence accuracy per output length (result.json's by_length).")

__all__ = ["AttnLossDecode", "AttnLossSteps"]
