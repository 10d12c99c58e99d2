"""The Ray Tune function trainable: one trial trains one or more seeds with ``locattn``.

A trial config carries a ``trial`` descriptor (:class:`TrialDescriptor`, as JSON) and, for
Optuna studies, a ``search`` mapping of sampled values; the worker reads both into one
:class:`TrialDescriptor`, which resolves each run's ``RunConfig`` once. Solo and packed trials share one skeleton,
:class:`Trial`: a solo trial trains its seeds one after another with ``locattn.train.train``
(or the trainer the driver's code passes, never one a folder names), a packed trial trains them together (``locattn.packed.train_packed``); either way
each seed keeps its own run directory, trainer checkpoint, result and MLflow run.

Per epoch the trainer saves its checkpoint atomically and calls the seed's
:class:`TrialRecorder`, which reports the epoch metrics to Tune with a Tune checkpoint of the
whole trial: the trial state (per unfinished seed its last epoch and epoch history; the
finished seeds and their scores) and each unfinished seed's trainer checkpoint under
``run/<run key>/``. On restore those checkpoints are copied back into the seeds' ``out_dir/
checkpoint`` and training continues from them.

Results carry ``kind`` = ``epoch`` | ``seed_final``; the last ``seed_final`` of a trial carries
``objective``: the median over *all* seeds of the search metric, each at its full budget.
Nothing here runs at import time. Only the driver and its workers import this module (Ray and
torch are loaded by then), never a light entry point such as ``study --help``.
"""


from __future__ import annotations

import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import ray
import torch
from ray import tune

from locattn.packed import pack_groups, train_packed
from locattn.train import RunResult, find_checkpoint, share_compile_cache, train as locattn_train

from study.trial.descriptor import (OBJECTIVE, TrialDescriptor, final_metrics, finished_result,
                                    run_dir, trial_dirname, write_trial_file)
from study.spec.plugins import import_in_worker
from study.spec.retention import prune_finished_run, study_keep
from study.trial.trial_state import (RUN_SUBDIR, STATE_DIGEST, STATE_FILE, TUNE_DIRNAME, current_trial_dir,
                                     earlier_trial_dirs, newest_checkpoint, read_complete, restore_run_checkpoint, stage_checkpoint,
                                     staged_runs, state_digest, strip_finished, upgrade_state)

Trainer = Callable[..., RunResult]
"""A solo trainer: :func:`locattn.train.train`'s signature (``cfg``, ``out_dir``, keywords) and
result. A caller's code may pass another (benchmarks pass a fake one); a study folder never
names one."""

__all__ = [
    "NOTICES", "OBJECTIVE", "RUN_SUBDIR", "STATE_DIGEST", "STATE_FILE", "TUNE_DIRNAME", "Trainer", "Trial", "TrialDescriptor",
    "TrialRecorder", "final_metrics", "finished_result", "newest_checkpoint", "read_complete", "run_dir",
    "run_trial", "staged_runs", "state_digest", "trial_dirname", "upgrade_state",
]

#: Result key of the lines a trial asks the driver to print (checkpoint fallbacks, restarts).
NOTICES = "notices"


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
        if self.trial.desc.packed:  # the pack's checkpoint comes with its group's last report
            self.trial.defer(self.key, result, Path(checkpoint_dir))
        else:
            self.trial.report(self.key, result, checkpoint_dir=Path(checkpoint_dir))

    def on_pack_epoch(self) -> None:
        self.trial.flush()

    def on_end(self, result: RunResult) -> None:  # final metrics are reported by the trial
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

    def __init__(self, desc: TrialDescriptor) -> None:
        self.desc = desc
        self.keys = desc.run_keys
        self.out_dirs = {key: desc.run_dir(key) for _, key in self.keys}
        self.state: dict[str, Any] = {"replicas": {}, "done": [], "scores": {}}
        self.resumed: dict[str, int] = {}
        self.replay: set[str] = set()
        self.notices: list[str] = []  # fallbacks and restarts, sent to the driver with the next report
        self.deferred: tuple[str, dict[str, Any], Path] | None = None  # a packed epoch's last report (defer)
        self.base = {"node_id": ray.get_runtime_context().get_node_id(), "start_time": time.time()}
        self.staging = Path(desc.study_dir) / "staging" / f"{self.keys[0][1]}.{os.getpid()}"
        self.keep = study_keep(desc.study_dir)  # what a finished run keeps (study.spec.retention)
        self.trial_dir = current_trial_dir(desc.study_dir)
        self.earlier = [d for d in earlier_trial_dirs(desc.study_dir, list(self.out_dirs.values()))
                        if d != self.trial_dir]

    def restore(self) -> None:
        """Put every unfinished seed's trainer checkpoint back from the most advanced complete
        Tune checkpoint (the restored one or the trial directory's own, see
        :func:`newest_checkpoint`); a seed without one starts fresh."""
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
                    if finished_result(self.out_dirs[key], self.desc.run_config(key)) is None:
                        restore_run_checkpoint(self.out_dirs[key], None)
                    continue
                restore_run_checkpoint(self.out_dirs[key], source)
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
            cfg = self.desc.run_config(key)
            done = finished_result(self.out_dirs[key], cfg)
            if done is not None:
                self.finish(seed, key, done, skipped=True)
            else:
                write_trial_file(self.out_dirs[key], self.desc.alone(key), seed,
                                 self.trial_dir.name if self.trial_dir is not None else None)
                todo.append((seed, key, cfg))
        return todo

    def recorder(self, seed: int, key: str) -> TrialRecorder:
        return TrialRecorder(seed=seed, key=key, trial=self)

    def defer(self, key: str, result: dict[str, Any], checkpoint_dir: Path) -> None:
        """A packed replica's epoch result: the one deferred before it is reported now without a
        checkpoint, and this one waits for :meth:`flush` (the end of the pack's epoch), which
        reports it with the checkpoint of the whole pack. A pack of K thus stages and persists
        K run checkpoints once per epoch, not K times (K x K copies, which cost a 15-run pack
        more than its training pass saved)."""
        if self.deferred is not None:
            k, r, _ = self.deferred
            self.report(k, r, checkpoint=False)
        self.deferred = (key, result, checkpoint_dir)

    def flush(self) -> None:
        """Report the deferred result (:meth:`defer`) with a checkpoint of the whole trial."""
        if self.deferred is not None:
            key, result, checkpoint_dir = self.deferred
            self.deferred = None
            self.report(key, result, checkpoint_dir=checkpoint_dir)

    def report(self, key: str, result: dict[str, Any], *, checkpoint_dir: Path | None = None,
               checkpoint: bool = True) -> None:
        """Report one seed's result to Tune with a checkpoint of the whole trial (none when
        ``checkpoint`` is false: Tune keeps the last one).

        ``checkpoint_dir`` is the reporting seed's trainer checkpoint as the trainer just saved
        it; the other unfinished seeds' checkpoints are looked up (and verified) in their run
        directories. The first report of a restored seed carries its restored epoch history,
        so the driver logs every epoch a killed driver had buffered but not written.
        """
        result = {**self.base, "resumed_from": self.resumed.get(key, 0), **result}
        if self.notices:
            result[NOTICES], self.notices = self.notices, []
        if key in self.replay:
            self.replay.discard(key)
            history = self.state["replicas"].get(key, {}).get("history", [])
            result.setdefault("history", [dict(h) for h in history])
        if not checkpoint:
            tune.report(result)
            return
        sources: dict[str, Path] = {}
        for _, k in self.keys:
            if k in self.state["done"] or k not in self.state["replicas"]:
                continue
            found = checkpoint_dir if k == key and checkpoint_dir is not None else find_checkpoint(self.out_dirs[k])
            if found is not None:
                sources[f"{RUN_SUBDIR}/{k}"] = found
        staged = stage_checkpoint(self.staging, self.state, sources)
        tune.report(result, checkpoint=tune.Checkpoint.from_directory(str(staged)))
        shutil.rmtree(staged, ignore_errors=True)

    def finish(self, seed: int, key: str, result: RunResult | None, *, skipped: bool) -> None:
        """Report a seed's final metrics (and, on the trial's last seed, the objective)."""
        final = final_metrics(self.out_dirs[key], result)
        if skipped:  # this attempt trained none of its epochs: it resumed from the last one
            self.resumed.setdefault(key, int(final.get("epochs_run", 0)))
        self.state["scores"][self.score_key(seed, key)] = final.get(self.desc.metric)
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
        distinct), or its run key when the trial packs hparams points or cells (seeds repeat)."""
        return key if len(self.desc.points) > 1 or len(self.desc.cells) > 1 else str(seed)

    def close(self) -> None:
        """Every seed finished: drop the model files from the trial's Tune checkpoints (and
        from those of its earlier attempts)."""
        for folder in (self.trial_dir, *self.earlier):
            strip_finished(folder)


def run_trial(config: dict[str, Any], train: Trainer | None = None) -> None:
    """Tune function trainable: train every seed of the trial, resuming from a Tune checkpoint.

    A packed trial (:attr:`TrialDescriptor.packed`) trains its unfinished seeds together. A seed whose
    training fails there (e.g. a non-finite loss) does not stop the others: they finish and
    are recorded, then the trial raises that seed's error so Tune retries or records it. A solo
    trial trains them one after another; a failing seed ends the trial at once.
    """
    import_in_worker()  # the study's plugins register before any config resolves
    desc = TrialDescriptor.of(config)
    torch.set_num_threads(max(1, int(desc.cpus)))
    share_compile_cache(Path(desc.study_dir) / "inductor_cache")  # train_path=compiled: one compile per study
    trial = Trial(desc)
    trial.restore()
    todo = trial.pending()
    if desc.packed and todo:
        errors = []
        # One pack; an ablation pack on a path that cannot switch per replica (compiled,
        # graphed) trains as the packs of its cells, one after another.
        for group in pack_groups([cfg for _, _, cfg in todo]):
            part = [todo[i] for i in group]
            results = train_packed([cfg for _, _, cfg in part], [trial.out_dirs[k] for _, k, _ in part],
                                   [trial.recorder(seed, key) for seed, key, _ in part], resume=True)
            errors += [r for r in results if isinstance(r, BaseException)]
            for (seed, key, _), result in zip(part, results):
                if not isinstance(result, BaseException):
                    trial.finish(seed, key, result, skipped=False)
        if errors:
            raise errors[0]
    elif todo:
        train = train or locattn_train
        for seed, key, cfg in todo:
            result = train(cfg, trial.out_dirs[key], recorder=trial.recorder(seed, key), resume=True)
            trial.finish(seed, key, result, skipped=False)
    trial.close()
