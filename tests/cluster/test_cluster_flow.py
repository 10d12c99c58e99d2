"""The README's cluster flow, as written, on a real 2-node Ray on loopback (README "Clusters").

`ray start` cannot make a multi-node cluster on loopback here (docs/../MACHINE facts: with
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 a second node aborts; without it Ray advertises the machine's
network address). ``ray.cluster_utils.Cluster`` is the supported way: a head (no CPUs: it runs the
job server and the drivers) and two 1-CPU worker nodes, every port on 127.0.0.0/8. On it:

1. ``ray job submit -- study launch <spec> --address auto``;
2. trials run on both worker nodes (the record names each run's Ray node);
3. ``ray job stop`` mid-study;
4. ``ray job submit -- study resume <study> --address auto``;
5. the record is complete, has one run per key, and the stopped trial resumed from its last
   epoch checkpoint, not from 0.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback; before ray is imported
pytest.importorskip("ray")
pytest.importorskip("mlflow")
pytest.importorskip("ray.dashboard.modules.job", reason="the job server needs ray[default]")
pytest.importorskip("grpc", reason="the job server needs ray[default] (grpcio)")

from record import schema  # noqa: E402
from tests.cluster.test_postgres_store import free_port  # noqa: E402
from tests.study.test_study import SMOKE, trial_runs, write_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # where the `study` and `ray` console scripts live
LONG = 30  # epochs of the trials that are stopped mid-run
STOP_AS_CTRL_C = '{"env_vars": {"RAY_JOB_STOP_SIGNAL": "SIGINT", "RAY_JOB_STOP_WAIT_TIME_S": "120"}}'


def listening_sockets(pids: set[int]) -> list[tuple[str, int, str]]:
    """(address, port, process) of every TCP socket that ``ss -ltnp`` shows for ``pids``."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        cols = line.split()
        local = cols[3]
        addr, port = local.rsplit(":", 1)
        addr = addr.strip("[]").removeprefix("::ffff:")
        for name, pid in re.findall(r'\("([^"]+)",pid=(\d+)', line):
            if int(pid) in pids:
                found.append((addr, int(port), name))
    return found


def _proc_status(pid: str) -> dict[str, str]:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:  # gone
        return {}
    return dict(ln.split(":", 1) for ln in lines if ":" in ln)


def process_tree(root_pid: int) -> set[int]:
    """``root_pid`` and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            ppid = _proc_status(entry.name).get("PPid", "").strip()
            if ppid.isdigit():
                children.setdefault(int(ppid), []).append(int(entry.name))
    tree, todo = set(), [root_pid]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo += children.get(pid, [])
    return tree


def user_processes(uid: int) -> set[int]:
    """PIDs of the processes whose real user id is ``uid``, from /proc."""
    return {int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()
            and _proc_status(e.name).get("Uid", "x").split()[:1] == [str(uid)]}


@pytest.fixture(scope="module")
def cluster():
    """A head with the job server (dashboard) and two 1-CPU workers, all on 127.0.0.1."""
    from ray.cluster_utils import Cluster

    # The job's driver runs `study` from the head's environment: this checkout, this venv.
    os.environ["PATH"] = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    c = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,  # trials run on the workers only
            "node_ip_address": "127.0.0.1",
            "include_dashboard": True,  # the job API
            "dashboard_host": "127.0.0.1",
            "dashboard_port": free_port(),
            # Ray's default (52365) is often taken by another Ray on this machine, and a job
            # server whose head agent could not bind answers "No available agent" for ever.
            "dashboard_agent_listen_port": free_port(),
        },
    )
    try:
        workers = [c.add_node(num_cpus=1, node_ip_address="127.0.0.1",
                              dashboard_agent_listen_port=free_port()) for _ in range(2)]
        c.wait_for_nodes()
        yield c, workers, "http://" + c.head_node.webui_url
    finally:
        c.shutdown()


def ray_job(address: str, *args: str, check: bool = True, timeout: float = 300) -> str:
    """``ray job ...`` against the job server (the CLI needs RAY_AUTH_MODE=token here)."""
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_ADDRESS=address)
    for _ in range(20):
        proc = subprocess.run([str(BIN / "ray"), "job", *args], env=env, capture_output=True,
                              text=True, timeout=timeout)
        out = proc.stdout + proc.stderr
        # The job server answers before the head's job agent has registered: a fresh cluster
        # refuses the first submission for a few seconds.
        if "No available agent to submit job" not in out:
            break
        time.sleep(2)
    if check and proc.returncode != 0:
        raise AssertionError(f"ray job {' '.join(args)} exited {proc.returncode}:\n{out[-4000:]}")
    return out


def job_status(address: str, job_id: str) -> str:
    """The job's status, in process through Ray's job SDK (polling the CLI would eat the CPUs)."""
    from ray.job_submission import JobSubmissionClient

    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "token"
    try:
        return str(JobSubmissionClient(address).get_job_status(job_id).value)
    finally:
        if saved is None:
            os.environ.pop("RAY_AUTH_MODE")
        else:
            os.environ["RAY_AUTH_MODE"] = saved


def checkpoint_epochs(study_dir: Path) -> dict[str, int]:
    """Run directory name -> epoch of its trainer checkpoint on disk."""
    out = {}
    for meta in study_dir.glob("runs/*/checkpoint/meta.json"):
        try:
            out[meta.parent.parent.name] = int(json.loads(meta.read_text())["epoch"])
        except (OSError, ValueError, KeyError):
            pass
    return out


@pytest.mark.cluster
def test_job_submit_launch_stop_resume_on_two_nodes(cluster, tmp_path: Path) -> None:
    c, workers, address = cluster
    assert c.address.startswith("127.0.0.1:") and address.startswith("http://127.0.0.1:")
    # 2 cells x 2 budgets: the 2-epoch trials finish while the LONG ones are mid-run.
    spec = write_spec(tmp_path, "flow", grid={"task": ["copy"], "variant": ["onestep", "mono"]},
                      hparams={"optim.epochs": [2, LONG]}, seeds=1,
                      overrides={**SMOKE, "task.train_size": 200}, max_concurrent=2)
    root = tmp_path / "studies"
    study_dir = root / "flow-smoke"
    db = study_dir / "mlflow.db"
    job = "locattn-flow-launch"
    # `ray job stop` sends SIGTERM and, 3 s later, SIGKILL. With these two variables (README
    # "Clusters") it sends SIGINT, which the study takes as Ctrl-C: Tune stops the trials and
    # saves its state, so every stopped trial resumes from its last epoch.
    ray_job(address, "submit", "--no-wait", "--submission-id", job, "--runtime-env-json", STOP_AS_CTRL_C,
            "--",
            "study", "launch", str(spec), "--root", str(root), "--address", "auto",
            "--progress-seconds", "1")

    seen_nodes: set[str] = set()
    t0 = time.time()
    while True:
        assert time.time() - t0 < 240, (
            f"no stop point within 240 s (nodes seen {seen_nodes}):\n"
            + ray_job(address, "logs", job, check=False)[-3000:])
        status = job_status(address, job)
        assert status in ("PENDING", "RUNNING"), (status, ray_job(address, "logs", job, check=False)[-3000:])
        try:
            runs = trial_runs(db) if db.is_file() else {}
        except sqlite3.OperationalError:  # the store is being created
            runs = {}
        seen_nodes |= {r["tags"][schema.NODE_ID] for r in runs.values() if r["tags"].get(schema.NODE_ID)}
        done = [r for r in runs.values() if r["tags"].get(schema.STATUS) == schema.STATUS_FINISHED]
        mid = [max(s for s, _ in r["metrics"]["train_loss"]) for r in runs.values()
               if r["tags"].get(schema.STATUS) != schema.STATUS_FINISHED and r["metrics"].get("train_loss")]
        if len(seen_nodes) == 2 and done and any(2 <= s <= LONG - 6 for s in mid):
            break
        time.sleep(1)

    # Every port of this cluster (GCS, raylets, dashboard/job server, agents, workers, the job's
    # driver) listens on loopback; `ss -ltnp` is the witness.
    print(f"stop point after {time.time() - t0:.1f} s: nodes {sorted(seen_nodes)}, epochs {mid}")
    socks = listening_sockets(process_tree(os.getpid()))
    assert len(socks) >= 8, socks
    off_loopback = [s for s in socks if not ipaddress.ip_address(s[0]).is_loopback]
    assert not off_loopback, off_loopback

    # Both worker nodes ran trials (the record names the Ray node of each run's attempt).
    assert seen_nodes == {w.node_id for w in workers}

    ray_job(address, "stop", job)  # waits until the job is stopped
    assert job_status(address, job) == "STOPPED"
    logs = ray_job(address, "logs", job)
    assert "interrupted (SIGINT): stopping the trials and saving state" in logs, logs[-3000:]
    before = trial_runs(db)
    recorded = {r["tags"][schema.RUN_KEY]: max(s for s, _ in r["metrics"].get("train_loss", [(0, 0)]))
                for r in before.values()}
    unfinished = {r["tags"][schema.RUN_KEY] for r in before.values()
                  if r["tags"][schema.STATUS] != schema.STATUS_FINISHED}
    finished_hist = {rid: r["metrics"]["train_loss"] for rid, r in before.items()
                     if r["tags"][schema.STATUS] == schema.STATUS_FINISHED}
    assert unfinished and finished_hist
    time.sleep(2)  # the stopped job's trial actors are being killed: let their last write land
    on_disk = checkpoint_epochs(study_dir)
    # A 2-epoch run can finish on disk (its result.json) after the record's last write: the stop
    # lands between the two. The resume reports it again and must not train it again.
    results = {k: study_dir / "runs" / k / "result.json" for k in unfinished}
    done_on_disk = {k: f.stat().st_mtime_ns for k, f in results.items() if f.is_file()}
    t1 = time.time()

    out = ray_job(address, "submit", "--submission-id", "locattn-flow-resume", "--",
                  "study", "resume", str(study_dir), "--address", "auto", "--progress-seconds", "5")
    assert job_status(address, "locattn-flow-resume") == "SUCCEEDED", out[-3000:]
    print(f"resume job: {time.time() - t1:.1f} s")

    runs = trial_runs(db)
    keys = [r["tags"][schema.RUN_KEY] for r in runs.values()]
    assert len(keys) == 4 and len(set(keys)) == 4  # complete, and no duplicate run per key
    for rid, r in runs.items():
        assert r["status"] == "FINISHED" and r["tags"][schema.STATUS] == schema.STATUS_FINISHED
        steps = [s for s, _ in r["metrics"]["train_loss"]]
        assert steps == list(range(1, int(r["metrics"]["epochs_run"][0][1]) + 1))  # each epoch once
        assert len(r["metrics"]["test.len15.seq_acc"]) == 1
    for rid, hist in finished_hist.items():
        assert runs[rid]["metrics"]["train_loss"] == hist  # finished runs untouched
    by_key = {r["tags"][schema.RUN_KEY]: r for r in runs.values()}
    resumed = {k: int(by_key[k]["tags"][schema.RESUMED_FROM]) for k in unfinished}
    print(f"stopped at (recorded epoch, trainer checkpoint on disk) "
          f"{ {k: (recorded[k], on_disk.get(k)) for k in unfinished} }; resumed from {resumed}")
    # Every trial stopped mid-run (the stop point guarantees one at epoch 2..LONG-6) continued
    # from its last epoch: at least what the record showed at the stop (it lags the trial), at
    # most the trainer's checkpoint on disk and at most one epoch behind it (a stop between the
    # trainer's save and Tune's copy of it). Not from 0.
    assert {k: results[k].stat().st_mtime_ns for k in done_on_disk} == done_on_disk  # not retrained
    mid_run = [k for k in unfinished if recorded[k] >= 2 and k not in done_on_disk]
    assert mid_run, (recorded, done_on_disk)
    for key in mid_run:
        frm, disk = resumed[key], on_disk[key]  # runs/<run key>/checkpoint
        assert recorded[key] <= frm and disk - 1 <= frm <= disk, (key, recorded[key], frm, disk)
