"""A study's plugins: which modules the driver and every trial worker import, and the trust rule.

A spec names plugin modules under ``plugins:`` (importable module names); ``--plugin`` names more
on the command line; installed distributions declare the entry-point group ``locattn.plugins``
and load on their own (:mod:`locattn.registry`). The driver imports them before any config
resolves and hands the list to the trial workers in :data:`PLUGINS_ENV` (a local Ray's workers
inherit the environment; on a cluster it travels in the job's ``runtime_env`` with the plugins'
code as ``py_modules``).

A study folder never names code that runs: ``study resume`` imports a plugin that its
``study.json`` names only when it is installed (an entry point) or named again by ``--plugin``;
otherwise it stops in one line, importing nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from locattn import registry
from locattn.config import make_run_config
from locattn.labels import task_label
from locattn.models.config import packable_families
from locattn.variants import PAPER_LABELS
from study.spec.checks import SpecError

if TYPE_CHECKING:
    from study.spec import StudySpec
    from study.spec.model import Cell

PLUGINS_ENV = "LOCATTN_PLUGINS"
"""The environment variable (comma-separated module names) that tells a trial worker which
plugin modules to import before it resolves a config."""


def spec_plugins(raw: Mapping[str, Any], path: str | Path) -> list[str]:
    """The ``plugins:`` list of a raw spec, checked: a list of importable module names."""
    value = raw.get("plugins", [])
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"{path}: plugins: expected a list of module names (e.g. [my_attn]), "
                        f"got {value!r}")
    for name in value:
        if not all(part.isidentifier() for part in name.split(".")):
            raise SpecError(f"{path}: plugins: {name!r} is not an importable module name")
    return list(dict.fromkeys(value))


def import_named(modules: Iterable[str], source: str) -> list[str]:
    """Import ``modules`` (a spec's or the command line's: the user runs them); a plugin that
    fails is a :class:`SpecError`, one line naming it and the cause."""
    names = list(dict.fromkeys(modules))
    try:
        registry.import_plugins(names, source=source)
    except registry.PluginError as exc:
        raise SpecError(str(exc)) from None
    return names


def trusted_for_resume(named: Iterable[str], given: Iterable[str], where: str | Path) -> list[str]:
    """The plugins a resume may import: every module the study folder names must be installed
    (an entry point of ``locattn.plugins``) or named again on the command line (``given``).
    Otherwise a :class:`SpecError` in one line; nothing is imported here."""
    installed = {m.split(".")[0] for m in registry.installed_plugins().values()}
    given = list(given)
    for name in named:
        if name.split(".")[0] not in installed and name not in given:
            raise SpecError(
                f"{where}: the study names plugin {name!r}, which is not an installed plugin "
                f"(entry-point group {registry.ENTRY_POINT_GROUP}); a study folder never names code "
                f"that runs: resume with --plugin {name} if you trust it")
    return list(dict.fromkeys([*named, *given]))


def export_to_workers(modules: list[str]) -> None:
    """Tell trial workers started after this call which plugins to import (:data:`PLUGINS_ENV`)."""
    if modules:
        os.environ[PLUGINS_ENV] = ",".join(modules)
    else:
        os.environ.pop(PLUGINS_ENV, None)


def import_in_worker() -> None:
    """A trial worker's first step: import the plugins the driver named (:data:`PLUGINS_ENV`);
    entry-point plugins load on their own."""
    names = [n for n in os.environ.get(PLUGINS_ENV, "").split(",") if n]
    registry.import_plugins(names, source=PLUGINS_ENV)


def config_plugins(family: str, task: str, variant: str) -> dict[str, dict[str, str]]:
    """{plugin: {"distribution", "version", "sha256"}} of the plugins a run's attention family,
    task and variant come from (``{}`` for a built-in run): the provenance each run records
    (``locattn.plugins`` tag), as the package's own commit is recorded."""
    out: dict[str, dict[str, str]] = {}
    for kind, name in (("attender", family), ("task", task), ("variant", variant)):
        if not registry.has(kind, name):
            continue
        entry = registry.get(kind, name)
        if not entry.builtin and entry.plugin and entry.plugin not in out:
            prov = registry.provenance(entry.plugin)
            out[entry.plugin] = {k: prov[k] for k in ("distribution", "version", "sha256")}
    return out


def spec_plugin_sources(cells: Iterable[Cell]) -> dict[str, str]:
    """{plugin: sha256 of its source} over a spec's cells (their resolved configs)."""
    out: dict[str, str] = {}
    for cell in cells:
        cfg = make_run_config(task=cell.task, variant=cell.variant, overrides=cell.overrides)
        for plugin, prov in config_plugins(cfg.model.attention.family, cfg.task.name,
                                           cfg.variant).items():
            out[plugin] = prov["sha256"]
    return dict(sorted(out.items()))


def labels_tag(cells: Iterable[Cell]) -> str:
    """The parent run's ``locattn.labels`` tag: JSON ``{"task": {name: label}, "variant": {name:
    label}}`` of the cells' registered labels (built-ins' and plugins'), so that a report prints a
    spec-only plugin's rows under its own labels without importing it."""
    tasks = {c.task: task_label(c.task) for c in cells}
    variants = {c.variant: PAPER_LABELS.get(c.variant, c.variant) for c in cells}
    return json.dumps({"task": tasks, "variant": variants}, sort_keys=True)


def solo_note(spec: StudySpec) -> str:
    """One line when a spec whose trials get a GPU (which pack on their own) runs solo because a
    cell's attention family cannot pack (one registered ``packable=False``); ``""`` otherwise."""
    if spec.gpus <= 0 or spec.packed:
        return ""
    packable = set(packable_families())
    for cell in spec.cells:
        cfg = make_run_config(task=cell.task, variant=cell.variant, overrides=cell.overrides)
        family = cfg.model.attention.family
        if cfg.model.kind == "seq2seq" and family not in packable:
            return (f"cell {cell.cell}: attention.family {family!r} cannot pack (packable: "
                    f"{', '.join(sorted(packable))}); every trial of this study trains solo")
    return ""


def check_attenders(spec: StudySpec, where: str | Path) -> None:
    """At launch, on the driver, before any trial: every plugin attender the spec's cells use
    is built and tried on a tiny dry batch, alone and as a pack of two
    (:func:`locattn.models.attention.check.attender_problem`). A misfit is a :class:`SpecError`
    in one line naming the cell, the attender, its plugin and what is expected. Each distinct
    model configuration is tried once; the built-ins are not tried."""
    seen: set[str] = set()
    for cell in spec.cells:
        cfg = make_run_config(task=cell.task, variant=cell.variant, overrides=cell.overrides)
        family = cfg.model.attention.family
        if cfg.model.kind != "seq2seq":
            continue
        entry = registry.get("attender", family, where="attention.family")
        key = json.dumps([family, cfg.model.hidden_size, dict(cfg.model.attention.options)],
                         sort_keys=True, default=str)
        if entry.builtin or key in seen:
            continue
        seen.add(key)
        from locattn.models.attention.check import attender_problem  # torch: only for a plugin

        problem = attender_problem(cfg.model)
        if problem:
            raise SpecError(f"{where}: cell {cell.cell}: attender {family!r} (plugin "
                            f"{entry.plugin!r}, target {_target_name(entry)}): {problem}")


def _target_name(entry: Any) -> str:
    target = entry.target
    if isinstance(target, str):
        return target
    return f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', repr(target))}"


def check_sources(saved: Mapping[str, str], current: Mapping[str, str], where: str | Path,
                  allow: bool) -> None:
    """Refuse (one line) a resume whose plugins' source changed since the study was launched,
    unless ``allow`` (``--allow-dirty``, the flag for the package's own uncommitted code)."""
    for plugin, sha in saved.items():
        now = current.get(plugin)
        if now is not None and now != sha and not allow:
            raise SpecError(
                f"{where}: plugin {plugin!r} changed since this study's runs were trained (source "
                f"sha256 {sha[:12]} then, {now[:12]} now); restore it, launch under another --name, "
                "or pass --allow-dirty to mix both in one study")


def runtime_env(modules: list[str]) -> dict[str, Any] | None:
    """The job ``runtime_env`` that brings the plugins to a cluster's workers: their code as
    ``py_modules`` (each plugin's top-level module or package, and those its registrations'
    lazy targets live in) and :data:`PLUGINS_ENV`; None without plugins."""
    tops = dict.fromkeys(m.split(".")[0] for m in modules)
    for kind in registry.KINDS:
        for entry in registry.entries(kind, discover=False).values():
            if not entry.builtin and entry.plugin:
                tops.setdefault(entry.plugin)
    if not tops:
        return None
    shipped = []
    for top in tops:
        module = sys.modules.get(top)
        if module is None and top not in modules:
            # registered earlier in this process by code that is gone (a notebook's or a test's
            # module no longer on the path): nothing of it can reach a trial, nothing to ship
            if importlib.util.find_spec(top) is None:
                continue
        shipped.append(_module_path(module or importlib.import_module(top)))
    return {"py_modules": shipped, "env_vars": {PLUGINS_ENV: ",".join(modules)}}


def _module_path(module: Any) -> str:
    """Where ``module``'s code lies, as a path string: its package folder, or its one ``.py`` file.
    Ray takes module objects too, but a job submitted with its own ``runtime_env``
    (``ray job submit --runtime-env-json``) merges it with the driver's by ``deepcopy``, and a
    module object cannot be copied ("cannot pickle 'module' object": the job fails at start)."""
    paths = list(getattr(module, "__path__", None) or [])
    if len(paths) > 1:
        raise SpecError(f"plugin {module.__name__!r}: a namespace package spread over {len(paths)} "
                        "folders cannot be shipped to a cluster's workers; make it one package")
    return str(paths[0] if paths else module.__file__)


__all__ = ["PLUGINS_ENV", "check_attenders", "check_sources", "config_plugins", "export_to_workers", "spec_plugin_sources", "import_in_worker", "import_named",
           "runtime_env", "solo_note", "spec_plugins", "trusted_for_resume"]
