"""The protocol's constants, the one copy both ends use (part 0 of the agent).

The platform's side imports them through hosts/backends/agent/protocol.py, which documents
them; the agent gets them bundled as the first part of its program (source.py), so the two
ends cannot disagree.
"""

from __future__ import annotations

import struct

VERSION = 1
HEADER = struct.Struct("!IIB")
MAX_PAYLOAD = 1024 * 1024
CHUNK = 256 * 1024  # data frames are cut to this size
WINDOW = 1024 * 1024  # inbound bytes a client may send ahead of the agent's CREDIT

REQUEST = 1
DATA = 2
EOF = 3
CANCEL = 4
RESULT = 5
ERROR = 6
HELLO = 7
CREDIT = 8
ACK = 9

CH_STDIN = 0
CH_STDOUT = 1
CH_STDERR = 2
CH_STDOUT_HEAD = 3
CH_STDOUT_TAIL = 4
CH_STDERR_HEAD = 5
CH_STDERR_TAIL = 6
CH_FILE = 7
CH_ENTRIES = 8
CH_PORT = 9  # a port stream's bytes, both ways
CH_PORT_OPEN = 10  # A: the port's connection is made

ERR_INVALID = "invalid"  # a malformed request: a bug on the client's side
ERR_SPAWN = "spawn"  # no new process (or thread) could be made: pids or memory limit full
ERR_NOT_FOUND = "not_found"
ERR_PERMISSION = "permission"
ERR_NOT_A_DIRECTORY = "not_a_directory"
ERR_EXISTS = "exists"
ERR_NOT_A_FILE = "not_a_file"
ERR_TOO_LARGE = "too_large"
ERR_INTERNAL = "internal"
ERR_PORT_CLOSED = "port_closed"  # nothing (of the agent's uid) listens on the port
ERR_TERMINAL_GONE = "terminal_gone"  # no terminal or shell session of that id runs

MARKER_ENV = "SANDHUB_EXEC_ID"  # as the per-command exec path's wrapper sets it
JOB_ENV = "SANDHUB_JOB_ID"
