"""Terminals and shell sessions (part 6 of the agent): their holders started, attached to,
closed and listed.

Each terminal or shell session is held by a process of its own (holder.py, shellholder.py),
started here detached (a session of its own, no pipe to the agent, oom_score_adj as every
child), so it outlives this agent: any agent of the sandbox, in any platform process, reaches
it by its id through its unix socket DIR/ID.sock. DIR is private to the sandbox user (0700,
checked: a directory, not a link, the agent's own uid), outside the workspace. Ids are
[a-z0-9-], so no id names a path.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import stat
import subprocess
import sys
import time
from typing import Any

from .constants import (
    CH_PORT_OPEN,
    ERR_EXISTS,
    ERR_INTERNAL,
    ERR_INVALID,
    ERR_PERMISSION,
    ERR_TERMINAL_GONE,
    MARKER_ENV,
)
from .ports import PortPump
from .wire import Reaper, Refusal, Request, refusal

TERMINAL_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,47}$")
HOLDER_START_LIMIT = 10.0  # seconds for a new holder to listen
HOLDER_ANSWER = 5.0  # seconds a holder has to answer an info or a close
MAX_SOCKET_PATH = 107
# The holder's command line (named on its first line, as `ps` shows it): it reads its source
# and its configuration (length-prefixed) from stdin, so neither sits in its argv.
HOLDER_BOOT = (
    "# sandhub terminal holder: its source comes on stdin\n"
    "import json, os\n"
    "def r(n):\n"
    " b = b''\n"
    " while len(b) < n:\n"
    "  c = os.read(0, n - len(b))\n"
    "  if not c: raise SystemExit(3)\n"
    "  b += c\n"
    " return b\n"
    "s = r(int.from_bytes(r(4), 'big'))\n"
    "c = json.loads(r(int.from_bytes(r(4), 'big')).decode())\n"
    "g = {'__name__': '__sandhub_holder__'}\n"
    "exec(compile(s, 'sandhub-holder', 'exec'), g)\n"
    "g['main'](c)\n"
)


def terminal_id(args: dict[str, Any]) -> str:
    value = args.get("id")
    if not isinstance(value, str) or not TERMINAL_ID.match(value):
        raise Refusal(ERR_INVALID, f"a terminal id is 1-48 of a-z, 0-9 and -, not {value!r}")
    return value


def private_dir(args: dict[str, Any], create: bool) -> str | None:
    """The holders' directory: made 0700 if missing (create), else None when missing;
    refused unless it is a directory of the agent's own uid (never through a link)."""
    path = args.get("dir")
    if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
        raise Refusal(ERR_INVALID, f"the terminals' directory must be absolute, not {path!r}")
    path = path.rstrip("/")
    try:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, 0o700)
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise refusal(exc, f"cannot make {path}") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise Refusal(ERR_PERMISSION, f"{path} is not a directory of the sandbox user's own")
    if info.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def socket_path(directory: str, tid: str) -> str:
    path = f"{directory}/{tid}.sock"
    if len(path.encode()) > MAX_SOCKET_PATH:
        raise Refusal(ERR_INVALID, f"{path} is too long for a unix socket")
    return path


def connect(path: str, timeout: float = HOLDER_ANSWER) -> socket.socket:
    """A connection to a holder; Refusal ERR_TERMINAL_GONE if none listens there (a stale
    socket, whose holder died, is removed)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        sock.close()
        if isinstance(exc, ConnectionRefusedError):
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise Refusal(ERR_TERMINAL_GONE, "no such terminal runs in the sandbox") from None
    except OSError as exc:
        sock.close()
        raise refusal(exc, "cannot reach the terminal") from None
    return sock


def holder_info(path: str) -> dict[str, Any] | None:
    """What the holder says of itself; None if it is gone or does not answer."""
    try:
        sock = connect(path)
    except Refusal:
        return None
    try:
        sock.sendall(b"I")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(4096)
            if not chunk or len(data) > 65536:
                return None
            data += chunk
        info = json.loads(data.decode())
        return info if isinstance(info, dict) else None
    except (OSError, ValueError):
        return None
    finally:
        sock.close()


def op_terminal_open(request: Request, reaper: Reaper, base_env: dict[str, str]) -> dict[str, Any]:
    args = request.args
    tid, mode = terminal_id(args), str(args.get("mode") or "terminal")
    if mode not in ("terminal", "shell"):
        raise Refusal(ERR_INVALID, f"mode is terminal or shell, not {mode!r}")
    directory = private_dir(args, create=True)
    assert directory is not None
    path = socket_path(directory, tid)
    running = holder_info(path)
    if running is not None:
        if args.get("exist_ok"):
            return {"pid": running.get("pid"), "existed": True, "kind": running.get("kind")}
        raise Refusal(ERR_EXISTS, f"a terminal {tid} runs already")
    env = dict(base_env)
    env.update({str(k): str(v) for k, v in (args.get("env") or {}).items()})
    env.pop(MARKER_ENV, None)  # a command's sweep must never take it
    config: dict[str, Any] = {
        "id": tid,
        "path": path,
        "mode": mode,
        "env": env,
        "cwd": str(args.get("cwd") or "/"),
    }
    config.update(cols=int(args.get("cols") or 80), rows=int(args.get("rows") or 24))
    config["idle"] = float(args.get("idle") or 0)
    return start_holder(reaper, config, directory, args.get("exist_ok"))


def start_holder(
    reaper: Reaper, config: dict[str, Any], directory: str, exist_ok: Any
) -> dict[str, Any]:
    source = globals().get("HOLDER_PROGRAM", "").encode()
    if not source:
        raise Refusal(ERR_INTERNAL, "the agent carries no holder program")
    blob = json.dumps(config).encode()
    log_path = f"{directory}/{config['id']}.log"
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        child = reaper.spawn(
            None,
            [sys.executable, "-I", "-S", "-c", HOLDER_BOOT],
            cwd=directory,
            env=config["env"],
            start_new_session=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    except OSError as exc:
        raise refusal(exc, "cannot start the terminal") from None
    finally:
        os.close(log)
    assert child.stdin is not None
    with contextlib.suppress(OSError), child.stdin:
        child.stdin.write(len(source).to_bytes(4, "big") + source)
        child.stdin.write(len(blob).to_bytes(4, "big") + blob)
    give_up = time.monotonic() + HOLDER_START_LIMIT
    while time.monotonic() < give_up:
        info = holder_info(config["path"])
        if info is not None and (info.get("pid") == child.pid or exist_ok):
            return {"pid": info.get("pid"), "existed": info.get("pid") != child.pid}
        if info is not None:  # another agent started one of that id at the same moment
            raise Refusal(ERR_EXISTS, f"a terminal {config['id']} runs already")
        if child.returncode is not None:
            break
        time.sleep(0.005)
    with contextlib.suppress(OSError), open(log_path, "rb") as handle:
        said = handle.read()[-600:].decode("utf-8", "replace").strip()
        raise Refusal(ERR_INTERNAL, f"the terminal did not start: {said or 'no word why'}")
    raise Refusal(ERR_INTERNAL, "the terminal did not start")


def op_terminal_attach(request: Request) -> dict[str, Any]:
    """Connect to the holder and carry its bytes both ways (ports.PortPump: the same windows
    as a port stream). The client's bytes are the holder's input frames."""
    directory = private_dir(request.args, create=False)
    tid = terminal_id(request.args)
    if directory is None:
        raise Refusal(ERR_TERMINAL_GONE, "no such terminal runs in the sandbox")
    sock = connect(socket_path(directory, tid))
    try:
        sock.sendall(b"A")
        opened = json.dumps({"address": tid}).encode()
        request.wire.send(request.wire.data(request.rid, CH_PORT_OPEN, opened))
        return PortPump(request, sock).run()
    finally:
        sock.close()


def op_terminal_close(request: Request) -> dict[str, Any]:
    """End a holder (it kills everything below it first); whether one ran."""
    directory = private_dir(request.args, create=False)
    tid = terminal_id(request.args)
    if directory is None:
        return {"closed": False}
    try:
        sock = connect(socket_path(directory, tid))
    except Refusal:
        return {"closed": False}
    try:
        sock.sendall(b"C")
        sock.settimeout(HOLDER_ANSWER * 2)
        while sock.recv(4096):  # the holder closes the connection last of all
            pass
    except OSError:
        pass
    finally:
        sock.close()
    return {"closed": True}


def op_terminal_list(request: Request) -> dict[str, Any]:
    directory = private_dir(request.args, create=False)
    found = []
    for name in sorted(os.listdir(directory)) if directory else []:
        if name.endswith(".sock") and TERMINAL_ID.match(name[:-5]):
            info = holder_info(f"{directory}/{name}")
            if info is not None:
                found.append(info)
    return {"terminals": found}
