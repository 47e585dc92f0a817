"""What a failed test left of its SSH sandboxes under a directory of its own, removed the way
destroy removes it (provision.destroy_command, run here as root): processes, the cgroups,
disk mounts and egress rules of isolated sandboxes (hosts/backends/ssh/isolation.py), users,
files. `rm -rf` of the directory alone would leave mounts, cgroups and iptables rules on the
machine, and a rule left for a uid refuses the loopback to whoever gets that uid next."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hosts.backends.ssh import layout
from hosts.backends.ssh.provision import destroy_command


def remove_sandboxes_under(path: Path) -> None:
    """Every sandbox whose directory lies below `path`: its users (by home) and its
    directories (by name, for a sandbox whose user is already gone)."""
    found: dict[str, Path] = {}
    passwd = subprocess.run(["getent", "passwd"], capture_output=True, text=True).stdout
    for line in passwd.splitlines():
        name, home = line.split(":")[0], Path(line.split(":")[5])
        sandbox_id = layout.sandbox_id_of_user(name)
        if sandbox_id and str(home).startswith(f"{path}/"):
            found[sandbox_id] = home.parent
    for directory in path.glob("**/[sw][bp]_*"):
        if layout.SANDBOX_ID_RE.match(directory.name) and (directory / ".sandhub").is_dir():
            found.setdefault(directory.name, directory)
    for sandbox_id, directory in found.items():
        state = {"sandbox_id": sandbox_id, "dir": str(directory)}  # own user: looked for
        subprocess.run(["sh", "-c", destroy_command(state)], capture_output=True, timeout=120)
