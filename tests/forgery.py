"""A process in a sandbox that attacks the sandbox agent's streams (issue 24): given the
agent's pid, it opens each of its /proc/PID/fd/N for writing and for reading, and writes a
forged command result into every pipe it could open for writing. The agent runs as the
sandbox user, like the attacker: unless the agent protects its streams, the platform reads
the forged result as the answer to a teammate's command in flight. Shared by the Docker
(tests/docker/test_agent_streams.py) and SSH (tests/ssh/test_agent_streams.py) tests. Not a
test module.

Use: write FORGER into the sandbox, start `forger_command(...)` detached (its own session,
output to a file), then run the victim command VICTIM: it lets the forger go and waits until
the forger is done, so the forged frames arrive while the victim's request is in flight.
The forger's report (JSON) says what it could open."""

from __future__ import annotations

import base64
import json
import shlex
from typing import Any

from hosts.backends.agent import protocol

FORGED_STDOUT = b"forged by another process\n"
# Request ids the forged result is written for: the client numbers its requests from 1, so
# the victim's is among them in any test (one whose id is not in flight is dropped).
FORGED_IDS = range(1, 1001)
# Paths in the sandbox's workspace (relative: the working directory of every command).
GO, DONE, REPORT = ".forge-go", ".forge-done", ".forge-report.json"
VICTIM = (
    f"touch {GO}; n=0; while [ ! -e {DONE} ] && [ $n -lt 3000 ]; do sleep 0.01; n=$((n+1)); "
    "done; echo real"
)

# Runs as the sandbox user with the sandbox's python3. Every frame pair for one request id
# goes out in one write (under PIPE_BUF: never interleaved with the agent's own writes).
FORGER = r"""
import base64, errno, json, os, struct, sys, time

template = base64.b64decode(sys.argv[1])
go, done, report_path = sys.argv[2], sys.argv[3], sys.argv[4]
first, last = int(sys.argv[5]), int(sys.argv[6])
agents = sys.argv[7:]  # only the sandbox's own: never another test's agent


def frames_for(rid):
    out, at = bytearray(), 0
    while at < len(template):
        length = struct.unpack_from("!I", template, at)[0]
        frame = bytearray(template[at : at + 9 + length])
        struct.pack_into("!I", frame, 4, rid)
        out += frame
        at += 9 + length
    return bytes(out)


give_up = time.monotonic() + 30
while not os.path.exists(go) and time.monotonic() < give_up:
    time.sleep(0.005)
report = {"agents": agents, "listed": {}, "opened": [], "refused": [], "forged_into": []}
for pid in agents:
    try:
        fds = sorted(os.listdir(f"/proc/{pid}/fd"), key=int)
        report["listed"][pid] = "ok"
    except OSError as exc:
        report["listed"][pid] = errno.errorcode.get(exc.errno, str(exc.errno))
        fds = [str(n) for n in range(16)]
    for fd in fds:
        path = f"/proc/{pid}/fd/{fd}"
        for how, flags in (("write", os.O_WRONLY), ("read", os.O_RDONLY)):
            try:
                handle = os.open(path, flags | os.O_NONBLOCK)
            except OSError as exc:
                report["refused"].append([pid, fd, how, errno.errorcode.get(exc.errno)])
                continue
            what = os.readlink(f"/proc/self/fd/{handle}")
            report["opened"].append([pid, fd, how, what])
            if how == "write" and what.startswith("pipe:"):
                os.set_blocking(handle, True)
                for rid in range(first, last + 1):
                    os.write(handle, frames_for(rid))
                report["forged_into"].append([pid, fd])
            os.close(handle)
with open(report_path, "w") as handle:
    json.dump(report, handle)
open(done, "w").close()
"""


def forged_template() -> bytes:
    """A command's result as the agent sends it (protocol.py's own encoder): its stdout's
    head, then RESULT; request id 0, which the forger replaces."""
    body = {
        "exit_code": 0,
        "timed_out": False,
        "cancelled": False,
        "swept": True,
        "stdout_bytes": len(FORGED_STDOUT),
        "stderr_bytes": 0,
        "duration": 0.01,
    }
    return protocol.data(0, protocol.CH_STDOUT_HEAD, FORGED_STDOUT) + protocol.control(
        0, protocol.RESULT, body
    )


def forger_command(script_path: str, agent_pid: int) -> str:
    """The shell command that starts the forger against the agent `agent_pid` detached (its
    own session, no terminal, its output in a file), so it outlives the command that started
    it."""
    args = [
        "python3",
        script_path,
        base64.b64encode(forged_template()).decode(),
        GO,
        DONE,
        REPORT,
        str(FORGED_IDS.start),
        str(FORGED_IDS.stop - 1),
        str(agent_pid),
    ]
    return f"setsid {shlex.join(args)} >.forge.log 2>&1 </dev/null &"


def refused_everything(report: dict[str, Any]) -> list[str]:
    """What the report shows the forger could do (nothing, when the agent is protected)."""
    problems = []
    for pid, listed in report["listed"].items():
        if listed != "EACCES":
            problems.append(f"listing /proc/{pid}/fd: {listed}")
    problems += [
        f"opened /proc/{p}/fd/{fd} for {how}: {what}" for p, fd, how, what in report["opened"]
    ]
    problems += [
        f"/proc/{p}/fd/{fd} for {how}: {err}"
        for p, fd, how, err in report["refused"]
        if err != "EACCES"
    ]
    return problems


def parse(text: str) -> dict[str, Any]:
    return json.loads(text)
