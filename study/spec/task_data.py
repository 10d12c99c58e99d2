"""Checks of a resolved spec before it launches: is it suspiciously large (:data:`SIZE_LIMITS`),
and can every task that reads user-supplied files read them.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from locattn.config import make_run_config
from study import cost
from study.spec.checks import SpecError
from study.spec.model import StudySpec


SIZE_LIMITS = {"runs": 20_000, "epochs": 100_000, "cpu_hours": 50_000.0}


def size_warnings(spec: StudySpec) -> list[str]:
    """Why a spec is suspiciously large (runs, epochs per run, estimated CPU time), or []."""
    out = []
    if spec.n_runs() > SIZE_LIMITS["runs"]:
        out.append(f"{spec.n_runs():,} runs (more than {SIZE_LIMITS['runs']:,})")
    max_epochs = max(make_run_config(task=c.task, variant=c.variant, overrides=c.overrides).optim.epochs
                     for c in spec.cells)
    cells = cost.cell_costs(spec, cost.load_calibration())
    cpu_seconds = cost.study_seconds(cells) * max(1.0, spec.cpus) if cells else 0.0
    if max_epochs > SIZE_LIMITS["epochs"]:
        out.append(f"up to {max_epochs:,} epochs per run (more than {SIZE_LIMITS['epochs']:,})")
    if cpu_seconds / 3600 > SIZE_LIMITS["cpu_hours"]:
        out.append(f"~{cpu_seconds / 3600:,.0f} CPU hours estimated (more than "
                   f"{SIZE_LIMITS['cpu_hours']:,.0f})")
    return out


def check_task_data(spec: StudySpec) -> list[str]:
    """Problems with user-supplied task data, found before anything is launched.

    Every distinct task config that reads files (CFQ, or any task with ``task.data_dir``) is
    loaded once here, so a missing directory, a missing file or a malformed line is reported
    with the file (and line) instead of failing every trial. A relative ``task.data_dir`` is a
    problem too: trials run in Ray's own working directories. Returns one message per problem.
    """
    # torch: study.spec (and so `study --help` and `study status`) must not import it
    from locattn.config import make_run_config
    from locattn.tasks import load_task

    problems: list[str] = []
    seen: set[str] = set()
    for cell in spec.cells:
        try:
            task = make_run_config(task=cell.task, variant=cell.variant, overrides=cell.overrides).task
        except (ValueError, KeyError, TypeError):
            continue  # reported by validation
        if not task.data_dir and task.name != "cfq":
            continue  # generated data
        key = json.dumps(asdict(task), sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        if task.data_dir and not Path(task.data_dir).is_absolute():
            problems.append(
                f"cell {cell.cell}: task.data_dir={task.data_dir!r} is a relative path, but trials run "
                f"in Ray's own working directories; give it as an absolute path (from here: "
                f"{str(Path(task.data_dir).resolve())!r})")
            continue
        try:
            load_task(task, use_cache=False)
        except (OSError, ValueError) as exc:
            problems.append(f"cell {cell.cell}: {exc}")
    return problems


def require_task_data(spec: StudySpec) -> None:
    """Raise :class:`SpecError` naming the spec file if :func:`check_task_data` finds problems."""
    problems = check_task_data(spec)
    if problems:
        hint = ""
        if any("data_dir" in p for p in problems):
            hint = (f" (set task.data_dir under `overrides:` in {spec.path} to the absolute path of "
                    "the directory holding those files)")
        raise SpecError(f"{spec.path}: task data: " + "; ".join(problems) + hint)
