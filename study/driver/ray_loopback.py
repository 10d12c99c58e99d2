"""``python -m study.driver.ray_loopback start ...``: ``ray start``, for the nodes of a Ray cluster on one
machine with every port on 127.0.0.1 (the cluster how-to's "Try the cluster flow on one
machine").

Why it exists (Ray 2.60): Ray binds a node's servers (GCS, raylet, dashboard agent, runtime-env
agent) to 127.0.0.1 only when the node's address is 127.0.0.1, and it keeps that address only
with ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``; otherwise ``ray start --node-ip-address=127.0.0.1``
is rewritten to the machine's network address (``services.resolve_ip_for_localhost``) and the
servers listen on it and on 0.0.0.0. With that setting, though, ``ray start --address`` refuses to
start a worker node ("Multi-node Ray clusters are not supported on Windows and OSX"). This is
Ray's own ``ray start`` command with that one refusal lifted: the setting is on (set here when
unset), and only the command's own check reads it as off. Everything else is Ray's, options
included (``python -m study.driver.ray_loopback start --help``).
"""

from __future__ import annotations

import os
import sys

from study.driver.ray_compat import ray_start_cli_for_loopback_nodes

#: Ray's loopback switch, read when Ray is imported.
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def main(argv: list[str] | None = None) -> int:
    """Run ``ray <argv>`` (``start ...``) with Ray's loopback mode on and ``ray start``'s
    refusal of a worker node in that mode lifted; returns its exit status."""
    os.environ.setdefault(LOOPBACK_ENV, "0")
    if os.environ[LOOPBACK_ENV] != "0":
        print(f"study.driver.ray_loopback: {LOOPBACK_ENV}={os.environ[LOOPBACK_ENV]} would put this node's "
              f"ports on the machine's address; unset it or set it to 0", file=sys.stderr)
        return 2
    return ray_start_cli_for_loopback_nodes(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
