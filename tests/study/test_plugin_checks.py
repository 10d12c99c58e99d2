"""A malformed plugin attender is one line at `study launch`, exit 2, before any trial and before
anything is written: a target whose signature does not fit (at registration for an object, at
launch for a lazy path), options for an attender that takes none, and a forward that returns the
wrong type or shape on the driver's dry batch."""

from __future__ import annotations

from pathlib import Path

import pytest

from locattn import registry
from study.cli import main as study_main

HEAD = "import torch\nfrom torch import nn\nfrom locattn.models.attention import AttnStep\nimport locattn\n"
GOOD_INIT = ("    def __init__(self, cfg, *, query_size, key_size, dim, total_batches=1):\n"
             "        super().__init__()\n        self.q = nn.Linear(query_size, key_size)\n")
SCORES = "        s = torch.einsum('bld,bd->bl', memory.keys, self.q(query)) + memory.score_bias\n"
FORWARD = "    def forward(self, query, memory, cache, state, t):\n" + SCORES


def module(name: str, cls: str, register: str) -> str:
    return (HEAD + f"class Bad(nn.Module):\n{cls}\n{register}\n"
            f"locattn.register_variant('{name}', label='Bad', parent='content', "
            f"delta={{'attention.family': '{name}'}})\n")


def lazy(name: str) -> str:
    return f"locattn.register_attender('{name}', '{name}:Bad', label='Bad')"


CASES = {
    # a lazy target: found when the launch loads it
    "signature": (
        lambda n: module(n, "    def __init__(self, window):\n        super().__init__()\n"
                            "    def forward(self, query, memory, cache, state, t):\n        pass\n", lazy(n)),
        "target Bad(window) cannot be called as target(cfg, *, query_size, key_size, dim, total_batches)"),
    # an object target: refused when the plugin registers it
    "signature_object": (
        lambda n: module(n, "    def __init__(self, cfg):\n        super().__init__()\n",
                         f"locattn.register_attender('{n}', Bad, label='Bad')"),
        f"plugin '{{n}}': register_attender('{{n}}'): target Bad(cfg) cannot be called as target(cfg, *, "
        "query_size, key_size, dim, total_batches)"),
    "options": (
        lambda n: (HEAD + f"locattn.register_attender('{n}', '{n}_impl:Bad', label='Bad')\n"
                   f"locattn.register_variant('{n}', label='Bad', parent='content', delta="
                   f"{{'attention.family': '{n}', 'attention.options': {{'window': 3}}}})\n"),
        f"register_variant('{{n}}'): delta sets attention.options={{'window': 3}}, but attender '{{n}}' "
        f"(from '{{n}}_impl') takes no options"),
    "returns_tensor": (
        lambda n: module(n, GOOD_INIT + FORWARD + "        return torch.softmax(s, -1)\n", lazy(n)),
        "forward must return (AttnStep, state), got a float32 tensor of shape (2, 5)"),
    "weights_shape": (
        lambda n: module(n, GOOD_INIT + FORWARD + "        return AttnStep(weights=torch.softmax(s, -1)[:, None]), state\n",
                         lazy(n)),
        "AttnStep.weights must be a float (B, L) = (2, 5) tensor, got a float32 tensor of shape (2, 1, 5)"),
    "padding": (
        lambda n: module(n, GOOD_INIT + FORWARD + "        return AttnStep(weights=torch.softmax(torch.zeros_like(s), -1)), state\n",
                         lazy(n)),
        "AttnStep.weights must be zero on padding"),
    "item": (  # a host read inside forward runs alone but not per replica under vmap
        lambda n: module(n, GOOD_INIT + FORWARD + "        if float(s.max()) > 1e9:\n            s = s / 2\n"
                         "        return AttnStep(weights=torch.softmax(s, -1)), state\n", lazy(n)),
        "as a pack of 2 replicas (torch.func.vmap): RuntimeError"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_malformed_plugin_attender_is_one_line_at_launch_and_nothing_is_written(tmp_path, monkeypatch,
                                                                                   capsys, case):
    name = f"bad_{case}"
    text, expected = CASES[case]
    ext = tmp_path / "ext"
    ext.mkdir()
    (ext / f"{name}.py").write_text(text(name))
    (ext / f"{name}_impl.py").write_text(HEAD + "class Bad(nn.Module):\n" + GOOD_INIT + FORWARD
                                         + "        return AttnStep(weights=torch.softmax(s, -1)), state\n")
    monkeypatch.syspath_prepend(str(ext))
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"name: bad\nplugins: [{name}]\ngrid: {{task: [copy], variant: [{name}, content]}}\n"
                    "seeds: 1\noverrides: {task.train_size: 16, task.dev_size: 8, task.test_size: 8, "
                    "optim.epochs: 1, model.hidden_size: 8, model.embedding_size: 8, model.value_size: 8}\n"
                    "resources: {cpus: 1}\n")
    root = tmp_path / "studies"
    code = study_main(["launch", str(spec), "--root", str(root)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert expected.replace("{n}", name) in err[0], err[0]
    assert name in err[0]  # names the plugin or the attender
    assert not root.exists()  # nothing written


def test_options_for_an_attender_without_options_are_one_line_at_launch(tmp_path, monkeypatch, capsys):
    ext = tmp_path / "ext"
    ext.mkdir()
    (ext / "noopt_impl.py").write_text(HEAD + "class Bad(nn.Module):\n" + GOOD_INIT + FORWARD
                                       + "        return AttnStep(weights=torch.softmax(s, -1)), state\n")
    (ext / "noopt.py").write_text(HEAD + "locattn.register_attender('noopt', 'noopt_impl:Bad', label='Bad')\n"
                                  "locattn.register_variant('noopt', label='Bad', parent='content', "
                                  "delta={'attention.family': 'noopt'})\n")
    monkeypatch.syspath_prepend(str(ext))
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: bad\nplugins: [noopt]\ngrid: {task: [copy], variant: [noopt]}\nseeds: 1\n"
                    "overrides: {model.attention.options: {window: 3}}\n")
    root = tmp_path / "studies"
    code = study_main(["launch", str(spec), "--root", str(root)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [
        f"study launch: {spec}: cell task=copy,variant=noopt: attention.options={{'window': 3}}: attender "
        "'noopt' (plugin 'noopt_impl') takes no options (registered without options=)"], err
    assert not root.exists()


def test_a_registered_object_target_must_take_the_attender_call():
    class NoCfg:
        def __init__(self, *, query_size, key_size, dim):
            pass

    with pytest.raises(registry.PluginError, match=r"register_attender\('no_cfg'\): target .*NoCfg\(\*, "
                                                   r"query_size, key_size, dim\) cannot be called as target"):
        registry.register_attender("no_cfg", NoCfg, label="No cfg")
    assert not registry.has("attender", "no_cfg")
