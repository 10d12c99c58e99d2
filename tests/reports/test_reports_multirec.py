"""One table from several records: `reports build A B`, campaign files, `study report A B` and
:func:`reports.build.collect` over several stores (committed records and real SQLite stores),
merged by run identity (cell, hparams, seed)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from record.layout import META_FILE, STORE_FILE
from record.store import unpack
from reports.build import collect, tables_of_study, used_runs
from reports.cli import main as reports_main
from reports.runset import RecordConflict, RecordSource, read_runs, resolve_source
from reports.synth import SynthRun, write_bulk_sql
from tests.locattn.test_cli import run_main

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "results" / "record"
SPEC = str(ROOT / "ablations" / "rc_table4.yaml")
SPLITS = ("len15", "len30", "len100")


def _runs(variant: str, seeds, shift: dict[int, float] | None = None) -> list[SynthRun]:
    """Finished Copy runs of ``variant``: seed s scores s/10 on every split (+ ``shift[s]``)."""
    shift = shift or {}
    return [SynthRun(task="copy", variant=variant, seed=s, n_seeds=5,
                     metrics={"best_selection_score": 0.5,
                              **{f"test.{sp}.seq_acc": s / 10 + shift.get(s, 0.0) for sp in SPLITS}})
            for s in seeds]


def _study(root: Path, name: str, runs: list[SynthRun]) -> Path:
    """A study directory as ``study launch`` leaves it: study.json beside a real SQLite store."""
    d = root / name
    d.mkdir(parents=True)
    write_bulk_sql(d / STORE_FILE, name, runs, tables=["rc_table4"])
    meta = {"name": name, "spec_path": SPEC, "profile": "quick", "only": {}, "raw": {},
            "resolved": {"name": "rc_table4", "grid": {"task": ["copy"], "variant": ["onestep"]},
                         "hparams": {}, "search": None, "seeds": [0, 1, 2, 3, 4]},
            "tracking_uri": f"sqlite:///{d / STORE_FILE}", "train_fn": "locattn.train:train"}
    (d / META_FILE).write_text(json.dumps(meta))
    return d


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    """``a``: seeds 0-2; ``b``: seeds 2-4, its seed 2 equal to a's; ``c``: seed 2, one split
    different from a's. Every store numbers its runs alike (``write_bulk_sql``), so the run ids
    of a, b and c coincide."""
    root = tmp_path_factory.mktemp("studies")
    return {"root": root,
            "a": _study(root, "a", _runs("onestep", range(3)) + _runs("onestep_no_step2", range(3))),
            "b": _study(root, "b", _runs("onestep", range(2, 5))),
            "c": _study(root, "c", _runs("onestep", [2], shift={2: 0.05}))}


def _cell(built, row: str, column: str):
    return built.results[0].cell(row, column)


def _values(record: str, variant: str, task: str, key: str) -> dict[int, float]:
    """seed -> value (%) of ``key`` of the finished runs of one cell, read from one committed record."""
    uri, name = resolve_source(RECORDS / record)
    rs = read_runs(uri, name, metric_keys=[key])
    runs = rs.runs.filter((pl.col("task") == task) & (pl.col("variant") == variant)
                          & (pl.col("status") == "finished"))
    vals = rs.metrics.filter(pl.col("key") == key).join(runs.select("run_id", "seed"), on="run_id")
    return {s: 100 * v for s, v in vals.select("seed", "value").rows()}


# --------------------------------------------------------------------------- committed records


def test_two_committed_records_give_one_cell_all_its_seeds() -> None:
    """rc_table4-paper holds seeds 0-4 of -Step 3 on Reverse Copy, rc_table4-gpu_seeds20 seeds
    5-19: one cell of 20 seeds, its median that of the 20 values read from the two stores."""
    built = collect([RECORDS / "rc_table4-gpu_seeds20", RECORDS / "rc_table4-paper"], tables=["rc_table4"])
    cell = _cell(built, "onestep_no_step3", "reverse_copy:len30")
    values = {**_values("rc_table4-paper", "onestep_no_step3", "reverse_copy", "test.len30.seq_acc"),
              **_values("rc_table4-gpu_seeds20", "onestep_no_step3", "reverse_copy", "test.len30.seq_acc")}
    assert sorted(values) == list(range(20)) and cell.n == 20
    assert cell.median == pytest.approx(float(np.median(list(values.values()))))
    assert cell.seed_records == tuple(sorted([(s, "rc_table4-paper") for s in range(5)]
                                             + [(s, "rc_table4-gpu_seeds20") for s in range(5, 20)]))
    assert cell.records == ("rc_table4-gpu_seeds20", "rc_table4-paper")
    # the runs behind the cell, with their records and whether their code was committed
    used = used_runs(built.results[0], built.runset).filter(
        (pl.col("row") == "onestep_no_step3") & (pl.col("column") == "reverse_copy:len30"))
    assert sorted(zip(used["seed"], used["record"])) == list(cell.seed_records)
    uri, name = resolve_source(RECORDS / "rc_table4-gpu_seeds20")
    raw = read_runs(uri, name, metric_keys=[]).runs.filter(
        (pl.col("task") == "reverse_copy") & (pl.col("variant") == "onestep_no_step3"))
    n_dirty = sum(v.endswith("+dirty") or d == "true" for v, d in raw.select("code_version", "dirty").rows())
    assert 0 < used["dirty"].sum() == n_dirty < used.height
    # a cell only one record holds says so; one record alone gives the cell its own 5 seeds
    assert _cell(built, "onestep", "copy:len15").records == ("rc_table4-paper",)
    alone = collect(RECORDS / "rc_table4-paper", tables=["rc_table4"])
    assert _cell(alone, "onestep_no_step3", "reverse_copy:len30").n == 5
    # provenance covers both: every run of uncommitted code is counted, and each record named
    prov = built.provenance
    dirty = [r.n_dirty for r in prov.records]
    assert [r.name for r in prov.records] == ["rc_table4-gpu_seeds20", "rc_table4-paper"]
    assert prov.n_dirty == sum(dirty) and sum(dirty) > 0 and prov.n_dirty > alone.provenance.n_dirty
    lines = prov.lines()
    assert any(ln.startswith("record rc_table4-gpu_seeds20 (") for ln in lines)
    assert any(ln.startswith("record rc_table4-paper (") for ln in lines)


def test_a_table_named_is_built_from_a_record_that_does_not_declare_it() -> None:
    """rc_table2-monospread declares rc_table2; its RMonoAttn runs fit rc_table7's rows."""
    built = collect(RECORDS / "rc_table2-monospread", tables=["rc_table7"])
    assert "rc_table7" not in tables_of_study(built.runset)
    cell = _cell(built, "rmono", "reverse_recopy:len15")
    assert cell.n == 5 and cell.records == ("rc_table2-monospread",)


def test_operational_params_do_not_make_two_copies_of_a_run_differ(tmp_path: Path) -> None:
    """Two copies of a record (a moved checkout): equal runs are taken once even where a run
    ran on another device; a changed result is refused."""
    src = RECORDS / "rc_table4-gpu"
    unpack(src / STORE_FILE)
    copies = {}
    for name in ("one", "two", "three"):
        (tmp_path / name).mkdir()
        shutil.copy(src / STORE_FILE, tmp_path / name / STORE_FILE)
        copies[name] = RecordSource(tmp_path / name, "rc_table4-gpu")
    with sqlite3.connect(tmp_path / "two" / STORE_FILE) as db:
        db.execute("UPDATE params SET value = 'cpu' WHERE key = 'device'")
    with sqlite3.connect(tmp_path / "three" / STORE_FILE) as db:
        db.execute("UPDATE latest_metrics SET value = value + 0.01 WHERE key = 'test.len15.seq_acc'")
    built = collect([copies["one"], copies["two"]], tables=["rc_table4"])
    cell = _cell(built, "onestep", "inv_recopy:len15")
    assert cell.n == 5 and built.runset.n_shared == 20
    assert cell.records == (f"rc_table4-gpu@{tmp_path / 'one'}",)
    with pytest.raises(RecordConflict, match=r"differ in metric test\.len15\.seq_acc"):
        collect([copies["one"], copies["three"]], tables=["rc_table4"])


# --------------------------------------------------------------------------- merge rules


def test_equal_runs_in_two_records_are_taken_once(stores) -> None:
    built = collect([stores["a"], stores["b"]], tables=["rc_table4"])
    cell = _cell(built, "onestep", "copy:len15")
    assert [s for s, _ in cell.seeds] == [0, 1, 2, 3, 4]
    assert cell.seed_records == ((0, "a"), (1, "a"), (2, "a"), (3, "b"), (4, "b"))
    assert cell.median == pytest.approx(20.0) and built.runset.n_shared == 1
    assert _cell(built, "onestep_no_step2", "copy:len15").records == ("a",)
    assert "(1 held equal by several records, each taken once)" in built.provenance.lines()[0]
    # the same record given twice is one record
    twice = collect([stores["a"], stores["a"]], tables=["rc_table4"])
    assert len(twice.runset.records) == 1 and _cell(twice, "onestep", "copy:len15").n == 3


def test_unequal_runs_are_refused_in_one_line_naming_both_records(stores, tmp_path: Path, capsys) -> None:
    with pytest.raises(RecordConflict) as exc:
        collect([stores["a"], stores["c"]], tables=["rc_table4"])
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("records a and c both hold run task=copy,variant=onestep hparams {} seed 2 "
                          "and differ in metric test.len100.seq_acc (0.2 in a, 0.25 in c)")
    out = tmp_path / "out"
    code, stdout, err = run_main(["build", str(stores["a"]), str(stores["c"]), "--out", str(out)], capsys,
                                 entry=reports_main)
    assert code == 2 and stdout == "" and not out.exists()
    assert err.count("\n") == 1 and err.startswith("reports build: records a and c both hold run")


# --------------------------------------------------------------------------- command line


def test_reports_build_of_two_sources_writes_the_records_of_each_cell(stores, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    code, stdout, err = run_main(["build", str(stores["a"]), str(stores["b"]), "--out", str(out),
                                  "--format", "csv,md"], capsys, entry=reports_main)
    assert code == 0, err
    assert stdout.split() == [str(out / "rc_table4.csv"), str(out / "rc_table4.md")]
    csv = pl.read_csv(out / "rc_table4.csv", comment_prefix="#")
    row = csv.filter((pl.col("row") == "onestep") & (pl.col("column") == "copy:len30")).row(0, named=True)
    assert json.loads(row["records"]) == {"a": [0, 1, 2], "b": [3, 4]}
    assert [s for s, _ in json.loads(row["seeds"])] == [0, 1, 2, 3, 4] and row["n"] == 5
    # the CSV holds the cells the Markdown shows (rows a or b ran); an empty cell is in the full frame
    assert set(csv["row"]) == {"onestep", "onestep_no_step2"}
    assert run_main(["build", str(stores["a"]), str(stores["b"]), "--out", str(tmp_path / "full"),
                     "--format", "csv", "--full-frame"], capsys, entry=reports_main)[0] == 0
    full = pl.read_csv(tmp_path / "full" / "rc_table4.csv", comment_prefix="#")
    missing = full.filter((pl.col("row") == "onestep_no_sigmoid") & (pl.col("column") == "copy:len30"))
    assert missing["records"].to_list() == ["{}"]
    md = (out / "rc_table4.md").read_text()
    assert "records: 2, runs merged by cell, hparams and seed" in md
    assert "record a (sqlite: a/mlflow.db)" in md and "record b (sqlite: b/mlflow.db)" in md
    # several sources: no default output folder, and --study names one
    for extra, needle in (([], "2 sources: give --out DIR"), (["--out", str(out), "--study", "a"], "--study names one")):
        code, _, err = run_main(["build", str(stores["a"]), str(stores["b"]), *extra], capsys, entry=reports_main)
        assert code == 2 and needle in err and err.count("\n") == 1


def test_a_campaign_file_lists_the_records_relative_to_itself(stores, tmp_path: Path, capsys) -> None:
    camp = stores["root"] / "campaigns" / "table4.yaml"
    camp.parent.mkdir(exist_ok=True)
    camp.write_text("name: table4 pooled\ntables: [rc_table4]\nrecords:\n  - ../a\n  - {path: ../b, study: b}\n")
    code, stdout, err = run_main(["build", str(camp), "--format", "csv"], capsys, entry=reports_main)
    assert code == 0, err
    written = camp.parent / "table4-reports" / "rc_table4.csv"  # beside the campaign file
    assert stdout.split() == [str(written)]
    out = tmp_path / "direct"
    assert run_main(["build", str(stores["a"]), str(stores["b"]), "--out", str(out), "--format", "csv"],
                    capsys, entry=reports_main)[0] == 0
    assert written.read_bytes() == (out / "rc_table4.csv").read_bytes()
    built = collect(camp)
    assert built.runset.study == "table4 pooled" and [r.table.id for r in built.results] == ["rc_table4"]


@pytest.mark.parametrize("text, needle", [
    ("records:\n  - ../a\n  - ../nosuch\n", "records[1]: '../nosuch' does not exist"),
    ("records: [../a]\nrecord: [../b]\n", "unknown key 'record'; valid: records, name, tables"),
    ("records:\n  - {path: ../a, stuyd: a}\n", "records[0]: unknown key 'stuyd'; valid: path, uri, study"),
    ("records:\n  - sqlite:///x.db\n", "records[0]: 'uri' 'sqlite:///x.db' needs 'study'"),
    ("records:\n  - {path: ../a, uri: 'sqlite:///x.db'}\n", "records[0]: give exactly one of 'path'"),
    ("name: x\n", "'records' must list one or more records"),
    ("- ../a\n", "expected a mapping with the keys records, name, tables"),
    ("records: [../a\n", "not YAML"),
])
def test_a_bad_campaign_file_is_one_line_naming_the_file_and_key(stores, text: str, needle: str,
                                                                  tmp_path: Path, capsys) -> None:
    camp = stores["root"] / "campaigns" / f"bad{abs(hash(text))}.yaml"
    camp.parent.mkdir(exist_ok=True)
    camp.write_text(text)
    out = tmp_path / "out"
    code, stdout, err = run_main(["build", str(camp), "--out", str(out)], capsys, entry=reports_main)
    assert code == 2 and stdout == "" and not out.exists()
    assert err.count("\n") == 1 and err.startswith(f"reports build: campaign file {str(camp)!r}: ")
    assert needle in err


def test_study_report_of_two_studies_builds_one_table(stores, tmp_path: Path, capsys) -> None:
    from study.cli import main as study_main

    out = tmp_path / "out"
    code, stdout, err = run_main(["report", "a", "b", "--root", str(stores["root"]), "--out", str(out),
                                  "--format", "csv"], capsys, entry=study_main)
    assert code == 0, err
    csv = pl.read_csv(out / "rc_table4.csv", comment_prefix="#")
    row = csv.filter((pl.col("row") == "onestep") & (pl.col("column") == "copy:len100")).row(0, named=True)
    assert json.loads(row["records"]) == {"a": [0, 1, 2], "b": [3, 4]} and row["n"] == 5
    code, _, err = run_main(["report", "a", "b", "--root", str(stores["root"])], capsys, entry=study_main)
    assert code == 2 and "give --out DIR" in err
    code, _, err = run_main(["report", "a", "c", "--root", str(stores["root"]), "--out", str(tmp_path / "x")],
                            capsys, entry=study_main)
    assert code == 2 and "records a and c both hold run" in err and not (tmp_path / "x").exists()


def test_help_says_how_several_sources_merge(capsys) -> None:
    from study.cli import main as study_main

    for entry, argv in ((reports_main, ["build", "--help"]), (study_main, ["report", "--help"])):
        code, out, _ = run_main(argv, capsys, entry=entry)
        flat = " ".join(out.split())
        assert code == 0 and "campaign file" in flat and "taken once when equal" in flat, flat
