"""Files, background jobs and kills by marker (part 4 of the agent).

Everything here acts as the sandbox user the agent runs as: what that user may not read or
write is refused with the reason, never done some other way. The semantics follow the
per-command path (hosts/backends/docker/files.py, background.py, sandboxes/services/files.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import time
from typing import Any

from .constants import (
    CH_ENTRIES,
    CH_FILE,
    CHUNK,
    ERR_EXISTS,
    ERR_INVALID,
    ERR_NOT_A_DIRECTORY,
    ERR_NOT_A_FILE,
    ERR_TOO_LARGE,
    JOB_ENV,
    MARKER_ENV,
)
from .procs import marked, proc_stat, signal_quietly, sweep
from .wire import Reaper, Refusal, Request, refusal

MAX_ENTRIES = 200000  # a listing's rows; the per-command path capped its listing at 16 MiB
_KINDS = ((stat.S_ISREG, "file"), (stat.S_ISDIR, "dir"), (stat.S_ISLNK, "link"))


def op_read(request: Request) -> dict[str, Any]:
    """`length` bytes from `offset` of a regular file, and its size."""
    path, offset = str(request.args["path"]), int(request.args.get("offset", 0))
    length = int(request.args["length"])
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise Refusal(ERR_NOT_A_FILE, f"{path} is not a regular file")
        # Non-blocking: a fifo swapped in since the stat must not hang the request.
        fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise refusal(exc, f"cannot read {path}") from None
    wire, sent = request.wire, 0
    try:
        size = os.fstat(fd).st_size
        while sent < length and not request.cancelled:
            chunk = os.pread(fd, min(CHUNK, length - sent), offset + sent)
            if not chunk:
                break
            wire.send(wire.data(request.rid, CH_FILE, chunk))
            sent += len(chunk)
    except OSError as exc:
        raise refusal(exc, f"cannot read {path}") from None
    finally:
        os.close(fd)
    return {"size": size, "length": sent}


def op_write(request: Request) -> dict[str, Any]:
    """Write a file under `root` atomically (a temp file renamed into place), making missing
    directories (0755). A link or a file where a directory goes is refused, never followed
    or replaced; a directory where the file goes is refused too. The file itself replaces
    what was there (a link is replaced, not followed)."""
    path, root = str(request.args["path"]), str(request.args.get("root") or "/workspace")
    mode = int(request.args.get("mode", 0o644)) & 0o7777
    prefix = root.rstrip("/") + "/"
    parts = path[len(prefix) :].split("/") if path.startswith(prefix) else []
    if not parts or "" in parts or "." in parts or ".." in parts:
        raise Refusal(ERR_INVALID, f"{path} is not a normalized path of a file under {root}")
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    where, tmp = root.rstrip("/"), ""
    try:
        fd = os.open(root, flags)
    except OSError as exc:
        raise refusal(exc, f"cannot write {path}") from None
    try:
        for part in parts[:-1]:
            where += "/" + part
            inner = _enter(fd, part, where, flags)
            os.close(fd)
            fd = inner
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISDIR(os.stat(parts[-1], dir_fd=fd, follow_symlinks=False).st_mode):
                raise Refusal(ERR_EXISTS, f"{path} is a directory")
        tmp = f".sandhub-write-{os.urandom(6).hex()}"
        creating = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        size = _receive(request, os.open(tmp, creating, 0o600, dir_fd=fd), mode)
        os.rename(tmp, parts[-1], src_dir_fd=fd, dst_dir_fd=fd)
        tmp = ""
        return {"size": size}
    except OSError as exc:
        raise refusal(exc, f"cannot write {path}") from None
    finally:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
        os.close(fd)


def _receive(request: Request, out: int, mode: int) -> int:
    """The request's inbound data into `out` (closed), which then gets `mode`; its size."""
    size = 0
    try:
        while True:
            chunk = request.take()
            if chunk is None:
                break
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
            size += len(chunk)
        os.fchmod(out, mode)
    finally:
        os.close(out)
    return size


def _enter(fd: int, part: str, where: str, flags: int) -> int:
    """The directory `part` of the directory fd, made if missing, opened."""
    try:
        info = os.stat(part, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        with contextlib.suppress(FileExistsError):
            os.mkdir(part, 0o755, dir_fd=fd)
        info = os.stat(part, dir_fd=fd, follow_symlinks=False)
    if stat.S_ISLNK(info.st_mode):
        message = (
            f"{where} is a symbolic link: uploads neither follow links nor replace them; "
            "upload to the directory it points to, or remove the link first"
        )
        raise Refusal(ERR_NOT_A_DIRECTORY, message)
    if not stat.S_ISDIR(info.st_mode):
        raise Refusal(ERR_NOT_A_DIRECTORY, f"{where} exists and is not a directory")
    return os.open(part, flags | os.O_NOFOLLOW, dir_fd=fd)


def _row(name: str, path: str, info: os.stat_result) -> list[Any]:
    kind = next((label for test, label in _KINDS if test(info.st_mode)), "other")
    # From the exact decimal, as `find -printf %T@` gives it (st_mtime may be 1 ulp off).
    seconds, nanoseconds = divmod(info.st_mtime_ns, 1000000000)
    mtime = float(f"{seconds}.{nanoseconds:09d}")
    return [name, path, kind, info.st_size, mtime, format(info.st_mode & 0o7777, "o")]


def op_list(request: Request) -> dict[str, Any]:
    """A directory's entries (not following links among them), or the one entry of a file;
    a link to a directory is listed as that directory."""
    path = str(request.args["path"])
    wire, rows, size, count = request.wire, [], 0, 0
    try:
        info = os.lstat(path)
        if not (stat.S_ISDIR(info.st_mode) or stat.S_ISLNK(info.st_mode) and os.path.isdir(path)):
            rows.append(_row(os.path.basename(path.rstrip("/")) or "/", path, info))
        else:
            prefix = path if path.endswith("/") else path + "/"
            with os.scandir(path) as listing:
                for item in listing:
                    try:
                        rows.append(
                            _row(item.name, prefix + item.name, item.stat(follow_symlinks=False))
                        )
                    except OSError:
                        continue  # gone since the listing
                    count += 1
                    size += 2 * len(item.name) + len(prefix) + 80
                    if count > MAX_ENTRIES:
                        raise Refusal(ERR_TOO_LARGE, f"{path} has over {MAX_ENTRIES} entries")
                    if size > CHUNK // 2:
                        wire.send(wire.data(request.rid, CH_ENTRIES, json.dumps(rows).encode()))
                        rows, size = [], 0
    except OSError as exc:
        raise refusal(exc, f"cannot list {path}") from None
    if rows:
        wire.send(wire.data(request.rid, CH_ENTRIES, json.dumps(rows).encode()))
    return {"count": count or len(rows)}


def op_job_start(request: Request, reaper: Reaper, base_env: dict[str, str]) -> dict[str, Any]:
    """Start a background job's runner (argv) detached: a session of its own (its pid is the
    session and group id, as the cancel and poll scripts expect), stdin /dev/null, output
    to DIR/log, JOB_ENV set and the exec marker dropped.

    The classic double fork exists to hand a daemon to init; this agent is a child
    subreaper, so an intermediate process would hand the job straight back to it. What lets
    the job outlive the agent is its own session, no pipe to the agent, and being reparented
    to the container's init when the agent ends."""
    args = request.args
    job_id, directory = str(args["job_id"]), str(args["dir"]).rstrip("/")
    if not job_id or len(job_id) > 64 or not all(c.isalnum() or c in "_-" for c in job_id):
        raise Refusal(ERR_INVALID, f"malformed job id {job_id!r}")
    env = dict(base_env)
    env.update({str(k): str(v) for k, v in (args.get("env") or {}).items()})
    env.pop(MARKER_ENV, None)  # a foreground command's sweep must never take the job
    env[JOB_ENV] = job_id
    try:
        os.makedirs(os.path.dirname(directory), exist_ok=True)
        os.mkdir(directory)
        log = os.open(
            f"{directory}/log", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644
        )
    except OSError as exc:
        raise refusal(exc, f"cannot create {directory}") from None
    try:
        child = reaper.spawn(
            None,
            [str(part) for part in args["argv"]],
            cwd="/",
            env=env,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    except OSError as exc:
        raise refusal(exc, f"cannot start job {job_id}") from None
    finally:
        os.close(log)
    give_up = time.monotonic() + 1.0  # the runner writes its pid file first thing
    while not os.path.exists(f"{directory}/pid") and time.monotonic() < give_up:
        time.sleep(0.002)
    return {"pid": child.pid}


def op_kill_marked(request: Request) -> dict[str, Any]:
    """Kill every process carrying the exec marker (a command whose agent died)."""
    marker = str(request.args["marker"])
    if not marker.isalnum():
        raise Refusal(ERR_INVALID, "the marker must be letters and digits")
    needle = f"\0{MARKER_ENV}={marker}\0".encode()
    return {"swept": sweep(lambda pid, info: marked(pid, needle))}


def op_job_cancel(request: Request) -> dict[str, Any]:
    """Cancel a background job as the per-command path's cancel script does (SIGTERM to its
    session and its marked processes, SIGKILL for what is left after `term` seconds), from
    this already running process: no new process is needed, so it works while the job, a
    fork bomb say, holds every pid and all the memory (an engine exec cannot start then)."""
    job_id, directory = str(request.args["job_id"]), str(request.args["dir"])
    if not job_id.replace("-", "").replace("_", "").isalnum():
        raise Refusal(ERR_INVALID, "malformed job id")
    session = int(request.args.get("sid") or 0)
    needle = f"\0{JOB_ENV}={job_id}\0".encode()

    def ours(pid: int, info: Any) -> bool:
        return (session > 0 and info[3] == session) or marked(pid, needle)

    if os.path.isdir(directory) and not os.path.exists(f"{directory}/exit"):
        with contextlib.suppress(OSError):
            os.close(os.open(f"{directory}/cancelled", os.O_WRONLY | os.O_CREAT, 0o644))
    give_up = time.monotonic() + float(request.args.get("term", 2.0))
    while _signal_all(ours, signal.SIGTERM) and time.monotonic() < give_up:
        time.sleep(0.02)
    return {"done": sweep(ours)}


def _signal_all(ours: Any, number: int) -> bool:
    """Send `number` to every live process ours() names; whether there was any."""
    found = False
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        info = proc_stat(int(name))
        if info is not None and info[0] not in ("Z", "X") and ours(int(name), info):
            signal_quietly(int(name), number)
            found = True
    return found


def op_kill_agent(request: Request) -> dict[str, Any]:
    """Kill another agent of this sandbox that stopped answering (stopped by a command, say):
    its platform gave up on it, and nothing else would end it."""
    pid = int(request.args["pid"])
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            command_line = handle.read()
    except OSError:
        return {"killed": False}  # gone already
    if pid == os.getpid() or b"sandhub agent" not in command_line:
        return {"killed": False}  # not an agent (the pid was reused), or this one
    signal_quietly(pid, signal.SIGKILL)
    return {"killed": True}
