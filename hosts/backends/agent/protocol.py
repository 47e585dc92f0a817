"""The wire protocol between the platform (client.py) and the sandbox agent (inside/).

The agent is sent into the sandbox as one self-contained program (source.py bundles it), so
it cannot import this module; the constants named below live in inside/constants.py, the
first part of that program, and this module takes them from there: one copy for both ends.

Start. The backend runs `python3 -I -u -c BOOTSTRAP` as the sandbox user with stdin and stdout
attached (Docker: one exec). The bootstrap reads a 4-byte big-endian length and that many
bytes of agent source from stdin, and runs it. The agent answers with a HELLO frame; from
then on both directions carry frames only. stderr is for diagnostics (a traceback if the
agent dies), never frames.

Frame: a 9-byte header `!IIB` (payload length, request id, type) and the payload. A payload
is at most MAX_PAYLOAD bytes; a longer length is a broken stream. Request ids are chosen by
the client, unique among its requests in flight, never 0 (id 0 is the agent itself).

Types (C: client to agent, A: agent to client):
- REQUEST  C  JSON {"op": ..., ...}: opens request `id`.
- DATA     C/A  one channel byte + raw bytes (binary-safe).
- EOF      C  one channel byte: no more DATA on that channel (stdin, file content).
- CANCEL   C  empty: stop the request (a command is killed, then swept).
- RESULT   A  JSON: the answer; ends the request.
- ERROR    A  JSON {"kind": ERR_*, "message": ...}: the request failed; ends it. With id 0:
              the agent could not go on (a malformed frame) and exits.
- HELLO    A  id 0, JSON {"version", "pid", "python", "subreaper", "private"}: the agent is
              ready ("private": it is not dumpable, so no process of the sandbox can open
              its streams; inside/guard.py).
- CREDIT   A  4-byte count: the agent consumed that many inbound bytes of the request, so the
              client may send that many more (at most WINDOW unacknowledged per request).
- ACK      C  4-byte count: the client's reader took that many bytes of a port stream, so the
              agent may send that many more (at most WINDOW unacknowledged per port request):
              the other direction's window, so a slow reader never piles data up in the
              platform's memory.

Operations (REQUEST payloads) and their answers:
- ping {} -> RESULT {"pid", "inflight"}: answered by the agent's main thread.
- exec {"argv", "cwd", "env", "timeout", "kill_after", "cap", "live", "marker", "stdin": bool}
      stdin true: DATA/EOF on CH_STDIN follow (else the command's stdin is /dev/null).
      -> DATA CH_STDOUT/CH_STDERR while it runs (live output: `live` bytes a stream as they
         come, then every 0.25 s the latest 4 KiB after a note of what was not shown; none
         if `live` is 0), then the kept output: CH_*_HEAD (the first cap - cap//2 bytes)
         and CH_*_TAIL (the last cap//2 bytes, if more came than fits the head), split as
         base.HeadTailBuffer splits it,
         -> RESULT {"exit_code", "timed_out", "cancelled", "stdout_bytes", "stderr_bytes",
                    "duration", "swept"}.
      A command that cannot start (no such program, bad cwd) is a RESULT with exit code 127
      or 126 and the reason on stderr, as a shell would say; no process at all (pids or
      memory limit full) is ERROR ERR_SPAWN.
- kill_marked {"marker"} -> RESULT {"swept"}: every process carrying the marker is killed.
- kill_agent {"pid"} -> RESULT {"killed"}: SIGKILL to another agent of the sandbox (one its
      platform gave up on), if that pid is an agent.
- read {"path", "offset", "length"} -> DATA CH_FILE chunks, RESULT {"size", "length"}
- write {"path", "mode", "root"} + DATA/EOF on CH_STDIN -> RESULT {"size"}: atomic (temp
      file and rename) under `root`, creating missing directories; never through a link.
- list {"path"} -> DATA CH_ENTRIES (JSON lists of [name, path, kind, size, mtime, mode]),
      RESULT {"count"}. Names that are not UTF-8 travel as surrogate escapes.
- manifest {"root", "after", "limit"} -> DATA CH_ENTRIES (JSON lists of [path, kind, size,
      mtime, mode, target], path relative to root, kind file|dir|link, mode an int of the
      0o7777 bits, target for links), RESULT {"exists", "next", "count"}: at most `limit`
      (1..5000) entries with a path > `after`, sorted bytewise; next is the last path when
      more follow, else null. A missing root: exists false; a file or link: ERROR
      ERR_NOT_A_DIRECTORY. Names that are not UTF-8 are left out.
- remove {"root"} + DATA/EOF on CH_STDIN (relative names, NUL-separated) -> RESULT
      {"removed"}: each entry unlinked (a directory with its content, links never
      followed); names with "", ".", ".." parts and those whose parent resolves outside
      the root are skipped.
- job_start {"job_id", "dir", "argv", "env"} -> RESULT {"pid"}: argv (the job runner) starts
      detached in a session of its own, stdin /dev/null, stdout and stderr to DIR/log.
- port {"port", "timeout"}: a TCP connection to 127.0.0.1:PORT (else [::1]:PORT) in the
      sandbox (previews). Only to a listener of the agent's own uid (the kernel's socket table
      is read before connecting, and the accepted socket's owner after), since on an SSH
      host sandboxes of several users share the host's loopback. Refused, or another
      uid's: ERROR ERR_PORT_CLOSED with the reason.
      -> DATA CH_PORT_OPEN {"address"} once connected; then DATA CH_PORT both ways: client to
         app within the CREDIT window, app to client within the ACK window. EOF CH_PORT from
         the client half-closes the connection (the app reads its end). When the app closes
         its side, what it sent is delivered, then RESULT {"sent", "received", "reset"}
         (reset: the app reset the connection, so its data may be cut short). CANCEL closes
         the connection: RESULT {"cancelled": true, ...}.
- terminal_open {"dir", "id", "mode", "cwd", "env", "cols", "rows", "idle", "exist_ok"}
      -> RESULT {"pid", "existed"}: starts the holder of a terminal (mode "terminal": a PTY
      running the user's login shell, TERM=xterm-256color, cols x rows) or of a shell session
      (mode "shell": bash on pipes), detached (inside/terminals.py, holder.py), listening on
      DIR/ID.sock; answers once it accepts. DIR (absolute, outside the workspace) is made
      0700 and must be the agent's uid's own directory; ID is [a-z0-9][a-z0-9-]{0,47}.
      `idle` seconds with no client attached and no input end it (0: never). One of that id
      running already: ERROR ERR_EXISTS, or (exist_ok) its RESULT with "existed" true
      and its "kind".
- terminal_attach {"dir", "id"}: a connection to the holder, carried as a port stream is:
      DATA CH_PORT_OPEN {"address": id} once connected, then DATA CH_PORT both ways within
      the CREDIT and ACK windows. From the holder: the scrollback, then the terminal's output,
      raw. To it: the holder's input frames (holder.py: `!BI` kind, length; kind 0 input,
      kind 1 a resize `!HH` cols, rows). The terminal ending ends the request (RESULT, as a
      port stream's); CANCEL detaches. None of that id: ERROR ERR_TERMINAL_GONE.
- terminal_close {"dir", "id"} -> RESULT {"closed"}: the holder kills its shell and all it
      started, then exits; closed false if none of that id ran.
- terminal_list {"dir"} -> RESULT {"terminals": [{"id", "kind" (terminal|shell), "pid",
      "started_at", "last_activity", "attached"}]}: what each running holder says.
A shell session's command is no operation of its own: an `exec` of inside/shellclient.py,
which hands it to the session's holder (agentinteractive.py).
"""

from __future__ import annotations

import json
from typing import Any

# The one copy of the constants, shared with the agent: re-exported here for the platform's side.
from hosts.backends.agent.inside.constants import *  # noqa: F403
from hosts.backends.agent.inside.constants import DATA, HEADER, MAX_PAYLOAD

# python3 -c BOOTSTRAP: first makes the process non-dumpable (inside/guard.py: from then on
# no process of the sandbox may open its /proc/PID/fd, and so its stdin and stdout), then
# reads the agent's source (length-prefixed) from fd 0 with os.read, so no buffered reader
# takes frames that follow, and runs it as __sandhub_agent__. Short, and named on its first
# line: `ps` in the sandbox shows it as the agent's command line.
BOOTSTRAP = (
    "# sandhub agent: its source comes on stdin\n"
    "import os\n"
    "try:\n"
    " import ctypes; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n"
    "except Exception: pass\n"
    "def r(n):\n"
    " b = b''\n"
    " while len(b) < n:\n"
    "  c = os.read(0, n - len(b))\n"
    "  if not c: raise SystemExit(3)\n"
    "  b += c\n"
    " return b\n"
    "exec(compile(r(int.from_bytes(r(4), 'big')), 'sandhub-agent', 'exec'), "
    "{'__name__': '__sandhub_agent__'})\n"
)


def frame(request_id: int, kind: int, payload: bytes = b"") -> bytes:
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"frame payload of {len(payload)} bytes is over {MAX_PAYLOAD}")
    return HEADER.pack(len(payload), request_id, kind) + payload


def control(request_id: int, kind: int, body: dict[str, Any]) -> bytes:
    return frame(request_id, kind, json.dumps(body, separators=(",", ":")).encode())


def data(request_id: int, channel: int, chunk: bytes) -> bytes:
    return frame(request_id, DATA, bytes((channel,)) + chunk)


class FrameReader:
    """Cuts a byte stream into (request id, type, payload) frames, however it was split."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[tuple[int, int, bytes]]:
        self._buffer += chunk
        frames = []
        size = HEADER.size
        while len(self._buffer) >= size:
            length, request_id, kind = HEADER.unpack_from(self._buffer)
            if length > MAX_PAYLOAD:
                raise ValueError(f"frame of {length} bytes announced: the stream is corrupt")
            if len(self._buffer) < size + length:
                break
            frames.append((request_id, kind, bytes(self._buffer[size : size + length])))
            # Deleting from the front of a bytearray is amortized O(1) in CPython.
            del self._buffer[: size + length]
        return frames

    @property
    def pending(self) -> int:
        return len(self._buffer)


# An execute-only copy of python3 that the sandbox image carries (images/sandbox/Dockerfile).
# A process whose program its user may not read is non-dumpable from its first instruction
# (the kernel's would_dump at exec): BOOTSTRAP's prctl comes only after the interpreter has
# started (~15 ms), and in between a process of the sandbox could open the agent's
# /proc/PID/fd and keep its pipes. Images without it start the given python3.
PRIVATE_PYTHON = "/usr/libexec/sandhub/python3"
_START = f'p={PRIVATE_PYTHON}; [ -x "$p" ] || p="$1"; exec "$p" -I -u -c "$2"'


def start_argv(python: str, program: str = BOOTSTRAP) -> list[str]:
    """The agent's command line: the private interpreter where the image has it, else
    `python`, running `program` (BOOTSTRAP; a test's probe)."""
    return ["/bin/sh", "-c", _START, "sandhub-agent", python, program]
