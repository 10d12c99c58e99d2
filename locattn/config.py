"""Run configuration: defaults -> variant preset -> spec -> dotted overrides -> resolved config.

Imports no torch: the tasks, attenders and variants it checks names against are registered data
(:mod:`locattn.registry`), so a spec check or ``study --help`` stays light.

Config flows one way. A resolved :class:`RunConfig` is saved with every run and checkpoint, and
its identity (everything except operational fields) keys runs and caches.
"""

from __future__ import annotations

import hashlib
import json
import types
import typing
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, Literal, Mapping

from locattn.metric_names import AttnLossDecode, AttnLossSteps
from locattn.models.config import ModelConfig
from locattn.renamed import RENAMED_FIELDS
from locattn.tasks.config import TaskConfig, data_version, task_defaults
from locattn.variants import get_variant

DevScoring = Literal["teacher_forced", "greedy"]
SelectOn = Literal["dev_acc", "dev_loss"]
RegressionProtocol = Literal["paper", "dev"]
TrainStep = Literal["eager", "graphed"]
Precision = Literal["fp32", "tf32", "bf16"]
TrainPath = Literal["eager", "compiled", "fused"]
#: The train paths each model kind takes (``RunConfig.train_path``).
#: The training step a run takes unless its config chooses another (``train_path``; ``--train-path``).
DEFAULT_TRAIN_PATH: TrainPath = "eager"
TRAIN_PATHS = {"seq2seq": (DEFAULT_TRAIN_PATH, "compiled"), "regressor": (DEFAULT_TRAIN_PATH, "fused")}


def train_path_entry(train_path: str) -> dict[str, str]:
    """A saved document's ``train_path`` entry: ``{"train_path": train_path}``, or ``{}`` for
    :data:`DEFAULT_TRAIN_PATH`. A study's ``study.json`` and a trial's descriptor (its Tune
    config, its run folders' trial files) name the train path only when it is not the default,
    so a document saved before the key existed is written back the same; :func:`saved_train_path`
    reads it back."""
    return {} if train_path == DEFAULT_TRAIN_PATH else {"train_path": train_path}


def saved_train_path(doc: Mapping[str, Any]) -> str:
    """The train path a saved document names (:func:`train_path_entry`): its ``train_path``,
    or :data:`DEFAULT_TRAIN_PATH` when absent or empty."""
    return str(doc.get("train_path") or DEFAULT_TRAIN_PATH)

PACKABLE_FIELDS = (
    "seed", "optim.lr", "optim.weight_decay", "optim.clip", "optim.epochs", "optim.patience",
    "optim.plateau_patience", "optim.plateau_factor", "optim.tie_tolerance",
    "optim.schedule_from_epoch", "optim.select_on", "optim.dev_scoring",
)
"""Config fields in which the runs of one pack may differ: each replica keeps its own optimizer,
scheduler, clipping, early stopping and dev scoring; only the training pass is shared
(``locattn.packed``; here, without torch, for a spec check)."""

#: Fields that never change what a run computes; excluded from its identity.
OPERATIONAL_FIELDS = frozenset({
    "device", "num_threads", "train_path", "gpu_share", "cache_dir", "task.data_dir",
    # what a finished run saves for the exhibits, not what it computes
    "outputs.trace_split", "outputs.trace_index", "outputs.n_wrong", "outputs.n_right",
})


@dataclass(frozen=True, kw_only=True)
class OptimConfig:
    """Optimisation protocol. Defaults are the protocol of Ray Chowdhury & Caragea's reference
    code."""

    lr: float = 1e-3
    """AdamW learning rate (no weight decay)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    batch_size: int = 32
    """Training batch size."""
    dev_batch_size: int = 256
    """Batch size for dev and test scoring."""
    clip: float = 5.0
    """Gradient-norm clip."""
    epochs: int = 100
    """Maximum number of epochs."""
    patience: int = 50
    """Early-stopping patience in epochs without a better dev score."""
    plateau_patience: int = 4
    """ReduceLROnPlateau patience (epochs)."""
    plateau_factor: float = 0.5
    """ReduceLROnPlateau factor."""
    tie_tolerance: float = 1e-5
    """A dev score (a fraction) within this of the best counts as a tie and replaces the best. The
    reference compares percentages with |diff| < 0.001, i.e. 1e-5 as a fraction: on a dev set of
    up to 100,000 examples only an exactly equal score is a tie."""
    schedule_from_epoch: int = 2
    """First epoch (from 1) whose dev score steps the LR scheduler and counts towards early-stopping
    patience. The reference skips both after its first epoch (2); 1 counts every epoch."""
    dev_scoring: DevScoring = "teacher_forced"
    """How dev accuracy is computed: teacher-forced (as the reference does) or greedy."""
    select_on: SelectOn = "dev_acc"
    """The dev signal that picks the tested checkpoint, steps the plateau scheduler and counts
    early-stopping patience: ``dev_acc`` (higher is better; Ray Chowdhury & Caragea's code) or
    ``dev_loss``, the dev NLL (lower is better; Dubois et al.'s code). With ``dev_loss`` the
    recorded ``best_selection_score`` is minus the best dev loss, so higher stays better."""
    updates_per_epoch: int = 0
    """Regression tasks (Raffel & Ellis): updates per epoch (their 'epoch' is 1,000 updates).
    0 means one pass over the training split."""
    stop_at_100: bool = True
    """Regression tasks: stop at the first epoch with 100 % accuracy on the held-out split that
    ``eval.regression_protocol`` names (Raffel & Ellis report epochs to 100 %). When False, train
    the full budget and still record ``epochs_to_100``."""
    teacher_forcing_ratio: float = 1.0
    """Seq2seq training: the probability that a training batch is teacher-forced; the other
    batches run the decoder free, fed its own argmax (the loss still scores the gold targets).
    One draw per run and batch from a generator seeded by (seed, epoch), so packing and resuming
    keep the draws. 1.0: always teacher-forced (Ray Chowdhury & Caragea's code); Dubois et al.'s
    code uses 0.2, drawn once per batch (the ``paper_tf02`` profile of ``dubois_table3``)."""
    train_step: TrainStep = "eager"
    """Seq2seq training pass: ``eager`` (batches trimmed to their own lengths, every run of a pack
    exactly its solo run) or ``graphed`` (:mod:`locattn.training.graphed`: batches padded to
    the split's longest lengths, one fused optimizer over the pack, no host sync per step; one CUDA
    graph on a GPU, the same code uncaptured on CPU). Results differ from ``eager`` beyond
    rounding (padding, and dropout masks drawn at the padded shape), so ``graphed`` is part of
    the run identity."""
    precision: Precision = "fp32"
    """Matmul precision of the ``graphed`` step: ``fp32`` (default), ``tf32`` (TF32 matmuls on
    a GPU) or ``bf16`` (bfloat16 autocast of the forward pass)."""

    def __post_init__(self) -> None:
        _check_positive(self, "lr", "batch_size", "dev_batch_size", "clip", "epochs",
                        "schedule_from_epoch")
        if not self.tie_tolerance >= 0:
            raise ValueError(f"OptimConfig.tie_tolerance must be >= 0, got {self.tie_tolerance!r}")
        if self.dev_scoring not in typing.get_args(DevScoring):
            raise ValueError(
                f"optim.dev_scoring={self.dev_scoring!r}; valid: {list(typing.get_args(DevScoring))}"
            )
        for name, choices in (("select_on", SelectOn), ("train_step", TrainStep),
                              ("precision", Precision)):
            if getattr(self, name) not in typing.get_args(choices):
                raise ValueError(f"optim.{name}={getattr(self, name)!r}; "
                                 f"valid: {list(typing.get_args(choices))}")
        if not 0.0 <= self.teacher_forcing_ratio <= 1.0:
            raise ValueError(f"optim.teacher_forcing_ratio={self.teacher_forcing_ratio!r}; valid: "
                             "a probability in [0, 1]")
        if self.teacher_forcing_ratio < 1.0 and self.train_step != "eager":
            raise ValueError(f"optim.teacher_forcing_ratio={self.teacher_forcing_ratio!r} needs "
                             "optim.train_step='eager' (the graphed step is always teacher-forced)")
        if self.precision != "fp32" and self.train_step != "graphed":
            raise ValueError(f"optim.precision={self.precision!r} needs optim.train_step='graphed' "
                             "(the eager step trains in fp32)")


@dataclass(frozen=True, kw_only=True)
class EvalConfig:
    """How a run's held-out splits are scored and which of them drives it: settings that
    evaluation reads, not the optimizer."""

    attn_loss_steps: AttnLossSteps = "with_eos"
    """Gold steps that test attnLoss pools: ``with_eos`` includes the ``<eos>`` step (Dubois et
    al.'s metric code); ``before_eos`` leaves it out (their paper's wording)."""
    attn_loss_decode: AttnLossDecode = "emitted"
    """Which decode test attnLoss reads: ``emitted`` scores the steps the greedy test decode
    emitted (it stops at its own ``<eos>``); ``gold_length`` decodes again, free-running for
    exactly the gold length, and scores every gold step (Dubois et al.'s evaluation; the Dubois
    specs set it). A model that stops early scores far lower under ``emitted``."""
    regression_protocol: RegressionProtocol = "paper"
    """Regression tasks (Raffel & Ellis) only: which held-out split drives the run. ``paper`` (their
    sec. 2.1): the 1,000-sequence test set is scored after every epoch, the run stops at 100 %
    test accuracy (``epochs_to_100`` counts test epochs) or at the epoch budget, and the last
    epoch's test accuracy is reported; there is no dev set, and a table picks the best learning
    rate by that test result. ``dev``: a separate dev set drives stopping, ``epochs_to_100`` and
    the checkpoint (best dev), the test set is scored once at the end, and tables pick the
    learning rate by dev. More honest, but its numbers answer another question than the paper's."""

    def __post_init__(self) -> None:
        for name, choices in (("attn_loss_steps", AttnLossSteps), ("attn_loss_decode", AttnLossDecode),
                              ("regression_protocol", RegressionProtocol)):
            if getattr(self, name) not in typing.get_args(choices):
                raise ValueError(f"eval.{name}={getattr(self, name)!r}; "
                                 f"valid: {list(typing.get_args(choices))}")


@dataclass(frozen=True, kw_only=True)
class OutputsConfig:
    """What a finished seq2seq run saves for the qualitative exhibits (operational: these fields
    change no trained weight or metric, so they are not part of the run identity)."""

    trace_split: str = ""
    """Test split of the example whose attention trace goes to ``attention.json``/``.png``;
    empty: the split with the longest sources (e.g. ``len100``)."""
    trace_index: int = 0
    """Index of that example in its split."""
    n_wrong: int = 5
    """Wrong greedy predictions saved per test split in ``examples.json`` (the first ones)."""
    n_right: int = 2
    """Right greedy predictions saved per test split in ``examples.json`` (the first ones)."""

    def __post_init__(self) -> None:
        for name in ("trace_index", "n_wrong", "n_right"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"OutputsConfig.{name} must be an integer >= 0, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything one training run needs."""

    task: TaskConfig = field(default_factory=TaskConfig)
    """Task and split sizes."""
    variant: str = "onestep"
    """Variant preset key (``locattn.list_variants()``)."""
    model: ModelConfig = field(default_factory=lambda: _default_model())
    """Model config, resolved from the variant preset plus overrides."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimisation protocol."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Scoring of the held-out splits."""
    seed: int = 0
    """Run seed: initialisation, data order, dropout."""
    device: str = "cpu"
    """Torch device (operational)."""
    num_threads: int = 1
    """torch intra-op threads (operational)."""
    train_path: TrainPath = DEFAULT_TRAIN_PATH
    """How the seq2seq training step runs (operational, like ``device``): ``eager`` op by op, or
    ``compiled``: torch.compile (inductor) of each batch's forward and backward, one graph per
    batch shape, kept in inductor's on-disk cache; with ``optim.train_step="graphed"`` also the
    stacked AdamW update, all inside the captured CUDA graph on a GPU
    (:mod:`locattn.training.graphed`). The same function: logits and one step's
    losses agree with eager within 1e-5; over epochs the rounding differences grow as they do
    between devices. Recorded in config.json.
    Regressors (Raffel & Ellis) take ``eager`` or ``fused``: :class:`locattn.models.regressor.PoolKernel`,
    the attention pooling in cache-sized chunks, one pass each way (2-3x faster on a CPU; gradients
    within 1e-6 of float64 where eager's are within 3e-4)."""
    gpu_share: float = 1.0
    """The fraction of its CUDA device the run was given (operational, like ``device``): a
    study trial with ``resources: {gpus: 0.25}`` gets 0.25. A packed run on CUDA sizes its pack
    to this share of the device's memory (:func:`locattn.training.packed.pack_size`), not to
    the whole device's free memory. In (0, 1]."""
    cache_dir: str | None = None
    """Dataset cache directory (operational); None uses ``~/.cache/locattn``."""
    outputs: OutputsConfig = field(default_factory=OutputsConfig)
    """What the run saves for the exhibits: examples and the traced example (operational)."""

    def __post_init__(self) -> None:
        paths = TRAIN_PATHS[self.model.kind]
        if self.train_path not in paths:
            raise ValueError(f"RunConfig.train_path={self.train_path!r} does not apply to a "
                             f"{self.model.kind} model (variant {self.variant!r}): valid are "
                             f"{', '.join(paths)}")
        if self.model.attention.family == "dubois_code" and (
            self.train_path != "eager" or self.optim.train_step != "eager"
        ):
            raise ValueError(
                f"variant {self.variant!r} (attention.family='dubois_code') trains only with "
                f"--train-path eager and optim.train_step='eager' (got train_path={self.train_path!r}, "
                f"train_step={self.optim.train_step!r}): its schedule counts training batches in Python"
            )
        if isinstance(self.gpu_share, bool) or not 0.0 < self.gpu_share <= 1.0:
            raise ValueError(f"RunConfig.gpu_share must be in (0, 1], got {self.gpu_share!r}")


def _default_model() -> ModelConfig:
    return get_variant(RunConfig.__dataclass_fields__["variant"].default)


def _check_positive(obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not value > 0:
            raise ValueError(f"{type(obj).__name__}.{name} must be > 0, got {value!r}")


# --------------------------------------------------------------------------- dict round trip


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """Nested JSON-safe dict of a dataclass config (tuples become lists)."""
    out: dict[str, Any] = {}
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if is_dataclass(value):
            value = config_to_dict(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


def _coerce(tp: Any, value: Any, where: str) -> Any:
    """Coerce a JSON/YAML/CLI value to the annotated type, or raise naming ``where``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}: expected a mapping, got {value!r}")
        return dataclass_from_dict(tp, value, prefix=where + ".")
    if origin is Literal:
        if value not in args:
            raise ValueError(f"{where}={value!r}; valid: {list(args)}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, where)
            except (ValueError, TypeError) as exc:
                errors.append(str(exc))
        raise ValueError(f"{where}={value!r} does not fit {tp}: {'; '.join(errors)}")
    if origin is tuple:
        forms = "write a list as 30,100 or [30, 100]"
        if isinstance(value, str):
            value = [v for v in value.strip().strip("[]()").split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{where}: expected a list, got {value!r} ({forms})")
        try:
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(_coerce(args[0], v, where) for v in value)
            if len(args) != len(value):
                raise ValueError(f"{where}: expected {len(args)} items, got {value!r}")
            return tuple(_coerce(a, v, where) for a, v in zip(args, value))
        except ValueError as exc:
            raise ValueError(f"{exc} ({forms})") from None
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ValueError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ValueError(f"{where}: expected an integer, got {value!r}")
        if isinstance(value, float) and value.is_integer():
            return int(value)
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: expected an integer, got {value!r}") from None
    if tp is float:
        if isinstance(value, bool):
            raise ValueError(f"{where}: expected a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: expected a number, got {value!r}") from None
    if tp is str:
        if not isinstance(value, str):
            raise ValueError(f"{where}: expected a string, got {value!r}")
        return value
    return value


_ABSENT = object()


def _take(data: dict[str, Any], path: str) -> Any:
    """Remove ``path`` from ``data`` (nested mappings, dotted keys or a mix) and return its value,
    or ``_ABSENT``. Nested mappings on the way are copied, never changed in place."""
    if path in data:
        return data.pop(path)
    head, _, rest = path.partition(".")
    if not rest or not isinstance(data.get(head), Mapping):
        return _ABSENT
    sub = dict(data[head])
    value = _take(sub, rest)
    if value is not _ABSENT:
        data[head] = sub
    return value


def _holds(data: Mapping[str, Any], path: str) -> bool:
    head, _, rest = path.partition(".")
    return path in data or (bool(rest) and isinstance(data.get(head), Mapping)
                            and _holds(data[head], rest))


def _put(data: dict[str, Any], path: str, value: Any) -> None:
    head, _, rest = path.partition(".")
    if not rest:
        data[head] = value
        return
    sub = dict(data[head]) if isinstance(data.get(head), Mapping) else {}
    _put(sub, rest, value)
    data[head] = sub


def _current_paths(data: Mapping[str, Any]) -> dict[str, Any]:
    """A :class:`RunConfig` mapping (nested, dotted or both) with every field of
    :data:`RENAMED_FIELDS` under its current path. Naming one field by both paths is an error."""
    out = dict(data)
    for old, new in RENAMED_FIELDS.items():
        value = _take(out, old)
        if value is _ABSENT:
            continue
        if _holds(out, new):
            raise ValueError(f"config keys {old!r} and {new!r} name one field ({old!r} is its "
                             f"former name); give only {new!r}")
        _put(out, new, value)
    return out


def dataclass_from_dict(cls: type, data: Mapping[str, Any], *, prefix: str = "") -> Any:
    """Build dataclass ``cls`` from a nested mapping. Unknown keys raise naming the valid ones;
    a :class:`RunConfig` mapping may name a field by its former path (:data:`RENAMED_FIELDS`)."""
    if cls is RunConfig:
        data = _current_paths(data)
    hints = typing.get_type_hints(cls)
    valid = {f.name for f in fields(cls)}
    unknown = set(data) - valid
    if unknown:
        raise ValueError(
            f"unknown config key {prefix + sorted(unknown)[0]!r}; valid keys under "
            f"{prefix.rstrip('.') or 'the top level'}: {sorted(valid)}"
        )
    kwargs = {k: _coerce(hints[k], v, prefix + k) for k, v in data.items()}
    return cls(**kwargs)


def run_config_from_dict(data: Mapping[str, Any]) -> RunConfig:
    """Inverse of :func:`config_to_dict` for :class:`RunConfig`."""
    return dataclass_from_dict(RunConfig, data)


# --------------------------------------------------------------------------- dotted overrides


def apply_overrides(cfg: Any, overrides: Mapping[str, Any], *, _prefix: str = "") -> Any:
    """Return ``cfg`` with dotted-path overrides applied, e.g. ``{"optim.lr": 3e-4}``.

    Values may be strings (from the command line) and are coerced to the field's type.
    An unknown path raises ``ValueError`` naming it and the valid keys at that level. On a
    :class:`RunConfig`, a field's former path (:data:`RENAMED_FIELDS`) is its current one.
    """
    if not overrides:
        return cfg
    if isinstance(cfg, RunConfig):
        overrides = _current_paths(overrides)
    hints = typing.get_type_hints(type(cfg))
    valid = {f.name: f for f in fields(cfg)}
    grouped: dict[str, dict[str, Any]] = {}
    direct: dict[str, Any] = {}
    for path, value in overrides.items():
        head, _, rest = path.partition(".")
        if head not in valid:
            raise ValueError(
                f"unknown config key {_prefix + path!r}; valid keys under "
                f"{_prefix.rstrip('.') or 'the top level'}: {sorted(valid)}"
            )
        if rest:
            if isinstance(getattr(cfg, head), Mapping):  # a plugin's options: one level deep
                options = direct.setdefault(head, dict(getattr(cfg, head)))
                options[rest] = value
                continue
            if not is_dataclass(getattr(cfg, head)):
                raise ValueError(f"config key {_prefix + head!r} has no sub-keys (got {_prefix + path!r})")
            grouped.setdefault(head, {})[rest] = value
        else:
            current = getattr(cfg, head)
            if is_dataclass(current) and isinstance(value, Mapping):
                grouped.setdefault(head, {}).update(value)
            else:
                direct[head] = _coerce(hints[head], value, _prefix + head)
    for head, sub in grouped.items():
        direct[head] = apply_overrides(getattr(cfg, head), sub, _prefix=_prefix + head + ".")
    return replace(cfg, **direct)


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``key=value`` from the command line.

    The value stays a string (coerced later to the field's type), except a bracketed list,
    the YAML/JSON form a spec uses (``[30, 100]``, ``["a", "b"]``), which becomes a list.
    ``30,100`` stays a string; list fields split it on commas.
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"override {text!r} is not of the form key=value (e.g. optim.lr=3e-4)")
    value = value.strip()
    if value.startswith("[") and value.endswith("]"):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = [v.strip().strip("'\"") for v in value[1:-1].split(",") if v.strip()]
        if isinstance(parsed, list):
            return key.strip(), parsed
    return key.strip(), value


def make_run_config(
    *,
    task: str | TaskConfig = "copy",
    variant: str = "onestep",
    seed: int = 0,
    overrides: Mapping[str, Any] | None = None,
) -> RunConfig:
    """Resolve a run config: defaults -> variant preset -> overrides.

    ``overrides`` are dotted paths into :class:`RunConfig` (``optim.lr``, ``model.attention.step``,
    ``task.train_size`` ...). The task's own registered defaults (``locattn.tasks.TASK_DEFAULTS``: SCAN's dev
    size, Raffel & Ellis' batch of 100 ...) come first; ``overrides`` win over them.
    """
    task_cfg = task if isinstance(task, TaskConfig) else TaskConfig(name=task)
    cfg = RunConfig(task=task_cfg, variant=variant, model=get_variant(variant), seed=seed)
    return apply_overrides(cfg, {**task_defaults(task_cfg.name), **(overrides or {})})


# --------------------------------------------------------------------------- identity


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 1e-3}}`` -> ``{"optim.lr": 1e-3}``."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(flatten(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out


def _location(flat: Mapping[str, Any]) -> bool:
    return flat["model.attention.family"] == "location"


def _regressor(flat: Mapping[str, Any]) -> bool:
    return flat["model.kind"] == "regressor"


#: Identity fields that committed run identities do not include, each with the value that
#: reproduces what those runs computed, and (optionally) the configs the field applies to.
#: :func:`identity_dict` leaves such a field out while it holds that legacy value or does not
#: apply, so a committed record keeps its run identities (and resumes) exactly when its runs
#: would compute the same thing; any other value is another run.
#: A new identity field must be added here (``test_identity.py`` fails otherwise).
LEGACY_VALUES: Mapping[str, tuple[Any, Any]] = types.MappingProxyType({
    "task.dev_from_long1": (0, None),
    "task.data_version": (1, None),  # derived from the task, not a field (tasks.config.DATA_VERSIONS)
    "optim.schedule_from_epoch": (1, None),
    "optim.select_on": ("dev_acc", None),
    "eval.attn_loss_steps": ("with_eos", None),
    "eval.attn_loss_decode": ("emitted", None),
    "optim.train_step": ("eager", None),
    "optim.precision": ("fp32", None),
    "optim.teacher_forcing_ratio": (1.0, lambda flat: flat["model.kind"] == "seq2seq"),
    "eval.regression_protocol": ("dev", _regressor),
    "model.regressor_init": ("torch", _regressor),
    "model.attention.location_norm": ("softmax", _location),
    "model.attention.rho_init": ("per_row", _location),
    "model.attention.mono_gate_on": ("relu", lambda flat: flat["model.attention.step"] == "mono"),
    "model.attention.controller_init": (
        "torch", lambda flat: flat["model.attention.controller"] == "gru"
    ),
})


def identity_dict(cfg: RunConfig) -> dict[str, Any]:
    """The flattened config without operational fields: what changes a run's result. Fields of
    :data:`LEGACY_VALUES` are left out while they hold their legacy value or do not apply, and
    fields of :data:`RENAMED_FIELDS` keep their former paths, so identities do not depend on
    where a field lives in the config."""
    flat = flatten(config_to_dict(cfg))
    out = {k: v for k, v in flat.items() if k not in OPERATIONAL_FIELDS}
    out["task.data_version"] = data_version(cfg.task.name)
    for key, (legacy, applies) in LEGACY_VALUES.items():
        if key in out and (out[key] == legacy or (applies is not None and not applies(flat))):
            del out[key]
    former = {new: old for old, new in RENAMED_FIELDS.items()}
    return {former.get(k, k): v for k, v in out.items()}


def run_identity(cfg: RunConfig) -> str:
    """A stable 16-hex-digit hash of :func:`identity_dict`."""
    blob = json.dumps(identity_dict(cfg), sort_keys=True, default=str).encode()
    return hashlib.sha1(blob).hexdigest()[:16]


__all__ = [
    "PACKABLE_FIELDS",
    "RENAMED_FIELDS",
    "EvalConfig",
    "OptimConfig",
    "OutputsConfig",
    "RunConfig",
    "TaskConfig",
    "ModelConfig",
    "apply_overrides",
    "config_to_dict",
    "dataclass_from_dict",
    "flatten",
    "identity_dict",
    "make_run_config",
    "parse_override",
    "run_config_from_dict",
    "run_identity",
]
