"""The adapter to Ray's private names: every use of ``ray._private`` (and of any other private
module or attribute of Ray) in the project lives here, each with the reason Ray's public API does
not serve (``test_architecture.py`` enforces it). Checked with Ray 2.60; a Ray that moved
one of these names breaks here, in one place.

Nothing here imports Ray at import time: ``study --help`` and ``study status`` stay light.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator


def keep_on_loopback() -> None:
    """Make a Ray imported before this call keep a private local cluster on 127.0.0.1, as
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` does when set before Ray's first import."""
    # Private: ``ray._private.ray_constants.ENABLE_RAY_CLUSTER``. Ray reads the variable once,
    # when first imported, into this constant, and has no public setter; a driver that imported
    # ray before the study code did (a notebook, a test) would advertise the network address.
    from ray._private import ray_constants  # the driver's heavy import (Ray)

    ray_constants.ENABLE_RAY_CLUSTER = False


@contextmanager
def sigterm_handler_kept() -> Iterator[None]:
    """While the block runs (``ray.init``), Ray does not replace the process's SIGTERM handler."""
    # Private: ``ray._private.utils.set_sigterm_handler``. ray.init installs a handler that calls
    # sys.exit, which inside Ray's start-up gave a traceback or a C++ abort, and it has no option
    # to keep the caller's; its setter is made a no-op for the duration of the call.
    from ray._private import utils as ray_utils  # the driver's heavy import (Ray)

    setter, ray_utils.set_sigterm_handler = ray_utils.set_sigterm_handler, lambda handler: None
    try:
        yield
    finally:
        ray_utils.set_sigterm_handler = setter


@contextmanager
def own_process_group() -> Iterator[None]:
    """While the block runs (``ray.init`` starting a private local Ray), every process Ray starts
    (GCS, raylet, and through the raylet its workers and agents) leads a session of its own, so
    a signal to the driver's process group (``timeout``, ``kill -TERM -- -PGID``) reaches the
    driver alone: it stops the study and then shuts Ray down itself. Ray's own fate sharing
    (``PR_SET_PDEATHSIG``) still ends them with the driver."""
    # Private: ``ray._private.services.ConsolePopen``, the Popen every Ray process is started
    # with. ray.init has no option for the children's process group, and a SIGTERM to the group
    # killed the GCS under the driver: Ray's core then waited 60 s ("Failed to connect to GCS
    # within 60 seconds") and ended the driver with exit 1.
    from ray._private import services  # the driver's heavy import (Ray)

    popen = services.ConsolePopen

    class SessionPopen(popen):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("start_new_session", True)
            super().__init__(*args, **kwargs)

    services.ConsolePopen = SessionPopen
    try:
        yield
    finally:
        services.ConsolePopen = popen


#: Ray's C++ core, as a module name: ``import ray`` loads it.
RAY_CORE_MODULE = "ray._raylet"


def core_loaded() -> bool:
    """Whether this process loaded Ray's C++ core (it imported ray: a launch or resume): such a
    process leaves through ``os._exit`` (``study.cli.program``)."""
    # Private: the module ``ray._raylet``. Ray has no public "is the core loaded"; its
    # ``ray.is_initialized`` is false again after ``ray.shutdown``, when the core still is.
    return RAY_CORE_MODULE in sys.modules


def ray_start_cli_for_loopback_nodes(argv: list[str]) -> int:
    """Run Ray's ``ray <argv>`` command (``start ...``) with ``ray start``'s refusal of a worker
    node under ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` lifted (:mod:`study.driver.ray_loopback` says
    why); returns its exit status."""
    # Private: ``ray._private.ray_constants.ENABLE_RAY_CLUSTER`` as the CLI module
    # ``ray.scripts.scripts`` sees it. ``ray start`` has no option to start a worker node whose
    # address stays 127.0.0.1; only that module gets a view of the constants in which clusters
    # are on, while services, the node and every process it starts read the real one (off).
    import types

    import ray._private.ray_constants as constants  # Ray, only for this command
    from ray.scripts import scripts  # (the same)

    view = types.ModuleType(constants.__name__)
    view.__dict__.update(constants.__dict__)
    view.ENABLE_RAY_CLUSTER = True
    scripts.ray_constants = view
    sys.argv = ["ray", *argv]
    try:
        scripts.main()
    except SystemExit as exc:  # click ends with SystemExit
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0
