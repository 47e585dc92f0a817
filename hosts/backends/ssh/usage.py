"""An isolated sandbox's cgroup read over the host connection (agentusage.py): inside, a
cgroup namespace hides which of the host's cgroups is the sandbox's. The path is the one
isolation.START makes (`sandhub/<id>` under the v2 mount or each v1 controller's); its files
are under a directory only root may read (0700), so through `sudo -n` as the platform's
other root scripts on the host run."""

from __future__ import annotations

import shlex
from typing import Any

from hosts.backends.ssh import layout
from hosts.backends.ssh.connection import SshConnection
from hosts.backends.usagescripts import USAGE_SCRIPT, parse_usage

__all__ = ["host_usage"]

TIMEOUT = 10.0


def host_usage(connection: SshConnection, state: dict[str, Any]) -> dict[str, Any]:
    """The cgroup keys of an isolated sandbox; {} for one that has no cgroup of its own."""
    if not state.get("isolated"):
        return {}
    cgroup = "/sandhub/" + str(state["sandbox_id"])
    body = f"set -- '' {shlex.quote(cgroup)}\n{USAGE_SCRIPT}"
    command = layout.script_command(body, {}, sudo=True, strict=False)
    result = connection.run(command, timeout=TIMEOUT, max_output=16384)
    answer = parse_usage(result.stdout.decode(errors="replace"))
    return answer if answer.get("visible") else {}
