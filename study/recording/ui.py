"""``study ui``: the MLflow UI over a study's store, started and stopped like ``mlflow ui``.

- The URL is printed once the server answers ``/health`` (it takes 15 s or more to start), with a
  line on stderr while it starts.
- Ctrl-C (or SIGTERM, SIGHUP) stops the server within seconds, without tracebacks: the server
  runs in its own session, so the terminal's SIGINT reaches only ``study ui``, which asks the
  server to stop (SIGTERM, which ``mlflow server`` forwards to its uvicorn) and kills its
  process group if it has not stopped after :data:`STOP_SECONDS`.
- ``kill -9`` of ``study ui`` stops the server too (``PR_SET_PDEATHSIG``).
- MLflow's job runner is off (``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``): the UI needs none,
  it delayed the start and left processes behind on Ctrl-C.
- The URL opens a saved view (:func:`save_view`): the cells' runs with their seeds' runs inside,
  and the headline metric columns shown.

- Beside it, on the next port (``--grid-port``), the study's live grid (:class:`GridServer`):
  the variant x task grid in percent with (k/n) seeds solved, each cell marked with its running
  and stale seeds and linked to its runs in the MLflow UI at the address served, regenerated
  from the store on each request and reloading itself every few seconds.
- While it serves, ``<study>/ui.json`` says where (:func:`write_served`): ``study report
  --html`` links its cells there rather than to port 5000.

Standard library only, but for :func:`save_view` and the grid page (``reports``); the server is
``python -m mlflow server``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import json
import urllib.request
from pathlib import Path
from typing import Callable, TextIO
from urllib.parse import quote

from record import schema
from record.layout import UI_FILE
from record.store import (StoreError, StudyNotFound, experiment_id, hidden_secrets, read_rows, redact,
                          split_credentials)
from record.summary import (HEADLINE_METRICS, PERCENT_SUFFIX, SEEDS_KEY, SELECTION_KEY, SOLVED_KEY,
                            hardest_split, headline_keys)
from study.recording.meta import StudyMeta
from study.recording.cell_results import cell_results
from study.recording.status import STALE, study_status
from study.spec import SpecError


#: Seconds ``study ui`` waits for a stopping server before it kills the server's process group.
STOP_SECONDS = 10.0
#: Seconds between ``/health`` probes while the server starts.
PROBE_SECONDS = 0.25


def check_port(host: str, port: int) -> None:
    """Refuse a port outside 1-65535 or one already in use on ``host``, in one line."""
    if not 1 <= port <= 65535:
        raise SpecError(f"--port {port}: a TCP port is 1-65535")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise SpecError(f"port {port} on {host} is already in use (another MLflow UI?); "
                                f"pick a free one with --port") from None
            raise SpecError(f"cannot serve on {host}:{port} ({exc.strerror})") from None


#: The runs table view ``study ui`` opens: the trial runs, flat, sorted by name.
UI_FILTER = f"tags.{schema.ROLE} = '{schema.ROLE_TRIAL}'"


def experiment_url(base: str, tracking_uri: str, name: str) -> str:
    """URL of the study's experiment in the MLflow UI, filtered to its trial runs (flat, not
    under the collapsed parent) and sorted by run name; ``base`` alone when the experiment id
    cannot be read here (a non-SQLite store)."""
    exp = experiment_id(tracking_uri, name)
    if exp is None:
        return base
    query = (f"searchFilter={quote(UI_FILTER)}&orderByKey={quote('attributes.run_name')}"
             f"&orderByAsc=true")
    return f"{base}/#/experiments/{exp}/runs?{query}"


#: The saved view ``study ui`` opens: an experiment tag ``mlflow.sharedViewState.<id>`` that
#: MLflow's UI (3.17) lists under its views and opens by ``?viewStateShareKey=<id>``. Its value
#: is the UI's saved-view envelope, whose ``state`` holds the runs table's search facets and
#: column and grouping state (the UI ignores it when the URL has search facets of its own).
VIEW_ID = "locattn-cells"
VIEW_NAME = "cells and seeds (locattn)"
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
#: The view's filter: the cells' runs (and the seeds' runs nested inside them), not the study's.
CELL_FILTER = f"tags.{schema.ROLE} != '{schema.ROLE_STUDY}'"


def metric_column(key: str) -> str:
    """The runs table's column id of a metric."""
    return f"metrics.`{key}`"


def view_state(tracking_uri: str, name: str) -> dict:
    """The runs table the study's view shows.

    A record with cell runs: every run but the study's, by start time, so each seed's run sits
    under its cell's run (MLflow nests runs under a parent in the result when sorted by time).
    Its columns, first what a table prints: the hardest test split in percent (``len100 pct``,
    :func:`record.summary.cell_percents`), ``solved`` (seeds at 90 % or more there) and
    ``seeds_finished``, then the other splits in percent and ``best_selection_score``. A cell's
    row shows its medians over its seeds; a seed's row, inside it, that seed's values.

    An older record (no cell runs, or cell runs written before the columns in percent): the
    headline metric of each split as logged (a fraction) and ``best_selection_score`` (under the
    name, or names, the store holds it by), and ``seeds_finished`` on cell runs; without cell
    runs the trial runs are grouped by the ``locattn.cell`` tag, each group showing MLflow's
    average over its seeds."""
    selection = [SELECTION_KEY, *(old for old, new in schema.RENAMED_METRICS.items() if new == SELECTION_KEY)]
    splits = sorted({r.split for r in cell_results(tracking_uri, name) if r.split}, key=split_order)
    try:
        rows = read_rows(tracking_uri, name, tag_keys=(schema.ROLE,), metric_keys=None, as_stored=True)
    except (StudyNotFound, StoreError):
        rows = None
    keys = {k for _, k, *_ in rows.metrics} if rows else set()
    has_cells = bool(rows) and any(v == schema.ROLE_CELL for _, _, v in rows.tags)
    held = [k for k in selection if k in keys] or [SELECTION_KEY]
    every = sorted(headline_keys(sorted(keys)), key=split_order)
    percents = [s + PERCENT_SUFFIX for s in every if s + PERCENT_SUFFIX in keys]
    if has_cells and percents and SOLVED_KEY in keys:
        hardest = (hardest_split(every) or "") + PERCENT_SUFFIX
        first = [hardest] if hardest in percents else []
        columns = [metric_column(k) for k in (*first, SOLVED_KEY, SEEDS_KEY,
                                              *(p for p in percents if p not in first), *held)]
        # MLflow orders metric columns by name; the runs table's own column state (the order a
        # drag gives, and the widths) puts them in this order, right after the run's name, each
        # wide enough for its head.
        return {"searchFilter": CELL_FILTER, "orderByKey": "attributes.start_time",
                "orderByAsc": True, "selectedColumns": columns, "columnOrder": columns,
                "columnWidths": {c: column_width(c) for c in columns}}
    columns = []
    for split in splits:
        key = next((f"test.{split}.{m}" for m in HEADLINE_METRICS if f"test.{split}.{m}" in keys), None)
        if key is not None:
            columns.append(metric_column(key))
    columns += [metric_column(k) for k in held] + ([metric_column(SEEDS_KEY)] if has_cells else [])
    if has_cells:
        return {"searchFilter": CELL_FILTER, "orderByKey": "attributes.start_time",
                "orderByAsc": True, "selectedColumns": columns}
    return {"searchFilter": UI_FILTER, "orderByKey": "attributes.run_name", "orderByAsc": True,
            "selectedColumns": columns, "groupsExpanded": {},
            "groupBy": {"aggregateFunction": "average",
                        "groupByKeys": [{"mode": "tag", "groupByData": schema.CELL}]}}


def column_width(column: str) -> int:
    """Pixels for a metric column of the view: its head's text at about 7 px a character, and
    room for the sort arrow, never under 70 px."""
    return max(70, 7 * len(column.removeprefix("metrics.").strip("`")) + 28)


def split_order(split: str) -> tuple:
    """``len15`` before ``len100``: the number inside a split's name by value."""
    digits = "".join(ch for ch in split if ch.isdigit())
    return (split.rstrip("0123456789"), int(digits) if digits else -1, split)


def save_view(tracking_uri: str, name: str) -> str | None:
    """Write the study's view (:func:`view_state`) as a saved view of its experiment in a
    SQLite store; None when it cannot (not SQLite, no experiment, a read-only store)."""
    exp = experiment_id(tracking_uri, name)
    if exp is None:
        return None
    now = int(time.time() * 1000)
    envelope = json.dumps({"name": VIEW_NAME, "createdAt": now, "updatedAt": now,
                           "state": json.dumps(view_state(tracking_uri, name))})
    # MLflow only here: `study ui` starts an MLflow server anyway.
    from mlflow.tracking import MlflowClient

    try:
        MlflowClient(tracking_uri=tracking_uri).set_experiment_tag(exp, VIEW_TAG_PREFIX + VIEW_ID, envelope)
    except Exception as exc:  # noqa: BLE001 - the view is a convenience: the flat URL stands
        print(f"study ui: could not save the view in the store ({type(exc).__name__}); "
              "opening the trial runs instead", file=sys.stderr, flush=True)
        return None
    return f"/#/experiments/{exp}/runs?viewStateShareKey={VIEW_ID}"


def browse_host(host: str) -> str:
    """The host to put in a URL for a server bound to ``host``: an unspecified address
    (0.0.0.0, ::) is not one a browser can open, so loopback stands for it."""
    if host in ("0.0.0.0", "", "::"):
        return "127.0.0.1" if host != "::" else "[::1]"
    return f"[{host}]" if ":" in host else host


def die_with_parent() -> None:
    """In a child, before exec: ask Linux to SIGTERM it when its parent dies, however the parent
    dies (``kill -9`` of ``study ui`` must not leave ``mlflow server`` serving the port)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's own handlers still stop it
        pass


#: ``mlflow server`` options that keep ``study ui``'s terminal for what matters: uvicorn's access
#: log printed a line per request (104 lines for two page loads).
QUIET_SERVER = ("--uvicorn-opts=--no-access-log",)


def ui_command(tracking_uri: str, host: str, port: int) -> list[str]:
    """The ``mlflow server`` command serving a store on host:port. A command line is visible to
    every user (``ps``): a URI that still holds a secret (:func:`record.store.redact`'s
    positions) is refused; its credentials travel in the environment
    (``study.recording.folder.take_credentials``)."""
    if split_credentials(tracking_uri)[1:] != (None, None) or hidden_secrets(tracking_uri):
        raise SpecError(f"{redact(tracking_uri)}: a secret in the store's URI would be on the mlflow "
                        "server's command line; give it by environment (PGUSER/PGPASSWORD, ~/.pgpass)")
    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracking_uri,
            "--host", host, "--port", str(port), "--workers", "1", *QUIET_SERVER]


class _Stop(Exception):
    """SIGINT, SIGTERM or SIGHUP to ``study ui``: stop the server."""


def health_url(host: str, port: int) -> str:
    """The server's health probe, on an address this machine can reach."""
    return f"http://{browse_host(host)}:{port}/health"


def answers(url: str) -> bool:
    """Whether ``url`` answers 200 within a second."""
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def stop_server(proc: subprocess.Popen) -> int:
    """SIGTERM the server, wait up to :data:`STOP_SECONDS`, then SIGKILL its process group."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever of its session is left (uvicorn)
    except (ProcessLookupError, PermissionError):
        pass
    return proc.wait()


def serve(cmd: list[str], *, probe: str, ready: Callable[[], None], err: TextIO = sys.stderr,
          env: dict[str, str] | None = None) -> int:
    """Run the server ``cmd`` until it exits or ``study ui`` is stopped; call ``ready`` once
    ``probe`` answers. Returns 0 after Ctrl-C/SIGTERM/SIGHUP, else the server's exit status."""
    # No job runner: the UI needs none, and it slowed the start and the stop.
    env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **(os.environ if env is None else env)}

    def stop(signum: int, frame: object) -> None:
        raise _Stop

    # SIGINT too: a shell that starts `study ui &` has it ignored, and Ctrl-C must still work.
    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    proc: subprocess.Popen | None = None
    start = time.monotonic()
    try:
        # The server's own lines go to stderr: stdout carries only the URL, once it answers.
        proc = subprocess.Popen(cmd, env=env, stdout=2, preexec_fn=die_with_parent,  # noqa: PLW1509
                                start_new_session=True)
        while not answers(probe):
            if proc.poll() is not None:
                print(f"study ui: mlflow server exited with status {proc.returncode} before it "
                      "answered", file=err, flush=True)
                return proc.returncode or 1
            time.sleep(PROBE_SECONDS)
        print(f"study ui: mlflow server answered after {time.monotonic() - start:.0f} s; "
              "Ctrl-C stops it", file=err, flush=True)
        ready()
        return proc.wait()
    except (KeyboardInterrupt, _Stop):
        for signum in old:  # a second Ctrl-C: no traceback either
            signal.signal(signum, signal.SIG_IGN)
        if proc is not None:
            print("study ui: stopping the MLflow server", file=err, flush=True)
            stop_server(proc)
        return 0
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)
        if proc is not None and proc.poll() is None:
            stop_server(proc)


# --------------------------------------------------------------------------- the live grid page

class GridServer:
    """The live grid page beside the MLflow UI: a standard-library HTTP server on its own
    thread that answers ``GET /`` with ``page()``, the page regenerated from the store on each
    request (it reloads itself every few seconds, :data:`reports.html.LIVE_REFRESH`). A
    failing ``page()`` answers 500 with one line and the server keeps serving."""

    def __init__(self, host: str, port: int, page: Callable[[], str]) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # only `study ui` serves

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the standard library's name
                if self.path.split("?", 1)[0] not in ("/", "/index.html"):
                    self._send(404, "text/plain", "not found: the grid is at /\n")
                    return
                try:
                    body, status, kind = page(), 200, "text/html"
                except Exception as exc:  # noqa: BLE001 - one line, and the next reload tries again
                    body, status, kind = f"the grid could not be read: {type(exc).__name__}: {exc}\n", 500, "text/plain"
                self._send(status, kind, body)

            def _send(self, status: int, kind: str, body: str) -> None:
                data = body.encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", f"{kind}; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
                pass

        family = socket.AF_INET6 if ":" in host else socket.AF_INET

        class Server(ThreadingHTTPServer):
            address_family = family
            daemon_threads = True

        self.server = Server((host, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="study-ui-grid", daemon=True)

    def start(self) -> "GridServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def grid_page(study_dir: Path, meta: StudyMeta, ui: str, render: Callable[..., str]) -> Callable[[], str]:
    """``GridServer``'s page for a study: its grid now, as ``render`` (the ``reports``
    command's ``live_grid_page``: study reaches reports by its entry point only) draws it, each
    cell marked with its (running, stale) seeds as ``study status`` counts them, and a line of
    the study's counts and the time it was read."""
    def page() -> str:
        rows, driver = study_status(meta, study_dir)
        marks = {r.cell: (r.count(schema.STATUS_RUNNING), r.count(STALE)) for r in rows}
        total = sum(r.expected for r in rows)
        done = sum(r.count(schema.STATUS_FINISHED) for r in rows)
        running = sum(m[0] for m in marks.values())
        stale = sum(m[1] for m in marks.values())
        status = (f"{done} of {total} runs finished, {running} running, {stale} stale; "
                  f"{driver.describe()}; read at {time.strftime('%H:%M:%S')}")
        return render(study_dir, meta.name, ui=ui, marks=marks, status=status)

    return page


def write_served(study_dir: Path, url: str) -> Path | None:
    """Record where ``study ui`` serves the study (:data:`record.layout.UI_FILE`), so that
    ``study report --html`` links there; None when the folder is not writable (a committed
    record served read-only: the report then links to the address it is given)."""
    path = Path(study_dir) / UI_FILE
    try:
        path.write_text(json.dumps({"url": url, "pid": os.getpid(), "host": socket.gethostname()}))
    except OSError:
        return None
    return path
