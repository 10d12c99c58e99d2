"""Table definitions: the layout of every paper table we regenerate, as data.

A table is a list of row sections (variant keys; labels come from ``locattn.variants.PAPER_LABELS``)
and a list of panels. A panel is a list of column groups (a header such as "Copy") and each group
holds columns. A column names the task(s), the test split(s) and optionally run params (Raffel's
``task.t0``) it reads; when a column lists several tasks or splits, each seed's value is the mean
over them (Dubois et al. Table 3 averages over three datasets and over the interpolation sets).
"""

from __future__ import annotations

import difflib

from dataclasses import dataclass, field
from typing import Iterable, Literal

from record import schema

Stat = Literal["median", "mean_std", "mean", "iqr", "n"]
Direction = Literal["max", "min"]
MetricKind = Literal["split", "epochs_or_accuracy"]

STATS: tuple[str, ...] = ("median", "mean_std", "mean", "iqr", "n")


@dataclass(frozen=True, kw_only=True)
class Column:
    """One column of a table."""

    label: str
    """Header text of the column, e.g. ``15`` or ``Long 1``."""
    tasks: tuple[str, ...]
    """Task keys the column reads (several: the per-seed value is their mean)."""
    splits: tuple[str, ...]
    """Test split names the column reads (several: the per-seed value is their mean)."""
    params: tuple[tuple[str, str], ...] = ()
    """Run params a run must have to belong to the column, e.g. ``(("task.t0", "50"),)``."""
    key: str = ""
    """Stable identifier used by paper-number files; derived from tasks/splits/params when empty."""

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError(f"Column {self.label!r}: tasks must not be empty")
        if not self.splits:
            raise ValueError(f"Column {self.label!r}: splits must not be empty")
        if not self.key:
            key = "+".join(self.tasks) + ":" + "+".join(self.splits)
            for name, value in self.params:
                key += f":{name}={value}"
            object.__setattr__(self, "key", key)


@dataclass(frozen=True, kw_only=True)
class ColumnGroup:
    """Columns under one spanning header."""

    label: str
    """Spanning header, e.g. ``Reverse Copy``."""
    columns: tuple[Column, ...]
    """The columns of the group, left to right."""


@dataclass(frozen=True, kw_only=True)
class Panel:
    """A block of column groups rendered as one header + body (papers stack two panels)."""

    groups: tuple[ColumnGroup, ...]
    """Column groups, left to right."""
    header: str = "(Length Splits)"
    """Text of the second header line's first cell."""

    @property
    def columns(self) -> tuple[Column, ...]:
        return tuple(c for g in self.groups for c in g.columns)


@dataclass(frozen=True, kw_only=True)
class TableDef:
    """A paper table."""

    id: str
    """Table id, e.g. ``rc_table2``."""
    source: str
    """Which paper table this reproduces, e.g. ``Ray Chowdhury & Caragea (2023), Table 2``."""
    title: str
    """One-line description used as the caption's first sentence."""
    sections: tuple[tuple[str | None, tuple[str, ...]], ...]
    """Row sections: (section label or None, variant keys)."""
    panels: tuple[Panel, ...]
    """Column panels, top to bottom."""
    metric: str
    """Split metric name (``seq_acc``, ``edit_distance``, ``attn_loss``) or ``epochs_to_100``."""
    direction: Direction
    """Whether higher (``max``) or lower (``min``) is better."""
    stat: Stat = "median"
    """Default statistic over seeds."""
    scale: float = 100.0
    """Multiplier applied before display (accuracies are fractions in the store)."""
    decimals: int = 1
    """Digits after the decimal point."""
    kind: MetricKind = "split"
    """``split``: metric ``test.<split>.<metric>``; ``epochs_or_accuracy``: Raffel & Ellis Table 1."""
    note: str = ""
    """Extra caption text (choices we made where the paper is silent)."""
    protocol_param: str = ""
    """Run param recording the protocol that decides how a cell's hyperparameters are chosen
    (Raffel & Ellis: ``eval.regression_protocol``); empty: by dev, for every run. Runs without the
    param count as :data:`LEGACY_PROTOCOL`."""
    protocol_titles: tuple[tuple[str, str], ...] = ()
    """(protocol value, title) for a table with a ``protocol_param``: the caption names the
    protocol its runs followed."""
    epoch_param: str = ""
    """``epochs_or_accuracy`` tables: the run param giving the updates in one of the run's epochs
    (Raffel & Ellis: ``optim.updates_per_epoch``; 0 or absent means ``epoch_updates``). Epoch
    counts are then shown in the paper's epochs of ``epoch_updates`` updates, as the paper counts
    them (a run that reached 100 % within k of them shows k), so that runs with shorter epochs
    compare with the paper's numbers."""
    epoch_updates: int = 0
    """Updates in one of the paper's epochs (Raffel & Ellis: 1,000); used with ``epoch_param``."""

    def __post_init__(self) -> None:
        if self.direction not in ("max", "min"):
            raise ValueError(f"TableDef {self.id}: direction={self.direction!r}; valid: max, min")
        if self.stat not in STATS:
            raise ValueError(f"TableDef {self.id}: stat={self.stat!r}; valid: {', '.join(STATS)}")
        keys = [c.key for c in self.columns]
        if len(set(keys)) != len(keys):
            raise ValueError(f"TableDef {self.id}: duplicate column keys")
        if bool(self.protocol_param) != bool(self.protocol_titles):
            raise ValueError(f"TableDef {self.id}: protocol_param and protocol_titles go together")
        if bool(self.epoch_param) != (self.epoch_updates > 0):
            raise ValueError(f"TableDef {self.id}: epoch_param and epoch_updates > 0 go together")

    @property
    def rows(self) -> tuple[str, ...]:
        return tuple(v for _, vs in self.sections for v in vs)

    @property
    def columns(self) -> tuple[Column, ...]:
        return tuple(c for p in self.panels for c in p.columns)

    @property
    def tasks(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for c in self.columns:
            for t in c.tasks:
                seen[t] = None
        return tuple(seen)

    def metric_keys(self) -> tuple[str, ...]:
        """The MLflow metric keys this table reads (besides ``best_selection_score``)."""
        keys: dict[str, None] = {}
        for c in self.columns:
            for s in c.splits:
                if self.kind == "split":
                    keys[f"test.{s}.{self.metric}"] = None
                else:
                    keys[f"test.{s}.accuracy"] = None
        if self.kind == "epochs_or_accuracy":
            keys["epochs_to_100"] = None
        return tuple(keys)


# --------------------------------------------------------------------------------------------
# Building blocks

_LEN = (("len15", "15"), ("len30", "30"), ("len100", "100"))
_LEN_IID = (("iid", "IID"),) + _LEN
# Ray Chowdhury & Caragea's Lookup lengths 7, 9, 11 are Long 1, 3, 5 (longer_seen_*).
_LOOKUP = (("longer_seen_1", "7"), ("longer_seen_3", "9"), ("longer_seen_5", "11"))


def _group(label: str, task: str, splits: tuple[tuple[str, str], ...]) -> ColumnGroup:
    return ColumnGroup(
        label=label,
        columns=tuple(Column(label=lab, tasks=(task,), splits=(s,)) for s, lab in splits),
    )


RC_PANEL_A = Panel(
    groups=(
        _group("Copy", "copy", _LEN),
        _group("Reverse Copy", "reverse_copy", _LEN),
        _group("Lookup", "lookup", _LOOKUP),
        _group("Reverse Lookup", "reverse_lookup", _LOOKUP),
    )
)
RC_PANEL_B = Panel(
    groups=(
        _group("ReCopy", "recopy", _LEN),
        _group("Reverse ReCopy", "reverse_recopy", _LEN),
        _group("Inv ReCopy", "inv_recopy", _LEN),
        _group("Inv Reverse ReCopy", "inv_reverse_recopy", _LEN),
    )
)

_RC_MAIN = (
    (None, ("content", "relative", "locattn")),
    ("Ours", ("birelative", "onestep", "mono")),
)

#: Dubois Table 3 "Interp.": their code scores each file separately and names no interpolation
#: group, so the column uses the files that match the paper's description (about 3,000 rows of
#: 2-4 tables from t1..t6): 2,492 + 400 = 2,892 rows. heldout_tables and new_compositions
#: involve the held-out t7/t8 (docs/dubois_protocol.md).
#: The interpolation sets of Dubois et al. (Table 3's Interp. column and the figures' interp. point).
DUBOIS_INTERP_SPLITS = ("heldout_inputs", "heldout_compositions")
_DUBOIS_INTERP = DUBOIS_INTERP_SPLITS
_DUBOIS_TASKS = ("lookup", "reverse_lookup", "noisy_lookup")
_RAFFEL_T0 = ("50", "100", "500", "1000", "5000", "10000")
#: Protocol of a Raffel run whose params lack ``eval.regression_protocol`` (some committed records):
#: such runs selected on dev.
LEGACY_PROTOCOL = "dev"
#: The protocol under which a table picks a cell's hyperparameters by the test result.
TEST_SELECTED_PROTOCOL = "paper"
_RAFFEL_TITLES = (
    ("paper", "Epochs needed to reach 100 % test accuracy, or the test accuracy (%) after the "
              "epoch budget when 100 % was never reached (marked); per cell the best result over "
              "the learning rates run, as the paper (test scored after every epoch, no dev set: "
              "the learning rate is selected on test)"),
    ("dev", "Dev-selected protocol, not the paper's: epochs needed to reach 100 % dev accuracy, "
            "or the test accuracy (%) of the best-dev checkpoint after the epoch budget when "
            "100 % was never reached (marked); per cell the learning rate with the best median "
            "dev score"),
)


def _raffel_group(label: str, task: str) -> ColumnGroup:
    return ColumnGroup(
        label=label,
        columns=tuple(
            Column(label=t0, tasks=(task,), splits=("test",), params=(("task.t0", t0),),
                   key=f"{task}:t0={t0}")
            for t0 in _RAFFEL_T0
        ),
    )


TABLES: dict[str, TableDef] = {}

#: Qualitative exhibits (``reports/exhibits.py``): ids a spec's ``tables:`` may name besides the
#: numeric tables; ``reports build`` writes them from the runs' artifacts.
#: File stem (and ``--table`` id) of the per-cell summary ``reports build`` writes for a study
#: that declares no table, or when asked for beside the tables.
SUMMARY_ID = "summary"

EXHIBITS: dict[str, str] = {
    "rc_table10": "Ray Chowdhury & Caragea (2023), Table 10: failure examples (input, gold, prediction)",
    "dubois_fig9": ("Dubois et al. (2020), Figure 9: the Mix attender's attention and variables "
                    "(mu, sigma, building-block weights, mix gate) on one Noisy Lookup long-4 example"),
}


def _register(t: TableDef) -> TableDef:
    TABLES[t.id] = t
    return t


_register(TableDef(
    id="rc_table2",
    source="Ray Chowdhury & Caragea (2023), Table 2",
    title="Sequence accuracy (%) on the length-generalisation splits of the probing tasks",
    sections=_RC_MAIN,
    panels=(RC_PANEL_A, RC_PANEL_B),
    metric="seq_acc", direction="max",
))
_register(TableDef(
    id="rc_table3",
    source="Ray Chowdhury & Caragea (2023), Table 3",
    title="Sequence accuracy (%) on the SCAN and CFQ length splits",
    sections=(
        (None, ("content", "relative", "mix_locattn")),
        ("Ours", ("birelative", "mix_onestep", "mix_mono")),
    ),
    panels=(Panel(header="", groups=(
        ColumnGroup(label="", columns=(
            Column(label="SCAN (Len.)", tasks=("scan",), splits=("test",)),
            Column(label="CFQ (Len.)", tasks=("cfq",), splits=("test",)),
        )),
    )),),
    metric="seq_acc", direction="max", stat="mean_std", decimals=2,
    note="As in the paper, cells are mean ± std (5 seeds for SCAN, 3 for CFQ).",
))
_register(TableDef(
    id="rc_table4",
    source="Ray Chowdhury & Caragea (2023), Table 4",
    title="Sequence accuracy (%) of the OneStepAttn ablations",
    sections=((None, ("onestep", "onestep_no_step2", "onestep_no_step3", "onestep_no_sigmoid")),),
    panels=(RC_PANEL_A, RC_PANEL_B),
    metric="seq_acc", direction="max",
))
_register(TableDef(
    id="rc_table6",
    source="Ray Chowdhury & Caragea (2023), Table 6",
    title="Sequence accuracy (%) on DeDupe and PosRetrieve",
    sections=((None, ("content", "birelative", "locattn", "onestep", "mono")),),
    panels=(Panel(groups=(
        _group("DeDupe", "dedupe", _LEN_IID),
        _group("PosRetrieve", "posretrieve", _LEN_IID),
    )),),
    metric="seq_acc", direction="max",
))
_register(TableDef(
    id="rc_table7",
    source="Ray Chowdhury & Caragea (2023), Table 7",
    title="Sequence accuracy (%) of the alternative and ablated location attentions",
    sections=((None, (
        "birope", "mix_locattn", "locattn_s", "mix_locattn_s", "mix_locattn_s_pr",
        "mix_onestep", "mix_onestep_pr", "mix_mono", "mix_mono_pr",
        "rmono", "mix_rmono", "mix_rmono_pr",
    )),),
    panels=(RC_PANEL_A, RC_PANEL_B),
    metric="seq_acc", direction="max",
))
_register(TableDef(
    id="rc_table8",
    source="Ray Chowdhury & Caragea (2023), Table 8",
    title="Sequence accuracy (%) on the SCAN length split (ablations)",
    sections=((None, (
        "birope", "locattn", "locattn_s", "mix_locattn_s", "mix_locattn_s_pr",
        "onestep", "mix_onestep_pr", "mono", "mix_mono_pr",
        "rmono", "mix_rmono", "mix_rmono_pr",
    )),),
    panels=(Panel(header="", groups=(
        ColumnGroup(label="", columns=(
            Column(label="SCAN (Length Split)", tasks=("scan",), splits=("test",)),
        )),
    )),),
    metric="seq_acc", direction="max", stat="mean_std", decimals=2,
    note="As in the paper, cells are mean ± std over seeds.",
))
_register(TableDef(
    id="rc_table9",
    source="Ray Chowdhury & Caragea (2023), Table 9",
    title="Mean token edit distance (lower is better) on the probing tasks",
    sections=_RC_MAIN,
    panels=(RC_PANEL_A, RC_PANEL_B),
    metric="edit_distance", direction="min", scale=1.0,
))
_register(TableDef(
    id="dubois_table3",
    source="Dubois et al. (2020), Table 3",
    title="Attention loss (lower is better) averaged over Lookup, Reverse Lookup and Noisy Lookup",
    sections=((None, (
        "dubois_scaled_dot", "dubois_multiplicative", "dubois_additive",
        "dubois_transformer", "dubois_transformer_xl", "dubois_mix", "dubois_location_code",
    )),),
    panels=(Panel(header="", groups=(ColumnGroup(label="", columns=(
        Column(label="Interp.", tasks=_DUBOIS_TASKS, splits=_DUBOIS_INTERP, key="interp"),
        *(Column(label=f"Long {i}", tasks=_DUBOIS_TASKS, splits=(f"longer_seen_{i}",),
                 key=f"long{i}") for i in range(1, 6)),
    )),)),),
    metric="attn_loss", direction="min", stat="mean", scale=1.0,
    note=("Each seed's value is the mean over the three tasks; the cell is the mean over "
          "seeds, as in the paper. Interp. is the mean of the heldout_inputs and "
          "heldout_compositions sets (2,892 rows of 2-4 tables from t1..t6, the paper's "
          "\"3000 examples\"); Dubois's code names no interpolation group, and "
          "heldout_tables and new_compositions involve the held-out t7/t8. The paper does "
          "not say which extrapolation files Long i uses; we read longer_seen_i. attnLoss "
          "includes the <eos> step, as Dubois's metric code does, and scores the decode that "
          "the runs' eval.attn_loss_decode names: gold_length (Dubois's evaluation: the "
          "decoder runs for exactly the gold length and every gold step is scored) or emitted "
          "(only the steps before the model's own <eos>)."),
))
_register(TableDef(
    id="raffel_table1",
    source="Raffel & Ellis (2016), Table 1",
    title=dict(_RAFFEL_TITLES)["paper"],
    sections=((None, ("ffattn", "mean")),),
    panels=(Panel(header="T0", groups=(
        _raffel_group("Addition", "raffel_add"),
        _raffel_group("Multiplication", "raffel_mul"),
    )),),
    metric="epochs_to_100", direction="min", scale=1.0, decimals=0,
    kind="epochs_or_accuracy",
    note=("A seed that never reached 100 % counts as infinitely many epochs; when the median "
          "seed never reached it, the cell shows the median test accuracy after the budget, "
          "marked with ° (greyed in LaTeX). Any epoch count ranks above any accuracy. Epochs "
          "are the paper's, 1,000 updates of batch 100 each: a run with shorter epochs counts "
          "as reaching 100 % at the first 1,000-update mark after it did, as the paper's "
          "once-per-epoch test would have seen it."),
    protocol_param="eval.regression_protocol",
    protocol_titles=_RAFFEL_TITLES,
    epoch_param="optim.updates_per_epoch",
    epoch_updates=1000,
))


_register(TableDef(
    id="raffel_variable",
    source="Raffel & Ellis (2016), §2.3",
    title=("Test accuracy (%) on variable-length addition and multiplication (one length per "
           "batch drawn from 50-10000), after the epoch budget"),
    sections=((None, ("ffattn", "mean")),),
    panels=(Panel(header="", groups=(ColumnGroup(label="", columns=(
        Column(label="Addition", tasks=("raffel_add",), splits=("test",),
               params=(("task.variable_length", "True"),), key="raffel_add:variable"),
        Column(label="Multiplication", tasks=("raffel_mul",), splits=("test",),
               params=(("task.variable_length", "True"),), key="raffel_mul:variable"),
    )),)),),
    metric="accuracy", direction="max",
    note=("The paper reports its best run over four learning rates, with the test set scored "
          "every epoch and no dev set."),
    protocol_param="eval.regression_protocol",
    protocol_titles=(
        ("paper", "Test accuracy (%) on variable-length addition and multiplication (one length per "
                  "batch drawn from 50-10000), after the epoch budget; per cell the best result over "
                  "the learning rates run, as the paper (test scored after every epoch, no dev set: "
                  "the learning rate is selected on test)"),
        ("dev", "Dev-selected protocol, not the paper's: test accuracy (%) on variable-length "
                "addition and multiplication (one length per batch drawn from 50-10000) of the "
                "best-dev checkpoint; per cell the learning rate with the best median dev score"),
    ),
))
_register(TableDef(
    id="dubois_interp",
    source="Dubois et al. (2020), §7.1",
    title="Sequence accuracy (%) on the interpolation sets of the three Long Lookup Tables tasks",
    sections=(
        (None, ("dubois_scaled_dot", "dubois_multiplicative", "dubois_additive",
                "dubois_transformer", "dubois_transformer_xl")),
        ("Ours", ("dubois_location", "dubois_mix", "dubois_location_code")),
    ),
    panels=(Panel(header="", groups=(ColumnGroup(label="Interp.", columns=tuple(
        Column(label=label, tasks=(task,), splits=_DUBOIS_INTERP, key=f"{task}:interp")
        for task, label in zip(_DUBOIS_TASKS, ("Lookup", "Reverse", "Noisy"))
    )),)),),
    metric="seq_acc", direction="max", stat="mean",
    note=("The paper's sanity check (§7.1) gives no table: its Location and Mix attenders and the "
          "best baseline (Transformer) reach 100 %. Each seed's value is the mean over the "
          "interpolation files of Table 3's Interp. column; the cell is the mean over seeds."),
))


def check_table_ids(tables: Iterable[str], exhibits: Iterable[str]) -> None:
    """Check that the ids of the tables and exhibits defined here are :data:`record.schema.TABLE_IDS`
    (what a spec's ``tables:`` may name: ``study`` checks it there, never importing ``reports``);
    :class:`ValueError` naming the ids only one side has. Run when this module loads, so the two
    cannot drift."""
    ours, named = set(tables) | set(exhibits), set(schema.TABLE_IDS)
    if ours != named:
        raise ValueError(f"reports.tables and record.schema.TABLE_IDS differ: only in reports.tables: "
                         f"{sorted(ours - named)}; only in record.schema.TABLE_IDS: {sorted(named - ours)}")


def get_table(table_id: str) -> TableDef:
    """The table definition for ``table_id``; ValueError listing the valid ids otherwise."""
    try:
        return TABLES[table_id]
    except KeyError:
        close = difflib.get_close_matches(str(table_id), sorted(TABLES), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(
            f"unknown table id {table_id!r}{hint}; valid: {', '.join(sorted(TABLES))}"
        ) from None


check_table_ids(TABLES, EXHIBITS)
