"""A study spec declares a table of its own (rows = variants, columns = tasks x splits, a
registered metric, published numbers from a CSV beside the spec): the spec checks it, the study
records it, and ``reports build`` writes it in Markdown, LaTeX and CSV like a paper table, with
significance marks, (k/n) and the comparison with the published numbers. A plugin metric a real
training run recorded shows in that table and in ``study status``."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import pytest

from locattn import registry, table_defs
from locattn.config import make_run_config
from locattn.train import train
from record import schema
from record.store import sqlite_uri
from reports.cli import main as reports_main
from reports.render import solved_applies
from reports.synth import SynthRun, write_with_client
from study.recording.cell_results import cell_results, format_results
from study.spec import SpecError, load_spec

TINY = {"task.train_size": 48, "task.dev_size": 8, "task.test_size": 12, "task.test_lengths": (15,),
        "optim.epochs": 1, "num_threads": 1}


def first_token_acc(pred, gold, *, eos_id):
    """Fraction of outputs whose first token is the target's first token."""
    return sum(bool(p) and p[0] == g[0] for p, g in zip(pred, gold)) / len(gold)


@pytest.fixture
def plugin_metric():
    registry.register_metric("first_token_acc", first_token_acc, label="First-token accuracy", accuracy=True,
                             doc="A plugin's metric: the first output token is right.")
    yield
    registry.unregister("metric", "first_token_acc")


SPEC = """name: mine
grid: {task: [copy], variant: [content, onestep]}
seeds: 6
tables:
  - id: first_token
    metric: first_token_acc
    splits: {iid: IID, len15: "15"}
    published: first_token_published.csv
"""


def write_spec(folder: Path, text: str = SPEC, published: str = "row,column,value\ncontent,copy:len15,90\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "first_token_published.csv").write_text(published)
    path = folder / "mine.yaml"
    path.write_text(text)
    return path


def parent_id(uri: str, study: str) -> str:
    from mlflow.tracking import MlflowClient  # the test writes the launch's parent tag itself

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(study)
    (run,) = client.search_runs([exp.experiment_id], f"tags.`{schema.ROLE}` = '{schema.ROLE_STUDY}'")
    return run.info.run_id


def test_a_spec_declared_table_builds_from_a_real_store(tmp_path, plugin_metric):
    spec = load_spec(write_spec(tmp_path / "spec"))
    assert spec.tables == ("first_token",)
    (recorded,) = spec.table_defs
    table = table_defs.table_from_dict(recorded)
    assert table.rows == ("content", "onestep") and [c.key for c in table.columns] == ["copy:iid", "copy:len15"]
    assert (table.metric, table.direction, table.scale) == ("first_token_acc", "max", 100.0)
    assert table.published == (("content", "copy:len15", 90.0, None, False),)
    assert table.tolerance == ("points", 10.0, "within 10 points (accuracy in %)", None)
    assert table.accuracy is True  # first_token_acc registers itself an accuracy: its cells have (k/n)
    # the table's own flag decides (a report built without the plugin), else the registry's
    assert solved_applies(table) and solved_applies(dataclasses.replace(table, accuracy=None))
    assert not solved_applies(dataclasses.replace(table, accuracy=False))
    assert spec.resolved["table_defs"] == [recorded]

    # one real run computes and records the plugin metric; the other seeds are written with
    # known values, so that the table's medians, (k/n) and significance can be checked
    cfg = make_run_config(task="copy", variant="content", seed=0,
                          overrides={**TINY, "cache_dir": str(tmp_path / "cache")})
    finals = train(cfg, tmp_path / "run").final_metrics()
    assert 0.0 <= finals["test.len15.first_token_acc"] <= 1.0
    runs = [SynthRun(task="copy", variant="content", seed=0, metrics=finals, n_seeds=6)]
    good = [0.95, 0.93, 0.97, 0.92, 0.96]  # content's seeds 1-5 on len15
    bad = [0.15, 0.2, 0.1, 0.3, 0.25, 0.05]  # onestep's six seeds
    runs += [SynthRun(task="copy", variant="content", seed=s, n_seeds=6,
                      metrics={"test.iid.first_token_acc": 1.0, "test.len15.first_token_acc": v})
             for s, v in enumerate(good, start=1)]
    runs += [SynthRun(task="copy", variant="onestep", seed=s, n_seeds=6,
                      metrics={"test.iid.first_token_acc": 1.0, "test.len15.first_token_acc": v})
             for s, v in enumerate(bad)]
    study = tmp_path / "studies" / "mine"
    study.mkdir(parents=True)
    uri = sqlite_uri(study / "mlflow.db")
    write_with_client(uri, "mine", runs, tables=spec.tables)
    from mlflow.tracking import MlflowClient  # what study launch writes (study.driver.launch: parent_tags)

    MlflowClient(tracking_uri=uri).set_tag(parent_id(uri, "mine"), schema.TABLE_DEFS,
                                           json.dumps(list(spec.table_defs), sort_keys=True))

    # study status's results table: the plugin metric's median beside the headline
    results = {r.cell: r for r in cell_results(uri, "mine")}
    content = [finals["test.len15.first_token_acc"], *good]
    median = 100 * (sorted(content)[2] + sorted(content)[3]) / 2
    assert results["task=copy,variant=content"].extra == (("first_token_acc", pytest.approx(median)),)
    status = format_results(list(results.values()), "mine").splitlines()
    assert status[0].split()[-1] == "first_token_acc" and f"{median:.3g}" in status[1] + status[2]

    out = tmp_path / "reports"
    assert reports_main(["build", str(study), "--out", str(out), "--solved", "--compare"]) == 0
    md = (out / "first_token.md").read_text()
    k = sum(v >= 0.9 for v in content)
    assert "First-token accuracy (%) on the study's test splits, as in the study spec mine.yaml." in md
    row: dict[str, str] = {}
    for line in md.splitlines():  # the first table: ours
        if line.startswith("| "):
            row.setdefault(line.split(" | ")[0], line)
    assert row["| Content"].endswith(f"| **{median:.1f} ({k}/6)** |")  # bold: best of its column
    assert row["| OneStepAttn"].endswith("| 17.5 (0/6) |")
    assert "1 of 1 comparisons in this table were testable" in md
    published = md[md.index("**Published numbers** (the study spec mine.yaml;"):]
    assert "| Content | – | 90 |" in published
    assert f"| Content | – | {median - 90:+.1f} |" in published  # the difference table
    tex = (out / "first_token.tex").read_text()
    assert f"\\textbf{{{median:.1f}" in tex and "17.5" in tex
    with (out / "first_token.csv").open() as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    cells = {(r["row"], r["column"]): r for r in rows}
    assert float(cells[("onestep", "copy:len15")]["median"]) == pytest.approx(17.5)
    assert float(cells[("onestep", "copy:len15")]["p_holm"]) < 0.05
    assert cells[("content", "copy:len15")]["best"] == "1"
    assert float(cells[("content", "copy:len15")]["paper_value"]) == 90.0


@pytest.mark.parametrize("table, published, message", [
    ("{id: t1, metric: no_such, splits: [len15]}", "", "tables[0].metric: unknown metric 'no_such'"),
    ("{id: t1, metric: seq_acc, splits: [len15], rows: ablation}", "",
     "rows by the axis 'ablation' are not supported"),
    ("{id: t1, metric: seq_acc, splits: [len15], rows: [nope]}", "", "unknown variant 'nope'"),
    ("{id: rc_table2, metric: seq_acc, splits: [len15]}", "", "'rc_table2' is already a registered table"),
    ("{id: t1, metric: seq_acc, splits: [len15], colour: red}", "", "tables[0].colour: unknown key"),
    ("{id: t1, metric: seq_acc, splits: [len15], published: first_token_published.csv}",
     "row,column,value\ncontent,copy:len99,90\n", "column 'copy:len99' is not a column key"),
    ("{id: t1, metric: epochs_to_100, splits: [len15]}", "", "'epochs_to_100' is not recorded per test split"),
])
def test_a_bad_spec_table_is_one_line_naming_the_key(tmp_path, table, published, message):
    text = f"name: mine\ngrid: {{task: [copy], variant: [content]}}\ntables:\n  - {table}\n"
    path = write_spec(tmp_path, text, published or "row,column,value\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert message in str(info.value) and "\n" not in str(info.value) and "mine.yaml" in str(info.value)


def test_the_localm_example_registers_its_metric_and_table_and_a_spec_records_the_table(tmp_path):
    """examples/locattn-localm adds a metric and a table of its own (torch-free registration);
    a spec naming the table records its definition, so a report needs no plugin."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    spec = tmp_path / "s.yaml"
    spec.write_text("plugins: [locattn_localm]\ntables: [localm_token_acc]\n"
                    "grid: {task: [copy], variant: [localm, onestep]}\n")
    code = ("import sys, json; import locattn_localm; light = 'torch' not in sys.modules; "
            "from locattn import registry; "
            "from locattn_localm.metrics import token_acc; from study.spec import load_spec; "
            f"s = load_spec({str(spec)!r}); "
            "print(json.dumps([registry.get('metric', 'token_acc').plugin, "
            "registry.get('table', 'localm_token_acc').plugin, light, "
            "token_acc([[1, 2, 0], [1]], [[1, 3, 0], [1, 2, 0]], eos_id=0), "
            "[d['id'] for d in s.table_defs], s.table_defs[0]['metric']]))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "examples" / "locattn-localm")])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got[:3] == ["locattn_localm", "locattn_localm", True]
    assert got[3] == 0.5 and got[4:] == [["localm_token_acc"], "token_acc"]


@pytest.mark.slow
def test_study_launch_records_a_plugin_metric_and_both_tables_and_study_report_builds_them(tmp_path):
    """The whole route through a real local Ray study: the localm example's metric is recorded
    by every run and shown by ``study status``; its registered table and a table the spec
    declares are recorded with the study, and ``study report`` builds both without the plugin."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    spec = write_spec(tmp_path / "spec", (
        "name: mine\nplugins: [locattn_localm]\n"
        "grid: {task: [copy], variant: [localm, onestep]}\nseeds: 1\n"
        "tables:\n  - localm_token_acc\n"
        "  - {id: own_token, metric: token_acc, splits: {len15: '15'}, published: first_token_published.csv}\n"
        "overrides: {task.train_size: 32, task.dev_size: 8, task.test_size: 8, task.test_lengths: [15], "
        "optim.epochs: 1}\nresources: {cpus: 1}\nmax_failures: 0\n"),
        published="row,column,value\nonestep,copy:len15,50\n")

    def study(args: list[str], plugin: bool) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
        path = [str(root), *([str(root / "examples" / "locattn-localm")] if plugin else [])]
        env.update(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0",
                   PYTHONPATH=os.pathsep.join(path))
        return subprocess.run([sys.executable, "-m", "study.cli", *args], capture_output=True,
                              text=True, env=env, cwd=root, timeout=900)

    studies = tmp_path / "studies"
    proc = study(["launch", str(spec), "--root", str(studies)], plugin=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    head = next(line for line in proc.stdout.splitlines() if line.startswith("cell "))
    assert head.split()[-1] == "token_acc"  # the results table after the launch: the plugin metric
    proc = study(["report", str(studies / "mine"), "--compare", "--solved"], plugin=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    reports = studies / "mine" / "reports"
    for stem in ("localm_token_acc", "own_token"):
        for ext in ("md", "tex", "csv"):
            assert (reports / f"{stem}.{ext}").is_file(), f"{stem}.{ext}"
    md = (reports / "localm_token_acc.md").read_text()
    assert "| Local-m |" in md and "| OneStepAttn |" in md
    own = (reports / "own_token.md").read_text()
    assert "**Published numbers** (the study spec mine.yaml;" in own and "| OneStepAttn | 50 |" in own
    assert "own_token: " in proc.stdout and "within 5 points (token accuracy in %)" in proc.stdout
