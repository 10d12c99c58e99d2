"""Which runs may train together as one pack: the judge (:func:`check_packable`) and the grouping
of runs into packs (:func:`pack_groups`). Config layer, no torch: a study's dry run forms its packs
with the same judge the packed trainer (:mod:`locattn.training.packed`) applies.
"""

from __future__ import annotations

from typing import Sequence

from locattn.config import PACKABLE_FIELDS, RunConfig, flatten, identity_dict, run_identity
from locattn.models.config import PACKABLE_STEPS, packable_families

SWITCH_FIELDS = ("variant", "model.attention.step", "model.attention.location_norm",
                 "model.attention.step_temperature", "model.attention.reference",
                 "model.attention.pa_from", "model.attention.mono_gate_init", "model.attention.mono_gate_on")
"""Model switches in which the runs of one pack (not compiled) may differ besides :data:`PACKABLE_FIELDS`:
location attention's step activation (any of :data:`locattn.models.config.PACKABLE_STEPS`),
``location_norm``, ``step_temperature``, ``reference``, ``pa_from`` and MonoAttn's gate
(``mono_gate_init``, ``mono_gate_on``). Each replica keeps its own value in the packed model
(``LocationAttender.pack_switches``). Two of them change the parameters: ``reference`` the step
head's row count (2, 3 or 4 rows; the packed head carries the widest replica's rows) and
``step: mono`` a gate parameter the other steps lack (the packed model holds it for every
replica); a replica's parameters, gradients and optimizer state stay its own
(``ParamPack``). Table 4's OneStepAttn, -Step 2, -Step 3 and -Sigmoid pack together, and
Table 7's Mix OneStepAttn, Mix OneStepAttn PR, Mix MonoAttn PR and Mix RMonoAttn PR do; Mix
beside a plain location model (a content scorer and a mix gate) does not: see
:data:`CANNOT_PACK`."""
CANNOT_PACK = {
    "model.attention.mode": "Mix has parameters a plain location model lacks (its content scorer "
                            "and mix gate), so mix and location runs have different parameter sets",
    "model.attention.direction": "direction: mixed adds a direction gate (parameters a forward-direction "
                                 "model lacks)",
    "model.attention.family": "attention families have different parameter sets",
    "model.attention.controller": "the linear and GRU controllers have different parameter sets",
    "model.attention.content_score": "content scorers have different parameter sets",
}
"""Why runs that differ in one of these fields cannot share a pack: the reason their refusal
names (a field not listed is refused without one)."""
MAY_DIFFER = PACKABLE_FIELDS + SWITCH_FIELDS
"""Every field in which the runs of one pack may differ."""


def check_packable(cfgs: Sequence[RunConfig]) -> None:
    """Raise ``ValueError`` (one line naming the fields) unless ``cfgs`` may train as one pack:
    equal except :data:`PACKABLE_FIELDS` and, for location attention on ``train_path: eager`` (the
    eager or the graphed step),
    :data:`SWITCH_FIELDS`; a packable seq2seq family; no two runs of one identity."""
    if not cfgs:
        raise ValueError("train_packed needs at least one RunConfig")
    flats = [flatten(identity_dict(c)) for c in cfgs]
    ref = {k: v for k, v in flats[0].items() if k not in MAY_DIFFER}
    for i, cfg in enumerate(cfgs[1:], start=1):
        other = {k: v for k, v in flats[i].items() if k not in MAY_DIFFER}
        diff = sorted(k for k in set(ref) | set(other) if ref.get(k) != other.get(k))
        if diff:
            why = "".join(f" ({f}: {CANNOT_PACK[f]})" for f in diff if f in CANNOT_PACK)
            raise ValueError(
                f"cfgs[{i}] differs from cfgs[0] in {diff}{why}; packed runs may differ only in {list(MAY_DIFFER)}"
            )
        if cfg.device != cfgs[0].device:
            raise ValueError(f"cfgs[{i}].device={cfg.device!r} differs from cfgs[0].device={cfgs[0].device!r}")
    family = cfgs[0].model.attention.family
    switched = sorted(f for f in SWITCH_FIELDS[1:] if len({flat.get(f) for flat in flats}) > 1)
    if switched:
        c0 = cfgs[0]
        if family != "location" or c0.train_path != "eager":
            raise ValueError(f"packed runs differ in {switched}: only location attention packs them, on "
                             f"train_path=eager (got attention.family={family!r}, train_path={c0.train_path!r}: "
                             "a compiled pack's kernels would differ from its replicas' solo graphs)")
        steps = {c.model.attention.step for c in cfgs}
        if len(steps) > 1 and not steps <= set(PACKABLE_STEPS):
            raise ValueError(f"packed runs differ in model.attention.step {sorted(steps)}; steps that pack "
                             f"together: {list(PACKABLE_STEPS)}")
    if cfgs[0].model.kind != "seq2seq" or family not in packable_families():
        raise ValueError(
            f"model.kind={cfgs[0].model.kind!r}, attention.family={family!r} cannot be packed; "
            f"packable: seq2seq with attention.family in {packable_families()}"
        )
    seeds = [c.seed for c in cfgs]
    if len({run_identity(c) for c in cfgs}) != len(cfgs):
        raise ValueError(f"packed runs must differ in seed or in one of {list(PACKABLE_FIELDS[1:])}, "
                         f"got seeds {seeds} and two equal runs")


def pack_groups(cfgs: Sequence[RunConfig]) -> list[list[int]]:
    """Indices of ``cfgs`` grouped into packs, in order: each config joins the first group that
    :func:`check_packable` accepts with it, else starts its own. E.g. Table 4's OneStepAttn, -Step 2,
    -Step 3 and -Sigmoid -> ``[[0, 1, 2, 3]]`` (not compiled), and so Table 7's Mix OneStepAttn,
    Mix OneStepAttn PR, Mix MonoAttn PR and Mix RMonoAttn PR; OneStepAttn and Mix OneStepAttn ->
    ``[[0], [1]]``; every config alone where none packs."""
    try:  # the common case, one check: all of them pack
        check_packable(cfgs)
        return [list(range(len(cfgs)))]
    except ValueError:
        pass
    groups: list[list[int]] = []
    for i, cfg in enumerate(cfgs):
        for group in groups:
            try:
                check_packable([cfgs[j] for j in group] + [cfg])
            except ValueError:
                continue
            group.append(i)
            break
        else:
            groups.append([i])
    return groups


__all__ = ["CANNOT_PACK", "MAY_DIFFER", "SWITCH_FIELDS", "check_packable", "pack_groups"]
