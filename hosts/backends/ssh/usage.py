"""An isolated sandbox's usage read over the host connection (agentusage.py): inside, a
cgroup namespace hides which of the host's cgroups is the sandbox's, and from the host one
script reads the cgroup and the workspace's disk, where asking inside as well would cost an
exec through sudo and nsenter more. The path is the one
isolation.START makes (`sandhub/<id>` under the v2 mount or each v1 controller's); its files
are under a directory only root may read (0700), so through `sudo -n` as the platform's
other root scripts on the host run."""

from __future__ import annotations

import posixpath
import shlex
import time
from typing import Any

from hosts.backends.base import SandboxGone
from hosts.backends.ssh import layout
from hosts.backends.ssh.connection import SshConnection
from hosts.backends.usagescripts import USAGE_SCRIPT, parse_usage

__all__ = ["host_usage"]

TIMEOUT = 10.0
GONE = 75  # the script's exit when the sandbox's directory is not there


def host_usage(connection: SshConnection, state: dict[str, Any]) -> dict[str, Any] | None:
    """The usage of an isolated sandbox, its cgroup and its workspace's loop disk (mounted at
    <dir>/workspace on the host), in one round trip; None for one that is not isolated."""
    if not state.get("isolated"):
        return None
    cgroup = "/sandhub/" + str(state["sandbox_id"])
    workspace = posixpath.join(str(state["dir"]), layout.WORKSPACE_DIR)
    quoted = shlex.quote(workspace)
    body = f"[ -d {quoted} ] || exit {GONE}\nset -- {quoted} {shlex.quote(cgroup)}\n{USAGE_SCRIPT}"
    command = layout.script_command(body, {}, sudo=True, strict=False)
    result = connection.run(command, timeout=TIMEOUT, max_output=16384)
    if result.exit_code == GONE:
        raise SandboxGone(f"sandbox {state['sandbox_id']} is gone from {connection.target.where}")
    answer = parse_usage(result.stdout.decode(errors="replace"))
    answer["at"] = time.time()
    return answer
