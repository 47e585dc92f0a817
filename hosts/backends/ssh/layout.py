"""Where a sandbox lives on an SSH host, and how a process runs as it: pure functions.

    /var/tmp/sandhub/                             the base (DEFAULT_BASE_DIR or Host.base_dir):
                                                  0711, the login user's
    /var/tmp/sandhub/sb_x/                        own user: 0711 root's; shared: 0700 login's
    /var/tmp/sandhub/sb_x/workspace/              0700, the sandbox user's: "/workspace"
    /var/tmp/sandhub/sb_x/.sandhub/               0700, the sandbox user's: platform files
    /var/tmp/sandhub/sb_x/.sandhub/instance       the SANDHUB_INSTANCE that made it
    /var/tmp/sandhub/sb_x/.sandhub/jobs/<job>/    background jobs (log, pid, exit)

Everything a later call needs (in any process) is in the backend state that provision returns
(see `make_state`): directories, the Unix user, whether it is the sandbox's own, its limits,
its environment, and whether the host runs systemd (which limits wrapper to use).

Services speak of "/workspace"; `host_path` / `sandbox_path` map between that and the
directory on the host. Other absolute paths are left alone: the sandbox user's own Unix
permissions decide what it may reach, as on any shared machine.

No network and no Django here: the agent link, provision and the backend all build on this.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from hosts.backends.ssh import isolation

DEFAULT_BASE_DIR = "/var/tmp/sandhub"
WORKSPACE = "/workspace"  # what services call the sandbox's files
WORKSPACE_DIR = "workspace"  # its name inside the sandbox directory
META_DIR = ".sandhub"
JOBS_DIR = "jobs"
INSTANCE_FILE = "instance"

# Every process of a sandbox carries this in its environment: destroy finds a shared-user
# sandbox's processes by it (/proc/PID/environ), and the agent's commands inherit it.
MARKER_ENV = "SANDHUB_SANDBOX_ID"
WORKSPACE_ENV = "SANDHUB_WORKSPACE"

# Sandbox ids (sb_) and warm-pool ids (wp_) as the platform makes them (12 characters after
# the prefix; services accept up to 29). Checked again here before an id reaches a shell.
SANDBOX_ID_RE = re.compile(r"^(sb|wp)_[a-z0-9]{6,32}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Per-sandbox Unix users: "sbx-<id without sb_>", "sbx-wp-<id without wp_>" for pool members
# (no id holds "-", so the name maps back to exactly one id). Linux caps user names at 32.
USER_PREFIX = "sbx-"
_POOL_USER_PREFIX = "sbx-wp-"
MAX_USER_NAME = 32
USER_NAME_RE = re.compile(r"^sbx-(wp-)?[a-z0-9]{6,32}$")

# What a command's environment starts from (env -i drops the login user's): the sandbox env
# and the call's env may replace these.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_LANG = "C.UTF-8"

# prlimit's memory limit where systemd cannot give MemoryMax. RLIMIT_AS counts address space,
# not memory: programs that reserve large virtual ranges (CUDA, JVMs, Go) may fail under it.
PRLIMIT_MEMORY_OPTION = "--as"


class LayoutError(ValueError):
    """A sandbox id, user name, env name or state that must not reach a shell line."""


# -- ids and names -----------------------------------------------------------------------------


def check_sandbox_id(sandbox_id: object) -> str:
    """The id itself when it matches SANDBOX_ID_RE, else LayoutError (never quoted blindly)."""
    if not isinstance(sandbox_id, str) or not SANDBOX_ID_RE.match(sandbox_id):
        raise LayoutError(f"malformed sandbox id {str(sandbox_id)[:40]!r}")
    return sandbox_id


def user_name(sandbox_id: str) -> str:
    """The sandbox's own Unix user: sb_abc123 -> sbx-abc123, wp_abc123 -> sbx-wp-abc123."""
    check_sandbox_id(sandbox_id)
    prefix = _POOL_USER_PREFIX if sandbox_id.startswith("wp_") else USER_PREFIX
    name = prefix + sandbox_id[3:]
    if len(name) > MAX_USER_NAME:
        raise LayoutError(
            f"sandbox id {sandbox_id} is too long for a Unix user name ({MAX_USER_NAME} max)"
        )
    return name


def sandbox_id_of_user(name: str) -> str | None:
    """The id a per-sandbox user belongs to (the reverse of user_name); None for other users."""
    if not USER_NAME_RE.match(name):
        return None
    if name.startswith(_POOL_USER_PREFIX):
        return "wp_" + name[len(_POOL_USER_PREFIX) :]
    return "sb_" + name[len(USER_PREFIX) :]


# -- directories -------------------------------------------------------------------------------


def check_base_dir(base_dir: str) -> str:
    """An absolute, normalised base directory other than "/" (rm -rf goes below it)."""
    if not isinstance(base_dir, str) or not base_dir.startswith("/") or "\x00" in base_dir:
        raise LayoutError(f"the base directory must be an absolute path, got {base_dir!r}")
    normal = posixpath.normpath(base_dir)
    if normal in ("/", "//"):
        raise LayoutError("the base directory cannot be /")
    return normal


def sandbox_dir(base_dir: str, sandbox_id: str) -> str:
    return posixpath.join(check_base_dir(base_dir), check_sandbox_id(sandbox_id))


def workspace_dir(base_dir: str, sandbox_id: str) -> str:
    return posixpath.join(sandbox_dir(base_dir, sandbox_id), WORKSPACE_DIR)


def meta_dir(base_dir: str, sandbox_id: str) -> str:
    return posixpath.join(sandbox_dir(base_dir, sandbox_id), META_DIR)


def instance_file(state: Mapping[str, Any]) -> str:
    return posixpath.join(state["meta"], INSTANCE_FILE)


def jobs_dir(state: Mapping[str, Any]) -> str:
    return posixpath.join(state["meta"], JOBS_DIR)


def job_dir(state: Mapping[str, Any], job_id: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,100}", job_id):
        raise LayoutError(f"malformed job id {job_id[:40]!r}")
    return posixpath.join(jobs_dir(state), job_id)


# -- the backend state -------------------------------------------------------------------------


def make_state(
    *,
    base_dir: str,
    sandbox_id: str,
    user: str,
    own_user: bool,
    limits: Mapping[str, Any],
    env: Mapping[str, str],
    systemd: bool = False,
    isolated: bool = False,
    network: bool = True,
) -> dict[str, Any]:
    """The JSON backend_state of a sandbox (the contract's keys, plus "systemd": whether its
    commands get their limits from `systemd-run --scope`, decided once at provision;
    "isolated": whether it has namespaces, a cgroup and a disk of its own (isolation.py),
    when provision adds its user's "uid" and "gid"; "network": whether it may reach out)."""
    return {
        "sandbox_id": check_sandbox_id(sandbox_id),
        "dir": sandbox_dir(base_dir, sandbox_id),
        # Inside its namespaces an isolated sandbox's workspace is at /workspace itself.
        "workspace": WORKSPACE if isolated else workspace_dir(base_dir, sandbox_id),
        "meta": meta_dir(base_dir, sandbox_id),
        "user": user,
        "own_user": own_user,
        "limits": {
            "memory_mb": int(limits["memory_mb"]),
            "cpus": float(limits["cpus"]),
            "pids": int(limits["pids"]),
        },
        "env": dict(env),
        "systemd": systemd,
        "isolated": isolated,
        "network": network,
    }


# -- paths -------------------------------------------------------------------------------------


def _normal(path: str) -> str:
    # POSIX keeps a leading "//"; a sandbox path never means anything special by it.
    return "/" + posixpath.normpath(path).lstrip("/")


def host_path(state: Mapping[str, Any], path: str) -> str:
    """A sandbox path on the host: "/workspace[/...]" -> the workspace directory[/...];
    relative paths are taken from /workspace; other absolute paths stay (normalised)."""
    if not path.startswith("/"):
        path = posixpath.join(WORKSPACE, path)
    path = _normal(path)
    if path == WORKSPACE:
        return str(state["workspace"])
    if path.startswith(WORKSPACE + "/"):
        return posixpath.join(state["workspace"], path[len(WORKSPACE) + 1 :])
    return path


def sandbox_path(state: Mapping[str, Any], path: str) -> str:
    """The reverse of host_path, for listings: the workspace directory[/...] -> /workspace[/...]."""
    path = _normal(path)
    workspace = str(state["workspace"])
    if path == workspace:
        return WORKSPACE
    if path.startswith(workspace + "/"):
        return WORKSPACE + path[len(workspace) :]
    return path


# -- running as the sandbox --------------------------------------------------------------------


def sandbox_env(
    state: Mapping[str, Any], env: Mapping[str, str] | None = None, *, own: bool = True
) -> dict[str, str]:
    """Every variable a command of the sandbox gets: defaults < sandbox env < call env <
    the fixed ones (marker, HOME, SANDHUB_WORKSPACE), which nothing may replace. own=False
    leaves the sandbox's own variables out (for a process whose argv they must not sit in:
    the agent gets them with each call, over its stdin)."""
    merged: dict[str, str] = {
        "PATH": DEFAULT_PATH,
        "LANG": DEFAULT_LANG,
        "USER": str(state["user"]),
        "LOGNAME": str(state["user"]),
    }
    if own:
        merged.update(state.get("env") or {})
    merged.update(env or {})
    merged.update(
        {
            MARKER_ENV: check_sandbox_id(state["sandbox_id"]),
            "HOME": str(state["workspace"]),
            WORKSPACE_ENV: str(state["workspace"]),
        }
    )
    for name, value in merged.items():
        if not ENV_NAME_RE.match(name):
            raise LayoutError(f"malformed environment variable name {name[:40]!r}")
        if "\x00" in str(value):
            raise LayoutError(f"environment variable {name} holds a NUL byte")
    return merged


def limits_prefix(state: Mapping[str, Any]) -> list[str]:
    """argv that applies the sandbox's limits to what follows it (and runs it as the sandbox
    user where it has its own)."""
    limits = state.get("limits") or {}
    memory_mb = int(limits.get("memory_mb") or 0)
    cpus = float(limits.get("cpus") or 0)
    pids = int(limits.get("pids") or 0)
    user = str(state["user"])
    if state.get("isolated"):  # the sandbox's cgroup holds every limit
        return isolation.enter_prefix(state)
    if state.get("own_user") and state.get("systemd"):
        # A transient scope: cgroup limits over every process of the command, forks included.
        # systemd-run needs root for a system scope; it drops to the user itself.
        argv = ["sudo", "-n", "systemd-run", "--scope", "--quiet", "--collect"]
        argv += [f"--uid={user}", f"--gid={user}"]
        if memory_mb > 0:
            argv += ["-p", f"MemoryMax={memory_mb}M"]
        if cpus > 0:
            argv += ["-p", f"CPUQuota={round(cpus * 100)}%"]
        if pids > 0:
            argv += ["-p", f"TasksMax={pids}"]
        return [*argv, "--"]
    argv = ["sudo", "-n", "-u", user, "--"] if state.get("own_user") else []
    rlimits = []
    # RLIMIT_NPROC counts every process of the real uid: right for the sandbox's own user,
    # wrong for the shared login user (its other sandboxes would use up the limit).
    if pids > 0 and state.get("own_user"):
        rlimits.append(f"--nproc={pids}")
    if memory_mb > 0:
        rlimits.append(f"{PRLIMIT_MEMORY_OPTION}={memory_mb * 1024 * 1024}")
    if rlimits:
        argv += ["prlimit", *rlimits, "--"]
    return argv


def as_sandbox(
    state: Mapping[str, Any],
    command: str | Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    own_env: bool = False,
) -> str:
    """A shell line (for SshConnection.run or channel.exec_command) that runs `command` as
    the sandbox: its user, its limits, a clean environment (`env -i`, see sandbox_env).

    command: an argv list, or a string run by /bin/sh -c. cwd: a sandbox path (mapped with
    host_path) to run in; one that cannot be entered fails the command with exit 126.
    own_env: whether the sandbox's own variables go in too (only the per-command path needs
    them; they are then in the argv of the command's processes, seen by no other tenant of
    an isolated sandbox's PID namespace).
    """
    argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
    if not argv or "=" in argv[0]:
        # env would take a first word holding "=" for one more variable.
        raise LayoutError(f"not a command to run: {argv[:1]!r}")
    if cwd is not None:
        chdir = 'cd -- "$1" || exit 126; shift; exec "$@"'
        argv = ["/bin/sh", "-c", chdir, "sh", host_path(state, cwd), *argv]
    variables = [f"{name}={value}" for name, value in sandbox_env(state, env, own=own_env).items()]
    # "--" before the variables: none of them can be taken for an option of env.
    full = [*limits_prefix(state), "env", "-i", "--", *variables, *argv]
    return " ".join(shlex.quote(part) for part in full)


def script_command(
    body: str, variables: Mapping[str, str], *, sudo: bool = False, strict: bool = True
) -> str:
    """A shell line running the POSIX sh script `body` (under `set -eu` when strict) after
    assigning `variables` (each value quoted), as root through `sudo -n` when asked: one
    round trip for a whole multi-step operation, whatever the login user's shell is."""
    for name in variables:
        if not ENV_NAME_RE.match(name):
            raise LayoutError(f"malformed shell variable name {name[:40]!r}")
    assigns = "".join(f"{name}={shlex.quote(value)}\n" for name, value in variables.items())
    script = f"{'set -eu' if strict else 'set -u'}\n{assigns}{body}"
    prefix = "sudo -n " if sudo else ""
    return f"{prefix}/bin/sh -c {shlex.quote(script)}"
