"""record.store.store_condition: what a store's failure says of the store, on the exceptions the
store and the file system really raise (a full SQLite file, a read-only one, a lock held by
another connection, a missing table, /dev/full), and the three messages built on it (the
mid-run failure line, the one-line OS error, the open-time unwritable check)."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy

from record.store import FULL, GONE, LOCKED, READ_ONLY, readonly_uri, store_condition
from study.recording.folder import StudyError, one_line_os_error


def _raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - the exception is the value under test
        return exc
    raise AssertionError("expected an exception")


def _db(tmp_path: Path) -> Path:
    db = tmp_path / "mlflow.db"
    con = sqlite3.connect(db)
    con.execute("create table runs (x text)")
    con.commit()
    con.close()
    return db


def _full(db: Path) -> None:
    con = sqlite3.connect(db)
    con.execute("pragma max_page_count = 3")  # SQLite's own "full": no more pages may be added
    for _ in range(100):
        con.execute("insert into runs values (?)", ("x" * 4000,))
    con.commit()


def _locked(db: Path) -> None:
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("begin exclusive")
    try:
        sqlite3.connect(db, timeout=0).execute("insert into runs values ('x')")
    finally:
        holder.execute("rollback")


def _dev_full() -> None:
    with open("/dev/full", "w") as f:
        f.write("x")


def test_each_condition_from_the_exceptions_the_store_raises(tmp_path: Path) -> None:
    db = _db(tmp_path)
    cases = {
        "full": _raised(lambda: _full(db)),
        "readonly": _raised(lambda: sqlite3.connect(readonly_uri(db), uri=True).execute(
            "insert into runs values ('x')")),
        "locked": _raised(lambda: _locked(db)),
        "no table": _raised(lambda: sqlite3.connect(db).execute("select * from experiments")),
        "no file": _raised(lambda: sqlite3.connect(tmp_path / "gone" / "mlflow.db")),
        "wrapped readonly": _raised(lambda: sqlalchemy.create_engine(
            f"sqlite:///{readonly_uri(db)}&uri=true").connect().exec_driver_sql("insert into runs values ('x')")),
    }
    # The texts are SQLite's own: a change in them is what this test is here to catch.
    assert str(cases["full"]) == "database or disk is full"
    assert str(cases["readonly"]) == "attempt to write a readonly database"
    assert str(cases["locked"]) == "database is locked"
    assert str(cases["no table"]) == "no such table: experiments"
    assert str(cases["no file"]) == "unable to open database file"
    assert type(cases["wrapped readonly"]).__module__ == "sqlalchemy.exc"
    assert "(sqlite3.OperationalError) attempt to write a readonly database\n[SQL:" in str(cases["wrapped readonly"])
    assert {k: store_condition(e) for k, e in cases.items()} == {
        "full": FULL, "readonly": READ_ONLY, "locked": LOCKED, "no table": GONE, "no file": GONE,
        "wrapped readonly": READ_ONLY}


@pytest.mark.parametrize("code, condition", [(errno.ENOSPC, FULL), (errno.EROFS, READ_ONLY),
                                             (errno.EACCES, READ_ONLY), (errno.EPERM, READ_ONLY),
                                             (errno.ENOENT, None), (errno.EIO, None)])
def test_the_file_systems_errno_says_it(code: int, condition: str | None, tmp_path: Path) -> None:
    exc = OSError(code, __import__("os").strerror(code), str(tmp_path / "mlflow.db"))
    assert store_condition(exc) == condition


def test_a_real_enospc_from_dev_full() -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    exc = _raised(_dev_full)
    assert isinstance(exc, OSError) and exc.errno == errno.ENOSPC
    assert store_condition(exc) == FULL
    assert one_line_os_error(exc, Path("/s/mlflow.db"), Path("/s")) == (
        "/s/mlflow.db: No space left on device (OSError); free space, then `study resume /s`")


def test_this_codes_own_errors_are_no_store_condition() -> None:
    # a bug, or the study's own one-line error, keeps its message whatever it quotes
    assert store_condition(KeyError("readonly")) is None
    assert store_condition(TypeError("database or disk is full")) is None
    assert store_condition(StudyError("x: cannot write here (attempt to write a readonly database)")) is None
    assert store_condition(sqlite3.OperationalError("near 'selec': syntax error")) is None


def test_the_messages_built_on_it(tmp_path: Path) -> None:
    from study.recording.record_callback import store_failure, unwritable  # study.recording.record_callback imports Ray Tune
    db = _db(tmp_path)
    full, ro, locked = _raised(lambda: _full(db)), _raised(lambda: sqlite3.connect(
        readonly_uri(db), uri=True).execute("insert into runs values ('x')")), _raised(lambda: _locked(db))
    assert store_failure("/x/mlflow.db", full) == "the store /x/mlflow.db failed mid-run (no space left on its device)"
    assert store_failure("/x/mlflow.db", ro) == "the store /x/mlflow.db failed mid-run (it became read-only)"
    assert store_failure("/x/mlflow.db", locked) == (
        "the store /x/mlflow.db failed mid-run (OperationalError: database is locked)")
    assert store_failure("/x/mlflow.db", ValueError("readonly")) is None
    assert unwritable(full) and unwritable(ro) and not unwritable(locked)
    assert one_line_os_error(ro, Path("/x/mlflow.db")) == (
        "/x/mlflow.db: cannot write here (attempt to write a readonly database)")
    assert one_line_os_error(locked, Path("/x/mlflow.db")) == "/x/mlflow.db: OperationalError: database is locked"
