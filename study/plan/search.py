"""How Tune picks trials: the grid queue, the scheduler, and Optuna search per cell.

:class:`TrialQueue` hands out a grid study's trial descriptors in order; :class:`OpenTrialsScheduler`
runs them first-in first-out without scanning finished trials. For a ``search:`` block, Optuna
searches each cell behind one Tune ``Searcher``:

Each (cell, grid-hparams point) gets its own Optuna study (stored in ``<study>/optuna.db``) and
``num_samples`` search points. A search point is one Tune trial that trains every seed; the
sampler is told the median of the seeds' final scores only when the trial finished all of them.
Intermediate results are never reported (no pruning, no partial budgets as complete results),
and a trial that fails is told to Optuna as FAIL.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch
from ray.tune.utils.util import unflatten_dict

from study.trial.trainable import OBJECTIVE

#: Optuna user attribute of a search point: the sampler's RNG states after it was drawn.
RNG_ATTR = "locattn.sampler_rng"


class TrialQueue(Searcher):
    """Tune searcher of a grid study: hands out the trial descriptors in order, O(1) per trial.

    (``tune.grid_search`` over N descriptors deep-copies the whole list for every trial it
    generates: O(N) each, O(N^2) per study.) A resumed study plans a new queue from the record
    (``study.driver.launch``): Tune's saved state is never restored.
    """

    def __init__(self, items: list[dict[str, Any]]) -> None:
        super().__init__()
        self.items = items
        self.next = 0

    def set_search_properties(self, metric: Any, mode: Any, config: dict, **spec: Any) -> bool:
        return True

    def suggest(self, trial_id: str) -> dict | None:
        if self.next >= len(self.items):
            return Searcher.FINISHED
        self.next += 1
        return {"trial": self.items[self.next - 1]}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        return None

    def save(self, checkpoint_path: str) -> None:
        # (Tune's snapshots call this; nothing reads it back.)
        with open(checkpoint_path, "w") as f:
            json.dump({"next": self.next}, f)


class OpenTrialsScheduler(FIFOScheduler):
    """Tune's FIFO scheduling, without its scan over every trial of the study.

    ``FIFOScheduler.choose_trial_to_run`` walks the whole trial list (finished trials first)
    looking for a pending one, up to twice per controller step: ~10 scans per trial, so the
    study's total grew with N^2 (2.4 ms per call, 72 s of a 650 s driver profile at 3,000
    trials). This one keeps the trials Tune has added and not yet seen finish, in the order
    they were added (a retried trial goes to the back, as in Tune), and picks the same trial
    FIFO would: the first pending one, else the first paused one.
    """

    def __init__(self) -> None:
        super().__init__()
        self._open: dict[str, Any] = {}

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        self._open.pop(trial.trial_id, None)
        self._open[trial.trial_id] = trial

    def choose_trial_to_run(self, tune_controller: Any) -> Any:
        paused = None
        for trial_id, trial in list(self._open.items()):
            status = trial.status
            if status in (Trial.TERMINATED, Trial.ERROR):
                del self._open[trial_id]
            elif status == Trial.PENDING:
                return trial
            elif status == Trial.PAUSED and paused is None:
                paused = trial
        return paused

    def __getstate__(self) -> dict:
        # Pickled with the Tuner: trials are re-added (on_trial_add) when it is restored.
        return {**self.__dict__, "_open": {}}


def optuna_space(space: Mapping[str, Mapping[str, Any]]) -> dict[str, BaseDistribution]:
    """Spec distributions -> Optuna distributions (keys are dotted config paths)."""
    out: dict[str, BaseDistribution] = {}
    for key, d in space.items():
        kind = d["type"]
        if kind == "loguniform":
            out[key] = FloatDistribution(float(d["low"]), float(d["high"]), log=True)
        elif kind == "uniform":
            out[key] = FloatDistribution(float(d["low"]), float(d["high"]))
        elif kind == "int":
            out[key] = IntDistribution(int(d["low"]), int(d["high"]))
        else:
            out[key] = CategoricalDistribution(list(d["choices"]))
    return out


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    """An Optuna sampler by spec name."""
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


class CompleteOnlyOptunaSearch(OptunaSearch):
    """OptunaSearch that sees only complete results: no intermediate reports, ever."""

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        return None

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        if error or not result or OBJECTIVE not in result:
            # Incomplete (error or unfinished seeds): FAIL, never a value.
            super().on_trial_complete(trial_id, None, error=True)
        else:
            super().on_trial_complete(trial_id, {OBJECTIVE: result[OBJECTIVE]}, error=False)

    def suggest(self, trial_id: str) -> dict | None:
        point = super().suggest(trial_id)
        trial = self._ot_trials.get(trial_id)
        if trial is not None and isinstance(point, dict):
            # The sampler's RNGs after this point, in the Optuna store (JSON): a resumed study
            # continues the same sequence of points (:meth:`resume`).
            trial.set_user_attr(RNG_ATTR, {path: _rng_to_json(rng) for path, rng in _sampler_rngs(self._sampler)})
        return point

    def resume(self) -> tuple[int, list[Any]]:
        """Continue from the Optuna store alone (Tune's saved state is never read): the
        sampler's RNGs as after the newest point, and (points asked so far, the asked points
        that never got a result, oldest first: a killed driver's)."""
        trials = self._ot_study.get_trials(deepcopy=False)
        saved = next((t.user_attrs[RNG_ATTR] for t in reversed(trials) if RNG_ATTR in t.user_attrs), {})
        for path, rng in _sampler_rngs(self._sampler):
            if isinstance(saved.get(path), list):
                _rng_from_json(rng, saved[path])
        open_ = [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
        return len(trials), open_

    def adopt(self, trial_id: str, frozen: optuna.trial.FrozenTrial) -> dict:
        """Hand out an asked point again as Tune trial ``trial_id``; its result is told to the
        same Optuna trial."""
        self._ot_trials[trial_id] = optuna.trial.Trial(self._ot_study, frozen._trial_id)
        return unflatten_dict(dict(frozen.params))


def _sampler_rngs(sampler: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(attribute path, numpy RandomState) of a sampler and its nested samplers."""
    out = []
    for name, value in sorted(vars(sampler).items()):
        rng = getattr(value, "rng", None) if type(value).__name__ == "LazyRandomState" else value
        if isinstance(rng, np.random.RandomState):
            out.append((prefix + name, rng))
        elif hasattr(value, "sample_independent") and not prefix.count(".") > 2:
            out += _sampler_rngs(value, f"{prefix}{name}.")
    return out


def _rng_to_json(rng: Any) -> list:
    kind, keys, pos, has_gauss, cached = rng.get_state()
    return [kind, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)]


def _rng_from_json(rng: Any, state: list) -> None:
    kind, keys, pos, has_gauss, cached = state
    rng.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def group_study_name(study: str, group: Mapping[str, Any]) -> str:
    """The Optuna study of one group, named for optuna-dashboard by what it searches:
    ``search_lr-smoke · task=copy,variant=onestep`` (then any grid hparams, ``· lr=1e-3``)."""
    hparams = [f"{k}={v}" for k, v in sorted((group.get("hparams") or {}).items())]
    return " · ".join([study, str(group["cell"]), *hparams])


class CellSearch(Searcher):
    """Round-robin over groups (cell x grid hparams), one Optuna study per group."""

    def __init__(
        self,
        *,
        groups: list[dict[str, Any]],
        space: Mapping[str, Mapping[str, Any]],
        num_samples: int,
        sampler: str,
        sampler_seed: int,
        mode: str,
        storage_url: str,
        study: str,
    ) -> None:
        super().__init__(metric=OBJECTIVE, mode=mode)
        self.groups = groups
        self.num_samples = num_samples
        self.count = [0] * len(groups)
        self.owner: dict[str, int] = {}
        self.subs = []
        dists = optuna_space(space)
        existing = set(optuna.study.get_all_study_names(optuna.storages.RDBStorage(storage_url)))
        for i, group in enumerate(groups):
            name = group_study_name(study, group)
            if f"{study}:{i}" in existing and name not in existing:
                name = f"{study}:{i}"  # that group's points are stored under its index: keep them
            storage = optuna.storages.RDBStorage(storage_url)
            self.subs.append(
                CompleteOnlyOptunaSearch(
                    space=dists,
                    metric=OBJECTIVE,
                    mode=mode,
                    sampler=make_sampler(sampler, sampler_seed + i),
                    study_name=name,
                    storage=storage,
                )
            )
        # A resumed study: the points asked so far count, and those that never got a result
        # are handed out again first, with the same values (their runs continue).
        self.reissue: list[tuple[int, Any]] = []
        for i, sub in enumerate(self.subs):
            self.count[i], open_ = sub.resume()
            self.reissue += [(i, frozen) for frozen in open_]

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return True

    def suggest(self, trial_id: str) -> dict | None:
        if self.reissue:
            i, frozen = self.reissue.pop(0)
            self.owner[trial_id] = i
            return {"trial": dict(self.groups[i]), "search": self.subs[i].adopt(trial_id, frozen)}
        open_groups = [i for i, n in enumerate(self.count) if n < self.num_samples]
        if not open_groups:
            return Searcher.FINISHED
        i = min(open_groups, key=lambda g: (self.count[g], g))
        point = self.subs[i].suggest(trial_id)
        if point is None or point == Searcher.FINISHED:
            return point
        self.count[i] += 1
        self.owner[trial_id] = i
        return {"trial": dict(self.groups[i]), "search": dict(point)}

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        return None

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        i = self.owner.get(trial_id)
        if i is not None:
            self.subs[i].on_trial_complete(trial_id, result, error)

    def save(self, checkpoint_path: str) -> None:
        # (Tune's snapshots call this; nothing reads it back: a resumed study rebuilds the
        # search from optuna.db, see __init__.)
        with open(checkpoint_path, "w") as f:
            json.dump({"count": self.count}, f)
