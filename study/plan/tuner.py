"""What a study's Tuner runs: its trials planned from the spec and the record, the searcher
that hands them out, and the one ``TuneConfig``.

A launch and a resume plan the same way (a resume never restores Tune's pickled state):
a grid study queues the trials the record does not hold finished; a search study runs Optuna
per cell, rebuilt from ``optuna.db``. Imports Ray Tune and Optuna: only the driver imports this.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, TextIO

from ray import tune

from locattn.config import make_run_config
from record import layout, schema
from record.layout import StudyPaths
from record.store import sqlite_uri
from record.summary import SELECTION_KEY
from study.recording.meta import StudyMeta
from study.plan.search import CellSearch, OpenTrialsScheduler, TrialQueue
from study.spec import StudySpec
from study.trial.trainable import TrialDescriptor, run_trial, trial_dirname

if TYPE_CHECKING:
    from ray.tune import Callback
    from ray.tune.search import Searcher
    from study.trial.trainable import Trainer
    from ray.tune.experiment import Trial

    from record.writer import RunState

#: Tune checkpoints kept per trial. Tune also snapshots its whole experiment state (O(trials)
#: bytes) whenever one trial has reported this many checkpoints since the last snapshot, so
#: that a snapshot never names a pruned checkpoint. At 3 (one per epoch) a study of N short
#: trials wrote ~N snapshots of O(N) bytes: quadratic. At 10, a forced snapshot comes at most
#: once per 10 epochs of the fastest trial and short trials never force one; the rest follow
#: Tune's timer (``TUNE_GLOBAL_CHECKPOINT_S``, default auto: ~5 % of the driver's time).
#: Finished trials drop the model files of their checkpoints (study.trial.trainable), so the
#: disk cost of keeping 10 is paid only by running trials.
TUNE_CHECKPOINTS_KEPT = 10


def plan_trials(spec: StudySpec, paths: StudyPaths, meta: StudyMeta, runs: Mapping[str, RunState]
                ) -> tuple[list[TrialDescriptor], int]:
    """(trial descriptors, trials skipped): a grid study's trials the record does not hold
    finished (``runs``: run key -> :class:`record.writer.RunState` of the record's runs), or a
    search study's cell groups (one per cell x hparams point)."""

    common = dict(study=meta.name, study_dir=str(paths.dir), cpus=spec.cpus, gpus=spec.gpus,
                  metric=spec.search.metric if spec.search else SELECTION_KEY,
                  pack=spec.pack_seeds,
                  train_path=meta.train_path)
    if spec.search is not None:
        return [TrialDescriptor(cell=cell.cell, task=cell.task, variant=cell.variant,
                                overrides={**cell.overrides, **hp}, hparams=hp, seeds=tuple(spec.seeds),
                                **common)
                for cell in spec.cells for hp in spec.hparam_points()], 0
    done = {k for k, s in runs.items() if s.status == schema.STATUS_FINISHED}
    trials, skipped = [], 0
    for t in spec.grid_trials():
        desc = TrialDescriptor(cell=t.cell, task=t.task, variant=t.variant, overrides=t.overrides,
                               hparams=t.hparams, seeds=t.seeds, points=t.points, cells=t.cells, **common)
        if all(k in done for _, k in desc.run_keys):
            skipped += 1
        else:
            trials.append(desc)
    return trials, skipped


def searcher(spec: StudySpec, paths: StudyPaths, meta: StudyMeta, trials: list[TrialDescriptor],
             skipped: int, out: TextIO) -> tuple[Any | None, int, int]:
    """(Tune searcher, trials it will run, trials skipped), from :func:`plan_trials`; no
    searcher when every trial is already finished in the record. A grid study queues its
    trials; a search study runs Optuna per cell."""
    name = meta.name
    if spec.search is not None:
        search = CellSearch(
            groups=[t.to_dict() for t in trials], space=spec.search.space, num_samples=spec.search.num_samples,
            sampler=spec.search.sampler, sampler_seed=spec.search.sampler_seed,
            mode=spec.search.mode, storage_url=sqlite_uri(paths.optuna_db), study=name,
        )
        return search, spec.n_trials(), 0
    if not trials:
        return None, 0, skipped
    return TrialQueue([t.to_dict() for t in trials]), len(trials), skipped


def make_tuner(spec: StudySpec, paths: StudyPaths, search_alg: Searcher, num_samples: int, limit: int | None,
               callbacks: list[Callback], trainer: Trainer | None = None) -> tune.Tuner:
    """The one Tuner of every study: a new one on every launch and resume, trials from
    ``search_alg``, first-in first-out, Tune's files in ``<study>/tune/``. ``trainer``: the
    solo trainer a caller's code chooses (``locattn.train.train`` when None; benchmarks pass a
    fake one); it never comes from the study folder."""
    fn = tune.with_parameters(run_trial, train=trainer) if trainer is not None else run_trial
    trainable = tune.with_resources(fn, {"cpu": spec.cpus, "gpu": spec.gpus})
    return tune.Tuner(
        trainable, param_space={},
        tune_config=tune.TuneConfig(search_alg=search_alg, num_samples=num_samples,
                                    max_concurrent_trials=limit or None, reuse_actors=True,
                                    scheduler=OpenTrialsScheduler(),
                                    trial_dirname_creator=_trial_dirname),
        run_config=tune.RunConfig(
            name=layout.TUNE_DIR, storage_path=str(paths.dir), callbacks=callbacks,
            failure_config=tune.FailureConfig(max_failures=spec.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=TUNE_CHECKPOINTS_KEPT), verbose=0))


def _trial_dirname(trial: Trial) -> str:
    return trial_dirname(trial.trial_id)


def max_epochs(spec: StudySpec) -> int:
    """Epochs of the study's first cell (the progress line's unit)."""
    cell = spec.cells[0]
    cfg = make_run_config(task=cell.task, variant=cell.variant,
                          overrides={**cell.overrides, **spec.hparam_points()[0]})
    return cfg.optim.epochs
