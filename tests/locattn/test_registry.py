"""The registries: built-ins register through the public API, plugins register the same way,
unknown names get one line, options enter the identity only when set, and the config layer
imports no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from locattn import registry
from locattn.config import identity_dict, make_run_config, run_identity
from locattn.models.config import AttentionConfig, REGRESSOR_FAMILIES, SEQ2SEQ_FAMILIES
from locattn.tasks.config import TASK_KEYS
from locattn.variants import PAPER_LABELS, get_variant, list_variants
from tests.plugin_helpers import write_plugin

ROOT = Path(__file__).resolve().parents[2]


def test_every_builtin_is_registered_through_the_public_api():
    assert list(registry.entries("attender"))[:6] == [*SEQ2SEQ_FAMILIES, *REGRESSOR_FAMILIES]
    assert list(registry.entries("task"))[: len(TASK_KEYS)] == list(TASK_KEYS)
    # PAPER_LABELS is live (plugins a test registered earlier are in it): built-ins come first
    builtin = [e.builtin for e in registry.entries("variant").values()]
    assert builtin[0] and builtin == sorted(builtin, reverse=True)
    assert {"onestep", "content", "mix_onestep"} <= {n for n, e in registry.entries("variant").items() if e.builtin}
    assert registry.get("variant", "onestep").label == "OneStepAttn"
    assert registry.get("task", "raffel_add").meta["kind"] == "regression"
    assert registry.get("attender", "location").meta["packable"] is True
    assert registry.get("attender", "dubois_code").meta["packable"] is False
    from locattn import metric_names  # noqa: F401 - registers the metrics (torch-free)

    assert registry.get("metric", "seq_acc").load().__module__ == "locattn.metrics"


@pytest.mark.parametrize("build, expected", [
    (lambda: AttentionConfig(family="contnt"), "unknown attender 'contnt' (attention.family). "
                                               "Did you mean 'content'? Valid: content, positional"),
    (lambda: make_run_config(task="reverse_cpy"), "unknown task 'reverse_cpy' (TaskConfig.name). "
                                                  "Did you mean 'reverse_copy'?"),
    (lambda: get_variant("onestp"), "unknown variant 'onestp'. Did you mean 'onestep'?"),
])
def test_an_unknown_name_is_one_line_with_a_close_match_and_the_valid_names(build, expected):
    with pytest.raises(ValueError) as info:
        build()
    msg = str(info.value)
    assert msg.startswith(expected) and "\n" not in msg


def test_a_plugin_registers_an_attender_with_options_and_a_variant(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(write_plugin(tmp_path, "plug_unit")))
    before = run_identity(make_run_config(task="copy", variant="content"))
    registry.import_plugins(["plug_unit"])
    registry.import_plugins(["plug_unit"])  # a second import (driver, then worker) is harmless
    assert list_variants("plug_unit") == {"plug_unit": "Tempered (plug_unit)"}
    assert PAPER_LABELS["plug_unit"] == "Tempered (plug_unit)"
    assert registry.get("attender", "plug_unit").plugin == "plug_unit_impl"

    cfg = make_run_config(task="copy", variant="plug_unit")
    assert cfg.model.attention.options == {"temperature": 2.0}
    ident = identity_dict(cfg)
    assert ident["model.attention.options.temperature"] == 2.0
    cooler = make_run_config(task="copy", variant="plug_unit",
                             overrides={"model.attention.options.temperature": "0.5"})
    assert cooler.model.attention.options == {"temperature": 0.5}
    assert run_identity(cooler) != run_identity(cfg)
    # a built-in's identity has no options key and did not change with the plugin loaded
    assert not any(k.startswith("model.attention.options") for k in identity_dict(
        make_run_config(task="copy", variant="content")))
    assert run_identity(make_run_config(task="copy", variant="content")) == before

    with pytest.raises(ValueError, match=r"attention.options of attender 'plug_unit': unknown "
                                         r"option 'width'; valid: \['temperature'\]"):
        make_run_config(task="copy", variant="plug_unit",
                        overrides={"model.attention.options.width": 3})
    with pytest.raises(ValueError, match="attender 'content' \\(plugin 'locattn'\\) takes no options"):
        make_run_config(task="copy", variant="content",
                        overrides={"model.attention.options": {"temperature": 2}})

    import torch

    from locattn.models import build_model

    model = build_model(cfg.model, 12, pad_id=0, sos_id=1, eos_id=2)
    assert type(model.attender).__name__ == "Tempered"
    src = torch.randint(4, 12, (3, 5))
    out = model(src, torch.tensor([5, 4, 3]), torch.randint(4, 12, (3, 4)))
    assert out.logits.shape == (3, 4, 12)
    out.logits.sum().backward()
    assert all(p.grad is not None for p in model.attender.parameters())


def test_a_plugin_that_fails_is_one_line_naming_it_and_the_cause(tmp_path, monkeypatch):
    (tmp_path / "plug_broken.py").write_text("import locattn\nraise RuntimeError('no GPU here')\n")
    (tmp_path / "plug_clash.py").write_text(
        "import locattn\nlocattn.register_attender('content', 'x:y', label='Mine')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(registry.PluginError) as info:
        registry.import_plugins(["plug_broken"], source="spec.yaml: plugins")
    assert str(info.value) == ("spec.yaml: plugins: plugin 'plug_broken' failed to import: "
                               "RuntimeError: no GPU here")
    with pytest.raises(registry.PluginError, match="attender 'content' is already registered by "
                                                   "'locattn.models.attention'; pick another name"):
        registry.import_plugins(["plug_clash"])
    with pytest.raises(registry.PluginError, match="'os;rm' is not an importable module name"):
        registry.import_plugins(["os;rm"])


def test_provenance_names_the_plugin_and_hashes_its_source(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(write_plugin(tmp_path, "plug_prov")))
    registry.import_plugins(["plug_prov"])
    first = registry.provenance("plug_prov")
    assert first["module"] == "plug_prov" and first["distribution"] == ""
    assert len(first["sha256"]) == 64
    (tmp_path / "plug_prov.py").write_text((tmp_path / "plug_prov.py").read_text() + "\n# edit\n")
    assert registry.provenance("plug_prov")["sha256"] != first["sha256"]


TORCHLESS = r"""
import sys

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            raise ImportError(f"{name} is blocked in this test")
        return None

sys.meta_path.insert(0, Blocker())
import locattn.config, locattn.models.config, locattn.tasks, locattn.tasks.config, locattn.variants
import study.cli, study.spec
from locattn.config import make_run_config, run_identity
cfg = make_run_config(task="scan", variant="mix_onestep_pr", overrides={"optim.lr": 3e-4})
print(run_identity(cfg))
spec = study.spec.load_spec("ablations/rc_table2.yaml")
print(len(spec.cells))
leaked = sorted(m for m in sys.modules if m.split(".")[0] == "torch")
assert not leaked, leaked
"""


def test_the_config_layer_spec_validation_and_study_cli_import_no_torch():
    proc = subprocess.run([sys.executable, "-c", TORCHLESS], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ident, cells = proc.stdout.split()
    assert ident == run_identity(make_run_config(task="scan", variant="mix_onestep_pr",
                                                 overrides={"optim.lr": 3e-4}))
    assert int(cells) > 0
