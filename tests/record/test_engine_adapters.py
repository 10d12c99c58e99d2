"""The engines' private names that the adapters (``record/mlflow_sql.py``, ``study/driver/ray_compat.py``)
rely on still exist, and do what the adapters assume, in the installed MLflow and Ray: a release
that moves one fails here, in seconds, rather than in a driver (``forget_engines`` would
otherwise pass silently, and ``keep_on_loopback`` fail only when a study starts)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from record import mlflow_sql
from record.store import sqlite_uri
from study.driver import ray_compat

ROOT = Path(__file__).resolve().parents[2]


def test_forget_engines_drops_mlflows_cached_engine_of_a_rebuilt_store(tmp_path: Path) -> None:
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    db = tmp_path / "mlflow.db"
    mlflow_sql.create_store(db)
    engines = SqlAlchemyStore._engine_map
    assert isinstance(engines, dict) and sqlite_uri(db) in engines  # MLflow still caches it there
    mlflow_sql.forget_engines(db)
    assert sqlite_uri(db) not in engines


def test_mlflows_migrations_are_found_and_a_new_store_is_stamped_at_their_head(tmp_path: Path) -> None:
    head = mlflow_sql.head_revision()
    known = mlflow_sql.known_revisions()
    assert known[0] == head and len(known) > 10 and len(set(known)) == len(known)
    db = tmp_path / "mlflow.db"
    mlflow_sql.create_store(db)
    assert mlflow_sql.schema_revision(sqlite_uri(db)) == head
    assert not mlflow_sql.half_built(db)


def test_keep_on_loopback_sets_the_constant_ray_read_at_its_import(monkeypatch) -> None:
    from ray._private import ray_constants

    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", True)  # ray imported with the variable unset
    ray_compat.keep_on_loopback()
    assert ray_constants.ENABLE_RAY_CLUSTER is False


def test_sigterm_handler_kept_makes_rays_setter_a_no_op_then_puts_it_back() -> None:
    from ray._private import utils

    def ours(signum, frame):  # a driver's handler
        raise AssertionError("not called")

    setter, before = utils.set_sigterm_handler, signal.signal(signal.SIGTERM, ours)
    try:
        with ray_compat.sigterm_handler_kept():
            utils.set_sigterm_handler(lambda signum, frame: sys.exit(1))  # what ray.init does
            assert signal.getsignal(signal.SIGTERM) is ours
        assert utils.set_sigterm_handler is setter
        setter(signal.SIG_DFL)  # Ray's own setter works again (not the no-op)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, before)


def test_core_loaded_follows_the_import_of_ray() -> None:
    code = ("from study.driver import ray_compat\nbefore = ray_compat.core_loaded()\nimport ray\n"
            "print(before, ray_compat.core_loaded())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.split() == ["False", "True"], out.stderr[-2000:]
