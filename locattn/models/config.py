"""Model configuration: one frozen dataclass for the network, one for its attender.

Every choice is a ``Literal``; fields that do not apply to the chosen attention family must keep
their defaults (a non-default value is a ``ValueError`` naming the field), so a config can never
describe two mechanisms at once. In particular, whether a location attender mixes in content
attention is the single field :attr:`AttentionConfig.mode` (``"location"`` or ``"mix"``): the
reference code's pair of switches (a "location only" flag checked before a "mix" flag, which made
its Mix OneStep/Mono/RMono configs silently compute their unmixed parents) cannot be expressed.

Sizes
-----
The defaults are Ray Chowdhury & Caragea's base model (embedding 64, hidden 128, one layer,
value MLP 128, dropout 0.5). Their reference code's CFQ size (``cfq``) and the size their paper's
text implies (``cfq_paper_text``) are named size presets applied on top of any variant::

    cfg = apply_size(get_variant("mix_onestep"), "cfq")   # 2 layers, emb 128, hidden 256, ...

``SIZE_PRESETS`` lists the sizes; a size is plain field values, so the same effect is available
through dotted overrides (``model.num_layers=2`` ...). There is deliberately no ``size`` field:
it would be a second source of truth for the same numbers.
"""

from __future__ import annotations

import difflib
import typing
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, Literal, Mapping

from locattn import registry

Kind = Literal["seq2seq", "regressor"]
EncoderKind = Literal["bigru", "gru_residual"]
Boundaries = Literal["start_end", "none"]
ContentScore = Literal["scaled_dot", "additive", "multiplicative"]
Positions = Literal["relative", "relative_shared_bias", "rotary", "absolute"]
Direction = Literal["forward", "mixed"]
Mode = Literal["location", "mix"]
PaFrom = Literal["attention", "location"]
Reference = Literal["previous", "gated", "initial"]
StepActivation = Literal["sigmoid", "softstair", "raw", "mono", "relu"]
PACKABLE_STEPS = ("sigmoid", "softstair", "raw", "relu", "mono")
"""Step activations that may differ between the replicas of one pack (``mono`` brings its gate
parameter, which the packed model holds for every replica and only MonoAttn's replicas use)."""
Controller = Literal["linear", "gru"]
ControllerInit = Literal["torch", "dubois"]
RegressorInit = Literal["paper", "torch"]
MonoGateOn = Literal["relu", "sigmoid"]
LocationNorm = Literal["sum", "softmax", "l1"]
RhoInit = Literal["grouped", "per_row"]

#: The built-in attention families (each registered below, as a plugin registers its own).
SEQ2SEQ_FAMILIES = ("content", "positional", "location", "dubois_code")
REGRESSOR_FAMILIES = ("feedforward", "mean")


def packable_families() -> list[str]:
    """The registered seq2seq families whose runs may train as one pack
    (:mod:`locattn.training.packed`): every one but those registered ``packable=False``
    (``dubois_code``, whose schedule counts batches in Python)."""
    return [name for name, e in registry.entries("attender").items()
            if e.meta["packable"] and e.meta["model_kind"] == "seq2seq"]


def families(model_kind: str) -> list[str]:
    """The registered attention families of a model kind (``seq2seq`` or ``regressor``),
    built-ins and plugins."""
    return [name for name, e in registry.entries("attender").items()
            if e.meta["model_kind"] == model_kind]


def _check_literals(obj: Any, prefix: str) -> None:
    """Raise ``ValueError`` for any ``Literal``-typed field holding a value outside its choices."""
    hints = typing.get_type_hints(type(obj))
    for f in fields(obj):
        tp = hints[f.name]
        if typing.get_origin(tp) is Literal:
            value = getattr(obj, f.name)
            if value not in typing.get_args(tp):
                raise ValueError(
                    f"{prefix}{f.name}={value!r}; valid: {list(typing.get_args(tp))}"
                )


@dataclass(frozen=True, kw_only=True)
class AttentionConfig:
    """The attender. ``family`` picks the class; the other fields are that class's arguments."""

    family: str = "content"
    """Mechanism family, a registered attender (``locattn list attenders``): ``content`` (content-only scorers), ``positional`` (sinusoidal/rotary
    position terms added to a scaled-dot content score), ``location`` (Gaussian location attention:
    LocAttn, OneStep, Mono ... and Dubois's location attender as his paper describes it),
    ``dubois_code`` (that attender as Dubois's code computes it, mixed by its location confidence:
    :mod:`locattn.models.attention.dubois_code`), or for the Raffel & Ellis regressors
    ``feedforward`` / ``mean`` pooling, or a plugin's."""
    content_score: ContentScore = "scaled_dot"
    """Content scorer (family ``content``, and the content half of ``mode="mix"``):
    ``scaled_dot`` (W_q h)·(W_k e)/sqrt(d); ``multiplicative`` e·(W h) (Luong);
    ``additive`` u·tanh(W_k e + W_q h) (Bahdanau)."""
    positions: Positions = "relative"
    """Positional term (family ``positional``): ``relative`` Transformer-XL with separate biases
    u, v (Ray Chowdhury's Relative); ``relative_shared_bias`` one bias for both terms (Dubois's
    TransformerXL, their eq. 4); ``rotary`` RoPE on queries and keys; ``absolute`` sinusoids added
    to keys and query (Dubois's Transformer)."""
    direction: Direction = "forward"
    """``mixed``: attend over e_dir = g·e + (1-g)·reverse(e), g = sigmoid(beta_dir·Linear(e_cls))
    (Ray Chowdhury eqs. 17-18). Families ``positional`` and ``location`` only."""
    direction_temperature: float = 5.0
    """beta in the direction gate (Ray Chowdhury: 5)."""
    mode: Mode = "location"
    """Family ``location``: ``location`` uses lambda only; ``mix`` uses
    alpha = m·lambda + (1-m)·softmax(content), m = sigmoid(beta_mix·Linear(h_{t-1}))."""
    mix_temperature: float = 5.0
    """beta_mix in the mix gate. The paper (eq. 16, App. E.2) sets 5; the reference code has no
    temperature (1). Default: the paper's 5. Dubois's Mix preset uses 1 (their gamma = sigmoid(Wq))."""
    pa_from: PaFrom = "attention"
    """Which previous attention gives pa_{t-1} = sum_j alpha_{t-1,j} p_j: the final (mixed)
    ``attention``, or the location-only lambda (``location``, the paper's PR modifier; needs
    ``mode="mix"``)."""
    reference: Reference = "previous"
    """How mu is built from the steps (Ray Chowdhury & Caragea). ``previous``: mu =
    step·stepsize + pa (OneStep family, no clamp). ``gated``: mu = clamp(step·stepsize +
    sigmoid(rho1)·pa + sigmoid(rho2)) (LocAttn, Dubois, -Step 2). ``initial``: mu =
    clamp(step·stepsize + pa + [t=0]·sigmoid(rho1)) (LocAttn S)."""
    step: StepActivation = "sigmoid"
    """Step activation applied to rho0: ``sigmoid`` sigmoid(beta_step·rho) (OneStep);
    ``softstair`` (LocAttn, -Step 3); ``raw`` rho itself (-Sigmoid); ``mono``
    s·relu(rho) + (1-s)·sigmoid(beta_step·rho), s = sigmoid(p) (MonoAttn); ``relu`` (RMonoAttn)."""
    step_temperature: float = 5.0
    """beta_step inside sigmoid(beta_step·rho) for steps ``sigmoid`` and ``mono`` (reference: 5)."""
    mono_gate_init: float = 0.0
    """Initial value of the scalar p in MonoAttn's gate s = sigmoid(p). The reference code
    initialises p = 20 (with ``mono_gate_on="relu"``), which is sigmoid(20) == 1.0 exactly in
    float32 with zero gradient: that MonoAttn computes RMonoAttn for ever, and it produced the
    published MonoAttn numbers; the ``mono`` preset sets 20. The paper gives no value; the
    ``mono_eq19`` preset keeps this default, 0 (s = 0.5)."""
    mono_gate_on: MonoGateOn = "relu"
    """Which term of MonoAttn's step the gate s weighs: ``relu`` step = s·relu(rho) +
    (1-s)·sigmoid(beta·rho) (the reference code); ``sigmoid`` step = s·sigmoid(beta·rho) +
    (1-s)·relu(rho) (the paper's eq. 19)."""
    location_norm: LocationNorm = "sum"
    """How the Gaussian density becomes lambda over the valid positions. ``sum`` (the reference):
    lambda = g / (sum(g) + L·1e-20), so where every g underflows (mu far outside the sequence,
    small sigma) lambda, the context and the next pa are all zero and no gradient flows.
    ``softmax``: a softmax of the log-density, the same number where the sum is normal, but
    attending the nearest boundary where the reference attends nothing. ``l1`` (Dubois's code,
    ``F.normalize(p=1)``): lambda = g / max(sum(g), 1e-12), the same number where the sum exceeds
    1e-12, a scaled-down lambda (summing to sum(g)/1e-12 < 1) below it."""
    rho_init: RhoInit = "grouped"
    """Initial bound of the bias-free sigma/rho head weights, U(-b, b). ``grouped`` (the reference):
    the sigma row is one Xavier-uniform (1, d, 1) tensor, b = sqrt(6/(d+1)), and the k rho rows one
    (1, d, k) tensor, b = sqrt(6/(k(d+1))). ``per_row``: b = sqrt(6/(d+1)) for every row."""
    controller: Controller = "linear"
    """What produces l_t from the query: ``linear`` l_t = Linear(h_{t-1}) (Ray Chowdhury);
    ``gru`` Dubois's weighter omega_t = GRU(relu(W_resize q_t)), its state passed between steps."""
    controller_size: int = 64
    """Width of Dubois's weighter GRU and its resize layer (controller ``gru``)."""
    controller_init: ControllerInit = "torch"
    """Initialisation of the resize layer and weighter GRU (controller ``gru``). ``torch``: PyTorch
    defaults. ``dubois`` (Dubois's code, ``seq2seq/util/initialization.py::weights_init``): resize
    weight Xavier-uniform; per gate block, GRU input weights Xavier-uniform and recurrent weights
    orthogonal; the reset-gate biases (input and recurrent) -1; the other biases PyTorch's."""
    sigma_min: float = 0.27
    """min_sigma in sigma_t = (relu(w_sigma·l_t) + min_sigma) / L."""
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """A plugin attender's own options (``model.attention.options: {width: 5}``), checked by the
    function it registered (:func:`locattn.register_attender`); empty for the built-ins. Part of
    the run identity, and logged as ``model.attention.options.<name>`` params, only when set."""

    def __post_init__(self) -> None:
        _check_literals(self, "attention.")
        entry = registry.get("attender", self.family, where="attention.family")
        if not isinstance(self.options, Mapping):
            raise ValueError(f"attention.options must be a mapping, got {self.options!r}")
        check = entry.meta["options"]
        if self.options and check is None:
            raise ValueError(f"attention.options={dict(self.options)!r}: attender {self.family!r} "
                             f"(plugin {entry.plugin!r}) takes no options (registered without options=)")
        if check is not None:
            try:
                checked = check(dict(self.options))
            except (ValueError, TypeError, KeyError) as exc:
                raise ValueError(f"attention.options of attender {self.family!r}: "
                                 f"{str(exc).strip(chr(39))}") from None
            object.__setattr__(self, "options", dict(checked))
        for name in ("direction_temperature", "mix_temperature", "step_temperature",
                     "controller_size", "sigma_min"):
            if not getattr(self, name) > 0:
                raise ValueError(f"attention.{name} must be > 0, got {getattr(self, name)!r}")
        applies = {
            "content_score": ("content", "location"),
            "positions": ("positional",),
            "direction": ("positional", "location"),
            "direction_temperature": ("positional", "location"),
            "mode": ("location",),
            "mix_temperature": ("location",),
            "pa_from": ("location",),
            "reference": ("location",),
            "step": ("location",),
            "step_temperature": ("location",),
            "mono_gate_init": ("location",),
            "mono_gate_on": ("location",),
            "location_norm": ("location",),
            "rho_init": ("location",),
            "controller": ("location",),
            "controller_size": ("location", "dubois_code"),
            "controller_init": ("location",),
            "sigma_min": ("location",),
        }
        defaults = AttentionConfig.__dataclass_fields__
        for name, families in applies.items():
            if self.family not in families and getattr(self, name) != defaults[name].default:
                raise ValueError(
                    f"attention.{name}={getattr(self, name)!r} does not apply to "
                    f"attention.family={self.family!r} (only to {list(families)}); leave it at "
                    f"its default {defaults[name].default!r}"
                )
        if self.family == "location" and self.mode == "location":
            for name in ("content_score", "mix_temperature"):
                if getattr(self, name) != defaults[name].default:
                    raise ValueError(
                        f"attention.{name}={getattr(self, name)!r} needs attention.mode='mix' "
                        f"(got mode='location')"
                    )
        if self.pa_from == "location" and self.mode != "mix":
            raise ValueError(
                "attention.pa_from='location' (PR) needs attention.mode='mix': without mixing the "
                f"location attention is the attention (got mode={self.mode!r})"
            )
        for name in ("mono_gate_init", "mono_gate_on"):
            if self.step != "mono" and getattr(self, name) != defaults[name].default:
                raise ValueError(
                    f"attention.{name} applies only to attention.step='mono' (got step={self.step!r})"
                )
        if self.step not in ("sigmoid", "mono") and (
            self.step_temperature != defaults["step_temperature"].default
        ):
            raise ValueError(
                "attention.step_temperature applies only to attention.step in ['sigmoid', 'mono'] "
                f"(got step={self.step!r})"
            )
        if self.controller != "gru" and self.controller_init != defaults["controller_init"].default:
            raise ValueError(
                f"attention.controller_init applies only to attention.controller='gru' "
                f"(got controller={self.controller!r})"
            )
        if self.family == "location" and self.controller != "gru" and (
            self.controller_size != defaults["controller_size"].default
        ):
            raise ValueError(
                f"attention.controller_size applies only to attention.controller='gru' "
                f"(got controller={self.controller!r})"
            )
        if self.direction == "forward" and (
            self.direction_temperature != defaults["direction_temperature"].default
        ):
            raise ValueError("attention.direction_temperature needs attention.direction='mixed'")


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """The network: sizes, encoder, attender. Defaults are Ray Chowdhury & Caragea's base model."""

    kind: Kind = "seq2seq"
    """``seq2seq`` (recurrent encoder-decoder) or ``regressor`` (Raffel & Ellis feed-forward)."""
    encoder: EncoderKind = "bigru"
    """``bigru``: bidirectional GRU, hidden_size/2 per direction (Ray Chowdhury). ``gru_residual``:
    unidirectional GRU with a residual connection from the embeddings to the encoder outputs,
    projected by a bias-free linear map when the sizes differ (Dubois et al.)."""
    source_boundaries: Boundaries = "start_end"
    """``start_end``: learned START/END vectors around each embedded source (L = S + 2);
    ``none``: the source as it is (L = S)."""
    embedding_size: int = 64
    """Shared source/target embedding size (also the regressor's unused field)."""
    hidden_size: int = 128
    """Encoder output size d (both directions together), decoder GRU hidden size, attention head
    size. For a regressor: the width D of its dense layers (Raffel & Ellis: 100)."""
    num_layers: int = 1
    """GRU layers in encoder and decoder."""
    value_size: int = 128
    """Width of the value MLP v = leaky_relu(Linear(d -> value_size) e)."""
    dropout: float = 0.5
    """Dropout on the encoder outputs (and the value MLP)."""
    input_channels: int = 2
    """Regressor only: channels per time step (value, marker)."""
    regressor_init: RegressorInit = "paper"
    """Regressor only: initialisation of its dense layers. ``paper`` (Raffel & Ellis sec. 2.1):
    every weight matrix W (M x N, so N = fan-in) drawn from N(0, std = 1/sqrt(N)), every bias zero.
    ``torch``: PyTorch's default ``nn.Linear`` initialisation (uniform, nonzero biases)."""
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    """The attender."""

    def __post_init__(self) -> None:
        _check_literals(self, "")
        for name in ("embedding_size", "hidden_size", "num_layers", "value_size", "input_channels"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if self.kind != "regressor" and self.regressor_init != "paper":
            raise ValueError(
                f"regressor_init={self.regressor_init!r} applies only to kind='regressor' (got "
                f"kind={self.kind!r}); leave it at 'paper'"
            )
        if not isinstance(self.attention, AttentionConfig):
            raise ValueError(f"attention must be an AttentionConfig, got {type(self.attention).__name__}")
        if self.encoder == "bigru" and self.hidden_size % 2:
            raise ValueError(
                f"hidden_size={self.hidden_size} must be even for encoder='bigru' (split over directions)"
            )
        family = self.attention.family
        valid = families(self.kind)
        if family not in valid:
            raise ValueError(
                f"attention.family={family!r} does not fit kind={self.kind!r}; valid: {list(valid)}"
            )
        if self.attention.positions == "rotary" and family == "positional" and self.hidden_size % 2:
            raise ValueError(f"hidden_size={self.hidden_size} must be even for rotary positions")


# --------------------------------------------------------------------------- sizes and deltas

SIZE_PRESETS: dict[str, dict[str, Any]] = {
    "base": {"num_layers": 1, "embedding_size": 64, "hidden_size": 128, "value_size": 128,
             "dropout": 0.5},
    "cfq": {"num_layers": 2, "embedding_size": 128, "hidden_size": 256, "value_size": 512,
            "dropout": 0.4},
    "cfq_paper_text": {"num_layers": 2, "embedding_size": 128, "hidden_size": 256,
                       "value_size": 256, "dropout": 0.5},
}
"""Named model sizes (Ray Chowdhury & Caragea): ``base``; ``cfq``, the reference code's CFQ config
(what produced the published CFQ numbers; with batch 128, ``optim.batch_size``); and
``cfq_paper_text``, what the paper's text implies (App. E: two layers and doubled sizes, with its
general value MLP of d units and 50 % dropout; its batch would be 32)."""


def apply_size(cfg: ModelConfig, size: str) -> ModelConfig:
    """Return ``cfg`` with the named size preset's fields (``SIZE_PRESETS``) applied."""
    if size not in SIZE_PRESETS:
        raise ValueError(f"unknown model size {size!r}; valid: {sorted(SIZE_PRESETS)}")
    return replace(cfg, **SIZE_PRESETS[size])


def derive(cfg: Any, delta: Mapping[str, Any]) -> Any:
    """Return dataclass ``cfg`` with dotted-path ``delta`` applied (``{"attention.step": "relu"}``).

    Values are used as given (no string coercion); unknown paths raise ``ValueError``.
    """
    direct: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    names = {f.name for f in fields(cfg)}
    for path, value in delta.items():
        head, _, rest = path.partition(".")
        if head not in names:
            close = difflib.get_close_matches(head, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown config key {path!r}{hint}; valid: {sorted(names)}")
        if rest:
            if not is_dataclass(getattr(cfg, head)):
                raise ValueError(f"config key {head!r} has no sub-keys (got {path!r})")
            nested.setdefault(head, {})[rest] = value
        else:
            direct[head] = value
    for head, sub in nested.items():
        direct[head] = derive(getattr(cfg, head), sub)
    return replace(cfg, **direct)


def flat_fields(cfg: Any, prefix: str = "") -> dict[str, Any]:
    """``{"attention.step": "sigmoid", "hidden_size": 128, ...}`` for a (nested) dataclass."""
    out: dict[str, Any] = {}
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if is_dataclass(value):
            out.update(flat_fields(value, prefix + f.name + "."))
        else:
            out[prefix + f.name] = value
    return out


_FAMILY_DOCS = {
    "content": ("Content", "Content-only scorers: scaled dot, multiplicative (Luong et al. 2015), "
                "additive (Bahdanau et al. 2015)."),
    "positional": ("Positional", "Sinusoidal, relative (Transformer-XL) or rotary position terms "
                   "added to a scaled-dot content score."),
    "location": ("Location", "Gaussian location attention (Ray Chowdhury & Caragea 2023; Dubois "
                 "et al. 2020 as their paper describes it)."),
    "dubois_code": ("Location (Dubois's code)", "Dubois et al.'s location attender as their "
                    "code computes it, mixed by its location confidence."),
    "feedforward": ("Feed-forward attention", "Raffel & Ellis (2016) feed-forward attention "
                    "pooling (regressor)."),
    "mean": ("Unweighted mean", "Raffel & Ellis (2016) unweighted mean pooling (regressor)."),
}
for _family in SEQ2SEQ_FAMILIES + REGRESSOR_FAMILIES:
    registry.register_attender(
        _family,
        f"locattn.models.attention:build_{_family}" if _family in SEQ2SEQ_FAMILIES
        else "locattn.models.regressor:build_regressor",
        label=_FAMILY_DOCS[_family][0], doc=_FAMILY_DOCS[_family][1],
        model_kind="seq2seq" if _family in SEQ2SEQ_FAMILIES else "regressor",
        packable=_family not in ("dubois_code", *REGRESSOR_FAMILIES),
        stacked=_family in SEQ2SEQ_FAMILIES,  # written for stacked (K, ...) parameters
    )


__all__ = [
    "AttentionConfig",
    "ModelConfig",
    "SIZE_PRESETS",
    "apply_size",
    "derive",
    "families",
    "packable_families",
    "PACKABLE_STEPS",
    "flat_fields",
]
