"""A plugin module written to a folder outside the package, as a researcher would write one."""

from __future__ import annotations

from pathlib import Path

#: A plugin: an attender with one option (a softmax temperature on a scaled-dot content score)
#: and a variant using it. Registration is torch-free; the class loads lazily from ``<name>_impl``.
PLUGIN = '''
import locattn

def check(options):
    unknown = set(options) - {"temperature"}
    if unknown:
        raise ValueError(f"unknown option {sorted(unknown)[0]!r}; valid: ['temperature']")
    t = float(options.get("temperature", 1.0))
    if not t > 0:
        raise ValueError(f"temperature must be > 0, got {t!r}")
    return {"temperature": t}

locattn.register_attender("{name}", "{name}_impl:build", label="Tempered dot",
                          doc="Scaled-dot content attention with a softmax temperature.",
                          options=check, packable={packable})
locattn.register_variant("{name}", label="Tempered ({name})", parent="content",
                         delta={"attention.family": "{name}",
                                "attention.options": {"temperature": 2.0}})
'''

IMPL = '''
import torch
from locattn.models.attention import Attender, AttnStep, ContentScorer

class Tempered(Attender):
    def __init__(self, cfg, *, query_size, key_size, dim, total_batches=1):
        super().__init__()
        self.temperature = cfg.options["temperature"]
        self.scorer = ContentScorer("scaled_dot", key_size=key_size, query_size=query_size, dim=dim)

    def prepare(self, memory):
        return self.scorer.prepare(memory.keys)

    def forward(self, query, memory, cache, state, t):
        scores = self.scorer(query, cache) / self.temperature + memory.score_bias  # (B, L)
        return AttnStep(weights=torch.softmax(scores, dim=-1)), state

build = Tempered
'''


def write_plugin(folder: Path, name: str, packable: bool = False) -> Path:
    """Write plugin module ``name`` (and ``<name>_impl``) into ``folder``; returns ``folder``.
    ``packable``: registered ``packable=True`` (its runs may train as one pack; False: solo
    always). The attender is an ordinary module either way (``stacked`` left False)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(PLUGIN.replace("{name}", name).replace("{packable}", str(packable)))
    (folder / f"{name}_impl.py").write_text(IMPL)
    return folder


def fake_install(site: Path, example: str) -> Path:
    """An example plugin as ``pip install -e examples/locattn-<example>`` leaves it, without
    touching the venv: its distribution metadata (with the ``locattn.plugins`` entry point
    ``<example> = locattn_<example>``) in ``site``, a folder to put on PYTHONPATH beside the
    example's source folder. Returns ``site``."""
    info = site / f"locattn_{example}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: locattn-{example}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[locattn.plugins]\n{example} = locattn_{example}\n")
    return site
