"""The OOM killer's order: every child the agent starts goes first (part 0 of the agent).

A command that fills the sandbox's memory must not take the agent, the one process that can
still stop it then (no new process starts while the memory is full): every child starts with
oom_score_adj 1000, the agent keeps 0. Raising a score needs no privilege. It must hold from
the child's first instruction (what it forks inherits its score then), so it is set between
fork and exec, never by the agent after Popen returns. Three ways, cheapest first, each used
only where the child then runs exactly as Popen(argv) alone would run it:

- `bash -c ...` (every run_command): bash itself sets it, before it reads the command, from
  BASH_ENV: a sealed memfd of the agent's with three builtins that also unset BASH_ENV again
  and leave $_ and $? as they were. No process more. The one trace: BASH_ARGC holds one
  element more (bash's bookkeeping of a sourced file, read only under extdebug).
- a /bin/sh shim that writes the score and execs the command, where dash runs it as Popen
  would (+0.5 ms: one more exec);
- Popen's preexec_fn elsewhere (+1.8 ms: it forces fork instead of vfork, and then every page
  the agent writes is a copy-on-write fault). The forked child is not dumpable, as the agent
  is not (guard.py), so its /proc/self/oom_score_adj is root's: it closes the agent's
  streams and becomes dumpable first.

bash reads BASH_ENV from its own copy of the memfd (passed as that fd, /proc/self/fd/N, and
closed by the script): the agent's /proc/PID/fd is closed to the sandbox user.

Measured through the agent (`true`, median, idle host; loaded: about twice the extra): Popen
alone 1.7 ms. A helper process of score 1000 that spawns for the agent costs +0.3 ms too,
and one more process in every sandbox.
"""

from __future__ import annotations

import fcntl
import os
import threading
from typing import Any

from .guard import open_up_child

_OOM_SHIM = 'echo 1000 2>/dev/null >/proc/self/oom_score_adj; exec "$@"'
_OOM_PATH = b"/proc/self/oom_score_adj"
# dash passes its environment on unchanged but for these: names a shell cannot hold are
# dropped, and it sets IFS, OPTIND and PPID itself (PWD too, unless it names the cwd).
_SHELL_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_SHELL_NAME_CHARS = _SHELL_NAME_START | frozenset("0123456789")
_SHELL_OWN_NAMES = frozenset(("IFS", "OPTIND", "PPID"))
# A program that is neither is refused by execve (ENOEXEC): Popen reports it, dash would run
# it as a script.
_EXEC_MAGICS = (b"#!", b"\x7fELF")


def _is_dash(path: str = "/bin/sh") -> bool:
    return os.path.basename(os.path.realpath(path)) == "dash" and os.access(path, os.X_OK)


_DASH = _is_dash()


def _oom_first_in_child() -> None:
    """Popen's preexec_fn: runs in the forked child of a threaded agent, so raw calls only."""
    open_up_child()
    try:
        fd = os.open(_OOM_PATH, os.O_WRONLY)
        try:
            os.write(fd, b"1000")
        finally:
            os.close(fd)
    except OSError:
        pass


def _shell_keeps(env: dict[str, str], cwd: str) -> bool:
    """dash would hand this environment on unchanged (see _SHELL_OWN_NAMES)."""
    for name in env:
        if name[:1] not in _SHELL_NAME_START or not _SHELL_NAME_CHARS.issuperset(name):
            return False
    if _SHELL_OWN_NAMES.intersection(env) or "%" in env.get("PATH", "%"):
        return False  # no PATH: dash and Popen search different defaults; % is dash syntax
    return env.get("PWD") == cwd and cwd.startswith("/")


def _popen_program(program: str, cwd: str, env: dict[str, str]) -> str | None:
    """The file Popen would execute: the program itself, or the first candidate on PATH that
    is an executable file (execve fails on the others with EACCES or ENOENT: both go on to
    the next). Paths as the child sees them, after its chdir. None: none, or an error."""
    if "/" in program:
        candidates = [program]
    else:
        candidates = [os.path.join(part, program) for part in env["PATH"].split(":")]
    for candidate in candidates:
        path = os.path.join(cwd, candidate)
        try:
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
        except (OSError, ValueError):
            return None
    return None


def _starts_as_popen_would(program: str, cwd: str, env: dict[str, str]) -> bool:
    """dash's `exec` runs the program Popen would run: the one Popen would execute is a
    binary or #! script (no candidate at all, or an error: Popen, which says it as it does
    today)."""
    path = _popen_program(program, cwd, env)
    if path is None:
        return False
    try:
        with open(path, "rb") as handle:
            return handle.read(4).startswith(_EXEC_MAGICS)
    except OSError:
        return False


# Read by bash -c before the command: the score, then the memfd (fd {fd}, bash's copy) closed
# and BASH_ENV gone from what the command sees, and a last builtin whose argument is what $_
# holds at bash's start (argv[0], as no `_` is in the environment): $? is 0, $_ is as
# without it. Errors go nowhere, as the shim's. `exec`, not `builtin exec`: redirections of
# any other command, `builtin` included, last only as long as it runs (no function can be
# called exec: _bash_reads_env refuses BASH_FUNC_ variables).
_BASH_ENV_SCRIPT = (
    "builtin echo 1000 2>/dev/null >/proc/self/oom_score_adj\n"
    "exec {fd}<&-\n"
    "builtin unset -v BASH_ENV\n"
    "builtin : bash\n"
)
# What would change how bash starts, or what it runs before the command: then not this way.
_BASH_OWN_NAMES = frozenset(("BASH_ENV", "_", "POSIXLY_CORRECT", "SHELLOPTS", "ENV"))
_bash_env_lock = threading.Lock()
_bash_env: list[int] = []  # the memfd once made; -1 when it cannot be made


def _bash_env_fd() -> int:
    """A sealed memfd holding _BASH_ENV_SCRIPT (-1 if none can be made), passed to bash as
    the same fd. Sealed: nothing with the sandbox's uid can change what bash reads there."""
    with _bash_env_lock:
        if not _bash_env:
            _bash_env.append(_make_bash_env())
        return _bash_env[0]


def _make_bash_env() -> int:
    try:
        fd = os.memfd_create("sandhub-oom", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        script = _BASH_ENV_SCRIPT.format(fd=fd).encode()
        os.write(fd, script)
        seals = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        with open(f"/proc/self/fd/{fd}", "rb") as check:  # as bash will open it
            if check.read() != script:
                return -1
        return fd
    except (AttributeError, OSError):  # an old kernel or python, no /proc
        return -1


def _bash_reads_env(argv: list[str], cwd: str, env: dict[str, str]) -> bool:
    """argv is `bash -c ...` that Popen would start as GNU bash, with an environment that
    leaves bash reading BASH_ENV (and nothing else) before the command."""
    if len(argv) < 3 or argv[0] != "bash" or argv[1] != "-c" or "PATH" not in env:
        return False
    if _BASH_OWN_NAMES.intersection(env) or any(name.startswith("BASH_FUNC_") for name in env):
        return False
    program = _popen_program("bash", cwd, env)
    return program is not None and os.path.basename(os.path.realpath(program)) == "bash"


def oom_first(argv: list[str], options: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """Popen's arguments for a child that has score 1000 before its first instruction, and
    otherwise runs as Popen(argv, **options) would run it."""
    env, cwd = options.get("env"), options.get("cwd")
    if env is not None and isinstance(cwd, str) and _bash_reads_env(argv, cwd, env):
        fd = _bash_env_fd()
        if fd >= 0:
            bash_env = {**env, "BASH_ENV": f"/proc/self/fd/{fd}"}
            return argv, {**options, "env": bash_env, "pass_fds": (fd,)}
    if (
        _DASH
        and argv
        and not argv[0].startswith("-")  # dash's exec might read it as an option
        and env is not None
        and isinstance(cwd, str)
        and _shell_keeps(env, cwd)
        and _starts_as_popen_would(argv[0], cwd, env)
    ):
        return ["/bin/sh", "-c", _OOM_SHIM, "sandhub", *argv], options
    return argv, {**options, "preexec_fn": _oom_first_in_child}


# -- telling an OOM kill from any other SIGKILL --------------------------------------------------
# A command the OOM killer took ends like one killed with `kill -9`: status 137. The sandbox's
# memory cgroup counts its OOM kills (v2: memory.events "oom_kill"; v1: memory.oom_control
# "oom_kill", kernel 4.13+): a command that ended on SIGKILL while that count went up was
# killed for memory. The platform matches OOM_NOTE (sandboxes/contract/results.py repeats it).
OOM_NOTE = "sandhub: the command was killed because the sandbox ran out of memory"
_NO_LIMIT = 1 << 60  # v1's "unlimited" is a huge number; v2 says "max"


def _own_cgroup() -> tuple[str, str]:
    """(v2 path, v1 memory path) of this process's cgroup, "" where it has none."""
    v2 = v1 = ""
    try:
        with open("/proc/self/cgroup") as handle:
            for line in handle:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) != 3:
                    continue
                if parts[0] == "0" and parts[1] == "":
                    v2 = parts[2]
                elif "memory" in parts[1].split(","):
                    v1 = parts[2]
    except OSError:
        pass
    return v2, v1


def _memory_cgroup_dir() -> tuple[str, int]:
    """The directory of this process's memory cgroup and its version (0: none found): its own
    path in the hierarchy (a host's view); else, inside a cgroup namespace, the isolated SSH
    sandbox's own cgroup (isolation.py: sandhub/<id>, the id in SANDHUB_SANDBOX_ID), as the
    host's hierarchy shows it; else the hierarchy's root, which a container's private view
    (Docker) shows as the container's own cgroup."""
    v2, v1 = _own_cgroup()
    sandbox = os.environ.get("SANDHUB_SANDBOX_ID", "")
    for base, path, version, probe in (
        ("/sys/fs/cgroup/memory", v1, 1, "memory.oom_control"),
        ("/sys/fs/cgroup", v2, 2, "memory.events"),
    ):
        if version == 1 and not v1:
            continue
        candidates = [base + path.rstrip("/")] if path.strip("/") else []
        if sandbox and sandbox.replace("_", "").isalnum():
            candidates.append(f"{base}/sandhub/{sandbox}")
        for directory in [*candidates, base]:
            if os.path.isfile(os.path.join(directory, probe)):
                return directory, version
    return "", 0


_memory_cgroup: list[tuple[str, int]] = []  # found once, at the first command (not at import)


def _memory_cgroup_found() -> tuple[str, int]:
    if not _memory_cgroup:
        _memory_cgroup.append(_memory_cgroup_dir())
    return _memory_cgroup[0]


def oom_kills() -> int | None:
    """How many processes the OOM killer has taken in the sandbox's cgroup; None: unknown."""
    directory, version = _memory_cgroup_found()
    name = "memory.oom_control" if version == 1 else "memory.events"
    try:
        with open(os.path.join(directory, name)) as handle:
            for line in handle:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return None


def memory_limit_mb() -> int | None:
    directory, version = _memory_cgroup_found()
    name = "memory.limit_in_bytes" if version == 1 else "memory.max"
    try:
        with open(os.path.join(directory, name)) as handle:
            limit = int(handle.read().strip())
    except (OSError, ValueError):  # "max": no limit
        return None
    return limit // (1024 * 1024) if 0 < limit < _NO_LIMIT else None


def oom_killed(code: int | None, before: int | None) -> bool:
    """Whether a command that ended with `code` was taken by the OOM killer: it died of
    SIGKILL (137, as a shell reports it) while the cgroup's OOM kill count went up. A plain
    `kill -9` leaves the count as it was."""
    if code != 137 or before is None:
        return False
    after = oom_kills()
    return after is not None and after > before


def oom_note() -> bytes:
    limit = memory_limit_mb()
    said = f" (limit {limit} MB)" if limit else ""
    return f"\n{OOM_NOTE}{said}; use a bigger sandbox or less memory\n".encode()
