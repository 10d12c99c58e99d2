"""The Ray Tune function trainable: one trial trains one or more seeds with ``locattn``.

A trial config carries a ``trial`` descriptor (see :func:`trial_descriptor`) and, for Optuna
studies, a ``search`` mapping of sampled values. Solo and packed trials share one skeleton,
:class:`Trial`: a solo trial trains its seeds one after another with the configured train
function, a packed trial trains them together (``locattn.packed.train_packed``); either way
each seed keeps its own run directory, trainer checkpoint, result and MLflow run.

Per epoch the trainer saves its checkpoint atomically and calls the seed's
:class:`TrialRecorder`, which reports the epoch metrics to Tune with a Tune checkpoint of the
whole trial: the trial state (per unfinished seed its last epoch and epoch history; the
finished seeds and their scores) and each unfinished seed's trainer checkpoint under
``run/<run key>/``. On restore those checkpoints are copied back into the seeds' ``out_dir/
checkpoint`` and training continues from them.

Results carry ``kind`` = ``epoch`` | ``seed_final``; the last ``seed_final`` of a trial carries
``objective``: the median over *all* seeds of the search metric, each at its full budget.
Nothing here runs at import time; Ray is imported inside the trial.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import shutil
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from record import layout
from record.layout import TRIAL_FILE
from study.retention import prune_finished_run, study_keep
from study.spec import run_key

OBJECTIVE = "objective"
STATE_FILE = "trial_state.json"
#: Result key of the lines a trial asks the driver to print (checkpoint fallbacks, restarts).
NOTICES = "notices"
#: Key of the trial state file's own SHA-256 (:func:`state_digest`).
STATE_DIGEST = "sha256"
RUN_SUBDIR = "run"
#: Tune's experiment directory under the study (``tune.RunConfig(name=...)``).
TUNE_DIRNAME = layout.TUNE_DIR
#: Key of a run's trial file listing the Tune trial directories that trained it, newest last. A
#: resumed study starts new Tune trials (it never restores Tune's pickled state), which find
#: the earlier attempts' checkpoints there. Only names of this form, directly under ``tune/``.
TUNE_TRIALS = "tune_trials"
TUNE_TRIAL_NAME = re.compile(r"trial_[A-Za-z0-9_]{1,64}")
TUNE_TRIALS_KEPT = 8


def trial_dirname(trial_id: str) -> str:
    """Name of a trial's directory under ``<study>/tune/`` (``trial_dirname_creator``)."""
    return f"trial_{trial_id}"


def trial_descriptor(
    *,
    study: str,
    study_dir: str,
    cell: str,
    task: str,
    variant: str,
    overrides: Mapping[str, Any],
    hparams: Mapping[str, Any],
    seeds: tuple[int, ...] | list[int],
    cpus: float,
    metric: str,
    train_fn: str,
    gpus: float = 0.0,
    pack: bool = False,
    points: Any = (),
) -> dict[str, Any]:
    """The JSON-safe description of one trial placed in its Tune config.

    ``points``: the hparams points a packed trial trains (each with every seed), when it packs
    hparams axes; ``hparams`` is then the first of them. Left out of the descriptor otherwise,
    so trials planned before packed hparams existed keep their descriptors."""
    out = {
        "study": study,
        "study_dir": str(study_dir),
        "cell": cell,
        "task": task,
        "variant": variant,
        "overrides": dict(overrides),
        "hparams": dict(hparams),
        "seeds": [int(s) for s in seeds],
        "cpus": float(cpus),
        "gpus": float(gpus),
        "metric": metric,
        "train_fn": train_fn,
        "pack": bool(pack) or len(points) > 1,
    }
    if len(points) > 1:
        out["points"] = [dict(p) for p in points]
    return out


def is_packed(config: Mapping[str, Any]) -> bool:
    """Whether the trial trains its runs (seeds, hparams points) together as one packed model."""
    t = config["trial"]
    return bool(t.get("pack")) and len(t["seeds"]) * len(t.get("points") or [None]) > 1


def trial_members(config: Mapping[str, Any]) -> list[tuple[int, str, dict[str, Any]]]:
    """(seed, run key, hparams) of every run this trial trains, in training order: per hparams
    point (one unless the trial packs hparams axes) every seed. The hparams are the grid
    hparams plus the Optuna-sampled values."""
    t = config["trial"]
    search = config.get("search") or {}
    out = []
    for point in t.get("points") or [t["hparams"]]:
        hp = {**point, **search}
        out += [(seed, run_key(t["study"], t["cell"], hp, seed), hp) for seed in t["seeds"]]
    return out


def trial_hparams(config: Mapping[str, Any], key: str | None = None) -> dict[str, Any]:
    """Selection hyperparameters of the trial's run ``key`` (default: its first run)."""
    members = trial_members(config)
    return next((hp for _, k, hp in members if k == key), members[0][2])


def trial_run_keys(config: Mapping[str, Any]) -> list[tuple[int, str]]:
    """(seed, run key) of every run this trial trains, in training order."""
    return [(seed, key) for seed, key, _ in trial_members(config)]


def run_dir(study_dir: str | Path, key: str) -> Path:
    """Per-run output directory (absolute, under the study directory)."""
    return Path(study_dir).resolve() / layout.RUNS_DIR / key


def resolve_run_config(config: Mapping[str, Any], seed: int, key: str | None = None) -> Any:
    """The resolved ``RunConfig`` of one seed of a trial, of its run ``key`` when the trial packs
    hparams points (also used by the driver for params)."""
    from dataclasses import replace

    from locattn.config import make_run_config

    t = config["trial"]
    overrides = {**t["overrides"], **trial_hparams(config, key)}
    cfg = make_run_config(task=t["task"], variant=t["variant"], seed=seed, overrides=overrides)
    device = "cuda" if float(t.get("gpus", 0.0)) > 0 else cfg.device
    return replace(cfg, num_threads=max(1, int(t["cpus"])), device=device)


def load_train_fn(path: str) -> Callable[..., Any]:
    """Import ``module:function``."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def final_metrics(out_dir: Path, result: Any) -> dict[str, float]:
    """Final per-run metrics from the trainer: its ``RunResult`` or ``out_dir/result.json``.

    Returns flat MLflow keys: ``best_dev_score``, ``best_epoch``, ``epochs_run``,
    ``epochs_to_100`` and ``test.<split>.<metric>``.
    """
    if result is not None and hasattr(result, "final_metrics"):
        return {k: float(v) for k, v in result.final_metrics().items()}
    data: Mapping[str, Any] = {}
    path = out_dir / layout.RESULT_FILE
    if path.is_file():
        data = json.loads(path.read_text())
    elif result is not None:
        from dataclasses import asdict, is_dataclass

        data = asdict(result) if is_dataclass(result) else dict(getattr(result, "__dict__", {}))
    out: dict[str, float] = {}
    for key in ("best_dev_score", "best_epoch", "epochs_run", "epochs_to_100"):
        value = data.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = float(value)
    test = data.get("test") or data.get("test_metrics") or {}
    for split, metrics in test.items():
        if isinstance(metrics, Mapping):
            for metric, value in metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    out[f"test.{split}.{metric}"] = float(value)
    for key, value in data.items():  # already-flat test keys
        if key.startswith("test.") and isinstance(value, (int, float)):
            out[key] = float(value)
    return out



def _stage(staging: Path, state: Mapping[str, Any], sources: Mapping[str, Path]) -> Path:
    """A directory with the trial state and (hard links to) trainer checkpoints:
    ``sources`` maps a path inside the staging directory to a checkpoint directory.

    The state file lists every file of the trainer checkpoints with its size and SHA-256, so a
    copy that a crash interrupted, or a file corrupted later, is recognised (:func:`read_complete`).
    """
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for rel, src in sources.items():
        try:
            shutil.copytree(src, staging / rel, copy_function=os.link)
        except OSError:
            shutil.rmtree(staging / rel, ignore_errors=True)
            shutil.copytree(src, staging / rel)
    from locattn.training.checkpoint import file_sha256

    files = {str(p.relative_to(staging)): [p.stat().st_size, file_sha256(p)]
             for p in sorted((staging / RUN_SUBDIR).rglob("*")) if p.is_file()}
    body = {**state, "files": files}
    (staging / STATE_FILE).write_text(json.dumps({**body, STATE_DIGEST: state_digest(body)}))
    return staging


def state_digest(body: Mapping[str, Any]) -> str:
    """SHA-256 of a trial state (its canonical JSON): the state file's own checksum, so an edit
    of its epoch history is caught like a corrupt model file."""
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def read_complete(ckpt_dir: Path, notices: list[str] | None = None) -> dict[str, Any] | None:
    """The trial state of a Tune checkpoint directory if it is complete and intact, else None.

    A file whose size or checksum differs from the state's list makes the checkpoint unusable;
    that is said in one line naming the file (a restore then falls back to an older one), also
    appended to ``notices`` (the driver prints them: the worker's output never reaches the user).
    """
    from locattn.training.checkpoint import file_sha256

    try:
        state = json.loads((ckpt_dir / STATE_FILE).read_text())
        digest = state.pop(STATE_DIGEST, None)  # (absent from checkpoints of older code)
        if digest is not None and digest != state_digest(state):
            _notice(notices, f"trial checkpoint file {ckpt_dir / STATE_FILE} is corrupt (checksum "
                              "mismatch); falling back to an older checkpoint")
            return None
        for rel, expect in (state.get("files") or {}).items():
            size, digest = (expect, None) if isinstance(expect, int) else expect
            path = ckpt_dir / rel
            if path.stat().st_size != size:
                return None
            if digest is not None and file_sha256(path) != digest:
                _notice(notices, f"trial checkpoint file {path} is corrupt (checksum mismatch); "
                                 "falling back to an older checkpoint")
                return None
    except (OSError, ValueError, TypeError):
        return None
    return state


def _notice(notices: list[str] | None, text: str) -> None:
    print(f"study: {text}", flush=True)
    if notices is not None:
        notices.append(text)


def newest_checkpoint(restored: Path | None, trial_dir: Path | None, notices: list[str] | None = None,
                      earlier: list[Path] = (), keys: set[str] | None = None
                      ) -> tuple[Path | None, dict | None]:
    """The most advanced complete checkpoint among the restored one and the trial's own.

    Tune restores the checkpoint named in its last experiment snapshot, which after a killed
    driver can be older than the trial's newest one, or stripped of its model files by
    :func:`_strip_finished`. Every checkpoint on disk was reported by this trial and training
    is deterministic, so the complete one with the most progress (seeds finished, epochs) is the
    best place to continue; the first report after it replays its epoch history to the driver.

    The choice depends only on what verifies, never on which checkpoint Tune's snapshot names
    nor on directory names (a restore from an older snapshot makes Tune reuse the names of
    newer checkpoints): every candidate is read, and an unfinished seed counts only the epochs
    of model files the checkpoint holds and whose checksums match. ``earlier``: the trial
    directories of earlier attempts (:func:`earlier_trial_dirs`); with ``keys``, a state that
    names another run is skipped.
    """
    candidates = [restored] if restored is not None else []
    for folder in (trial_dir, restored.parent if restored is not None else None, *earlier):
        if folder is not None and folder.is_dir() and folder.name.startswith("trial_"):
            candidates += [p for p in sorted(folder.glob("checkpoint_*")) if p not in candidates]
    best: tuple[tuple[int, int], Path, dict] | None = None
    for path in candidates:
        state = read_complete(path, notices)
        if state is None or (keys is not None and not _names_only(state, keys)):
            continue
        rank = _rank(_held(state, path))
        if best is None or rank > best[0]:
            best = (rank, path, state)
    return (best[1], best[2]) if best is not None else (None, None)


def _names_only(state: Mapping[str, Any], keys: set[str]) -> bool:
    """Whether a trial state speaks only of the runs ``keys`` (the older layout names none)."""
    named = set(state.get("replicas") or {}) | set(state.get("done") or [])
    return named <= keys


def earlier_trial_dirs(study_dir: str | Path, out_dirs: list[Path]) -> list[Path]:
    """The Tune trial directories that earlier attempts of these runs reported checkpoints to,
    as their trial files list them (:data:`TUNE_TRIALS`); a name of any other form is ignored."""
    tune_dir = Path(study_dir).resolve() / TUNE_DIRNAME
    found: list[Path] = []
    for out_dir in out_dirs:
        for name in _listed_trials(out_dir):
            if tune_dir / name not in found:
                found.append(tune_dir / name)
    return found


def _listed_trials(out_dir: Path) -> list[str]:
    try:
        names = json.loads((out_dir / TRIAL_FILE).read_text()).get(TUNE_TRIALS)
    except (OSError, ValueError, AttributeError):
        return []
    return [n for n in names if isinstance(n, str) and TUNE_TRIAL_NAME.fullmatch(n)] \
        if isinstance(names, list) else []


def _held(state: Mapping[str, Any], ckpt_dir: Path) -> Mapping[str, Any]:
    """``state`` with only the replicas whose model files the checkpoint lists (and
    :func:`read_complete` verified): a replica without them would restart from scratch."""
    if "replicas" not in state:
        return state
    listed = {Path(rel).parts[1] for rel in state.get("files") or {} if len(Path(rel).parts) > 2}
    return {**state, "replicas": {k: v for k, v in state["replicas"].items() if k in listed}}


def _rank(state: Mapping[str, Any]) -> tuple[int, int]:
    """Progress of a trial state: (seeds finished, epochs of the unfinished ones).

    (A state saved before solo and packed trials shared :class:`Trial` counts its seed index
    and that seed's epoch: the same progress.)
    """
    if "seed_index" in state:
        return int(state.get("seed_index", 0)), int(state.get("epoch", 0))
    epochs = sum(int(r.get("epoch", 0)) for r in (state.get("replicas") or {}).values())
    return len(state.get("done") or []), epochs


def _strip_finished(trial_dir: Path | None) -> None:
    """A finished trial keeps its Tune checkpoints' trial state but drops the model files.

    Nothing resumes from them any more (every seed has its ``result.json``); a restore from
    one of them finds it incomplete and falls back to the final checkpoint (no model files).
    """
    if trial_dir is None or not trial_dir.is_dir():
        return
    for path in trial_dir.glob(f"checkpoint_*/{RUN_SUBDIR}"):
        shutil.rmtree(path, ignore_errors=True)


def _trial_dir(study_dir: str | Path) -> Path | None:
    """This trial's directory under ``<study>/tune/``, where Tune keeps its checkpoints.

    (``tune.get_context().get_trial_dir()`` names a directory under Ray's temporary working
    directory, not the storage directory, so it held no checkpoints to scan or strip.)
    """
    from ray import tune

    try:
        trial_id = tune.get_context().get_trial_id()
    except Exception:  # noqa: BLE001 - not inside a Tune trial
        return None
    if not trial_id:
        return None
    return Path(study_dir).resolve() / TUNE_DIRNAME / trial_dirname(trial_id)


def write_trial_file(out_dir: Path, config: Mapping[str, Any], seed: int, tune_trial: str | None = None
                     ) -> None:
    """Record in ``out_dir`` which trial and seed it belongs to (for reconciliation), and the
    Tune trial directories that trained it (``tune_trial`` added last)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    body = {"trial": config["trial"], "search": dict(config.get("search") or {}), "seed": int(seed)}
    listed = [n for n in _listed_trials(out_dir) if n != tune_trial] + ([tune_trial] if tune_trial else [])
    if listed:
        body[TUNE_TRIALS] = listed[-TUNE_TRIALS_KEPT:]
    tmp = out_dir / f".{TRIAL_FILE}.tmp"
    tmp.write_text(json.dumps(body, sort_keys=True, default=str))
    os.replace(tmp, out_dir / TRIAL_FILE)


def _restore(out_dir: Path, source: Path | None) -> None:
    """Make ``out_dir/checkpoint`` equal to ``source``, the run's trainer checkpoint inside the
    Tune checkpoint (or absent: start fresh).

    The Tune checkpoint is the source of truth: every epoch it holds was reported, so metrics
    continue without gaps.
    """
    from locattn.training import checkpoint as ckpt

    ckpt.remove_checkpoint(out_dir)
    if source is not None and source.is_dir():
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source, out_dir / ckpt.CHECKPOINT)


def finished_result(out_dir: Path, cfg: Any) -> Any:
    """The trainer's result if this exact run already finished (its result.json), else None.

    ``train`` deletes ``result.json`` when it starts and writes it last, so its presence with
    the same run identity means the run finished; it is never trained (or scored) twice.
    """
    path = out_dir / layout.RESULT_FILE
    if not path.is_file():
        return None
    from locattn.config import run_identity

    try:
        from locattn.train import load_result

        result = load_result(out_dir)
    except (ValueError, TypeError, KeyError, ImportError):
        return None
    return result if getattr(result, "run_identity", None) == run_identity(cfg) else None


# ------------------------------------------------------------------------ the trial skeleton


class TrialRecorder:
    """locattn recorder of one seed of a :class:`Trial`: reports each epoch to Tune under the
    seed's run key, with a Tune checkpoint of the whole trial (:meth:`Trial.report`)."""

    def __init__(self, *, seed: int, key: str, trial: "Trial") -> None:
        self.seed = seed
        self.key = key
        self.trial = trial

    def on_epoch(self, epoch: int, metrics: Mapping[str, float], checkpoint_dir: Path) -> None:
        values = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
        replica = self.trial.state["replicas"].setdefault(self.key, {"epoch": 0, "history": []})
        replica["epoch"] = int(epoch)
        replica["history"].append({"epoch": int(epoch), **values})
        result = {"kind": "epoch", "seed": self.seed, "run_key": self.key, "epoch": int(epoch), **values}
        self.trial.report(self.key, result, checkpoint_dir=Path(checkpoint_dir))

    def on_end(self, result: Any) -> None:  # final metrics are reported by the trial
        pass


class Trial:
    """Progress, restore and reports of one Tune trial, solo or packed.

    ``state`` holds ``replicas`` (per unfinished seed that has reported an epoch: its last
    epoch and its epoch history), ``done`` (the finished run keys) and ``scores`` (search
    metric per finished seed). The trainer saves a seed's checkpoint before it calls the seed's
    recorder, so every staged trainer checkpoint is at the epoch the state says.

    Use: :meth:`restore`, then :meth:`pending` (re-reports the seeds that already finished and
    returns the others), train those with a :class:`TrialRecorder` each and :meth:`finish`
    every one, then :meth:`close`.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        import ray

        self.config = config
        self.t = config["trial"]
        self.keys = trial_run_keys(config)
        self.out_dirs = {key: run_dir(self.t["study_dir"], key) for _, key in self.keys}
        self.state: dict[str, Any] = {"replicas": {}, "done": [], "scores": {}}
        self.resumed: dict[str, int] = {}
        self.replay: set[str] = set()
        self.notices: list[str] = []  # fallbacks and restarts, sent to the driver with the next report
        self.base = {"node_id": ray.get_runtime_context().get_node_id(), "start_time": time.time()}
        self.staging = Path(self.t["study_dir"]) / "staging" / f"{self.keys[0][1]}.{os.getpid()}"
        self.keep = study_keep(self.t["study_dir"])  # what a finished run keeps (study.retention)
        self.trial_dir = _trial_dir(self.t["study_dir"])
        self.earlier = [d for d in earlier_trial_dirs(self.t["study_dir"], list(self.out_dirs.values()))
                        if d != self.trial_dir]

    def restore(self) -> None:
        """Put every unfinished seed's trainer checkpoint back from the most advanced complete
        Tune checkpoint (the restored one or the trial directory's own, see
        :func:`newest_checkpoint`); a seed without one starts fresh."""
        from ray import tune

        checkpoint = tune.get_checkpoint()
        ctx = checkpoint.as_directory() if checkpoint is not None else None
        try:
            # Scanned also when Tune restores nothing: its last experiment snapshot can predate
            # the trial's first checkpoint (a killed driver), while the trial directory holds newer ones.
            restored = Path(ctx.__enter__()) if ctx is not None else None
            ckpt_dir, found = newest_checkpoint(restored, self.trial_dir, self.notices, self.earlier,
                                                {key for _, key in self.keys})
            if ckpt_dir is None and self.notices:
                self.notices.append("no intact checkpoint left: the trial's unfinished seeds restart "
                                    "from epoch 0")
            sources: dict[str, Path] = {}
            if ckpt_dir is not None and found is not None:
                self.state, sources = upgrade_state(found, ckpt_dir, self.keys)
            for seed, key in self.keys:
                replica = self.state["replicas"].get(key)
                source = sources.get(key)
                if key in self.state["done"] or replica is None or source is None or not source.is_dir():
                    self.state["replicas"].pop(key, None)
                    if finished_result(self.out_dirs[key], resolve_run_config(self.config, seed, key)) is None:
                        _restore(self.out_dirs[key], None)
                    continue
                _restore(self.out_dirs[key], source)
                self.resumed[key] = int(replica["epoch"])
                self.replay.add(key)
        finally:
            if ctx is not None:
                ctx.__exit__(None, None, None)

    def pending(self) -> list[tuple[int, str, Any]]:
        """(seed, run key, RunConfig) of every seed still to train, in training order, each with
        its trial file written. Seeds that already finished (their ``result.json`` with this
        run identity) are reported again instead: the driver's writes are idempotent, and a
        killed driver may not have recorded them."""
        todo = []
        for seed, key in self.keys:
            cfg = resolve_run_config(self.config, seed, key)
            done = finished_result(self.out_dirs[key], cfg)
            if done is not None:
                self.finish(seed, key, done, skipped=True)
            else:
                write_trial_file(self.out_dirs[key], self.config, seed,
                                 self.trial_dir.name if self.trial_dir is not None else None)
                todo.append((seed, key, cfg))
        return todo

    def recorder(self, seed: int, key: str) -> TrialRecorder:
        return TrialRecorder(seed=seed, key=key, trial=self)

    def report(self, key: str, result: dict[str, Any], *, checkpoint_dir: Path | None = None) -> None:
        """Report one seed's result to Tune with a checkpoint of the whole trial.

        ``checkpoint_dir`` is the reporting seed's trainer checkpoint as the trainer just saved
        it; the other unfinished seeds' checkpoints are looked up (and verified) in their run
        directories. The first report of a restored seed carries its restored epoch history,
        so the driver logs every epoch a killed driver had buffered but not written.
        """
        from ray import tune

        from locattn.training import checkpoint as ckpt

        result = {**self.base, "resumed_from": self.resumed.get(key, 0), **result}
        if self.notices:
            result[NOTICES], self.notices = self.notices, []
        if key in self.replay:
            self.replay.discard(key)
            history = self.state["replicas"].get(key, {}).get("history", [])
            result.setdefault("history", [dict(h) for h in history])
        sources: dict[str, Path] = {}
        for _, k in self.keys:
            if k in self.state["done"] or k not in self.state["replicas"]:
                continue
            found = checkpoint_dir if k == key and checkpoint_dir is not None else ckpt.find_checkpoint(self.out_dirs[k])
            if found is not None:
                sources[f"{RUN_SUBDIR}/{k}"] = found
        staged = _stage(self.staging, self.state, sources)
        tune.report(result, checkpoint=tune.Checkpoint.from_directory(str(staged)))
        shutil.rmtree(staged, ignore_errors=True)

    def finish(self, seed: int, key: str, result: Any, *, skipped: bool) -> None:
        """Report a seed's final metrics (and, on the trial's last seed, the objective)."""
        final = final_metrics(self.out_dirs[key], result)
        if skipped:  # this attempt trained none of its epochs: it resumed from the last one
            self.resumed.setdefault(key, int(final.get("epochs_run", 0)))
        self.state["scores"][self.score_key(seed, key)] = final.get(self.t["metric"])
        if key not in self.state["done"]:
            self.state["done"].append(key)
        history = self.state["replicas"].pop(key, {}).get("history", [])
        report: dict[str, Any] = {"kind": "seed_final", "seed": seed, "run_key": key, **final}
        if skipped and getattr(result, "history", None):
            # Finished in an earlier attempt: the driver may have lost buffered epochs of it.
            report["history"] = [dict(h) for h in result.history]
        elif key in self.replay:  # restored at its last epoch: nothing else replays its history
            report["history"] = [dict(h) for h in history]
        if len(self.state["done"]) == len(self.keys):
            scores = [self.state["scores"].get(self.score_key(s, k)) for s, k in self.keys]
            if all(isinstance(v, (int, float)) for v in scores):
                report[OBJECTIVE] = float(statistics.median(scores))
            report["seeds_done"] = len(self.keys)
        self.report(key, report)
        prune_finished_run(self.out_dirs[key], self.keep)

    def score_key(self, seed: int, key: str) -> str:
        """Where ``state["scores"]`` keeps a run's search metric: its seed (a trial's seeds are
        distinct), or its run key when the trial packs hparams points (seeds repeat)."""
        return key if self.t.get("points") else str(seed)

    def close(self) -> None:
        """Every seed finished: drop the model files from the trial's Tune checkpoints (and
        from those of its earlier attempts)."""
        for folder in (self.trial_dir, *self.earlier):
            _strip_finished(folder)


def upgrade_state(found: Mapping[str, Any], ckpt_dir: Path, keys: list[tuple[int, str]]
                   ) -> tuple[dict[str, Any], dict[str, Path]]:
    """A restored trial state in today's layout, and where in ``ckpt_dir`` each of its
    replicas' trainer checkpoints lies.

    Solo trials saved before solo and packed trials shared :class:`Trial` kept their progress
    as (``seed_index``, ``epoch``, ``history``) with the one trainer checkpoint at ``run/``;
    that is read as the same progress, so their studies resume where they stopped.
    """
    state = {k: v for k, v in found.items() if k not in ("files", "packed")}
    if "seed_index" not in state:
        state.setdefault("replicas", {})
        state.setdefault("done", [])
        state.setdefault("scores", {})
        return state, {key: ckpt_dir / RUN_SUBDIR / key for key in state["replicas"]}
    ordered = [key for _, key in keys]
    index = min(int(state["seed_index"]), len(ordered))
    upgraded: dict[str, Any] = {"replicas": {}, "done": ordered[:index],
                                "scores": dict(state.get("scores") or {})}
    sources: dict[str, Path] = {}
    if index < len(ordered) and int(state.get("epoch", 0)) > 0:
        key = ordered[index]
        upgraded["replicas"][key] = {"epoch": int(state["epoch"]),
                                     "history": list(state.get("history") or [])}
        sources[key] = ckpt_dir / RUN_SUBDIR
    return upgraded, sources


def staged_runs(ckpt_dir: Path) -> dict[str, tuple[int, Path]]:
    """Run key -> (epoch, trainer checkpoint directory) of every seed whose model files a
    complete Tune checkpoint of a trial holds (empty when it is incomplete or holds none)."""
    state = read_complete(ckpt_dir)
    if state is None:
        return {}
    if "seed_index" in state:  # the layout before solo and packed trials shared one skeleton
        path = ckpt_dir / RUN_SUBDIR
        return {"": (int(state.get("epoch", 0)), path)} if (path / layout.CHECKPOINT_STATE).is_file() else {}
    out = {}
    for key, replica in (state.get("replicas") or {}).items():
        path = ckpt_dir / RUN_SUBDIR / key
        if (path / layout.CHECKPOINT_STATE).is_file():
            out[key] = (int(replica.get("epoch", 0)), path)
    return out


def run_trial(config: dict[str, Any]) -> None:
    """Tune function trainable: train every seed of the trial, resuming from a Tune checkpoint.

    A packed trial (:func:`is_packed`) trains its unfinished seeds together. A seed whose
    training fails there (e.g. a non-finite loss) does not stop the others: they finish and
    are recorded, then the trial raises that seed's error so Tune retries or records it. A solo
    trial trains them one after another; a failing seed ends the trial at once.
    """
    t = config["trial"]
    try:
        import torch

        torch.set_num_threads(max(1, int(t["cpus"])))
    except ImportError:  # pragma: no cover - torch is a core dependency
        pass
    trial = Trial(config)
    trial.restore()
    todo = trial.pending()
    if is_packed(config) and todo:
        from locattn.packed import train_packed

        results = train_packed([cfg for _, _, cfg in todo], [trial.out_dirs[k] for _, k, _ in todo],
                               [trial.recorder(seed, key) for seed, key, _ in todo], resume=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        for (seed, key, _), result in zip(todo, results):
            if not isinstance(result, BaseException):
                trial.finish(seed, key, result, skipped=False)
        if errors:
            raise errors[0]
    elif todo:
        train = load_train_fn(t["train_fn"])
        for seed, key, cfg in todo:
            result = train(cfg, trial.out_dirs[key], recorder=trial.recorder(seed, key), resume=True)
            trial.finish(seed, key, result, skipped=False)
    trial.close()
