"""Every command in the fenced ``bash`` blocks of the README and of the docs pages works as
written (issues 26 and 42). A ``bash`` block is a recipe to copy; templates with placeholders
and session logs are ``text`` blocks.

The commands are extracted from README.md, then from each page under docs/ (sorted by path),
in order, and run with the project's console
scripts in one scratch folder (with ``ablations/`` beside it, as in a clone), so that a later
command sees what an earlier one wrote (``study status rc_table2-smoke`` after its launch).
A command is left out only for a reason in :data:`SKIP`, each matching at least one command.
Each line runs in bash as written (``&&``, pipes and redirections included; :func:`run_as_written`).
The commands that train (the smoke study and what reads it, ``locattn train``: 3-10 minutes in
all) are marked ``readme`` and ``slow``: deselected by default, run by ``.ci/run``'s integration
step (``-m "... or readme"``). The ones that talk to ``http://127.0.0.1:5000`` run against a real
``mlflow server`` on a free loopback port (:func:`mlflow_server`), over the smoke study's store.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: (substring of the command, why it is not run here). Keep it small and explicit.
SKIP = (
    ("pip install", "installs packages from a registry (.ci/run does the set-up)"),
    ("python -m pytest", "the test suite itself"),
    ("HEAD_IP", "needs a cluster's head node"),
    ("get-auth-token", "writes ~/.ray/auth_token where none is (conftest writes this machine's)"),
    ("RAY_ADDRESS=", "needs a cluster's head node"),
    ("ray job ", "needs a cluster's job server"),
    ("cluster.yaml", "the cluster launcher (tests/cluster/test_ray_up.py runs it on loopback, -m cluster)"),
    ("DB_HOST", "needs a PostgreSQL host (tests/cluster/test_postgres_store.py, -m cluster)"),
    ("mlflow server", "a long-running server (tests/cluster/test_postgres_store.py starts one)"),
    ("bench_reports_postgres", "needs PostgreSQL (-m cluster)"),
    ("study ui", "a long-running server (tests/cli/test_researcher_loop.py and test_ui_screenshot.py run it)"),
    ("task.train_size=2000", "up to 100 epochs: tens of minutes on a CPU (its flags: tests/locattn/test_train_cli.py)"),
    ("--profile quick", "hours of training"),
    ("--profile paper", "days of training"),
    ("ablations/spec.schema.json", "rewrites a committed file (tests/study/test_spec_schema.py checks it)"),
    ("localm", "needs the example plugin pip-installed (tests/study/test_localm_example.py installs it in a "
               "scratch site and runs these commands)"),
)
#: Commands that train models or read what training wrote: minutes, so ``-m readme`` (and
#: ``slow``, which keeps them out of the default run).
SLOW = ("locattn train --task", "locattn attention", "rc_table2-smoke", "search_lr-smoke", "smoke-slices",
        "study launch ablations/rc_table2.yaml --profile smoke",
        "study launch ablations/search_lr.yaml --profile smoke",
        )
#: The MLflow server the README's Clusters section starts; the tests start one on a free port.
SERVER = "http://127.0.0.1:5000"


#: The pages whose ``bash`` blocks run: the README first, then the docs site's pages.
PAGES = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")))


def block_commands(block: str) -> list[str]:
    """The command lines of one ``bash`` block as a reader pastes them: continuation lines
    joined, comment-only and blank lines dropped, and each line otherwise as written, so that
    ``&&``, ``|``, ``>`` and quoting reach the shell as they do from the page."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line.strip() for line in joined.splitlines() if shlex.split(line, comments=True)]


#: A block after this line is a step of docs/howto/cluster.md's one-machine cluster: the steps
#: run together, in order, in tests/cluster/test_cluster_howto.py (``-m cluster``), not one by one here.
CLUSTER_STEP = "<!-- loopback-cluster -->"


def readme_commands(page: str = "README.md") -> list[str]:
    """The commands of a page's ``bash`` blocks (:func:`block_commands`), but the cluster
    recipe's steps (:data:`CLUSTER_STEP`)."""
    text = re.sub(re.escape(CLUSTER_STEP) + r"\n```bash\n.*?```", "", (ROOT / page).read_text(), flags=re.S)
    return [cmd for block in re.findall(r"```bash\n(.*?)```", text, re.S) for cmd in block_commands(block)]


SOURCED = [(page, cmd) for page in PAGES for cmd in readme_commands(page)]
COMMANDS = [cmd for _, cmd in SOURCED]


def skip_reason(cmd: str) -> str | None:
    return next((why for needle, why in SKIP if needle in cmd), None)


def _param(page: str, cmd: str):
    why = skip_reason(cmd)
    marks = [pytest.mark.skip(reason=why)] if why else []
    if not why and any(s in cmd for s in SLOW) and "--dry-run" not in cmd:
        marks += [pytest.mark.readme, pytest.mark.slow]
    return pytest.param(cmd, marks=marks, id=f"{page}:{cmd[:60]}")


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A scratch working folder laid out like a clone's root."""
    d = tmp_path_factory.mktemp("clone")
    (d / "ablations").symlink_to(ROOT / "ablations")
    (d / "README.md").symlink_to(ROOT / "README.md")
    (d / "examples").symlink_to(ROOT / "examples")
    (d / "results").mkdir()  # the committed records, read; what a command writes stays here
    (d / "results" / "record").symlink_to(ROOT / "results" / "record")
    return d


@pytest.fixture(scope="module")
def mlflow_server(clone: Path, tmp_path_factory) -> Iterator[str]:
    """``mlflow server`` (as the README's Clusters section runs it) on a free 127.0.0.1 port over
    the smoke study's SQLite store, which the commands before wrote; yields its URL."""
    db = clone / "studies" / "rc_table2-smoke" / "mlflow.db"
    if not db.is_file():
        pytest.skip("needs the smoke study of the README's earlier commands (run -m readme)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = tmp_path_factory.mktemp("mlflow-server")
    log = tmp / "server.log"
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # ready in ~15 s, not 45
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{db}",
             "--artifacts-destination", (tmp / "mlflow-artifacts").as_uri(), "--host", "127.0.0.1",
             "--port", str(port), "--workers", "1"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not answer on {url}:\n"
                                   f"{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and its workers: its own process group
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def run_as_written(cmd: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``cmd`` in bash, as a reader's terminal runs it, but failing when any part of a pipe
    fails (``pipefail``)."""
    return subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=590)


def test_a_command_with_shell_operators_runs_as_written(tmp_path: Path) -> None:
    block = ('echo "a  b" > out.txt && cat out.txt | tr a x >> out.txt  # a comment\n'
             "# a comment line\n\n"
             "printf '%s\\n' one \\\n  two | wc -l\n")
    cmds = block_commands(block)
    assert cmds == ['echo "a  b" > out.txt && cat out.txt | tr a x >> out.txt  # a comment',
                    "printf '%s\\n' one  two | wc -l"]
    env = dict(os.environ)
    assert run_as_written(cmds[0], tmp_path, env).returncode == 0
    assert (tmp_path / "out.txt").read_text() == "a  b\nx  b\n"
    assert run_as_written(cmds[1], tmp_path, env).stdout.strip() == "2"
    assert run_as_written("false | cat", tmp_path, env).returncode != 0


def test_every_skip_reason_still_matches_a_command() -> None:
    assert len(COMMANDS) > 30
    for needle, _ in SKIP:
        assert any(needle in c for c in COMMANDS), f"stale skip entry {needle!r}"
    run = [c for c in COMMANDS if not skip_reason(c)]
    assert any(c.startswith("study launch ablations/rc_table2.yaml --profile smoke") for c in run)
    assert any(c.startswith("reports build studies/rc_table2-smoke") for c in run)
    assert sum(SERVER in c for c in run) == 3  # two reports build, one study launch
    docs = [c for page, c in SOURCED if page != "README.md" and not skip_reason(c)]
    assert any(c.startswith("study launch ablations/search_lr.yaml") for c in docs)


@pytest.mark.parametrize("cmd", [_param(page, c) for page, c in SOURCED])
def test_readme_command_works_as_written(cmd: str, clone: Path, request) -> None:
    readme_cmd = cmd
    if SERVER in cmd:  # the server the README starts on port 5000: ours, on a free port
        cmd = cmd.replace(SERVER, request.getfixturevalue("mlflow_server"))
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{bindir}:{os.environ.get('PATH', '')}",
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
           "MPLBACKEND": "Agg"}
    proc = run_as_written(cmd, clone, env)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    if SERVER in readme_cmd and cmd.startswith("study launch"):
        # the smoke study again, now on the server: every trial is finished there (the server
        # serves its store), and the line saying so points to the server, not to `study ui`
        server = request.getfixturevalue("mlflow_server")
        assert ("every trial is already finished in the record (4 of 4 runs finished, 0 failed); "
                f"browse it at {server} (experiment 'rc_table2-smoke')") in proc.stdout, proc.stdout[-2000:]
        assert "study ui" not in proc.stdout
