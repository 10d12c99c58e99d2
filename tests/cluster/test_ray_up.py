"""`ray up cluster.yaml` for real: Ray's cluster launcher, on-premise provider, SSH to 127.0.0.1.

The test starts its own ``sshd`` (Debian's openssh-server) on a free 127.0.0.1 port with a
generated host key, for a dedicated user (``locattn-rayup``) with a fresh home and an authorized
key made here. It writes a loopback variant of ``cluster.yaml``: the same file with only the
changes in :data:`LOOPBACK` (each must match exactly once, so an edit of cluster.yaml that they
no longer fit fails here). Then:

1. ``ray up -y`` rsyncs the checkout, runs the setup commands (a venv with torch and
   ``locattn[cluster,reports]``) and the head start commands (``ray start --head`` and the MLflow
   server);
2. on the head (``ray exec``), ``study launch <spec> --address <head>`` joins that Ray, and its
   run is recorded in the head's MLflow server;
3. ``ray down -y`` stops it.

Why a dedicated user: ``ray stop`` (in cluster.yaml's start commands, and in ``ray down``) ends
every Ray process its user may signal on the machine; as an unprivileged user it cannot touch
anybody else's Ray. Every process left under that user at the end is ended by PID.

What the loopback run cannot cover: the two worker nodes of cluster.yaml (one machine, and
``ray start`` cannot join a second node on loopback, see tests/cluster/test_cluster_flow.py) and the
NFS mount (no NFS server here).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.cluster.test_cluster_flow import listening_sockets, user_processes
from tests.cluster.test_postgres_store import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
USER = "locattn-rayup"


def loopback_changes(ssh_port: int, key: Path, user: str, ports: dict[str, int]) -> list[tuple[str, str, str]]:
    """(line in cluster.yaml, its loopback replacement, why) for a run against this machine."""
    head = ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1 ray start --head --port=6379 "
            "--node-ip-address=HEAD_PRIVATE_IP --dashboard-host=127.0.0.1 "
            "--autoscaling-config=~/ray_bootstrap_config.yaml")
    return [
        ("  head_ip: HEAD_PRIVATE_IP            # placeholder, e.g. 10.0.0.10",
         "  head_ip: 127.0.0.1", "this machine, on loopback"),
        ("  worker_ips:                         # placeholders\n"
         "    - WORKER_1_PRIVATE_IP\n    - WORKER_2_PRIVATE_IP",
         "  worker_ips: []", "one machine: no worker nodes"),
        ("min_workers: 2\nmax_workers: 2", "min_workers: 0\nmax_workers: 0", "no worker nodes"),
        ("  ssh_user: ubuntu\n"
         "  # ssh_private_key: ~/.ssh/id_ed25519   # a path on your machine; the key itself is never here",
         f"  ssh_user: {user}\n  ssh_private_key: {key}\n"
         f"  ssh_proxy_command: nc 127.0.0.1 {ssh_port}",
         "the test's user, key, and sshd port (the launcher has no port option: nc relays)"),
        ("  - sudo mkdir -p /shared && (mountpoint -q /shared || sudo mount -t nfs "
         "HEAD_PRIVATE_IP:/srv/shared /shared)\n  - mkdir -p /shared/studies",
         "  - mkdir -p ~/shared/studies", "no NFS server and no sudo here: shared storage in ~"),
        # twice: head and workers
        (" --index-url https://download.pytorch.org/whl/cpu", "",
         "download.pytorch.org is unreachable here; the same CPU wheel is in this machine's wheel cache"),
        (f"  - {head}",
         f"  - RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head --port={ports['gcs']} "
         f"--node-ip-address=127.0.0.1 --dashboard-host=127.0.0.1 --dashboard-port={ports['dashboard']} "
         f"--ray-client-server-port={ports['client']} "
         f"--dashboard-agent-listen-port={ports['agent']} "
         "--autoscaling-config=~/ray_bootstrap_config.yaml",
         "loopback only (=1 advertises the machine's address), free ports (other Rays run here)"),
        ("--host HEAD_PRIVATE_IP --port 5000", f"--host 127.0.0.1 --port {ports['mlflow']}",
         "loopback, a free port"),
    ]


def loopback_yaml(text: str, changes: list[tuple[str, str, str]]) -> str:
    for old, new, why in changes:
        n = text.count(old)
        expected = 2 if "--index-url" in old else 1
        assert n == expected, f"cluster.yaml holds {old!r} {n} times, expected {expected} ({why})"
        text = text.replace(old, new)
    return text


def _ensure_user(home: Path) -> pwd.struct_passwd:
    try:
        pwd.getpwnam(USER)
        subprocess.run(["usermod", "-d", str(home), USER], check=True, capture_output=True)
    except KeyError:
        subprocess.run(["useradd", "--system", "--shell", "/bin/bash", "-M", "-d", str(home), USER],
                       check=True, capture_output=True)
    # No password, but not locked: sshd refuses a locked account even with a valid key.
    subprocess.run(["usermod", "-p", "*", USER], check=True, capture_output=True)
    return pwd.getpwnam(USER)


def _end_user_processes(uid: int) -> None:
    """End, by PID, every process of the test's own user (ray down should have left none)."""
    for sig in (15, 9):
        pids = user_processes(uid)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if pids:
            time.sleep(3)


@pytest.mark.cluster
@pytest.mark.slow  # minutes: a fresh venv with torch and the cluster extra (.ci/run runs it)
def test_ray_up_cluster_yaml_over_ssh_to_loopback() -> None:
    missing = [b for b in ("/usr/sbin/sshd", "rsync", "nc", "ssh", "ssh-keygen", "useradd")
               if not shutil.which(b)]
    if missing:
        pytest.skip(f"the cluster launcher test needs {', '.join(missing)} "
                    "(apt-get install openssh-server rsync netcat-openbsd)")
    if os.geteuid() != 0:
        pytest.skip("the cluster launcher test creates a dedicated user and runs sshd: needs root")

    # Short paths: Ray's Unix sockets live under the user's temp dir (108-byte limit).
    base = Path(tempfile.mkdtemp(prefix="rayup-", dir="/tmp"))
    base.chmod(0o755)
    home = base / "home"
    home.mkdir()
    user = _ensure_user(home)
    shutil.chown(home, user.pw_uid, user.pw_gid)
    # This machine's pip set-up (a local wheel cache and mirrors) for the cluster user, as an
    # administrator provisions nodes: copied, not changed.
    pipconf = Path.home() / ".config/pip/pip.conf"
    if pipconf.is_file():
        (home / ".config/pip").mkdir(parents=True)
        shutil.copy(pipconf, home / ".config/pip/pip.conf")
        subprocess.run(["chown", "-R", f"{USER}:", str(home / ".config")], check=True)
    tmp = base / "t"  # the user's TMPDIR / RAY_TMPDIR: its own Ray session files
    tmp.mkdir()
    shutil.chown(tmp, user.pw_uid, user.pw_gid)

    key = base / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / "host_key")],
                   check=True)
    (base / "authorized_keys").write_text((base / "id_ed25519.pub").read_text())
    ssh_port = free_port()
    (base / "sshd_config").write_text(
        f"ListenAddress 127.0.0.1\nPort {ssh_port}\nHostKey {base / 'host_key'}\n"
        f"PidFile {base / 'sshd.pid'}\nAuthorizedKeysFile {base / 'authorized_keys'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        f"AllowUsers {USER}\nSetEnv TMPDIR={tmp} RAY_TMPDIR={tmp}\n"
        "MaxStartups 50\nMaxSessions 50\n")
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(base / "sshd_config")],
                            stdout=(base / "sshd.log").open("wb"), stderr=subprocess.STDOUT)
    ports = {k: free_port() for k in ("gcs", "dashboard", "client", "agent", "mlflow")}
    cfg = base / "cluster-loopback.yaml"
    cfg.write_text(loopback_yaml((ROOT / "cluster.yaml").read_text(),
                                 loopback_changes(ssh_port, key, USER, ports)))
    assert yaml.safe_load(cfg.read_text())["provider"]["head_ip"] == "127.0.0.1"
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)

    def ray(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "ray"), *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=timeout)

    try:
        t0 = time.time()
        up = ray("up", "-y", "--no-config-cache", str(cfg))
        t_up = time.time() - t0
        assert up.returncode == 0, up.stdout[-5000:] + up.stderr[-3000:]
        print(f"ray up: {t_up:.0f} s")

        # The head's listening ports are all on loopback.
        # The MLflow server was started in the background: give it time to listen.
        deadline = time.time() + 180
        while True:
            socks = listening_sockets(user_processes(user.pw_uid))
            if any(p == ports["mlflow"] for _, p, _ in socks) or time.time() > deadline:
                break
            time.sleep(2)
        shown = "\n".join(map(str, socks))
        log = home / "mlflow/server.log"
        assert any(p == ports["mlflow"] for _, p, _ in socks), (
            f"{shown}\n{log.read_text()[-3000:] if log.is_file() else 'no ' + str(log)}")
        assert any(p == ports["gcs"] and n == "gcs_server" for _, p, n in socks), shown
        assert all(a.startswith("127.") for a, _, _ in socks), shown  # loopback only
        print(f"ports of the launched head, all on loopback:\n{shown}")

        # A study joins the head's Ray and records into the head's MLflow. On a real head
        # `--address auto` finds the one Ray there; here `auto` would scan every Ray on this
        # shared machine ("Found multiple active Ray instances"), so the test names the head.
        spec = {"name": "up", "seeds": 1, "resources": {"cpus": 1}, "max_failures": 0,
                "grid": {"task": ["copy"], "variant": ["onestep"]},
                "overrides": {"task.train_size": 64, "task.dev_size": 32, "task.test_size": 32,
                              "task.test_lengths": [15], "optim.epochs": 2},
                "profiles": {"smoke": {}}, "default_profile": "smoke"}
        (home / "up.yaml").write_text(yaml.safe_dump(spec))
        mlflow_uri = f"http://127.0.0.1:{ports['mlflow']}"
        ex = ray("exec", str(cfg),
                 f"study launch ~/up.yaml --root ~/shared/studies --address 127.0.0.1:{ports['gcs']} "
                 f"--tracking-uri {mlflow_uri} --progress-seconds 30", timeout=600)
        out = ex.stdout + ex.stderr
        assert ex.returncode == 0, out[-5000:]
        assert "1 trials finished, 0 failed" in out or "1 of 1 runs finished" in out, out[-3000:]
        # The head's raylet (the only node) names itself in its log: the trial ran there.
        raylet_log = (tmp / "ray/session_latest/logs/raylet.out").read_text(errors="replace")
        from mlflow.tracking import MlflowClient

        client = MlflowClient(mlflow_uri)
        exp = client.get_experiment_by_name("up-smoke")
        runs = client.search_runs([exp.experiment_id], "tags.`locattn.role` = 'trial'")
        assert len(runs) == 1 and runs[0].info.status == "FINISHED"
        node_id = runs[0].data.tags["locattn.node_id"]
        assert node_id and node_id in raylet_log  # trained on the launched head's raylet
        assert (home / "shared/studies/up-smoke/study.json").is_file()
    finally:
        down = ray("down", "-y", str(cfg), timeout=300)
        print(down.stdout[-2000:], down.stderr[-2000:])
        sshd.terminate()
        sshd.wait(timeout=30)
        _end_user_processes(user.pw_uid)
        shutil.rmtree(base, ignore_errors=True)
    assert down.returncode == 0, down.stdout[-3000:] + down.stderr[-3000:]
