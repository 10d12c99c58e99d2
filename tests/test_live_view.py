"""What a researcher reads while and after a study runs: the cell runs' columns in percent in
the MLflow UI's saved view (the names fit a column; the seeds' runs show their own values in the
same columns), and ``study ui``'s live grid page (its HTML, regenerated from the store on each
request, with running and stale cells marked and links into the MLflow UI at the address served).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from record.summary import cell_medians, cell_percents, seed_percents


def test_a_cell_run_holds_each_split_in_percent_and_its_solved_seeds_on_the_hardest_split() -> None:
    runs = [{"test.len15.seq_acc": 1.0, "test.len100.seq_acc": 0.95, "best_selection_score": 0.9},
            {"test.len15.seq_acc": 0.9, "test.len100.seq_acc": 0.5, "best_selection_score": 0.8},
            {"test.len15.seq_acc": 0.8, "test.len100.seq_acc": math.nan, "best_selection_score": 0.7}]
    got = cell_percents(runs)
    # medians over the finite values; solved: 0.95 only (len100 is the hardest split; a NaN is no seed)
    assert got == {"len15 pct": 90.0, "len100 pct": 72.5, "solved": 1.0}
    assert cell_percents([{"test.len15.seq_acc": 0.4321}, {"test.len15.seq_acc": 0.9543}])["len15 pct"] == 69.32
    all_ = cell_medians(runs)
    assert all_["len100 pct"] == 72.5 and all_["test.len100.seq_acc"] == 0.725
    assert all_["seeds_finished"] == 3.0 and all_["seeds_diverged"] == 1.0
    # the names fit MLflow's metric names and a column: short, no '%', which MLflow refuses
    from mlflow.utils.validation import validate_param_and_metric_name

    assert all(validate_param_and_metric_name(k) and len(k) <= 12 for k in got)


def test_accuracy_is_the_headline_where_no_split_has_a_sequence_accuracy() -> None:
    finals = {"test.iid.accuracy": 0.25, "test.iid.loss": 3.0, "best_epoch": 4.0}
    assert seed_percents(finals) == {"iid pct": 25.0}
    assert cell_percents([finals]) == {"iid pct": 25.0, "solved": 0.0}
    assert cell_percents([{"best_epoch": 3.0}]) == {}


def test_the_saved_view_puts_the_percent_solved_and_seeds_columns_first(tmp_path: Path) -> None:
    """A record with cell runs (as a launch writes them): the view's columns start with the
    hardest split in percent, the seeds solved and finished, in that order (the runs table's
    column state, since MLflow would order them by name), then the other splits in percent."""
    from record.writer import RecordWriter
    from reports.synth import SynthRun, write_bulk_sql
    from study.naming import cell_name
    from study.ui import view_state

    runs = [SynthRun(task="copy", variant=v, seed=s, hparams={}, n_seeds=2,
                     metrics={"best_selection_score": 0.5, "test.len15.seq_acc": 0.5,
                              "test.len100.seq_acc": 0.25})
            for v in ("onestep", "content") for s in (0, 1)]
    db = tmp_path / "mlflow.db"
    write_bulk_sql(db, "s", runs, tables=["rc_table2"])
    uri = f"sqlite:///{db}"
    RecordWriter(tracking_uri=uri, study="s", artifact_location=None, parent_tags={},
                 cell_name=cell_name).open()  # writes the cells' runs, as a resume does
    state = view_state(uri, "s")
    want = ["metrics.`len100 pct`", "metrics.`solved`", "metrics.`seeds_finished`",
            "metrics.`len15 pct`", "metrics.`best_selection_score`"]
    assert state["selectedColumns"] == want and state["columnOrder"] == want
    assert state["searchFilter"] == "tags.locattn.role != 'study'"
    assert all(70 <= w <= 200 for w in state["columnWidths"].values())
    assert json.dumps(state)  # the saved view is JSON
