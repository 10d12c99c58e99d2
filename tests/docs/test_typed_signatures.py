"""Typed values for named concepts, checked statically (``ast``, no imports of the code).

In the public signatures of ``study/``, ``record/`` and ``reports/`` (module-level functions and
the methods of public classes; a name starting with ``_`` is private, dunders are public):

- a *bag* is a parameter or return annotated ``Any``, bare ``dict``/``Dict``, or
  ``dict``/``Dict``/``Mapping`` of ``Any`` values (alone or in a union, ``X | None``,
  ``Optional[X]``, a quoted annotation too). A signature with a bag is allowed only where it is
  listed below with why: a hook whose interface Tune (or Optuna, Python) fixes, or a value that
  has no name in the project yet (a YAML or JSON document before it is parsed, a value of any
  type by design);
- a parameter named after a concept the project has a type for (:data:`NAMED_CONCEPTS`: the
  spec, a run's config, the record writer, Tune's trial, ...) carries that type, bag or not,
  unless Tune's hook interface hands the value over untyped (:data:`TUNE_FORCED`).

``python tests/docs/test_typed_signatures.py [ROOT]`` prints the count of public signatures and of
those with a bag, and each one with its slots (``ROOT``: another checkout, e.g. an older commit's).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("study", "record", "reports")
BAG_NAMES = ("Any", "dict", "Dict")
MAPPING_NAMES = ("dict", "Dict", "Mapping", "MutableMapping")


# -- the counter -----------------------------------------------------------------------------


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def is_bag(node: ast.expr | None) -> bool:
    """Whether an annotation is ``Any``, a bare ``dict``, or a mapping of ``Any`` values (alone
    or in a union)."""
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return False
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return is_bag(node.left) or is_bag(node.right)
    if isinstance(node, (ast.Name, ast.Attribute)):
        return _name(node) in BAG_NAMES
    if isinstance(node, ast.Subscript):
        base = _name(node.value)
        if base == "Optional":
            return is_bag(node.slice)
        if base == "Union":
            return any(is_bag(e) for e in getattr(node.slice, "elts", [node.slice]))
        if base in MAPPING_NAMES and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) == 2:
            return _name(node.slice.elts[1]) == "Any"
    return False


def _public_functions(body: list[ast.stmt], prefix: str = ""):
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            dunder = node.name.startswith("__") and node.name.endswith("__")
            if dunder or not node.name.startswith("_"):
                yield prefix + node.name, node
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            yield from _public_functions(node.body, prefix + node.name + ".")


def _slots(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[str, ast.expr | None]]:
    """(name, annotation) of each parameter (``*args``, ``**kwargs`` so written) and ``return``."""
    a = fn.args
    out = [(x.arg, x.annotation) for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]]
    if a.vararg:
        out.append(("*" + a.vararg.arg, a.vararg.annotation))
    if a.kwarg:
        out.append(("**" + a.kwarg.arg, a.kwarg.annotation))
    return out + [("return", fn.returns)]


def signatures(source: str, module: str) -> dict[str, list[tuple[str, ast.expr | None]]]:
    """``module:qualname`` -> its slots, for each public function and method of ``source``."""
    tree = ast.parse(source)
    return {f"{module}:{name}": _slots(fn) for name, fn in _public_functions(tree.body)}


def bags(sigs: dict[str, list[tuple[str, ast.expr | None]]]) -> dict[str, list[str]]:
    """``module:qualname`` -> the names of its slots that are bags (:func:`is_bag`), for each
    signature with one."""
    out = {q: [s for s, ann in slots if is_bag(ann)] for q, slots in sigs.items()}
    return {q: s for q, s in out.items() if s}


def _module(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def tree_signatures(root: Path = ROOT) -> dict[str, list[tuple[str, ast.expr | None]]]:
    """Every public signature of the public modules of :data:`PACKAGES` under ``root``."""
    out: dict[str, list[tuple[str, ast.expr | None]]] = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).parts
            if any(p.startswith("_") and p != "__init__.py" for p in rel):
                continue
            out.update(signatures(path.read_text(), _module(path, root)))
    return out


def misnamed(sigs: dict[str, list[tuple[str, ast.expr | None]]]) -> dict[str, list[str]]:
    """``module:qualname`` -> ``param: annotation`` of each parameter named after a
    :data:`NAMED_CONCEPTS` concept that is a bag or has no annotation (a parameter of that name
    typed as something else, ``spec: Path``, is another thing of that name)."""
    out: dict[str, list[str]] = {}
    for q, slots in sigs.items():
        for name, ann in slots:
            want = NAMED_CONCEPTS.get(name.lstrip("*"))
            note = ast.unparse(ann) if ann is not None else "no annotation"
            if want is not None and (ann is None or is_bag(ann)) and not any(t in note for t in want):
                out.setdefault(q, []).append(f"{name}: {note}")
    return out


# -- what is allowed, and why -----------------------------------------------------------------

#: Parameter name -> the type names one of which it carries (in its annotation's text).
NAMED_CONCEPTS: dict[str, tuple[str, ...]] = {
    "spec": ("StudySpec",),
    "cfg": ("RunConfig",),
    "recorder": ("RecordCallback", "RecordWriter"),
    "trial": ("Trial",),
    "summary": ("StudySummary", "DryRunPlan"),
    "meta": ("StudyMeta",),
}

#: Parameters named like a concept that are another thing of that name: ``module:qualname`` ->
#: (the parameter, what it is).
NOT_THE_CONCEPT: dict[str, tuple[str, str]] = {
    "study.cost.calibration:merge_rates": ("meta", "a calibration table's provenance per device, not a study"),
}

# Interfaces others fix
_TUNE_RESULT = "Tune hands a trial's reported result over as a plain dict (Searcher/Callback hooks)"
_TUNE_RESULT_INFO = "Tune's Callback.on_trial_result: the result dict and **info of Tune's making"
_TUNE_INFO = "Tune's Callback hooks take **info of Tune's making"
_TUNE_SEARCH = "Tune's Searcher interface: set_search_properties(metric, mode, config, **spec), suggest -> a config dict"
_TUNE_SCHEDULER = "Tune's TrialScheduler hooks take its TuneController (no public type)"
_TUNE_REPORT = "a result as tune.report takes it: a dict of metric values of any kind"
_TUNE_CONFIG = "Tune's function trainable gets its config as a dict (the trial's descriptor, as JSON)"
_RAY_ENV = "Ray's runtime_env is a dict of Ray's keys (ray.init(runtime_env=...))"
_PICKLE = "pickle's __getstate__/__setstate__ protocol: a dict of the object's state"
_PROXY = "__getattr__ of a proxy: whatever MlflowClient's attribute is"
_ARGPARSE = "argparse's sub-parsers action (its class, argparse._SubParsersAction, is private)"
_REPLACE = "dataclasses.replace's keywords: any of StudyMeta's fields"

# Values that have no type of their own, by design
_ATTENTION_JSON = ("the trainer's attention.json as read (JSON; its keys are the per-step diagnostic's, "
                   "written by locattn.training.attention)")
_CALIBRATION_JSON = "a cost calibration file's JSON document (and its provenance) before it is a Calibration"
_SETS = "--set KEY=VALUE overrides: dotted key -> a YAML value of any type, before the spec resolves them"
_ANY_VALUE = "a value of any type by design: the function checks, canonicalises or prints whatever it is given"
_HPARAMS = "hyperparameters as the spec gives them: dotted key -> a YAML value of any type"
_YAML = "the spec's YAML (or a part of it) as read, before StudySpec is built from it"
_STUDY_JSON = "study.json as a JSON document, before StudyMeta.from_json (or after to_json, or in a migration)"
_TRIAL_JSON = "a JSON document of a trial (trial.json, Tune's trial state, a search group) as read or written"
_UI_JSON = "the JSON document the study ui's grid page reads"
_LOCK_JSON = "study.lock's JSON fields (the holder's PID, host, Ray session, ...)"
_TASK_DATA = "a task's data as locattn.tasks.load_task returns it (locattn types it Any)"
_PACK_MEMORY = ("locattn.training.memory.PackMemory or None: study reaches locattn through its public face "
                "(locattn.train, locattn.packed), which does not export the type")

#: Signatures whose bags an interface of Tune, Ray, Optuna, argparse or Python fixes:
#: ``module:qualname`` -> (bag slots, why).
TUNE_FORCED: dict[str, tuple[tuple[str, ...], str]] = {
    "record.writer:PatientClient.__getattr__": (('return',), _PROXY),
    "study.cli:add_export": (('sub',), _ARGPARSE),
    "study.cli:add_import": (('sub',), _ARGPARSE),
    "study.cli:add_launch": (('sub',), _ARGPARSE),
    "study.cli:add_migrate": (('sub',), _ARGPARSE),
    "study.cli:add_report": (('sub',), _ARGPARSE),
    "study.cli:add_resume": (('sub',), _ARGPARSE),
    "study.cli:add_runs": (('sub',), _ARGPARSE),
    "study.cli:add_schema": (('sub',), _ARGPARSE),
    "study.cli:add_status": (('sub',), _ARGPARSE),
    "study.cli:add_study_command": (('sub',), _ARGPARSE),
    "study.cli:add_ui": (('sub',), _ARGPARSE),
    "study.driver.process:init_ray": (('runtime_env',), _RAY_ENV),
    "study.plan.search:CellSearch.on_trial_complete": (('result',), _TUNE_RESULT),
    "study.plan.search:CellSearch.on_trial_result": (('result',), _TUNE_RESULT),
    "study.plan.search:CellSearch.set_search_properties": (('config', '**spec'), _TUNE_SEARCH),
    "study.plan.search:CellSearch.suggest": (('return',), _TUNE_SEARCH),
    "study.plan.search:CompleteOnlyOptunaSearch.adopt": (('return',), _TUNE_SEARCH),
    "study.plan.search:CompleteOnlyOptunaSearch.on_trial_complete": (('result',), _TUNE_RESULT),
    "study.plan.search:CompleteOnlyOptunaSearch.on_trial_result": (('result',), _TUNE_RESULT),
    "study.plan.search:CompleteOnlyOptunaSearch.suggest": (('return',), _TUNE_SEARCH),
    "study.plan.search:OpenTrialsScheduler.__getstate__": (('return',), _PICKLE),
    "study.plan.search:OpenTrialsScheduler.choose_trial_to_run": (('tune_controller', 'return'), _TUNE_SCHEDULER),
    "study.plan.search:OpenTrialsScheduler.on_trial_add": (('tune_controller',), _TUNE_SCHEDULER),
    "study.plan.search:TrialQueue.on_trial_complete": (('result',), _TUNE_RESULT),
    "study.plan.search:TrialQueue.set_search_properties": (('metric', 'mode', 'config', '**spec'), _TUNE_SEARCH),
    "study.plan.search:TrialQueue.suggest": (('return',), _TUNE_SEARCH),
    "study.recording.meta:StudyMeta.replace": (('**changes',), _REPLACE),
    "study.recording.progress:ProgressLine.__getstate__": (('return',), _PICKLE),
    "study.recording.progress:ProgressLine.__setstate__": (('state',), _PICKLE),
    "study.recording.progress:ProgressLine.on_experiment_end": (('**info',), _TUNE_INFO),
    "study.recording.progress:ProgressLine.on_step_end": (('**info',), _TUNE_INFO),
    "study.recording.progress:ProgressLine.on_trial_error": (('**info',), _TUNE_INFO),
    "study.recording.progress:ProgressLine.on_trial_result": (('result', '**info'), _TUNE_RESULT_INFO),
    "study.recording.progress:ProgressLine.on_trial_start": (('**info',), _TUNE_INFO),
    "study.recording.progress:running_label": (('result',), _TUNE_RESULT),
    "study.recording.record_callback:RecordCallback.__getstate__": (('return',), _PICKLE),
    "study.recording.record_callback:RecordCallback.__setstate__": (('state',), _PICKLE),
    "study.recording.record_callback:RecordCallback.on_experiment_end": (('**info',), _TUNE_INFO),
    "study.recording.record_callback:RecordCallback.on_step_end": (('**info',), _TUNE_INFO),
    "study.recording.record_callback:RecordCallback.on_trial_complete": (('**info',), _TUNE_INFO),
    "study.recording.record_callback:RecordCallback.on_trial_error": (('**info',), _TUNE_INFO),
    "study.recording.record_callback:RecordCallback.on_trial_recover": (('**info',), _TUNE_INFO),
    "study.recording.record_callback:RecordCallback.on_trial_result": (('result', '**info'), _TUNE_RESULT_INFO),
    "study.recording.record_callback:RecordCallback.on_trial_start": (('**info',), _TUNE_INFO),
    "study.recording.record_callback:RecordCallback.setup": (('**info',), _TUNE_INFO),
    "study.spec.plugins:runtime_env": (('return',), _RAY_ENV),
    "study.trial.descriptor:TrialDescriptor.of": (('config',), _TUNE_CONFIG),
    "study.trial.trainable:Trial.defer": (('result',), _TUNE_REPORT),
    "study.trial.trainable:Trial.report": (('result',), _TUNE_REPORT),
    "study.trial.trainable:run_trial": (('config',), _TUNE_CONFIG),
}

#: Signatures whose bags hold a value the project has no type for, by design: ``module:qualname``
#: -> (bag slots, why).
NO_NAME_YET: dict[str, tuple[tuple[str, ...], str]] = {
    "study.cost.packs:cell_memory": (('return',), _PACK_MEMORY),
    "study.cost.sampling:sample_data": (('return',), _TASK_DATA),
    "reports.exhibits:read_artifact_json": (('return',), _ATTENTION_JSON),
    "reports.exhibits:trace_caption": (('record',), _ATTENTION_JSON),
    "reports.exhibits:trace_figure": (('record',), _ATTENTION_JSON),
    "reports.figures:attention_figure_from_json": (('record',), _ATTENTION_JSON),
    "study.cost.calibration:calibration_from_dict": (('body',), _CALIBRATION_JSON),
    "study.cost.calibration:calibration_to_dict": (('return',), _CALIBRATION_JSON),
    "study.cost.calibration:merge_rates": (('meta',), _CALIBRATION_JSON),
    "study.driver.launch:launch": (('sets',), _SETS),
    "study.driver.launch:new_meta": (('raw', 'sets'), _SETS),
    "study.driver.relaunch:relaunch_meta": (('raw',), _YAML),
    "study.driver.relaunch:refuse_other_spec": (('sets',), _SETS),
    "study.driver.launch:resume": (('sets',), _SETS),
    "study.driver.relaunch:resume_sets": (('sets',), _SETS),
    "study.driver.relaunch:spec_with_sets": (('sets',), _SETS),
    "study.driver.process:StudyLock.write": (('**extra',), _LOCK_JSON),
    "study.plan.search:group_study_name": (('group',), _TRIAL_JSON),
    "study.recording.folder:new_study_paths": (('name',), _ANY_VALUE),
    "study.recording.folder:read_meta": (('return',), _STUDY_JSON),
    "study.recording.meta:StudyMeta.from_json": (('doc',), _STUDY_JSON),
    "study.recording.meta:StudyMeta.to_json": (('return',), _STUDY_JSON),
    "study.recording.migrate:meta_format": (('doc',), _STUDY_JSON),
    "study.recording.migrate:upgrade_meta": (('doc',), _STUDY_JSON),
    "study.recording.naming:run_name": (('hparams',), _HPARAMS),
    "study.recording.naming:short_value": (('value',), _ANY_VALUE),
    "study.recording.record_callback:is_final_metric": (('value',), _ANY_VALUE),
    "study.recording.runs:started_under_other_values": (('sets',), _SETS),
    "study.recording.status:expected_cells": (('resolved',), _STUDY_JSON),
    "study.recording.ui:view_state": (('return',), _UI_JSON),
    "study.spec.canon:canonical": (('value', 'return'), _ANY_VALUE),
    "study.spec.canon:canonical_mapping": (('values', 'return'), _ANY_VALUE),
    "study.spec.canon:canonical_of": (('tp', 'value', 'return'), _ANY_VALUE),
    "study.spec.canon:field_type": (('return',), _ANY_VALUE),
    "study.spec.canon:type_name": (('tp',), _ANY_VALUE),
    "study.spec.checks:check_int": (('value',), _ANY_VALUE),
    "study.spec.checks:check_list": (('value',), _ANY_VALUE),
    "study.spec.checks:check_mapping": (('value', 'return'), _ANY_VALUE),
    "study.spec.checks:check_number": (('value',), _ANY_VALUE),
    "study.spec.checks:check_range": (('value',), _ANY_VALUE),
    "study.spec.checks:check_study_name": (('name',), _ANY_VALUE),
    "study.spec.checks:short_repr": (('value',), _ANY_VALUE),
    "study.spec.checks:spec_error": (('valid',), _ANY_VALUE),
    "study.spec.checks:spelling": (('value',), _ANY_VALUE),
    "study.spec.grid:canonical_grid": (('grid', 'return'), _YAML),
    "study.spec.grid:expand_cells": (('grid', 'overrides'), _YAML),
    "study.spec.grid:parse_pack": (('merged', 'hparams', 'search'), _YAML),
    "study.spec.grid:parse_search": (('raw',), _YAML),
    "study.spec.grid:restrict_grid": (('grid',), _YAML),
    "study.spec.grid:validate_configs": (('hparams',), _HPARAMS),
    "study.spec.json_schema:spec_schema": (('return',), _YAML),
    "study.spec.keys:cell_id": (('axes',), _HPARAMS),
    "study.spec.keys:format_value": (('value',), _ANY_VALUE),
    "study.spec.keys:hparams_json": (('hparams',), _HPARAMS),
    "study.spec.keys:run_key": (('hparams',), _HPARAMS),
    "study.spec.plugins:spec_plugins": (('raw',), _YAML),
    "study.spec.yaml:read_yaml": (('return',), _YAML),
    "study.spec:apply_profile": (('raw',), _YAML),
    "study.spec:apply_sets": (('raw', 'sets', 'return'), _YAML),
    "study.spec:assemble_spec": (('description', 'grid', 'hparams', 'search_raw', 'search', 'overrides', 'pack_axes'), _YAML),
    "study.spec:check_cost": (('merged',), _YAML),
    "study.spec:check_plugins_imported": (('raw',), _YAML),
    "study.spec:check_resources": (('merged',), _YAML),
    "study.spec:check_seeds": (('seeds_raw',), _YAML),
    "study.spec:check_tables": (('tables',), _YAML),
    "study.spec:declared_tables": (('tables', 'grid'), _YAML),
    "study.spec.compare:packs_seeds": (('resolved',), _YAML),
    "study.spec:parse_sets": (('return',), _YAML),
    "study.spec:resolve_spec": (('raw',), _YAML),
    "study.spec.compare:same_spec": (('old', 'new'), _YAML),
    "study.spec.compare:spec_changes": (('old', 'new'), _YAML),
    "study.spec.compare:widens": (('old', 'new'), _YAML),
    "study.trial.descriptor:TrialDescriptor.to_dict": (('return',), _TRIAL_JSON),
    "study.trial.trial_state:read_complete": (('return',), _TRIAL_JSON),
    "study.trial.trial_state:stage_checkpoint": (('state',), _TRIAL_JSON),
    "study.trial.trial_state:state_digest": (('body',), _TRIAL_JSON),
    "study.trial.trial_state:upgrade_state": (('found',), _TRIAL_JSON),
}

ALLOWED = {**TUNE_FORCED, **NO_NAME_YET}


# -- the checks ------------------------------------------------------------------------------


def test_only_listed_signatures_hold_bags():
    found = bags(tree_signatures())
    unlisted = {q: s for q, s in found.items() if tuple(s) != ALLOWED.get(q, ((),))[0]}
    assert not unlisted, (
        "public signatures with Any / bare dict / dict[str, Any] that the lists do not allow (use "
        "the concept's type; a Tune hook or an unparsed document goes in TUNE_FORCED or NO_NAME_YET, "
        "with why):\n" + "\n".join(f"{q}: {', '.join(s)}" for q, s in sorted(unlisted.items())))


def test_every_listed_signature_still_holds_its_bags():
    found = bags(tree_signatures())
    stale = sorted(q for q, (slots, _) in ALLOWED.items() if tuple(found.get(q, ())) != slots)
    assert not stale, "listed but no longer so (take them off the list):\n" + "\n".join(stale)


def test_named_concepts_carry_their_type_except_where_tune_forces():
    forced = {q: set(slots) for q, (slots, _) in TUNE_FORCED.items()}
    for q, (param, _) in NOT_THE_CONCEPT.items():
        forced.setdefault(q, set()).add(param)
    found = {q: s for q, s in misnamed(tree_signatures()).items()
             if not all(x.split(":")[0] in forced.get(q, ()) for x in s)}
    assert not found, ("parameters named after a concept that do not carry its type "
                       f"({NAMED_CONCEPTS}):\n"
                       + "\n".join(f"{q}: {', '.join(s)}" for q, s in sorted(found.items())))


def test_no_reason_is_left_empty_and_the_lists_do_not_overlap():
    assert not set(TUNE_FORCED) & set(NO_NAME_YET)
    assert all(why.strip() for _, why in [*ALLOWED.values(), *NOT_THE_CONCEPT.values()])


def test_a_named_concept_is_never_excused_as_a_value_without_a_name():
    """Only an interface Tune (or another library) fixes may hand a named concept over untyped."""
    excused = {q: [x for x in slots if x.lstrip("*") in NAMED_CONCEPTS and NOT_THE_CONCEPT.get(q, ("",))[0] != x]
               for q, (slots, _) in NO_NAME_YET.items()}
    assert not {q: x for q, x in excused.items() if x}


# -- the counter, on snippets ----------------------------------------------------------------

SNIPPET = '''
from typing import Any, Mapping, Optional
def a(x: Any) -> None: ...
def b(x: dict) -> int: ...
def c(x: int) -> dict[str, Any]: ...
def d(x: Optional[Dict[str, Any]] = None, *rest: Any, **kw: int) -> "Mapping[str, Any] | None": ...
def typed(x: dict[str, int], y: list[Any], z: "StudySpec") -> Mapping[str, float]: ...
def _private(x: Any) -> Any: ...
class Hook:
    def on_trial_result(self, trial: "Trial", result: dict, **info: Any) -> None: ...
    def _hidden(self, x: Any) -> None: ...
    def __getstate__(self) -> dict: ...
    def nested(self) -> None:
        def inner(x: Any) -> Any: ...
class _Private:
    def f(self, x: Any) -> None: ...
def g(spec: Any, cfg: "RunConfig", trial, recorder: RecordWriter | None) -> None: ...
'''


def test_the_counter_finds_each_kind_of_bag_and_nothing_else():
    found = bags(signatures(SNIPPET, "m"))
    assert found == {
        "m:a": ["x"], "m:b": ["x"], "m:c": ["return"], "m:d": ["x", "*rest", "return"],
        "m:Hook.on_trial_result": ["result", "**info"], "m:Hook.__getstate__": ["return"],
        "m:g": ["spec"],
    }


def test_the_named_concept_check_flags_an_untyped_or_bag_concept():
    assert misnamed(signatures(SNIPPET, "m")) == {
        "m:g": ["spec: Any", "trial: no annotation"]}


def test_the_checks_fail_on_a_new_bag(tmp_path, monkeypatch):
    pkg = tmp_path / "study"
    pkg.mkdir()
    (pkg / "probe.py").write_text("def launch(spec: StudySpec) -> dict: ...\n")
    (pkg / "_private.py").write_text("def launch(spec: Any) -> dict: ...\n")
    sigs = tree_signatures(tmp_path)
    assert bags(sigs) == {"study.probe:launch": ["return"]}
    assert misnamed(sigs) == {}


def main(root: Path = ROOT) -> None:
    sigs = tree_signatures(root)
    found = bags(sigs)
    named = {q: [x for x in s if x.split(":")[0] not in TUNE_FORCED.get(q, ((), ""))[0]
                 and NOT_THE_CONCEPT.get(q, ("",))[0] != x.split(":")[0]] for q, s in misnamed(sigs).items()}
    named = {q: s for q, s in named.items() if s}
    print(f"{root}: {len(sigs)} public signatures in {', '.join(PACKAGES)}; {len(found)} with a bag "
          f"({sum(map(len, found.values()))} slots): {len(set(found) & set(TUNE_FORCED))} fixed by an interface (Tune, Ray, Optuna, Python), "
          f"{len(set(found) & set(NO_NAME_YET))} without a name yet, {len(set(found) - set(ALLOWED))} not "
          f"listed; {len(named)} with a named concept untyped outside Tune's hooks")
    for q, s in sorted(found.items()):
        kind = "tune" if q in TUNE_FORCED else "no-name" if q in NO_NAME_YET else "UNLISTED"
        print(f"  {kind:8} {q}: {', '.join(s)}")
    for q, s in sorted(named.items()):
        print(f"  concept  {q}: {', '.join(s)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT)
