"""Report tables as data: the layout of every paper table the reports regenerate, and of a table
a study spec or a plugin declares (standard library only).

A table is a list of row sections (variant keys; labels come from the variant registry) and a
list of panels. A panel is a list of column groups (a header such as "Copy") and each group
holds columns. A column names the task(s), the test split(s) and optionally run params (Raffel's
``task.t0``) it reads; when a column lists several tasks or splits, each seed's value is the mean
over them (Dubois et al. Table 3 averages over three datasets and over the interpolation sets).

Every table registers in one registry (:func:`locattn.registry.register_table`, kind ``table``):
the built-ins below, each in one ``_builtin(TableDef(...))`` call, the qualitative exhibits
(``reports.exhibits``) by id, and a plugin's through the same function. A spec's own table
(``tables:`` in a study spec) is checked by :func:`table_from_spec` and recorded with the study
(:func:`table_to_dict`, :func:`table_from_dict`), so a report builds it from the store alone.
``study`` validates a spec's ``tables:`` and ``reports`` builds them from this one registry.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Literal, Mapping

from locattn import registry
from locattn.labels import task_label

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
    published: tuple[tuple[str, str, float, float | None, bool], ...] = ()
    """Published numbers kept with the table, (row, column key, value as printed, std or None,
    greyed): a spec's table reads them from a CSV beside the spec (:func:`table_from_spec`).
    Empty for the built-ins, whose numbers live in ``reports/paper_numbers/<id>.csv``."""
    tolerance: tuple[str, float, str, float | None] | None = None
    """The metric's agreement tolerance (kind, amount, rule, fallback:
    :class:`locattn.registry.Tolerance`) kept with the table, so that a report compares a plugin
    metric's cells without the plugin; None: the registry's (:func:`with_metric_info`)."""
    accuracy: bool | None = None
    """Whether the metric is an accuracy in percent, kept likewise; None: the registry says."""

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
#: involve the held-out t7/t8, which the paper never mentions.
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


#: Qualitative exhibits (``reports/exhibits.py``): ids a spec's ``tables:`` may name besides the
#: numeric tables; ``reports build`` writes them from the runs' artifacts.
BUILTIN_EXHIBITS: dict[str, str] = {
    "rc_table10": "Ray Chowdhury & Caragea (2023), Table 10: failure examples (input, gold, prediction)",
    "dubois_fig9": ("Dubois et al. (2020), Figure 9: the Mix attender's attention and variables "
                    "(mu, sigma, building-block weights, mix gate) on one Noisy Lookup long-4 example"),
}


def _builtin(t: TableDef) -> TableDef:
    registry.register_table(t.id, t, label=t.source, doc=t.title)
    return t


_builtin(TableDef(
    id="rc_table2",
    source="Ray Chowdhury & Caragea (2023), Table 2",
    title="Sequence accuracy (%) on the length-generalisation splits of the probing tasks",
    sections=_RC_MAIN,
    panels=(RC_PANEL_A, RC_PANEL_B),
    metric="seq_acc", direction="max",
))
_builtin(TableDef(
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
_builtin(TableDef(
    id="rc_table4",
    source="Ray Chowdhury & Caragea (2023), Table 4",
    title="Sequence accuracy (%) of the OneStepAttn ablations",
    sections=((None, ("onestep", "onestep_no_step2", "onestep_no_step3", "onestep_no_sigmoid")),),
    panels=(RC_PANEL_A, RC_PANEL_B),
    metric="seq_acc", direction="max",
))
_builtin(TableDef(
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
_builtin(TableDef(
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
_builtin(TableDef(
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
_builtin(TableDef(
    id="rc_table9",
    source="Ray Chowdhury & Caragea (2023), Table 9",
    title="Mean token edit distance (lower is better) on the probing tasks",
    sections=_RC_MAIN,
    panels=(RC_PANEL_A, RC_PANEL_B),
    metric="edit_distance", direction="min", scale=1.0,
))
_builtin(TableDef(
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
_builtin(TableDef(
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


_builtin(TableDef(
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
_builtin(TableDef(
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


for _id, _doc in BUILTIN_EXHIBITS.items():
    registry.register_table(_id, None, label=_doc.split(":")[0], doc=_doc, exhibit=True)


# --------------------------------------------------------------------------------------------
# The registry's tables, and a table as JSON (recorded with a study) or as a spec declares it


def tables() -> dict[str, TableDef]:
    """{id: table} of every registered numeric table, built-ins first."""
    return {name: e.load() for name, e in registry.entries("table").items() if not e.meta["exhibit"]}


def exhibits() -> dict[str, str]:
    """{id: description} of every registered exhibit."""
    return {name: e.doc for name, e in registry.entries("table").items() if e.meta["exhibit"]}


class TableView(Mapping[str, Any]):
    """A live, read-only view of the registered tables (``exhibit`` False: {id: TableDef}) or
    exhibits (True: {id: description}), in registration order: a plugin's appear once it
    registers."""

    def __init__(self, exhibit: bool) -> None:
        self._exhibit = exhibit

    def _items(self) -> dict[str, Any]:
        return exhibits() if self._exhibit else tables()

    def __getitem__(self, name: str) -> Any:
        return self._items()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())

    def __contains__(self, name: object) -> bool:
        try:
            entry = registry.entries("table").get(name)  # type: ignore[arg-type]
        except TypeError:
            return False
        return entry is not None and bool(entry.meta["exhibit"]) == self._exhibit


def with_metric_info(t: TableDef) -> TableDef:
    """``t`` with its metric's tolerance and accuracy flag from the registry written into it
    (what a study records for a table that is not a built-in); ``t`` when the metric is not
    registered."""
    try:
        m = registry.metric(t.metric)
    except registry.UnknownNameError:
        return t
    tol = m.meta["tolerance"]
    return dataclasses.replace(t, tolerance=(tol.kind, float(tol.amount), tol.rule, tol.fallback),
                               accuracy=bool(m.meta["accuracy"]))


def table_to_dict(t: TableDef) -> dict[str, Any]:
    """The JSON form of a table (what a study records for a table that is not a built-in):
    plain dicts, lists and numbers, as it reads back from JSON."""
    return json.loads(json.dumps(asdict(t)))


def table_from_dict(d: Mapping[str, Any]) -> TableDef:
    """A table from its JSON form (:func:`table_to_dict`); ValueError naming a bad field."""
    try:
        panels = tuple(
            Panel(header=p.get("header", ""), groups=tuple(
                ColumnGroup(label=g["label"], columns=tuple(
                    Column(label=c["label"], tasks=tuple(c["tasks"]), splits=tuple(c["splits"]),
                           params=tuple((str(k), str(v)) for k, v in c.get("params", ())),
                           key=c.get("key", ""))
                    for c in g["columns"]))
                for g in p["groups"]))
            for p in d["panels"])
        scalars = {k: d[k] for k in ("stat", "scale", "decimals", "kind", "note", "protocol_param",
                                     "epoch_param", "epoch_updates") if k in d}
        return TableDef(
            id=d["id"], source=d["source"], title=d["title"], metric=d["metric"],
            direction=d["direction"], panels=panels,
            sections=tuple((s[0], tuple(s[1])) for s in d["sections"]),
            protocol_titles=tuple((str(a), str(b)) for a, b in d.get("protocol_titles", ())),
            published=tuple((str(r), str(c), float(v), None if s is None else float(s), bool(g))
                             for r, c, v, s, g in d.get("published", ())),
            tolerance=None if d.get("tolerance") is None else (
                str(d["tolerance"][0]), float(d["tolerance"][1]), str(d["tolerance"][2]),
                None if d["tolerance"][3] is None else float(d["tolerance"][3])),
            accuracy=d.get("accuracy"),
            **scalars)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"table {d.get('id', '?') if isinstance(d, Mapping) else '?'}: bad "
                         f"definition ({type(exc).__name__}: {exc})") from None


class TableSpecError(ValueError):
    """A spec's table that does not check: ``key`` (the field under the table), ``message`` and
    the ``valid`` choices, for the spec's one-line error."""

    def __init__(self, key: str, message: str, valid: list[str] | None = None) -> None:
        super().__init__(f"{key}: {message}")
        self.key, self.message, self.valid = key, message, valid


#: The keys a spec's own table takes (``tables:`` items that are mappings).
SPEC_TABLE_KEYS = ("id", "title", "metric", "rows", "tasks", "splits", "stat", "decimals",
                   "published", "note", "source")


def _names(key: str, value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise TableSpecError(key, f"expected a non-empty list of names, got {value!r}")
    if len(set(value)) != len(value):
        raise TableSpecError(key, f"duplicate names in {value!r}")
    return value


def table_from_spec(raw: Mapping[str, Any], *, spec_dir: Path, variants: list[str],
                    tasks: list[str], spec_name: str = "") -> TableDef:
    """A table a study spec declares under ``tables:``, checked (:class:`TableSpecError`).

    ``id``: a new table id. ``metric``: a registered metric recorded per test split (by name
    or key; its direction and scale come from the registry). ``splits``: the test splits, a
    list or {split: column label}. ``rows``: variant keys (default ``variants``, the grid's);
    rows by another axis are not supported. ``tasks``: the column groups, one per task (default
    ``tasks``, the grid's). ``published``: a CSV beside the spec (``spec_dir``) with the header
    ``row,column,value[,std,greyed]``, ``column`` a column key ``<task>:<split>``. ``stat``,
    ``decimals``, ``title``, ``note``, ``source`` (the published numbers' origin, ``Smith et al.
(2024), Table 2``; default: the spec file ``spec_name``): as the built-in tables
(:class:`TableDef`)."""
    if not isinstance(raw, Mapping):
        raise TableSpecError("", f"expected a table id or a mapping, got {raw!r}")
    bad = sorted(set(raw) - set(SPEC_TABLE_KEYS))
    if bad:
        raise TableSpecError(bad[0], "unknown key", list(SPEC_TABLE_KEYS))
    table_id = raw.get("id")
    if not isinstance(table_id, str) or not table_id.replace("_", "a").isalnum() \
            or not table_id[:1].isalpha() or table_id != table_id.lower():
        raise TableSpecError("id", f"expected a lower-case name (letters, digits, _), got {table_id!r}")
    if registry.has("table", table_id):
        raise TableSpecError("id", f"{table_id!r} is already a registered table; pick another id")
    metrics = {str(e.meta["key"]): e for e in registry.entries("metric").values()
               if e.meta["record"] == "split"}
    try:
        m = registry.metric(str(raw.get("metric")))
    except registry.UnknownNameError:
        raise TableSpecError("metric", f"unknown metric {raw.get('metric')!r}", sorted(metrics)) from None
    if m.meta["record"] != "split":
        raise TableSpecError("metric", f"{m.name!r} is not recorded per test split", sorted(metrics))
    key = str(m.meta["key"])
    percent = m.meta["scale"] == "percent"
    splits_raw = raw.get("splits")
    if isinstance(splits_raw, Mapping):
        splits = {str(s): str(lab) for s, lab in splits_raw.items()}
        _names("splits", list(splits))
    else:
        splits = {s: s for s in _names("splits", splits_raw)}
    if isinstance(raw.get("rows"), str) and raw["rows"] not in ("variant", "variants"):
        raise TableSpecError("rows", f"rows by the axis {raw['rows']!r} are not supported; rows are "
                             "variants (a list of variant keys, or 'variant': the grid's)")
    rows = variants if raw.get("rows") in (None, "variant", "variants") else _names("rows", raw["rows"])
    for row in rows:
        if not registry.has("variant", row):
            raise TableSpecError("rows", f"unknown variant {row!r}", sorted(registry.entries("variant")))
    columns_tasks = _names("tasks", raw["tasks"]) if "tasks" in raw else list(tasks)
    for task in columns_tasks:
        if not registry.has("task", task):
            raise TableSpecError("tasks", f"unknown task {task!r}", sorted(registry.entries("task")))
    stat = raw.get("stat", "median")
    if stat not in STATS:
        raise TableSpecError("stat", f"unknown stat {stat!r}", list(STATS))
    decimals = raw.get("decimals", 1 if percent else 2)
    if not isinstance(decimals, int) or isinstance(decimals, bool) or not 0 <= decimals <= 6:
        raise TableSpecError("decimals", f"expected an int in [0, 6], got {decimals!r}")
    for k in ("title", "note", "source"):
        if k in raw and not isinstance(raw[k], str):
            raise TableSpecError(k, f"expected a string, got {raw[k]!r}")
    panel = Panel(header="", groups=tuple(
        ColumnGroup(label=task_label(task), columns=tuple(
            Column(label=label, tasks=(task,), splits=(split,)) for split, label in splits.items()))
        for task in columns_tasks))
    unit = " (%)" if percent else ""
    table = TableDef(
        id=table_id, source=raw.get("source") or f"the study spec {spec_name or table_id}",
        title=raw.get("title") or f"{m.label}{unit} on the study's test splits",
        sections=((None, tuple(rows)),), panels=(panel,), metric=key,
        direction=m.meta["direction"], stat=stat, scale=100.0 if percent else 1.0,
        decimals=decimals, note=raw.get("note", ""))
    if "published" in raw:
        table = _with_published(table, raw["published"], spec_dir)
    return with_metric_info(table)


def _with_published(table: TableDef, name: Any, spec_dir: Path) -> TableDef:
    """``table`` with the published numbers of the CSV ``name`` (beside the spec)."""
    if not isinstance(name, str) or not name:
        raise TableSpecError("published", f"expected a CSV file name beside the spec, got {name!r}")
    path = (spec_dir / name) if not Path(name).is_absolute() else Path(name)
    if not path.is_file():
        raise TableSpecError("published", f"no file {str(path)!r}")
    rows, cols = set(table.rows), {c.key for c in table.columns}
    out: list[tuple[str, str, float, float | None, bool]] = []
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if not {"row", "column", "value"} <= set(reader.fieldnames or ()):
            raise TableSpecError("published", f"{path}: the header must hold row,column,value "
                                 f"(and optionally std,greyed), got {reader.fieldnames!r}")
        for i, rec in enumerate(reader, start=2):
            if rec["row"] not in rows:
                raise TableSpecError("published", f"{path}:{i}: row {rec['row']!r} is not a row",
                                     sorted(rows))
            if rec["column"] not in cols:
                raise TableSpecError("published", f"{path}:{i}: column {rec['column']!r} is not a "
                                     "column key", sorted(cols))
            try:
                value = float(rec["value"])
                std = float(rec["std"]) if rec.get("std") else None
            except ValueError:
                raise TableSpecError("published", f"{path}:{i}: value {rec['value']!r} or std "
                                     f"{rec.get('std')!r} is not a number") from None
            if not math.isfinite(value):
                raise TableSpecError("published", f"{path}:{i}: value {rec['value']!r} is not finite")
            out.append((rec["row"], rec["column"], value, std, (rec.get("greyed") or "").strip() == "1"))
    return dataclasses.replace(table, published=tuple(out))


__all__ = [
    "BUILTIN_EXHIBITS",
    "Column",
    "ColumnGroup",
    "DUBOIS_INTERP_SPLITS",
    "Direction",
    "LEGACY_PROTOCOL",
    "MetricKind",
    "Panel",
    "RC_PANEL_A",
    "RC_PANEL_B",
    "SPEC_TABLE_KEYS",
    "STATS",
    "Stat",
    "TEST_SELECTED_PROTOCOL",
    "TableDef",
    "TableSpecError",
    "TableView",
    "exhibits",
    "table_from_dict",
    "table_from_spec",
    "table_to_dict",
    "tables",
    "with_metric_info",
]
