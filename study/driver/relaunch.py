"""A launch beside a study that exists, and a resume's overrides: the same spec relaunched (its train
path set), widened by grid values or seeds (:func:`study.spec.widens`), or refused in one line
naming what differs (:func:`refuse_other_spec`); a resume's ``--set`` (:func:`resume_sets`).
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import Any, TextIO

from locattn.config import OPERATIONAL_FIELDS
from record import schema
from record.layout import StudyPaths
from study.recording.folder import StudyError, load_meta, one_line_os_error, relocate, write_meta
from study.recording.meta import StudyMeta
from study.recording.runs import started_under_other_values
from study.recording.status import trial_runs
from study.spec import SpecError, StudySpec, apply_sets, resolve_spec, same_spec, spec_changes, widens
from study.spec.plugins import check_sources, spec_plugin_sources


def refuse_other_spec(spec: StudySpec, spec_path: Path, paths: StudyPaths, name: str, meta: StudyMeta,
                      profile: str | None, only: dict[str, list] | None, seeds: int | list[int] | None,
                      sets: dict[str, Any] | None) -> None:
    """A launch (or its dry run) of an existing study under a spec that neither is its own nor
    widens it: :class:`SpecError` in one line. When runs of the study finished, it names them
    and their values beside the launch's (another budget, ``--set optim.epochs=4``: the tables
    would pool the two) and the launch that puts the new spec beside them under another
    ``--name``. No ``--yes`` overrides it: a study is one spec, so that each of its cells is
    one number."""
    if widens(meta.resolved, spec.resolved) or same_spec(meta.resolved, spec.resolved):
        return
    changed = spec_changes(meta.resolved, spec.resolved)
    shown = "; ".join(changed[:4]) + (f"; and {len(changed) - 4} more" if len(changed) > 4 else "")
    done = sum(1 for *_, status in trial_runs(meta.tracking_uri, name) if status == schema.STATUS_FINISHED)
    if done:
        old = "; ".join(c.split(" -> ")[0] for c in changed[:4])
        new = "; ".join(f"{c.split(': ')[0]}: {c.split(' -> ')[-1]}" for c in changed[:4])
        again = " ".join([f"study launch {spec_path}"] + ([f"--profile {profile}"] if profile else [])
                         + [f"--name {name}-2"] + [f"--only {k}={','.join(map(str, v))}" for k, v in (only or {}).items()]
                         + ([f"--seeds {seeds_arg(seeds)}"] if seeds is not None else [])
                         + ["--set " + shlex.quote(f"{k}={json.dumps(v, separators=(',', ':'))}")
                            for k, v in (sets or {}).items()])
        raise SpecError(
            f"{spec_path}: study {name!r} at {paths.dir} has {done} finished run(s) under {old}, and this "
            f"launch asks for {new} ({meta.spec_path}, profile {meta.profile}, --only {_only_text(meta.only)}"
            f"{_seeds_text(meta)}): its {spec.n_runs()} runs would be planned beside them and the tables "
            f"would pool the two; launch it as another study, `{again}`, resume this one as it was "
            f"with `study resume {paths.dir}`, or widen it with the same spec and profile and a wider "
            "--only or more --seeds")
    raise SpecError(
        f"{spec_path}: study {name!r} at {paths.dir} was launched with a different spec or "
        f"profile (changed: {shown}) ({meta.spec_path}, profile {meta.profile}, --only "
        f"{_only_text(meta.only)}{_seeds_text(meta)}); resume it with `study "
        f"resume {paths.dir}`, widen it with the same spec and profile and a wider --only "
        "or more --seeds, or launch under another --name"
    )


def relaunch_meta(spec: StudySpec, spec_path: Path, raw: dict[str, Any], paths: StudyPaths, name: str, *,
                  only: dict[str, list] | None, seeds: int | list[int] | None, train_path: str | None,
                  tracking_uri: str | None, allow_dirty: bool, out: TextIO,
                  relaunch: tuple[str | None, dict[str, Any] | None] = (None, None)) -> StudyMeta:
    """A launch of a study that exists: the same spec resumes it, a wider ``only`` or more
    ``seeds`` widens it, another spec is refused (:func:`refuse_other_spec`; ``relaunch``: the
    launch's ``--profile`` and ``--set``, for the command it suggests); returns its saved meta,
    updated (YAML, train path, tracking URI)."""
    meta = load_meta(paths)
    refuse_other_spec(spec, spec_path, paths, name, meta, relaunch[0], only, seeds, relaunch[1])
    check_sources(meta.plugin_sources, spec_plugin_sources(spec.cells), paths.meta, allow_dirty)
    meta = relocate(paths, meta, out)
    if widens(meta.resolved, spec.resolved):
        meta = _widen(paths, meta, spec, raw, only or {}, seeds, out)
    elif meta.raw != raw or meta.resolved != spec.resolved:
        # the YAML changed elsewhere (a description, a former key's new name): saved, so
        # that a resume rebuilds this spec
        meta = meta.replace(raw=raw, resolved=spec.resolved)
        write_meta(paths, meta)
    meta = set_train_path(paths, meta, train_path, out)
    if tracking_uri and tracking_uri != meta.tracking_uri:
        print(f"[study {name}] WARNING: --tracking-uri {tracking_uri} differs from the one "
              f"saved in study.json ({meta.tracking_uri}); using {tracking_uri} from now on "
              "(finished runs missing there are re-recorded from the run directories)", file=out)
        meta = meta.replace(tracking_uri=tracking_uri)
        write_meta(paths, meta)
    print(f"[study {name}] exists at {paths.dir}: resuming (finished trials are not rerun)",
          file=out)
    return meta


def _only_text(only: dict[str, list] | None) -> str:
    return " ".join(f"{k}={','.join(map(str, v))}" for k, v in (only or {}).items()) or "(none)"


def set_train_path(paths: StudyPaths, meta: StudyMeta, train_path: str | None, out: TextIO) -> StudyMeta:
    """Save a launch's or resume's ``--train-path`` in study.json when it changes the study's."""
    if train_path is None or train_path == meta.train_path:
        return meta
    print(f"[study {meta.name}] --train-path {train_path} (was {meta.train_path}) "
          "from now on; run identities and finished runs are unchanged", file=out)
    meta = meta.replace(train_path=train_path)
    write_meta(paths, meta)
    return meta


def _seeds_text(meta: StudyMeta) -> str:
    return f", --seeds {seeds_arg(meta.seeds)}" if meta.seeds is not None else ""


def seeds_arg(seeds: int | list[int]) -> str:
    return ",".join(map(str, seeds)) if isinstance(seeds, list) else str(seeds)


def _seed_range(seeds: list[int]) -> str:
    """``[0, 1, 2]`` -> ``0-2``; other lists as they are."""
    if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(map(str, seeds))


def _widen(paths: StudyPaths, meta: StudyMeta, spec: StudySpec, raw: dict[str, Any],
           only: dict[str, list], seeds: int | list[int] | None, out: TextIO) -> StudyMeta:
    """Grow a study to a wider ``--only`` or more ``--seeds`` of its own spec and profile. Finished runs stay in the
    record and are not rerun. Tune's state knows only the old trials, so it is set aside (kept,
    never deleted) and the trials are planned from the record; a run that was part-way through
    starts again from its first epoch. The YAML read now (``raw``) is saved with the wider
    ``--only``: its grid may have grown since the launch, and a resume rebuilds the spec from both."""
    before = resolve_spec(raw, path=meta.spec_path, profile=meta.profile or None,
                          only=meta.only or None, seeds=meta.seeds).n_trials()
    old_seeds = meta.resolved.get("seeds") or []
    grown = (f" and seeds {_seed_range(old_seeds)} -> {_seed_range(list(spec.seeds))}"
             if list(spec.seeds) != old_seeds else "")
    print(f"[study {meta.name}] widening --only {_only_text(meta.only)} -> "
          f"{_only_text(only)}{grown}: {before} -> {spec.n_trials()} trials; finished runs are kept, "
          "unfinished ones start again", file=out)
    if paths.tune.exists():
        aside = paths.tune.with_name(f"tune.before-widening-{int(time.time())}")
        try:
            paths.tune.rename(aside)
        except OSError as exc:
            raise StudyError(one_line_os_error(exc, paths.dir)) from None
        print(f"[study {meta.name}] Tune's state of the narrower study set aside as {aside.name}",
              file=out)
    meta = meta.replace(only=only, seeds=seeds, raw=raw, resolved=spec.resolved)
    write_meta(paths, meta)
    return meta


def spec_with_sets(meta: StudyMeta, sets: dict[str, Any]) -> StudySpec:
    """The study's saved spec with ``sets`` as its last overrides (:func:`study.spec.apply_sets`
    in its profile), validated as a launch's are; raises :class:`SpecError` in one line."""
    raw = apply_sets(meta.raw, meta.profile or None, sets)
    return resolve_spec(raw, path=meta.spec_path, profile=meta.profile or None,
                        only=meta.only or None, seeds=meta.seeds)


def resume_sets(paths: StudyPaths, meta: StudyMeta, spec: StudySpec, sets: dict[str, Any],
                out: TextIO) -> StudyMeta:
    """Record ``study resume --set`` in ``study.json`` (``raw``, ``resolved`` and ``set``), so
    that later resumes, status and reports see the spec the runs train under. A set that
    changes the spec changes the runs' identities: it is said, and refused once a run has
    finished under the old values, since the tables would pool the old and the new runs of a
    cell (launch such a study under another ``--name``), or while an unfinished run holds a
    checkpoint of the old values. A set of operational fields only (``num_threads``, ``device``:
    :data:`locattn.config.OPERATIONAL_FIELDS`) changes no identity and is taken as it is."""
    changed = spec_changes(meta.resolved, spec.resolved)
    name = meta.name
    old, new = meta.resolved.get("overrides") or {}, spec.resolved.get("overrides") or {}
    keys = {k for k in sets if old.get(k, old) != new.get(k, new)}  # the fields the sets change
    if changed and keys <= OPERATIONAL_FIELDS:  # threads, device, ...: no run's identity or metrics
        print(f"[study {name}] --set changes how its runs train ({'; '.join(changed)}), not what they "
              "compute: their identities stay, finished runs are kept", file=out)
    elif changed:
        shown = "; ".join(changed[:4]) + (f"; and {len(changed) - 4} more" if len(changed) > 4 else "")
        done = sum(1 for *_, status in trial_runs(meta.tracking_uri, name)
                   if status == schema.STATUS_FINISHED)
        another = " ".join([f"launch another study, `study launch {meta.spec_path}"]  # the study's own options too
                           + ([f"--profile {meta.profile}"] if meta.profile else []) + [f"--name {name}-2"]
                           + [f"--only {k}={','.join(map(str, v))}" for k, v in meta.only.items()]
                           + ([f"--seeds {seeds_arg(meta.seeds)}"] if meta.seeds is not None else [])
                           + ["--set " + shlex.quote(f"{k}={json.dumps(v, separators=(',', ':'))}")
                              for k, v in {**meta.sets, **sets}.items()]) + "`"
        if done:
            raise SpecError(
                f"--set changes study {name!r}'s spec ({shown}), but {done} of its runs finished under "
                f"the old values and its tables would pool them with the new ones: {another}")
        if started := started_under_other_values(paths.dir, sets):  # their checkpoints hold the old config
            folders = ", ".join(str(p.relative_to(paths.dir)) for p in started[:3])
            raise SpecError(
                f"--set changes study {name!r}'s spec ({shown}), but {len(started)} of its runs started under "
                f"the old values ({folders}{', ...' if len(started) > 3 else ''}) and their checkpoints cannot "
                f"continue under the new ones: `study resume {paths.dir}` without --set finishes them, or "
                f"{another}")
        print(f"[study {name}] --set changes its spec ({shown}): the runs from here on train under the "
              "new values (new run identities; no run had finished under the old ones)", file=out)
    meta = meta.replace(raw=apply_sets(meta.raw, meta.profile or None, sets), resolved=spec.resolved,
                        sets={**meta.sets, **sets})
    write_meta(paths, meta)
    return meta
