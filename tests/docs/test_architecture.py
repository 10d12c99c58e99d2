"""The house rules, checked statically with the standard library (no imports of the code):

- no import cycle within ``locattn/``, ``study/`` or ``reports/``, counting imports inside
  functions (an import moved into a function to dodge a cycle still counts);
- ``locattn/training/`` keeps its floors: a module imports only modules on lower floors, and
  ``study`` uses its public face (``locattn.train``, ``locattn.packed``), never the modules;
- no module imports another module's ``_private`` name, or reaches for one as an attribute of
  an imported project module (tests and benchmarks included: they use the public seams too);
- the packages stand on floors: ``locattn`` at the bottom, ``record`` (the run record) on it,
  and ``study`` and ``reports`` side by side on both, never importing each other;
- only ``record.mlflow_sql`` opens MLflow's database (``sqlite3``, SQLAlchemy), and only
  ``record.uri`` writes a ``sqlite:`` tracking URI;
- MLflow's and Ray's private names (``ray._private``, ``mlflow`` modules and attributes starting
  with ``_``) appear only in their adapters, ``record.mlflow_sql`` and ``study.driver.ray_compat``, and
  raw SQL only in ``record.mlflow_sql``;
- a file name of a study folder or a run folder is written as a string once, by its owner
  (``locattn/training/files.py``, ``record/layout.py``); everyone else imports the constant;
- no function in ``study``, ``record`` or ``reports`` is longer than 80 lines;
- ``docs/architecture.md``'s map (section 0) names every module of the four packages and its
  floor, and no import climbs to a higher floor of its own package; no ``study`` module is longer
  than 450 lines;
- no signature in ``study`` takes the study as a dict: a parameter ``meta`` is a ``StudyMeta``;
- in ``locattn``, ``record``, ``study`` and ``reports`` an import inside a function says why in a
  comment (which heavy or optional dependency it keeps off which light path).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("locattn", "record", "study", "reports")

# locattn/training, lowest floor first (the order of locattn/training/__init__.py's docstring)
TRAINING_FLOORS = {
    "files": 0,
    "results": 1, "aot_step": 1, "graph_passes": 1,
    "data": 2, "checkpoint": 2, "recorders": 2, "evaluate": 2, "examples": 2, "scoring": 2,
    "attention": 2, "compiles": 2,
    "epoch": 3, "graphed": 3, "decode": 3,
    "seq2seq": 4, "packed": 4, "regression": 4, "memory": 4,
    "run": 5,
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            out[_module_name(path)] = path
    return out


MODULES = _modules()
# tests and benchmarks import each other's helpers: benchmarks as top-level modules (bench_reports),
# tests through the ``tests`` folder (tests.study_helpers, tests.study.test_study)
LOCAL_MODULES = tuple(sorted({"tests"} | {p.stem for d in ("tests", "benchmarks") for p in (ROOT / d).rglob("*.py")}))


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(name: str) -> list[tuple[str, list[str], int]]:
    """(target module, imported names, line) for every import statement, wherever it is."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.append((alias.name, [], node.lineno))
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(name, path.name == "__init__.py", node)
            out.append((target, [a.name for a in node.names], node.lineno))
    return out


def _type_checking_lines(tree: ast.Module) -> set[int]:
    """Lines of the imports under ``if TYPE_CHECKING:``: they never run, so they name a type for
    the annotations without depending on its module (Ray's callbacks type ``"Trial"`` so)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            out |= {n.lineno for stmt in node.body for n in ast.walk(stmt)
                    if isinstance(n, (ast.Import, ast.ImportFrom))}
    return out


def _edges() -> dict[str, set[str]]:
    """module -> the project modules it imports at run time (not under ``if TYPE_CHECKING:``)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for name in MODULES:
        typing_only = _type_checking_lines(ast.parse(MODULES[name].read_text()))
        for target, names, line in _imports(name):
            if target.split(".")[0] not in PACKAGES or line in typing_only:
                continue
            for n in names:  # ``from pkg import module`` imports that module
                if f"{target}.{n}" in MODULES:
                    graph[name].add(f"{target}.{n}")
            if target in MODULES:
                graph[name].add(target)
    for name in graph:
        graph[name].discard(name)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _is_package_init(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def test_no_import_cycles_counting_function_level_imports():
    graph = _edges()
    # A package's __init__ re-exporting its submodules is not a cycle of design: a submodule
    # that imports a sibling ``from pkg.sibling import x`` never needs the package's names.
    # So edges *into* a package __init__ from its own submodules are the only ones dropped.
    for name, targets in graph.items():
        for t in list(targets):
            if _is_package_init(t) and name.startswith(t + "."):
                targets.discard(t)
    cycles = _cycles(graph)
    assert not cycles, "import cycles (function-level imports included):\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


def test_the_checker_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_cycle_checker_leaves_out_only_type_checking_imports():
    tree = ast.parse("from typing import TYPE_CHECKING\nimport a\nif TYPE_CHECKING:\n    from b import B\n"
                     "    import c\nelse:\n    import d\ndef f():\n    from e import E\n")
    assert _type_checking_lines(tree) == {4, 5}
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_training_floors_point_down():
    bad = []
    for name in MODULES:
        if not name.startswith("locattn.training."):
            continue
        floor = TRAINING_FLOORS[name.rsplit(".", 1)[1]]
        for target in _edges()[name]:
            if target.startswith("locattn.training.") and TRAINING_FLOORS[target.rsplit(".", 1)[1]] >= floor:
                if TRAINING_FLOORS[target.rsplit(".", 1)[1]] > floor:
                    bad.append(f"{name} (floor {floor}) imports {target} (floor "
                               f"{TRAINING_FLOORS[target.rsplit('.', 1)[1]]})")
    assert not bad, "\n".join(bad)


def test_every_training_module_has_a_floor():
    names = {p.stem for p in (ROOT / "locattn" / "training").glob("*.py")} - {"__init__"}
    assert names == set(TRAINING_FLOORS), (
        f"locattn/training modules without a floor: {sorted(names - set(TRAINING_FLOORS))}; "
        f"floors without a module: {sorted(set(TRAINING_FLOORS) - names)}")


def _private_uses(path: Path, own: str | None) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    modules_bound: set[str] = set()
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if own is not None and node.level:
                target = _resolve(own, path.name == "__init__.py", node)
            if target.split(".")[0] not in PACKAGES + LOCAL_MODULES or target == own:
                continue
            for alias in node.names:
                if f"{target}.{alias.name}" in MODULES:
                    modules_bound.add(alias.asname or alias.name)
                elif alias.name.startswith("_") and not alias.name.startswith("__"):
                    out.append(f"{where}:{node.lineno}: from {target} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES and alias.asname:
                    modules_bound.add(alias.asname)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in modules_bound and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            out.append(f"{where}:{node.lineno}: {node.value.id}.{node.attr}")
    return out


def test_no_private_name_crosses_a_module_boundary():
    found = []
    for name, path in MODULES.items():
        found += _private_uses(path, name)
    for folder in ("tests", "benchmarks", "results"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            found += _private_uses(path, None)
    assert not found, "private names used across modules:\n" + "\n".join(found)


@pytest.mark.parametrize("source, expected", [
    ("from locattn.train import _Hidden\n", 1),
    ("from locattn.training import checkpoint as ckpt\nckpt._secret()\n", 1),
    ("from locattn.train import train\n", 0),
    ("from test_study import _wait_for\n", 1),
])
def test_the_private_checker_flags_what_it_should(tmp_path, source, expected):
    assert len(_private_uses(_probe(tmp_path, source), None)) == expected


def _probe(tmp_path: Path, source: str) -> Path:
    """A module holding ``source``, for a checker's self-test."""
    path = tmp_path / "probe.py"
    path.write_text(source)
    return path


# ---------------------------------------------------------------------------- package floors

#: What each package may import of the project's packages (besides itself).
PACKAGE_FLOORS = {
    "locattn": set(),
    "record": {"locattn"},
    "study": {"locattn", "record"},
    "reports": {"locattn", "record"},
}


def _package_violations(modules: dict[str, Path]) -> list[str]:
    bad = []
    for name, path in modules.items():
        own = name.split(".")[0]
        for target, _, line in _imports_of(path, name):
            top = target.split(".")[0]
            if top in PACKAGE_FLOORS and top != own and top not in PACKAGE_FLOORS[own]:
                bad.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}: "
                           f"{own} imports {target}")
    return bad


def _imports_of(path: Path, name: str) -> list[tuple[str, list[str], int]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((_resolve(name, path.name == "__init__.py", node), [a.name for a in node.names],
                        node.lineno))
    return out


def test_packages_keep_their_floors_and_study_and_reports_never_meet():
    assert set(PACKAGE_FLOORS) == set(PACKAGES)
    bad = _package_violations(MODULES)
    assert not bad, "imports across package floors (function-level imports included):\n" + "\n".join(bad)


#: The training implementation (``locattn.training``) is locattn's own; studies use its public
#: face, ``locattn.train`` and ``locattn.packed`` (docs/architecture.md).
TRAINING_INTERNALS = "locattn.training"
#: study modules that still reach into it (issue 25 item 3), each until its imports switch.
TRAINING_INTERNALS_ALLOWED: frozenset[str] = frozenset()


def _training_internals(path: Path, name: str) -> list[str]:
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    out = []
    for target, names, line in _imports_of(path, name):
        for module in [target, *(f"{target}.{n}" for n in names)]:  # ``from locattn import training``
            if module == TRAINING_INTERNALS or module.startswith(TRAINING_INTERNALS + "."):
                out.append(f"{where}:{line}: imports {module}")
                break
    return out


def test_study_uses_only_locattns_public_training_api():
    bad = []
    for name, path in MODULES.items():
        if name.split(".")[0] == "study" and name not in TRAINING_INTERNALS_ALLOWED:
            bad += _training_internals(path, name)
    assert not bad, ("study imports locattn.training (use locattn.train / locattn.packed):\n"
                     + "\n".join(bad))


@pytest.mark.parametrize("source, expected", [
    ("from locattn.training.checkpoint import find_checkpoint\n", 1),
    ("def f():\n    from locattn.training import checkpoint as ckpt\n", 1),
    ("import locattn.training.regression\n", 1),
    ("from locattn import training\n", 1),
    ("from locattn.train import find_checkpoint\n", 0),
    ("from locattn.packed import train_packed\n", 0),
])
def test_the_training_api_checker_flags_what_it_should(tmp_path, source, expected):
    assert len(_training_internals(_probe(tmp_path, source), "study.probe")) == expected


def test_the_floor_checker_flags_study_and_reports_importing_each_other(tmp_path):
    (tmp_path / "study").mkdir()
    (tmp_path / "reports").mkdir()
    probes = {"study.x": tmp_path / "study" / "x.py", "reports.y": tmp_path / "reports" / "y.py",
              "record.z": tmp_path / "record_z.py"}
    probes["study.x"].write_text("def f():\n    from reports.runset import read_runs\n")
    probes["reports.y"].write_text("import study.driver.launch\nfrom record import schema\n")
    probes["record.z"].write_text("from study.spec import run_key\n")
    bad = _package_violations(probes)
    assert [b.split(": ", 1)[1] for b in bad] == [
        "study imports reports.runset", "reports imports study.driver.launch", "record imports study.spec"]


# ---------------------------------------------------------------------------- the store's one door

#: The one module that opens MLflow's database (the SQL adapter), and the one that builds a
#: ``sqlite:`` tracking URI (the URI helpers); everyone else goes through ``record.store``.
DATABASE_MODULE = "record.mlflow_sql"
URI_MODULE = "record.uri"
DATABASE_MODULES = ("sqlite3", "sqlalchemy")


def _store_access(path: Path) -> list[str]:
    """Imports of a database driver, and ``sqlite:`` URI literals, in one file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        out += [f"{path.name}:{node.lineno}: imports {n}" for n in names
                if n.split(".")[0] in DATABASE_MODULES]
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and node.value.startswith("sqlite:") and " " not in node.value):  # not help text
            out.append(f"{path.name}:{node.lineno}: a sqlite: URI literal")
    return out


def test_only_the_record_store_opens_mlflows_database():
    bad = []
    for name, path in MODULES.items():
        allowed = {DATABASE_MODULE: ": imports ", URI_MODULE: ": a sqlite: URI literal"}.get(name)
        bad += [f"{path.relative_to(ROOT).parent}/{b}" for b in _store_access(path)
                if allowed is None or allowed not in b]
    assert not bad, ("MLflow's database opened outside record/mlflow_sql.py (or its URI built outside "
                     "record/uri.py):\n" + "\n".join(bad))


@pytest.mark.parametrize("source, expected", [
    ("import sqlite3\n", 1),
    ("def f():\n    import sqlalchemy\n    return sqlalchemy.create_engine('x')\n", 1),
    ("URI = 'sqlite:///x.db'\n", 1),
    ("def f(p):\n    return f'sqlite:///{p}'\n", 1),
    ("from record.store import sqlite_uri\n", 0),
    ("HELP = 'sqlite:///..., postgresql://...'\n", 0),
])
def test_the_store_checker_flags_what_it_should(tmp_path, source, expected):
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert len(_store_access(path)) == expected


# ---------------------------------------------------------------------------- the engines' doors

#: The one module that may use an engine's private names (modules, attributes, names starting
#: with ``_``), each use with a comment saying why the public API does not serve.
ENGINE_ADAPTERS = {"mlflow": "record.mlflow_sql", "ray": "study.driver.ray_compat"}
#: The one module that holds raw SQL (statements, ``execute``, ``sqlalchemy.text``).
SQL_MODULE = "record.mlflow_sql"
SQL_WORDS = ("SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "PRAGMA")
SQL_CALLS = ("execute", "executemany", "executescript", "text")


def _is_private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _engine_private(path: Path) -> list[tuple[str, str]]:
    """``(engine, where)`` for each private name of an engine (:data:`ENGINE_ADAPTERS`) in one
    file: an import of a private module or name (``from ray._private import utils``, ``from
    mlflow.store.db.utils import _get_alembic_config``), a private attribute reached from a name
    imported from the engine (``SqlAlchemyStore._engine_map``, ``MlflowClient()._tracking_client``,
    ``getattr(SqlAlchemyStore, "_engine_map")``), or a private module named in a string
    (``"ray._raylet" in sys.modules``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    bound: dict[str, str] = {}  # local name -> engine
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                engine = a.name.split(".")[0]
                if engine in ENGINE_ADAPTERS:
                    bound[(a.asname or a.name).split(".")[0]] = engine
                    if any(_is_private(p) for p in a.name.split(".")):
                        out.append((engine, f"{where}:{node.lineno}: import {a.name}"))
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            engine = node.module.split(".")[0]
            if engine not in ENGINE_ADAPTERS:
                continue
            for a in node.names:
                bound[a.asname or a.name] = engine
                if any(_is_private(p) for p in [*node.module.split("."), a.name]):
                    out.append((engine, f"{where}:{node.lineno}: from {node.module} import {a.name}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts = node.value.split(".")
            if (parts[0] in ENGINE_ADAPTERS and len(parts) > 1 and " " not in node.value
                    and any(_is_private(p) for p in parts[1:])):
                out.append((parts[0], f"{where}:{node.lineno}: {node.value!r}"))

    def root(node: ast.AST) -> str | None:
        while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
            node = node.func if isinstance(node, ast.Call) else node.value
        return node.id if isinstance(node, ast.Name) else None

    for node in ast.walk(tree):
        name = attr = None
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            name, attr = root(node.value), node.attr
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _is_private(node.args[1].value)):
            name, attr = root(node.args[0]), node.args[1].value
        if name in bound:
            out.append((bound[name], f"{where}:{node.lineno}: {name}...{attr}"))
    return out


def _raw_sql(path: Path) -> list[str]:
    """Raw SQL in one file: a string that starts with an SQL statement's word (:data:`SQL_WORDS`,
    upper case, then a space), and calls of ``.execute``, ``.executemany``, ``.executescript`` or
    ``sqlalchemy.text``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    out = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and re.match(rf"\s*({'|'.join(SQL_WORDS)})\s", node.value)):
            out.append(f"{where}:{node.lineno}: {node.value.strip()[:40]!r}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in SQL_CALLS
              and (node.func.attr != "text" or (isinstance(node.func.value, ast.Name)
                                                and node.func.value.id == "sqlalchemy"))):
            out.append(f"{where}:{node.lineno}: .{node.func.attr}(...)")
    return out


def test_engines_private_names_and_raw_sql_only_in_their_adapters():
    bad = []
    for name, path in MODULES.items():
        bad += [w for engine, w in _engine_private(path) if ENGINE_ADAPTERS[engine] != name]
        if name != SQL_MODULE:
            bad += _raw_sql(path)
    assert not bad, ("MLflow's or Ray's private names, or raw SQL, outside their adapters "
                     f"({', '.join(sorted(set(ENGINE_ADAPTERS.values())))}):\n" + "\n".join(bad))


def test_the_adapters_do_hold_what_the_rule_keeps_there():
    """The rule guards something: each adapter still uses its engine's private names (else the
    rule and the adapter are stale; move the names back out of the list)."""
    for engine, module in ENGINE_ADAPTERS.items():
        assert any(e == engine for e, _ in _engine_private(MODULES[module])), module
    assert _raw_sql(MODULES[SQL_MODULE])


@pytest.mark.parametrize("source, expected", [
    ("from ray._private import utils\n", 1),
    ("def f():\n    import ray._private.worker\n", 1),
    ("from mlflow.store.db.utils import _get_alembic_config\n", 1),
    ("from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore\nSqlAlchemyStore._engine_map\n", 1),
    ("from mlflow.tracking import MlflowClient\nMlflowClient(tracking_uri='x')._tracking_client.store\n", 1),
    ("from mlflow.tracking import MlflowClient as C\ngetattr(C, '_x', None)\n", 1),
    ("import sys\nloaded = 'ray._raylet' in sys.modules\n", 1),
    ("import ray\nray.init(address='local')\n", 0),
    ("from mlflow.tracking import MlflowClient\nMlflowClient().search_runs(['1'])\n", 0),
    ("class A:\n    def f(self):\n        return self._x\n", 0),
    ("HELP = 'see ray._private in the docs'\n", 0),
])
def test_the_engine_private_checker_flags_what_it_should(tmp_path, source, expected):
    assert len(_engine_private(_probe(tmp_path, source))) == expected


@pytest.mark.parametrize("source, expected", [
    ("q = 'SELECT run_uuid FROM runs'\n", 1),
    ("def f(t):\n    return f'UPDATE {t} SET x = 1'\n", 1),
    ("def f(con):\n    con.execute(q)\n", 1),
    ("import sqlalchemy\nsqlalchemy.text(q)\n", 1),
    ("MSG = 'Select a study'\n", 0),
    ("WORD = 'DELETE'\n", 0),
    ("def f(w):\n    w.text('x')\n", 0),
])
def test_the_raw_sql_checker_flags_what_it_should(tmp_path, source, expected):
    assert len(_raw_sql(_probe(tmp_path, source))) == expected


# ---------------------------------------------------------------------------- file names, once

#: Module that owns the file-name constants, and the names it owns.
FILE_NAME_OWNERS = {"locattn.training.files": "locattn/training/files.py",
                    "record.layout": "record/layout.py"}


def _owned_names() -> dict[str, str]:
    """file name -> owning module, read from the owners' own assignments (``NAME = "x.ext"``)."""
    owned = {}
    for module, rel in FILE_NAME_OWNERS.items():
        for node in ast.parse((ROOT / rel).read_text()).body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str) and "." in node.value.value):
                owned[node.value.value] = module
    return owned


def _file_name_literals(path: Path, owned: dict[str, str]) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for name in owned:
                if node.value == name or node.value.endswith("/" + name):
                    out.append(f"{path.name}:{node.lineno}: {node.value!r} (owned by {owned[name]})")
    return out


def test_file_names_are_written_once_by_their_owner():
    owned = _owned_names()
    assert {"result.json", "state.pt", "config.json", "examples.json", "study.json", "mlflow.db",
            "study.lock", "trial.json"} <= set(owned)
    bad = []
    for name, path in MODULES.items():
        if name not in FILE_NAME_OWNERS:
            bad += [f"{path.relative_to(ROOT).parent}/{b}" for b in _file_name_literals(path, owned)]
    assert not bad, "file names retyped outside their owner (import the constant):\n" + "\n".join(bad)


def test_the_file_name_checker_flags_a_retyped_name(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text('STATE = "state.pt"\nP = "checkpoint/state.pt"\n"""Writes state.pt."""\n')
    assert len(_file_name_literals(path, _owned_names())) == 2


# ---------------------------------------------------------------------------- function-level imports
REASONED_IMPORT_PACKAGES = ("locattn", "record", "study", "reports")
#: Modules whose function-level imports may go without a reason (none: every one says why).
UNREASONED_IMPORTS_ALLOWED: frozenset[str] = frozenset()


def _unreasoned_imports(path: Path) -> list[str]:
    """Function-level imports whose group (consecutive import lines) carries no ``#`` comment on
    its lines or on the line just above it: the comment says which heavy dependency it keeps off
    which light path."""
    text = path.read_text()
    lines = text.splitlines()
    out = []
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for inner in ast.walk(node):
            if not isinstance(inner, (ast.Import, ast.ImportFrom)):
                continue
            first = last = inner.lineno - 1
            def part(i: int) -> bool:  # an import line, or a blank line inside the group
                return lines[i].lstrip().startswith(("import ", "from ")) or not lines[i].strip()

            while first > 0 and part(first - 1):
                first -= 1
            while last + 1 < len(lines) and part(last + 1):
                last += 1
            if not any("#" in line for line in lines[max(first - 1, 0):last + 1]):
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                out.append(f"{where}:{inner.lineno}: {lines[inner.lineno - 1].strip()}")
    return sorted(set(out))


def test_every_function_level_import_says_why():
    found = [line for name, path in MODULES.items()
             if name.split(".")[0] in REASONED_IMPORT_PACKAGES and name not in UNREASONED_IMPORTS_ALLOWED
             for line in _unreasoned_imports(path)]
    assert not found, "function-level imports without a reason (a comment):\n" + "\n".join(found)


@pytest.mark.parametrize("source, expected", [
    ("def f():\n    import torch\n", 1),
    ("def f():\n    import torch  # heavy: off the CLI\n", 0),
    ("def f():\n    # torch off --help\n    import torch\n    import numpy\n", 0),
    ("def f():\n    import torch  # off --help\n\n    import numpy\n", 0),
    ("import torch\n", 0),
])
def test_the_import_reason_checker_flags_what_it_should(tmp_path, source, expected):
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert len(_unreasoned_imports(path)) == expected


# -- function length ------------------------------------------------------------------------------

#: The packages whose functions are read top to bottom: none longer than this many lines (the
#: ``def`` line to the last line of its body, docstring included).
MAX_FUNCTION_LINES = 80
SHORT_FUNCTION_PACKAGES = ("study", "record", "reports")


def _long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``path:line: name (n lines)`` for each function (nested ones too) longer than ``limit``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return [f"{where}:{node.lineno}: {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > limit]


def test_no_function_in_study_record_or_reports_is_longer_than_80_lines():
    found = [line for name, path in MODULES.items() if name.split(".")[0] in SHORT_FUNCTION_PACKAGES
             for line in _long_functions(path)]
    assert not found, (f"functions longer than {MAX_FUNCTION_LINES} lines (split them: plan, run, "
                       "summarise):\n" + "\n".join(found))


def test_the_length_checker_names_the_function_and_its_length(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text("def short():\n    return 1\n\n\ndef long():\n" + "    x = 1\n" * 80)
    assert _long_functions(path) == [f"{path}:5: long (81 lines)"]


# -- the typed study ------------------------------------------------------------------------------

#: Parameters named like the study's metadata that are something else (module.function: why).
NOT_THE_STUDY = {
    "study.cost.calibration.merge_rates": "meta is a calibration table's provenance per device, not a study",
}
STUDY_META_NAMES = ("meta", "study_meta")


def _untyped_study_params(name: str, path: Path) -> list[str]:
    """``path:line: function(meta: annotation)`` for each parameter named like the study's
    metadata whose annotation is not :class:`study.recording.meta.StudyMeta` (a dict, a Mapping, none)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or f"{name}.{node.name}" in NOT_THE_STUDY:
            continue
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            note = ast.unparse(arg.annotation) if arg.annotation is not None else "no annotation"
            if arg.arg in STUDY_META_NAMES and "StudyMeta" not in note:
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                out.append(f"{where}:{node.lineno}: {node.name}({arg.arg}: {note})")
    return out


def test_no_study_signature_takes_the_study_as_a_dict():
    found = [line for name, path in MODULES.items() if name.split(".")[0] == "study"
             for line in _untyped_study_params(name, path)]
    assert not found, ("the study is study.recording.meta.StudyMeta, not a dict (read it with study.recording.folder.load_meta):\n"
                       + "\n".join(found))


def test_the_study_type_checker_flags_a_dict_meta(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text("def f(meta: dict[str, Any]) -> None: ...\n"
                    "def g(meta: StudyMeta) -> None: ...\n"
                    "def h(*, study_meta: Mapping[str, Any] | None = None) -> None: ...\n")
    assert _untyped_study_params("study.probe", path) == [
        f"{path}:1: f(meta: dict[str, Any])", f"{path}:3: h(study_meta: Mapping[str, Any] | None)"]


def test_the_drivers_repository_root_is_the_repositorys():
    """The driver puts the repository root on its Ray workers' ``PYTHONPATH`` and starts Ray from
    it: a path climbed from ``__file__`` must follow the module into its sub-package."""
    from study.driver.process import REPO_ROOT

    assert (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "study" / "cli.py").is_file(), REPO_ROOT


# -- the map: docs/architecture.md section 0 names every module and its floor ----------------------

ARCHITECTURE_DOC = ROOT / "docs" / "architecture.md"
#: The longest a ``study`` module may be: past it, a module holds more than one purpose.
STUDY_MODULE_MAX_LINES = 450
_MAP_HEADING = re.compile(r"^\*\*`(\w+)/`\*\*")
_MAP_FLOOR = re.compile(r"^(\d+)\. ")
_MAP_NAME = re.compile(r"`([A-Za-z_][\w.]*)`")


def read_map(text: str, modules: set[str]) -> tuple[dict[str, int], list[str]]:
    """The floor of each module the map names (its package's top-level list item, ``N. ``, that
    first names it in backticks by its dotted path inside the package), and the map's errors: a
    module of ``modules`` it does not name, and a dotted name under one of its sub-packages that
    is no module. A package's own ``__init__`` (``study``, ``record``) sits under every floor."""
    floors: dict[str, int] = {}
    errors: list[str] = []
    pkg, floor = None, None
    for line in text.split("\n"):
        heading = _MAP_HEADING.match(line)
        if heading:
            pkg, floor = heading.group(1), None
            continue
        if line.startswith("#") or (line.startswith("**") and pkg):
            pkg = None if line.startswith("#") else pkg
            continue
        if pkg is None:
            continue
        item = _MAP_FLOOR.match(line)
        if item:
            floor = int(item.group(1))
        if floor is None:
            continue
        for name in _MAP_NAME.findall(line):
            full = f"{pkg}.{name}"
            if full in modules:
                floors.setdefault(full, floor)
            elif "." in name and f"{pkg}.{name.rsplit('.', 1)[0]}" in modules and name.islower():
                errors.append(f"{full}: named on the map, but no such module")
    packages = {m.split(".")[0] for m in modules}
    errors += [f"{m}: a module the map does not name" for m in sorted(modules - set(floors) - packages)]
    return floors, errors


def floor_climbs(graph: dict[str, set[str]], floors: dict[str, int]) -> list[str]:
    """``importer (floor) -> imported (floor)`` for each import of a module on a higher floor of
    the importer's own package."""
    return [f"{a} (floor {floors[a]}) imports {b} (floor {floors[b]})"
            for a in sorted(graph) for b in sorted(graph[a])
            if a.split(".")[0] == b.split(".")[0] and a in floors and b in floors and floors[b] > floors[a]]


def long_modules(paths: dict[str, Path], limit: int) -> list[str]:
    """``module: N lines`` for each of ``paths`` longer than ``limit`` lines."""
    out = []
    for name, path in sorted(paths.items()):
        n = len(path.read_text().splitlines())
        if n > limit:
            out.append(f"{name}: {n} lines")
    return out


def test_every_module_is_on_the_map():
    _, errors = read_map(ARCHITECTURE_DOC.read_text(), set(MODULES))
    assert not errors, "docs/architecture.md section 0 (the map) and the code disagree:\n" + "\n".join(errors)


def test_no_import_climbs_a_floor_of_the_map():
    floors, _ = read_map(ARCHITECTURE_DOC.read_text(), set(MODULES))
    climbs = floor_climbs(_edges(), floors)
    assert not climbs, ("imports that climb the map's floors (docs/architecture.md section 0): move the "
                        "module or the map:\n" + "\n".join(climbs))


def test_no_study_module_is_longer_than_450_lines():
    long = long_modules({m: p for m, p in MODULES.items() if m.split(".")[0] == "study"}, STUDY_MODULE_MAX_LINES)
    assert not long, (f"study modules over {STUDY_MODULE_MAX_LINES} lines (split each into parts with one "
                      "purpose):\n" + "\n".join(long))


def test_the_map_checks_flag_a_missing_module_a_stray_name_a_climb_and_a_long_module(tmp_path):
    doc = ("## 0. Floors\n\n**`pkg/`**\n1. `low` (the bottom), `sub.gone` (renamed away)\n"
           "2. `high`, `sub` (its `__init__`)\n   and `sub.leaf` under it, `Leaf` a class\n"
           "**`other/`**\n1. `mod`\n\n## 1. Next\n`pkg.unnamed`\n")
    modules = {"pkg", "pkg.low", "pkg.high", "pkg.sub", "pkg.sub.leaf", "pkg.unnamed", "other.mod"}
    floors, errors = read_map(doc, modules)
    assert floors == {"pkg.low": 1, "pkg.high": 2, "pkg.sub": 2, "pkg.sub.leaf": 2, "other.mod": 1}
    assert errors == ["pkg.sub.gone: named on the map, but no such module",
                      "pkg.unnamed: a module the map does not name"]
    graph = {"pkg.low": {"pkg.high", "other.mod"}, "pkg.high": {"pkg.low"}, "pkg.sub.leaf": {"pkg.sub"}}
    assert floor_climbs(graph, floors) == ["pkg.low (floor 1) imports pkg.high (floor 2)"]
    (tmp_path / "short.py").write_text("x = 1\n" * 3)
    (tmp_path / "long.py").write_text("x = 1\n" * 4)
    assert long_modules({"short": tmp_path / "short.py", "long": tmp_path / "long.py"}, 3) == ["long: 4 lines"]
