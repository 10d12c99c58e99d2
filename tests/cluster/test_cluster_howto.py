"""docs/howto/cluster.md's one-machine recipe, run as written: its ``<!-- loopback-cluster -->``
bash blocks, in order, each with the first (the settings) before it, in ``bash`` from the
repository root, with free ports and a temporary ``RAY_TRY`` and ``STUDIES``.

1. the start block forms a 2-node cluster (``ray status``: 2 nodes) with token authentication;
2. every TCP listener of the cluster's processes is on 127.0.0.1 (``ss -ltnp``);
3. the launch job runs, is stopped (SIGINT: the study saves its state), and the resume job,
   submitted with the same runtime env, finishes the study: every run of the record finished;
4. after the stop block no process of the cluster is left, and nothing of it listens.

Never a bare ``ray stop``: other Rays run on this machine. ``cluster`` tier (a few minutes).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray.dashboard.modules.job", reason="the job server needs ray[default]")

from tests.cluster.test_cluster_flow import listening_sockets, process_tree  # noqa: E402
from tests.cluster.test_postgres_store import free_port  # noqa: E402
from tests.study.test_study import trial_runs  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HOWTO = ROOT / "docs" / "howto" / "cluster.md"
MARKER = "<!-- loopback-cluster -->"
BIN = Path(sys.executable).parent


def howto_blocks() -> list[str]:
    """The bash blocks of the how-to that follow the marker, in order."""
    text = HOWTO.read_text()
    return re.findall(re.escape(MARKER) + r"\n```bash\n(.*?)```", text, flags=re.S)


def test_the_howto_has_the_recipe_blocks() -> None:
    """Default tier: the blocks the cluster test runs are there, and none runs a bare `ray stop`."""
    blocks = howto_blocks()
    assert len(blocks) == 6, blocks
    assert all(not re.search(r"\bray stop\b", b) for b in blocks)
    assert "RAY_AUTH_MODE=token" in blocks[0]
    launch, resume = blocks[2], blocks[4]
    assert '--runtime-env-json "$STOP_AS_CTRL_C"' in launch and '--runtime-env-json "$STOP_AS_CTRL_C"' in resume


def _descendants(pids: set[int]) -> set[int]:
    out: set[int] = set()
    for pid in pids:
        out |= process_tree(pid)
    return out


def _pgid_members(pgids: list[int]) -> set[int]:
    found = set()
    for e in Path("/proc").iterdir():
        if e.name.isdigit():
            try:
                if os.getpgid(int(e.name)) in pgids:
                    found.add(int(e.name))
            except ProcessLookupError:
                pass
    return found


@pytest.mark.cluster
def test_the_howto_recipe_forms_a_loopback_cluster_stops_and_resumes_a_job_and_leaves_nothing(tmp_path: Path) -> None:
    blocks = howto_blocks()
    settings, start, launch, stop_job, resume, stop_cluster = blocks
    # Ray's socket paths (<RAY_TRY>/session_<date>_<pid>/sockets/plasma_store) must fit 107 bytes
    try_dir = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    env = dict(os.environ, RAY_PORT=str(free_port()), DASHBOARD_PORT=str(free_port()),
               CLIENT_PORT=str(free_port()), HEAD_AGENT_PORT=str(free_port()),
               WORKER_AGENT_PORT=str(free_port()), RAY_TRY=str(try_dir), STUDIES=str(tmp_path / "studies"),
               PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    env.pop("RAY_ADDRESS", None)

    def run(block: str, timeout: float = 300, retry: str | None = None) -> str:
        for _ in range(30):
            proc = subprocess.run(["bash", "-euo", "pipefail", "-c", settings + block], cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=timeout)
            out = proc.stdout + proc.stderr
            if retry is None or retry not in out:
                break
            time.sleep(2)
        assert proc.returncode == 0, f"block exited {proc.returncode}:\n{block}\n{out[-4000:]}"
        return out

    def pgids() -> list[int]:
        return [int((try_dir / f"{n}.pgid").read_text()) for n in ("head", "worker")
                if (try_dir / f"{n}.pgid").is_file()]

    seen: set[int] = set()
    groups: list[int] = []
    try:
        out = run(start)
        groups = pgids()
        assert len(groups) == 2, out
        assert len(re.findall(r"^ 1 node_", out, flags=re.M)) == 2, out  # two nodes joined

        def jobs(*args: str) -> str:
            proc = subprocess.run([str(BIN / "ray"), "job", *args, "--address",
                                   f"http://127.0.0.1:{env['DASHBOARD_PORT']}"],
                                  env=dict(env, RAY_AUTH_MODE="token"), capture_output=True, text=True, timeout=120)
            return proc.stdout + proc.stderr

        # a fresh job server refuses submissions until its head's agent registers
        run(launch, retry="No available agent")
        db = tmp_path / "studies" / "rc_table2-smoke" / "mlflow.db"
        deadline = time.time() + 300
        while True:  # stop point: a trial of the study runs (the smoke study takes a minute or so)
            seen |= _descendants(_pgid_members(groups))
            try:
                runs = trial_runs(db) if db.is_file() else {}
            except Exception:  # noqa: BLE001 - the store is being created
                runs = {}
            if any(r["tags"].get("locattn.status") == "running" for r in runs.values()):
                break
            assert time.time() < deadline, "no trial ran in 300 s:\n" + jobs("logs", "try-launch")[-3000:]
            time.sleep(0.5)
        # every listener of the cluster (GCS, raylets, dashboard, agents, workers, the driver)
        socks = listening_sockets(seen | _descendants(_pgid_members(groups)))
        assert len(socks) >= 8, socks
        off = [s for s in socks if not ipaddress.ip_address(s[0]).is_loopback]
        assert not off, off
        print(f"{len(socks)} listeners, all on loopback")

        run(stop_job)
        logs = jobs("logs", "try-launch")
        assert re.search(r"stopped", jobs("status", "try-launch"), flags=re.I), logs[-2000:]
        assert "interrupted (SIGINT)" in logs, logs[-3000:]

        out = run(resume, timeout=600)
        assert "succeeded" in out.lower(), out[-3000:]
        # the resume job kept the launch's runtime env (Ray's job SDK, in a process of its own:
        # Ray reads RAY_AUTH_MODE once, when it is imported)
        info = subprocess.run(
            [sys.executable, "-c", "import json, sys; from ray.job_submission import JobSubmissionClient as C; "
             "print(json.dumps(C(sys.argv[1]).get_job_info('try-resume').runtime_env))",
             f"http://127.0.0.1:{env['DASHBOARD_PORT']}"],
            env=dict(env, RAY_AUTH_MODE="token"), capture_output=True, text=True, timeout=120)
        assert json.loads(info.stdout.strip().splitlines()[-1])["env_vars"]["RAY_JOB_STOP_SIGNAL"] == "SIGINT", info
        runs = trial_runs(db)
        assert len(runs) == 4 and all(r["tags"]["locattn.status"] == "finished" for r in runs.values()), runs
        seen |= _descendants(_pgid_members(groups))
    finally:
        t0 = time.time()
        if groups:
            try:
                run(stop_cluster)
            except BaseException:
                for g in groups:  # the block failed: our own groups only, never a bare `ray stop`
                    try:
                        os.killpg(g, 9)
                    except ProcessLookupError:
                        pass
                raise
        shutil.rmtree(try_dir, ignore_errors=True)
    print(f"stop block: {time.time() - t0:.1f} s")
    deadline = time.time() + 60
    while (left := {p for p in seen if Path(f"/proc/{p}").exists()}) and time.time() < deadline:
        time.sleep(1)
    left = {p: Path(f"/proc/{p}/cmdline").read_bytes()[:80] for p in left if Path(f"/proc/{p}").exists()}
    assert not left, f"processes of the cluster left: {left}"
    assert not _pgid_members(groups)
    assert not listening_sockets(seen)
