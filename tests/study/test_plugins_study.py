"""Plugins through `study launch`, real local Ray: a module outside the repository named only in a
spec's `plugins:`, the worked example installed through its entry point, the resume trust rule,
and a plugin that fails."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from record import schema
from tests.plugin_helpers import fake_install, write_plugin
from tests.study_helpers import trial_run_rows

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "locattn-localp"
TINY = ("overrides: {task.train_size: 32, task.dev_size: 8, task.test_size: 8, "
        "task.test_lengths: [15], optim.epochs: 1}\nresources: {cpus: 1}\nmax_failures: 0\n")


def run(args: list[str], pythonpath: list[Path], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    env.update(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0",
               PYTHONPATH=os.pathsep.join([str(ROOT), *map(str, pythonpath)]))
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


def finished_configs(study: Path) -> dict[str, dict]:
    out = {}
    for result in sorted((study / "runs").glob("*/result.json")):
        cfg = json.loads((result.parent / "config.json").read_text())
        out[f"{cfg['task']['name']}/{cfg['variant']}"] = cfg
    return out


def pdf_text(path: Path) -> str:
    """The strings a matplotlib PDF draws: its kerned ``[(Lo) 0.2 (cal-p)] TJ`` runs, joined."""
    streams = re.findall(rb"stream\r?\n(.*?)\r?\nendstream", path.read_bytes(), re.S)
    runs = re.findall(rb"\[([^\]]*)\]\s*TJ", b"\n".join(zlib.decompress(s) for s in streams), re.S)
    return "\n".join(re.sub(rb"\\(.)", rb"\1", b"".join(re.findall(rb"\(((?:\\.|[^\\)])*)\)", r)))
                     .decode("latin-1") for r in runs)



def test_a_spec_plugin_outside_the_repo_trains_and_a_resume_trusts_only_what_it_is_told(tmp_path):
    ext = write_plugin(tmp_path / "elsewhere", "plug_study")
    spec = tmp_path / "mine.yaml"
    spec.write_text("name: mine\nplugins: [plug_study]\n"
                    "grid: {task: [copy], variant: [plug_study, content]}\nseeds: 1\n" + TINY)
    proc = run(["study.cli", "launch", str(spec), "--root", str(tmp_path / "studies")], [ext])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    study = tmp_path / "studies" / "mine"
    configs = finished_configs(study)
    assert sorted(configs) == ["copy/content", "copy/plug_study"]
    assert configs["copy/plug_study"]["model"]["attention"] == {
        **configs["copy/plug_study"]["model"]["attention"], "family": "plug_study",
        "options": {"temperature": 2.0}}
    meta = json.loads((study / "study.json").read_text())
    assert meta["resolved"]["plugins"] == ["plug_study"]

    # the folder names the plugin, but a resume imports it only when told to
    proc = run(["study.cli", "resume", str(study)], [ext])
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "names plugin 'plug_study', which is not an installed plugin" in err[0]
    assert "resume with --plugin plug_study if you trust it" in err[0]
    proc = run(["study.cli", "resume", str(study), "--plugin", "plug_study"], [ext])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    # each run of the plugin records its name, distribution and source hash; a built-in's does not
    rows = {r["tags"][schema.VARIANT]: r["tags"] for r in trial_run_rows(study / "mlflow.db")}
    assert schema.PLUGINS not in rows["content"]
    prov = json.loads(rows["plug_study"][schema.PLUGINS])
    assert set(prov) == {"plug_study", "plug_study_impl"}
    assert prov["plug_study_impl"]["sha256"] == hashlib.sha256(
        b"plug_study_impl.py\0" + (ext / "plug_study_impl.py").read_bytes() + b"\0").hexdigest()
    assert meta["plugin_sources"] == {k: v["sha256"] for k, v in prov.items()}

    # the plugin's source changes: a resume refuses in one line unless told otherwise
    impl = ext / "plug_study_impl.py"
    impl.write_text(impl.read_text() + "\n# tuned\n")
    proc = run(["study.cli", "resume", str(study), "--plugin", "plug_study"], [ext])
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "plugin 'plug_study_impl' changed since this study's runs were trained" in err[0]
    proc = run(["study.cli", "resume", str(study), "--plugin", "plug_study", "--allow-dirty"], [ext])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    # the report runs without the plugin (a folder names no code): its launch recorded the labels
    proc = run(["study.cli", "report", str(study), "--figures"], [])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    grid = (study / "reports" / "grid.md").read_text()
    assert "\n| Variant | Copy iid.seq_acc | Copy len15.seq_acc |\n" in grid
    assert "\n| Tempered (plug_study) | " in grid and "\n| Content | " in grid
    assert "Tempered (plug_study)" in pdf_text(study / "reports" / "figures" / "length_copy.pdf")


def test_a_plugin_that_fails_is_one_line_and_nothing_is_recorded(tmp_path):
    (tmp_path / "ext").mkdir()
    (tmp_path / "ext" / "plug_fails.py").write_text("raise ImportError('needs cuda_magic')\n")
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: bad\nplugins: [plug_fails]\ngrid: {task: [copy], variant: [content]}\n"
                    "seeds: 1\n" + TINY)
    proc = run(["study.cli", "launch", str(spec), "--root", str(tmp_path / "studies")],
               [tmp_path / "ext"])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"study launch: {spec}: plugins: plugin 'plug_fails' failed to import: "
        "ImportError: needs cuda_magic"]
    assert not (tmp_path / "studies").exists()


def test_the_worked_example_installs_lists_trains_and_reports(tmp_path):
    site = fake_install(tmp_path / "site", "localp")
    paths = [EXAMPLE, site]
    listed = run(["locattn", "list", "attenders", "localp"], paths)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split()[:4] == ["localp", "Local-p", "plugin", "locattn_localp"]
    root = tmp_path / "studies"
    proc = run(["study.cli", "launch", str(EXAMPLE / "spec.yaml"), "--profile", "smoke", "--root",
                str(root), "--only", "task=addition,copy", "--only", "variant=localp,content"], paths)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    configs = finished_configs(root / "locattn-localp-smoke")
    assert sorted(configs) == ["addition/content", "addition/localp", "copy/content", "copy/localp"]
    assert configs["addition/localp"]["model"]["attention"]["options"] == {"window": 3}
    report = run(["study.cli", "report", str(root / "locattn-localp-smoke")], paths)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    summary = (root / "locattn-localp-smoke" / "reports" / "summary.md").read_text()
    assert "task=addition,variant=localp" in summary and "task=copy,variant=localp" in summary
    grid = (root / "locattn-localp-smoke" / "reports" / "grid.md").read_text()
    assert ("| Variant | Addition iid.seq_acc | Addition len15.seq_acc | Copy iid.seq_acc | "
            "Copy len15.seq_acc |") in grid  # tasks and variants by key
    assert "\n| Local-p | " in grid and "\n| Content | " in grid


def test_plugin_attenders_declared_packable_train_packed_through_study_launch(tmp_path):
    """local-p, and a module outside the repository, declare themselves packable: a spec naming
    them only in `plugins:` packs their seeds (`pack_seeds: true`), and every seed is recorded as
    its own run, packed with the others."""
    ext = write_plugin(tmp_path / "elsewhere", "plug_pack", packable=True)
    spec = tmp_path / "packed.yaml"
    spec.write_text("name: packed\nplugins: [locattn_localp, plug_pack]\npack_seeds: true\n"
                    "grid: {task: [copy], variant: [localp, plug_pack, content]}\nseeds: 2\n" + TINY)
    proc = run(["study.cli", "launch", str(spec), "--root", str(tmp_path / "studies")], [EXAMPLE, ext])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    study = tmp_path / "studies" / "packed"
    assert json.loads((study / "study.json").read_text())["resolved"]["pack_seeds"] is True
    rows = trial_run_rows(study / "mlflow.db")
    runs = sorted((r["tags"][schema.VARIANT], r["tags"][schema.SEED],
                   r["tags"].get(schema.PACKED_WITH), r["status"]) for r in rows)
    assert runs == [(variant, seed, "0,1", "FINISHED") for variant in ("content", "localp", "plug_pack")
                    for seed in ("0", "1")]
    assert len(list((study / "runs").glob("*/result.json"))) == 6


@pytest.mark.parametrize("entry", ["localp"])
def test_the_example_registers_without_torch(entry):
    code = ("import sys\nclass B:\n    def find_spec(self, n, p=None, t=None):\n"
            "        if n.split('.')[0] == 'torch': raise ImportError('blocked')\n"
            "sys.meta_path.insert(0, B())\nimport locattn_localp\n"
            "from locattn.config import make_run_config\n"
            f"print(make_run_config(task='addition', variant='{entry}').model.attention.options)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{EXAMPLE}"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "{'window': 3}"


def test_a_gpu_spec_with_a_plugin_that_cannot_pack_says_so_in_one_line_and_runs_solo(tmp_path, monkeypatch):
    from locattn.models.config import packable_families
    from study.spec.plugins import solo_note
    from study.spec import load_spec

    ext = write_plugin(tmp_path / "ext", "plug_solo")
    monkeypatch.syspath_prepend(str(ext))
    spec = tmp_path / "gpu.yaml"
    spec.write_text("name: gpu\nplugins: [plug_solo]\ngrid: {task: [copy], variant: [content, plug_solo]}\n"
                    "seeds: 2\nresources: {cpus: 1, gpus: 0.5}\n")
    loaded = load_spec(spec)
    assert not loaded.packed
    packable = sorted(packable_families())  # the built-ins, and localp where CI installed the example
    assert {"content", "location", "positional"} <= set(packable) and "plug_solo" not in packable
    assert solo_note(loaded) == ("cell task=copy,variant=plug_solo: attention.family 'plug_solo' cannot "
                                 f"pack (packable: {', '.join(packable)}); every trial of this "
                                 "study trains solo")
    spec.write_text(spec.read_text().replace("content, plug_solo", "content"))
    assert load_spec(spec).packed and solo_note(load_spec(spec)) == ""
