"""The store's schema check and its :class:`record.store.Store` door, against real SQLite MLflow
stores whose ``alembic_version`` stamp is changed by hand: a driver refuses a store stamped
older or newer than the installed MLflow writes, in one line, and leaves it as it was; readers
still read it."""

from __future__ import annotations

import sqlite3
from importlib import metadata
from pathlib import Path

import pytest

from record import mlflow_sql, schema
from record.store import IndexedRun, MlflowStore, Store, StoreError, check_schema, open_store, sqlite_uri
from record.writer import RecordWriter
from study.spec import SpecError
from study.recording.study_store import store_uri


def writer(uri: str) -> RecordWriter:
    return RecordWriter(tracking_uri=uri, study="s", artifact_location=None, parent_tags={}).open()


def stamp(db: Path, revision: str) -> None:
    """Set the store's schema revision (what another MLflow would have left)."""
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE alembic_version SET version_num = ?", (revision,))
    con.close()


def stamped(db: Path) -> list[str]:
    con = sqlite3.connect(db)
    try:
        return [r[0] for r in con.execute("SELECT version_num FROM alembic_version")]
    finally:
        con.close()


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, str, str]:
    """A real store holding one study with one trial run: (file, URI, the run's id)."""
    db = tmp_path / "mlflow.db"
    uri = sqlite_uri(db)
    w = writer(uri)
    state = w.create_run("k", tags={schema.RUN_KEY: "k", schema.ROLE: schema.ROLE_TRIAL,
                                    schema.STATUS: schema.STATUS_RUNNING}, params={"lr": 0.1}, name="k")
    w.flush()
    return db, uri, state.run_id


def test_a_store_at_the_installed_mlflows_schema_opens(store) -> None:
    db, uri, _ = store
    assert stamped(db) == [mlflow_sql.head_revision()]
    check_schema(uri)  # no error
    assert writer(uri).runs["k"]


def test_a_store_stamped_older_is_refused_in_one_line_naming_both_and_the_upgrade(store) -> None:
    db, uri, run_id = store
    older = mlflow_sql.known_revisions()[1]
    stamp(db, older)
    with pytest.raises(StoreError) as exc:
        writer(uri)
    message = str(exc.value)
    assert "\n" not in message
    head = mlflow_sql.head_revision()
    assert (f"the store {uri} has MLflow schema {older}, older than {head} that "
            f"MLflow {metadata.version('mlflow')} writes") in message
    assert f"`mlflow db upgrade {uri}`" in message
    assert stamped(db) == [older]  # left as it was: nothing migrated, nothing written
    # Readers do not check: the record still reads.
    rows = open_store(uri).read_rows("s", tag_keys=[schema.ROLE])
    assert [r[0] for r in rows.runs if (r[0], schema.ROLE, schema.ROLE_TRIAL) in rows.tags] == [run_id]


def test_a_store_stamped_newer_is_refused_naming_the_newer_mlflow(store) -> None:
    db, uri, _ = store
    stamp(db, "0123456789ab")  # no revision this MLflow knows: a newer MLflow wrote it
    with pytest.raises(StoreError) as exc:
        check_schema(uri)
    message = str(exc.value)
    assert "\n" not in message
    assert (f"has MLflow schema 0123456789ab, newer than MLflow {metadata.version('mlflow')} knows "
            f"(its newest is {mlflow_sql.head_revision()}): install the newer MLflow") in message
    with pytest.raises(StoreError, match="newer than"):
        writer(uri)
    assert stamped(db) == ["0123456789ab"]


def test_a_new_store_and_a_server_are_not_checked_here(tmp_path: Path) -> None:
    check_schema(sqlite_uri(tmp_path / "none-yet.db"))  # MLflow builds it
    check_schema("http://127.0.0.1:9/")  # a server checks its own database; nothing is contacted
    assert not (tmp_path / "none-yet.db").exists()


def test_the_mlflow_store_is_a_store_and_reads_what_the_writer_wrote(store) -> None:
    db, uri, run_id = store
    s = open_store(uri, writing=True)
    assert isinstance(s, Store) and isinstance(s, MlflowStore)
    index = s.run_index(writer(uri).experiment_id)
    assert index is not None and index["k"] == IndexedRun(
        run_id=run_id, last_step=0, status=schema.STATUS_RUNNING, metric_keys=frozenset())
    rows = s.read_rows("s", tag_keys=[schema.RUN_KEY], param_keys=["lr"])
    assert (run_id, "lr", "0.1") in rows.params
    assert s.latest_metrics([run_id]) == {run_id: {}}


def test_study_ui_refuses_a_store_of_another_schema_before_any_repair_writes(store, tmp_path: Path) -> None:
    db, uri, _ = store
    older = mlflow_sql.known_revisions()[1]
    stamp(db, older)
    before = db.read_bytes()
    with pytest.raises(SpecError, match=f"has MLflow schema {older}, older than"):
        store_uri(uri, tmp_path, "s")
    assert db.read_bytes() == before
