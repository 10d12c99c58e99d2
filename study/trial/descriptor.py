"""What one Tune trial trains: its descriptor (the JSON-safe ``trial`` entry of a Tune config),
the runs it trains (seed, run key, hparams), their resolved ``RunConfig``s and run folders, and
what a finished run left (its final metrics, its ``result.json``). No Ray.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field, is_dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from locattn.config import DEFAULT_TRAIN_PATH, make_run_config, run_identity, saved_train_path, train_path_entry
from locattn.folders import confined
from record import layout, schema
from record.layout import TRIAL_FILE
from study.spec.keys import run_key
from study.spec.model import Cell, TrialSpec

if TYPE_CHECKING:
    from locattn.config import RunConfig
    from locattn.train import RunResult

#: Result key of a trial's objective (the median over all its seeds of the search metric).
OBJECTIVE = "objective"
#: Key of a run's trial file listing the Tune trial directories that trained it, newest last. A
#: resumed study starts new Tune trials (it never restores Tune's pickled state), which find
#: the earlier attempts' checkpoints there. Only names of this form, directly under ``tune/``.
TUNE_TRIALS = "tune_trials"
TUNE_TRIAL_NAME = re.compile(r"trial_[A-Za-z0-9_]{1,64}")
TUNE_TRIALS_KEPT = 8


def trial_dirname(trial_id: str) -> str:
    """Name of a trial's directory under ``<study>/tune/`` (``trial_dirname_creator``)."""
    return f"trial_{trial_id}"


def run_dir(study_dir: str | Path, key: str) -> Path:
    """Per-run output directory ``<study>/runs/<key>`` (absolute, links resolved).

    Raises :class:`locattn.folders.FolderError` (one line) unless ``key`` is a run key and the
    folder resolves inside the study directory: a run folder, or ``runs/`` itself, that links
    out of the study is refused, since a study folder may come from elsewhere."""
    root = Path(study_dir).resolve()
    return confined(confined(root, layout.RUNS_DIR, what=f"study {root}"), key, what=f"study {root}", key=True)


@dataclass(frozen=True, kw_only=True)
class Member:
    """One run a trial trains: its seed, run key, selection hyperparameters and cell."""

    seed: int
    key: str
    hparams: dict[str, Any]
    cell: Cell


@dataclass(frozen=True, kw_only=True)
class TrialDescriptor(TrialSpec):
    """What one Tune trial trains, typed: its :class:`TrialSpec` (cell, overrides, hparams,
    seeds, packed points) and where and how it runs. It travels in the Tune config (and in each
    run folder's trial file) as :meth:`to_dict`, plain JSON: Tune writes the config to
    ``params.json`` and the driver rebuilds finished runs from trial files, so both must stay
    readable without this class. :meth:`of` reads it back, with the Optuna-sampled values of
    ``config["search"]``."""

    study: str
    study_dir: str
    cpus: float
    metric: str
    """The per-seed final metric a search optimises (its median over seeds is the objective)."""
    gpus: float = 0.0
    pack: bool = False
    train_path: str = DEFAULT_TRAIN_PATH
    """How the runs' training steps run, eager or graphed (``RunConfig.train_path``; operational:
    not part of a run's identity). A study sets it at launch or resume (``--train-path``)."""
    search: dict[str, Any] = field(default_factory=dict)
    """Optuna-sampled values (a search study), applied on top of every point."""
    packed_cells: tuple[str, ...] = ()
    """On a descriptor narrowed to one cell of an ablation pack (:meth:`alone`): the cell ids of
    the pack its trial trains, for the run's record and trial file; empty otherwise."""

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> "TrialDescriptor":
        """The descriptor of a trial config ``{"trial": <to_dict()>, "search": {...}}``."""
        t = config["trial"]
        return cls(study=t["study"], study_dir=str(t["study_dir"]), cell=t["cell"], task=t["task"],
                   variant=t["variant"], overrides=dict(t["overrides"]), hparams=dict(t["hparams"]),
                   seeds=tuple(int(s) for s in t["seeds"]), cpus=float(t["cpus"]),
                   gpus=float(t.get("gpus", 0.0)), metric=schema.current_metric(t["metric"]),
                   pack=bool(t.get("pack")), points=tuple(dict(p) for p in t.get("points") or ()),
                   train_path=saved_train_path(t), search=dict(config.get("search") or {}),
                   cells=tuple(Cell(cell=c["cell"], task=c["task"], variant=c["variant"],
                                    overrides=dict(c["overrides"])) for c in t.get("cells") or ()),
                   packed_cells=tuple(str(c) for c in t.get("packed_cells") or ()))

    def to_dict(self) -> dict[str, Any]:
        """The JSON-safe ``trial`` entry of a Tune config (without ``search``, which Tune
        samples). ``points`` is left out for one point, so a trial that packs no hparams keeps
        the descriptor its run folders' trial files hold."""
        out = {
            "study": self.study, "study_dir": str(self.study_dir), "cell": self.cell, "task": self.task,
            "variant": self.variant, "overrides": dict(self.overrides), "hparams": dict(self.hparams),
            "seeds": [int(s) for s in self.seeds], "cpus": float(self.cpus), "gpus": float(self.gpus),
            "metric": self.metric,
            "pack": bool(self.pack) or len(self.points) > 1,
        }
        if len(self.points) > 1:
            out["points"] = [dict(p) for p in self.points]
        out.update(train_path_entry(self.train_path))  # the default absent, like points: older trial files stay equal
        if len(self.cells) > 1:  # likewise
            out["cells"] = [{"cell": c.cell, "task": c.task, "variant": c.variant, "overrides": dict(c.overrides)}
                            for c in self.cells]
        if self.packed_cells:
            out["packed_cells"] = list(self.packed_cells)
        return out

    def alone(self, key: str | None) -> "TrialDescriptor":
        """This descriptor narrowed to the cell of the run ``key`` (None: the first run): itself
        for a trial of one cell;
        for an ablation pack the trial of that cell alone (its points and seeds), naming the pack's
        cells in :attr:`packed_cells`. What a run's record and trial file describe: a run of a
        pack reads as the same run of its own cell."""
        if len(self.cells) <= 1:
            return self
        c = self.member(key).cell
        return replace(self, cell=c.cell, task=c.task, variant=c.variant,
                       overrides={**c.overrides, **self.hparams}, cells=(),
                       packed_cells=tuple(x.cell for x in self.cells))

    @cached_property
    def members(self) -> tuple[Member, ...]:
        """Every run this trial trains, in training order: per cell (one unless the trial is an
        ablation pack), per hparams point (one unless the trial packs hparams axes) every seed.
        Their hparams are the point's plus the Optuna-sampled values."""
        out = []
        first = Cell(cell=self.cell, task=self.task, variant=self.variant, overrides=self.overrides)
        for cell in self.cells if len(self.cells) > 1 else (first,):
            for point in self.points if len(self.points) > 1 else (self.hparams,):
                hp = {**point, **self.search}
                out += [Member(seed=s, key=run_key(self.study, cell.cell, hp, s), hparams=hp, cell=cell)
                        for s in self.seeds]
        return tuple(out)

    @property
    def run_keys(self) -> list[tuple[int, str]]:
        """(seed, run key) of every run, in training order."""
        return [(m.seed, m.key) for m in self.members]

    @property
    def packed(self) -> bool:
        """Whether the trial trains its runs (seeds, hparams points, cells) together as one packed model."""
        return self.pack and len(self.members) > 1

    def member(self, key: str | None = None) -> Member:
        """The run ``key`` (default: the first run)."""
        return next((m for m in self.members if m.key == key), self.members[0])

    @cached_property
    def _resolved(self) -> dict[str, RunConfig]:
        return {}

    def run_config(self, key: str | None = None) -> RunConfig:
        """The resolved ``RunConfig`` of the run ``key`` (default: the first run), resolved once
        per descriptor."""
        m = self.member(key)
        if m.key not in self._resolved:
            self._resolved[m.key] = self._resolve(m)
        return self._resolved[m.key]

    def _resolve(self, m: Member) -> RunConfig:
        cfg = make_run_config(task=m.cell.task, variant=m.cell.variant, seed=m.seed,
                              overrides={**m.cell.overrides, **m.hparams})
        if self.gpus > 0:  # the trial's share of its one device sizes its pack (RunConfig.gpu_share)
            cfg = replace(cfg, device="cuda", gpu_share=min(1.0, self.gpus))
        if self.train_path != DEFAULT_TRAIN_PATH:
            cfg = replace(cfg, train_path=self.train_path)
        return replace(cfg, num_threads=max(1, int(self.cpus)))

    def run_dir(self, key: str) -> Path:
        """The run folder of ``key``."""
        return run_dir(self.study_dir, key)


def final_metrics(out_dir: Path, result: RunResult | None) -> dict[str, float]:
    """Final per-run metrics from the trainer: its ``RunResult`` or ``out_dir/result.json``.

    Returns flat MLflow keys: ``best_selection_score``, ``best_epoch``, ``epochs_run``,
    ``epochs_to_100`` and ``test.<split>.<metric>`` (a key of ``result.json`` by its former name
    under its current one).
    """
    if result is not None and hasattr(result, "final_metrics"):
        return {k: float(v) for k, v in result.final_metrics().items()}
    data: Mapping[str, Any] = {}
    path = out_dir / layout.RESULT_FILE
    if path.is_file():
        data = json.loads(path.read_text())
    elif result is not None:
        data = asdict(result) if is_dataclass(result) else dict(getattr(result, "__dict__", {}))
    out: dict[str, float] = {}
    for key in (*schema.RENAMED_METRICS, *schema.FINAL_METRICS):
        value = data.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[schema.current_metric(key)] = float(value)
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


def listed_trials(out_dir: Path) -> list[str]:
    """The Tune trial directory names a run's trial file lists (:data:`TUNE_TRIALS`), newest
    last; a name of any other form is left out."""
    try:
        names = json.loads((out_dir / TRIAL_FILE).read_text()).get(TUNE_TRIALS)
    except (OSError, ValueError, AttributeError):
        return []
    return [n for n in names if isinstance(n, str) and TUNE_TRIAL_NAME.fullmatch(n)] \
        if isinstance(names, list) else []


def write_trial_file(out_dir: Path, desc: TrialDescriptor, seed: int, tune_trial: str | None = None
                     ) -> None:
    """Record in ``out_dir`` which trial and seed it belongs to (for reconciliation), and the
    Tune trial directories that trained it (``tune_trial`` added last)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    body = {"trial": desc.to_dict(), "search": dict(desc.search), "seed": int(seed)}
    listed = [n for n in listed_trials(out_dir) if n != tune_trial] + ([tune_trial] if tune_trial else [])
    if listed:
        body[TUNE_TRIALS] = listed[-TUNE_TRIALS_KEPT:]
    tmp = out_dir / f".{TRIAL_FILE}.tmp"
    tmp.write_text(json.dumps(body, sort_keys=True, default=str))
    os.replace(tmp, out_dir / TRIAL_FILE)


def finished_result(out_dir: Path, cfg: RunConfig) -> RunResult | None:
    """The trainer's result if this exact run already finished (its result.json), else None.

    ``train`` deletes ``result.json`` when it starts and writes it last, so its presence with
    the same run identity means the run finished; it is never trained (or scored) twice.
    """
    path = out_dir / layout.RESULT_FILE
    if not path.is_file():
        return None
    from locattn.train import load_result  # here: torch; study.recording.runs (so `study --help`) imports us
    try:
        result = load_result(out_dir)
    except (ValueError, TypeError, KeyError, ImportError):
        return None
    return result if getattr(result, "run_identity", None) == run_identity(cfg) else None
