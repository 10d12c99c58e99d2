"""One registration per extension: what a registry holds is named in one place, and every other
module reads it from there.

- a metric: its ``register_metric`` call (``locattn/metric_names.py`` for a built-in); no other
  module lists registered metric keys (the record's final and headline metrics, the reports'
  tolerances and accuracy flags come from the registry);
- a per-step attention diagnostic: its ``AttnStep`` field (``diagnostic(...)`` in
  ``locattn/models/attention/base.py``): the model's trace, the plugin dry-batch check and the
  run's ``attention.json`` follow it (checked by adding one to a scratch copy of the module);
- a task: its ``register_task`` call (``locattn/tasks/config.py`` for a built-in, label included).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from locattn import registry

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("locattn", "record", "reports", "study")
#: The one module that lists the built-in metrics (its registrations) and the one that holds
#: their functions (``__all__`` names them).
METRIC_HOMES = {"locattn/metric_names.py"}


def metric_names() -> set[str]:
    """Every registered metric's name and record key."""
    found = registry.entries("metric", discover=False)
    return set(found) | {str(e.meta["key"]) for e in found.values()}


def metric_lists(source: str, names: set[str]) -> list[tuple[int, list[str]]]:
    """(line, names) of each tuple, list, set or dict-keys literal of ``source`` naming two or
    more of ``names``: a second list of the registry's metrics. ``__all__`` is left alone."""
    tree = ast.parse(source)
    exports = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
               and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)}
    hits = []
    for node in ast.walk(tree):
        if id(node) in exports:
            continue
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None]
        else:
            continue
        named = [e.value for e in items if isinstance(e, ast.Constant) and e.value in names]
        if len(named) >= 2:
            hits.append((node.lineno, named))
    return hits


def test_no_module_lists_the_registered_metrics_again():
    names = metric_names()
    bad = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel not in METRIC_HOMES:
                bad += [f"{rel}:{line}: {named}" for line, named in metric_lists(path.read_text(), names)]
    assert not bad, ("a second list of registered metrics (read them from locattn.registry instead):\n"
                     + "\n".join(bad))


def test_the_metric_list_checker_flags_what_it_should():
    names = {"seq_acc", "accuracy", "edit_distance"}
    source = textwrap.dedent("""
        HEADLINE = ("seq_acc", "accuracy")
        TOL = {"seq_acc": 1, "edit_distance": 2}
        ONE = ("seq_acc", "dev_loss")
        __all__ = ["seq_acc", "edit_distance"]
    """)
    assert metric_lists(source, names) == [(2, ["seq_acc", "accuracy"]), (3, ["seq_acc", "edit_distance"])]


def test_the_records_metric_names_are_the_registrys():
    from record import schema
    from record.summary import HEADLINE_METRICS

    metrics = registry.entries("metric", discover=False).values()
    assert schema.FINAL_METRICS == ("best_selection_score", "best_epoch", "epochs_run", "epochs_to_100")
    assert set(schema.FINAL_METRICS[3:]) == {e.meta["key"] for e in metrics if e.meta["record"] == "run"}
    assert HEADLINE_METRICS == schema.HEADLINE_METRICS == ("seq_acc", "accuracy")


# A scratch copy of locattn/models/attention/base.py with one more AttnStep diagnostic, loaded in
# place of the real one in a fresh interpreter: the trace, the dry-batch check and the record
# must carry it with no other edit.
SCRATCH = r'''
import dataclasses, importlib.util, json, sys, types
from pathlib import Path

root = Path(sys.argv[1])
source = (root / "locattn/models/attention/base.py").read_text()
anchor = '    """(B,) weight m of the location attention in a Mix attender."""\n'
assert anchor in source
source = source.replace(anchor, anchor + '    entropy: Tensor | None = diagnostic(ROW)\n    """(B,) scratch."""\n')
spec = importlib.util.spec_from_loader("locattn.models.attention.base", loader=None)
base = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = base
exec(compile(source, "scratch_base.py", "exec"), base.__dict__)

import torch
from locattn.models import build_model
from locattn.models.attention import check
from locattn.training.attention import attention_record
from locattn.variants import get_variant


class WithEntropy(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def prepare(self, memory):
        return self.inner.prepare(memory)

    def initial_state(self, memory):
        return self.inner.initial_state(memory)

    def forward(self, query, memory, cache, state, t):
        step, state = self.inner(query, memory, cache, state, t)
        w = step.weights
        return dataclasses.replace(step, entropy=-(w * w.clamp_min(1e-12).log()).sum(-1)), state


torch.manual_seed(0)
model = build_model(get_variant("mix_onestep"), 11, pad_id=0, sos_id=1, eos_id=2).eval()
model.attender = WithEntropy(model.attender)
src, src_len = torch.tensor([[3, 4, 5, 6], [7, 8, 0, 0]]), torch.tensor([4, 2])
tgt_in = torch.tensor([[1, 5, 6], [1, 7, 8]])
with torch.no_grad():
    trace = model(src, src_len, tgt_in, trace=True).trace


class Vocab:
    eos_id = 2
    def encode(self, toks): return list(toks)
    def decode(self, ids): return list(ids)


ex = types.SimpleNamespace(src=[3, 4, 5], tgt=[5, 4, 3])
data = types.SimpleNamespace(splits={"s": [ex]}, vocab=Vocab(), decode_cap=lambda n: n + 2)
record = attention_record(model, data, "s", 0, "cpu")
out = check.step_problem((base.AttnStep(weights=torch.tensor([[1.0, 0, 0, 0, 0], [1.0, 0, 0, 0, 0]]),
                                        entropy=torch.zeros(2, 5)), None), 2, torch.ones(2, 5, dtype=torch.bool))
print(json.dumps({"trace_shape": list(trace.entropy.shape), "row_fields": list(check.ROW_FIELDS),
                  "keys": list(record), "entropy_steps": len(record["entropy"]), "problem": out}))
'''


def test_a_diagnostic_added_as_one_attnstep_field_reaches_the_trace_the_check_and_the_record():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", SCRATCH, str(ROOT)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["trace_shape"] == [2, 3]  # (B, T)
    assert got["row_fields"] == ["mu", "sigma", "step", "mix_gate", "entropy"]
    assert got["keys"] == ["split", "index", "src", "gold", "pred", "correct", "source_offset", "weights", "mu",
                           "sigma", "step", "mix_gate", "entropy", "blocks", "location_weights",
                           "content_weights", "dir_gate"]
    assert got["entropy_steps"] >= 1
    assert got["problem"] == "AttnStep.entropy must be None or a tensor of shape (2,), got a float32 tensor of shape (2, 5)"


def test_the_trace_and_the_check_are_made_from_the_attnstep_declarations():
    from dataclasses import fields

    from locattn.models.attention import base, check
    from locattn.models.seq2seq import AttentionTrace

    declared = base.diagnostics()
    assert list(declared) == ["mu", "sigma", "step", "mix_gate", "location_weights", "content_weights", "rho"]
    assert [f.name for f in fields(AttentionTrace)] == (
        ["weights"] + [n for n, d in declared.items() if d.traced] + ["blocks", "dir_gate"])
    assert check.ROW_FIELDS == ("mu", "sigma", "step", "mix_gate")
    assert check.MAP_FIELDS == ("location_weights", "content_weights")


def test_a_task_registered_once_is_named_everywhere_by_its_label(capsys):
    """A task's paper name is its registration's label (the built-ins' in
    locattn/tasks/config.py): task_label, locattn.labels.TASK_LABELS, list_tasks and the
    ``locattn tasks`` read it, with no second table of labels."""
    from locattn.cli import main
    from locattn.labels import TASK_LABELS, task_label
    from locattn.tasks import list_tasks
    from locattn.tasks.config import TASK_KEYS

    assert task_label("raffel_add") == "Addition (Raffel & Ellis)" and task_label("no_such_task") == "no_such_task"
    registry.register_task("scratch_task", "locattn.tasks.load:load_algorithmic", label="Scratch Task")
    try:
        assert task_label("scratch_task") == "Scratch Task" and TASK_LABELS["scratch_task"] == "Scratch Task"
        assert list_tasks()[: len(TASK_KEYS)] == list(TASK_KEYS) and "scratch_task" in list_tasks()
        assert main(["tasks"]) == 0
        assert ["scratch_task", "Scratch", "Task"] in [line.split() for line in capsys.readouterr().out.splitlines()]
    finally:
        registry.unregister("task", "scratch_task")
    assert "scratch_task" not in TASK_LABELS and task_label("scratch_task") == "scratch_task"
