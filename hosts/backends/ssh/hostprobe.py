"""What an SSH host can do, how loaded it is, and what Sandhub left on it: over the connection.

    facts = host_facts(conn)                    # sudo? systemd? isolated? (cache it)
    result = probe(conn, base_dir=base)         # load + GPUs + the facts, one round trip
    found = list_managed(conn, base, "default", sudo=facts.sudo)

`probe` runs the facts script and probes.PROBE_SCRIPT in one command, so a probe is one round
trip and refreshes the facts too (`facts_from_details` reads them back from a ProbeResult).
The facts themselves, and the script that learns them, are in capabilities.py.
A probe reports, it never raises: an unreachable host is `healthy=False` with the error.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from hosts.backends.base import BackendError, ManagedResource, ProbeResult
from hosts.backends.ssh import layout
from hosts.backends.ssh.capabilities import (
    FACTS_SCRIPT,
    HostFacts,
    facts_from_details,
    parse_facts,
)
from hosts.backends.ssh.connection import SshConnection
from hosts.backends.ssh.probes import PROBE_SCRIPT, parse_probe_output

__all__ = [
    "FACTS_SCRIPT",
    "HostFacts",
    "facts_from_details",
    "host_facts",
    "list_managed",
    "parse_facts",
    "probe",
]

PROBE_TIMEOUT = 30.0
LIST_TIMEOUT = 60.0


def host_facts(conn: SshConnection, *, timeout: float = PROBE_TIMEOUT) -> HostFacts:
    """The host's facts (one round trip); raises BackendError when it cannot tell."""
    result = conn.run(f"/bin/sh -c {shlex.quote(FACTS_SCRIPT)}", timeout=timeout)
    try:
        return parse_facts(result.stdout.decode(errors="replace"))
    except ValueError as exc:
        said = result.stderr.decode(errors="replace").strip()[:300]
        raise BackendError(f"{conn.target.where}: {exc}{': ' + said if said else ''}") from None


# The number of sandbox directories: what the probe calls sandboxes running there.
_COUNT_SCRIPT = """\
echo '@@sandhub-probe sandboxes@@'
n=0
for d in "$base"/sb_* "$base"/wp_*; do [ -d "$d" ] && n=$((n + 1)); done
echo "$n"
"""


def probe(
    conn: SshConnection,
    *,
    base_dir: str = layout.DEFAULT_BASE_DIR,
    assigned: Mapping[int, int] | None = None,
    timeout: float = PROBE_TIMEOUT,
) -> ProbeResult:
    """Health, load (cpu, memory, GPUs), the host's facts and its sandbox count, in one
    command. `assigned`: GPU index -> sandboxes Sandhub gave it (they count as busy)."""
    try:
        body = FACTS_SCRIPT + _COUNT_SCRIPT + PROBE_SCRIPT
        base = layout.check_base_dir(base_dir)
        command = layout.script_command(body, {"base": base}, strict=False)
        result = conn.run(command, timeout=timeout)
        text = result.stdout.decode(errors="replace")
        facts = parse_facts(text)
        sample = parse_probe_output(text, assigned)
    except Exception as exc:  # a probe reports, it never raises
        return ProbeResult(healthy=False, error=str(exc) or type(exc).__name__)
    count = re.search(r"^@@sandhub-probe sandboxes@@\n(\d+)$", text, re.MULTILINE)
    details = sample.details() | {
        "facts": facts.as_dict(),
        "per_sandbox_users": facts.per_sandbox_users,
        "isolated": facts.isolated,
        "isolation_missing": list(facts.isolation_missing),
        "sudo": facts.sudo,
        "systemd": facts.systemd,
        "python3": facts.has_python3,
    }
    return ProbeResult(
        healthy=True,
        cpu_percent=sample.cpu_percent,
        memory_percent=sample.memory_percent,
        gpu_percent=sample.gpu_percent,
        sandboxes_running=int(count.group(1)) if count else 0,
        details=details,
    )


# -- reconciliation ----------------------------------------------------------------------------

# One line per sandbox directory ("D id ctime owner workspace-owner instance") and per
# sandbox user ("U name home"), tab-separated. ctime, not mtime: a sandbox can set its
# directory's mtime to any date, its ctime only to now, which can only delay the removal of an
# orphan.
_LIST_SCRIPT = """\
for d in "$base"/sb_* "$base"/wp_*; do
  [ -d "$d" ] && [ ! -L "$d" ] || continue
  i=$(head -n 1 "$d/.sandhub/instance" 2>/dev/null | head -c 200) || i=
  o=$(stat -c %U "$d/workspace" 2>/dev/null) || o=
  c=$(stat -c '%Z %U' "$d" 2>/dev/null) || c=' '
  printf 'D\\t%s\\t%s\\t%s\\t%s\\t%s\\n' "${d##*/}" "${c% *}" "${c#* }" "$o" "$i"
done
getent passwd | while IFS=: read -r n _ _ _ _ h _; do
  case $n in sbx-*) printf 'U\\t%s\\t%s\\n' "$n" "$h" ;; esac
done
"""


def list_managed(
    conn: SshConnection,
    base_dir: str,
    instance: str,
    *,
    sudo: bool = False,
    timeout: float = LIST_TIMEOUT,
) -> list[ManagedResource]:
    """Sandbox directories under base_dir made by `instance` (kind "directory"), and the
    per-sandbox users whose home is in one of them (kind "user"); label_id is the sandbox
    (or pool) id, created_at the directory's ctime, state what destroy() needs.

    sudo: read as root (per-sandbox users' .sandhub/ is theirs alone); pass facts.sudo.
    A user whose directory is gone is not listed: its instance cannot be told.
    """
    base = layout.check_base_dir(base_dir)
    command = layout.script_command(_LIST_SCRIPT, {"base": base}, sudo=sudo)
    result = conn.run(command, timeout=timeout, max_output=64 * 1024 * 1024)
    if not result.ok:
        said = result.stderr.decode(errors="replace").strip()[:500]
        raise BackendError(
            f"listing sandboxes under {base} on {conn.target.where} failed "
            f"(exit {result.exit_code}): {said}"
        )
    dirs: dict[str, ManagedResource] = {}
    users: list[tuple[str, str]] = []
    for line in result.stdout.decode(errors="replace").splitlines():
        parts = line.split("\t")
        if parts[0] == "D" and len(parts) == 6:
            found = _directory(base, parts[1:], instance, conn.target.username)
            if found is not None:
                dirs[found.label_id] = found
        elif parts[0] == "U" and len(parts) == 3:
            users.append((parts[1], parts[2]))
    return [*dirs.values(), *_users(users, dirs)]


def _directory(
    base: str, fields: list[str], instance: str, login_user: str
) -> ManagedResource | None:
    sandbox_id, ctime, dir_owner, owner, made_by = fields
    if not layout.SANDBOX_ID_RE.match(sandbox_id) or made_by != instance:
        return None
    try:
        user = layout.user_name(sandbox_id)
    except layout.LayoutError:
        user = ""
    # A sandbox with a user of its own has a directory root owns (shared: the login user's),
    # which tells it even once its user is gone.
    own_user = bool(user) and (owner == user or dir_owner == "root")
    state = layout.make_state(
        base_dir=base,
        sandbox_id=sandbox_id,
        user=user if own_user else login_user,
        own_user=own_user,
        limits={"memory_mb": 0, "cpus": 0, "pids": 0},
        env={},
    )
    return ManagedResource(
        kind="directory",
        label_id=sandbox_id,
        name=state["dir"],
        created_at=float(ctime) if ctime.isdigit() else None,
        instance=made_by,
        pool=sandbox_id.startswith("wp_"),
        running=True,  # a sandbox on an SSH host is up while its directory is there
        state=state,
    )


def _users(
    users: list[tuple[str, str]], dirs: Mapping[str, ManagedResource]
) -> list[ManagedResource]:
    found = []
    for name, home in users:
        sandbox_id = layout.sandbox_id_of_user(name)
        directory = dirs.get(sandbox_id or "")
        if directory is None or home != directory.state["workspace"]:
            continue
        found.append(
            ManagedResource(
                kind="user",
                label_id=directory.label_id,
                name=name,
                created_at=directory.created_at,
                instance=directory.instance,
                pool=directory.pool,
                state={**directory.state, "user": name, "own_user": True},
            )
        )
    return found
