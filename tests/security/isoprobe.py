"""What the SSH isolation tests run inside a sandbox (`python3 isoprobe.py <what> ...`, put
there by ssh_tenants.IsolationHost.create): connections, what the sandbox sees of other
processes, memory and CPU hogs, the destroy race's exchange loop; each prints one JSON
document. Stdlib only, for the host's python3. Not a test module."""
# ruff: noqa: B905  (zip's strict= is python 3.10's; a host's python3 may be older)

import concurrent.futures
import ctypes
import errno
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import urllib.request


def tcp(timeout, *targets):
    """Each host:port: "connected", or how the connection failed."""

    def one(target):
        host, port = target.rsplit(":", 1)
        started = time.monotonic()
        try:
            socket.create_connection((host, int(port)), timeout=float(timeout)).close()
            return "connected"
        except OSError as exc:
            took = time.monotonic() - started
            return f"failed {type(exc).__name__} errno={exc.errno} after {took:.2f}s"

    with concurrent.futures.ThreadPoolExecutor(max(1, len(targets))) as pool:
        return dict(zip(targets, pool.map(one, targets)))


def http(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return {"ok": True, "body": answer.read(4096).decode("utf-8", "replace")}
    except OSError as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def unix(name):
    """Connect to the abstract Unix socket @name and read what it says."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    try:
        sock.connect("\0" + name)
        return {"ok": True, "said": sock.recv(4096).decode("utf-8", "replace")}
    except OSError as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        sock.close()


def serve_abstract(name, text):
    """Listen on the abstract Unix socket @name; tell each caller `text`. Runs until killed."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind("\0" + name)
    sock.listen(16)
    print("listening", flush=True)
    while True:
        conn, _ = sock.accept()
        with conn:
            conn.sendall(text.encode())


def view(needles_file):
    """What this sandbox sees of the host's processes: the needles (one per line of the file)
    wherever `ps -eo pid,user,args` or /proc/*/cmdline or /proc/*/environ shows them, and
    every process whose owner is not this sandbox's user."""
    with open(needles_file) as handle:
        needles = [line.strip() for line in handle if line.strip()]
    hits = {str(i): [] for i in range(len(needles))}
    try:
        listing = subprocess.run(
            ["ps", "-eo", "pid=,user=,args="], capture_output=True, text=True
        ).stdout
    except FileNotFoundError:  # no ps in the sandbox: it shows nothing
        listing = ""
    for i, needle in enumerate(needles):
        if needle in listing:
            hits[str(i)].append("ps -eo pid,user,args")
    me, others, seen = os.getuid(), [], 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as handle:
                status = dict(line.split(":", 1) for line in handle if ":" in line)
        except OSError:
            continue
        seen += 1
        uid = int(status["Uid"].split()[0])
        if uid != me:
            others.append([int(entry), uid, status["Name"].strip()])
        for part in ("cmdline", "environ"):
            try:
                with open(f"/proc/{entry}/{part}", "rb") as handle:
                    data = handle.read()
            except OSError:
                continue
            for i, needle in enumerate(needles):
                if needle.encode() in data:
                    hits[str(i)].append(f"/proc/{entry}/{part}")
    users = sorted({line.split()[1] for line in listing.splitlines() if len(line.split()) > 1})
    others.sort()
    return {
        "uid": me,
        "processes": seen,
        "others": others[:40],
        "others_count": len(others),
        "ps_users": users[:40],
        "hits": hits,
    }


def kill(pid):
    """kill(pid, 0) and kill(pid, SIGKILL): what each said."""
    said = {}
    for name, signum in (("probe", 0), ("kill", signal.SIGKILL)):
        try:
            os.kill(int(pid), signum)
            said[name] = "delivered"
        except OSError as exc:
            said[name] = errno.errorcode.get(exc.errno, str(exc.errno))
    return said


def hog(count, megabytes, hold_seconds):
    """`count` processes each allocating and touching `megabytes` MiB, then holding it until
    a common moment `hold_seconds` after the start: the exit status of each (0: it held its
    memory at that moment; negative: killed by that signal; 3: done allocating too late)."""
    count, size = int(count), int(megabytes) * 2**20
    until = time.monotonic() + float(hold_seconds)
    children = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                block = bytearray(size)
                for at in range(0, size, 4096):
                    block[at] = 1
                code = 3 if time.monotonic() > until else 0
                time.sleep(max(0.0, until - time.monotonic()))
            finally:
                os._exit(code)
        children.append(pid)
    statuses = []
    for pid in children:
        _, status = os.waitpid(pid, 0)
        statuses.append(os.waitstatus_to_exitcode(status))
    return {"statuses": statuses}


def burn(count, seconds):
    """`count` busy loops for `seconds` of wall time: the CPU seconds they got, and the wall."""
    count, seconds = int(count), float(seconds)
    started = time.monotonic()
    for _ in range(count):
        if os.fork() == 0:
            while time.monotonic() - started < seconds:
                pass
            os._exit(0)
    for _ in range(count):
        os.wait()
    wall = time.monotonic() - started
    times = os.times()
    return {"cpu": times.children_user + times.children_system, "wall": wall}


def _renameat2():
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        call = libc.renameat2

        def exchange(a, b):
            return call(-100, a, -100, b, 2)  # AT_FDCWD, RENAME_EXCHANGE
    except AttributeError:  # a libc without the wrapper: the system call itself
        number = {"x86_64": 316, "aarch64": 276}[platform.machine()]

        def exchange(a, b):
            return libc.syscall(number, -100, a, -100, b, 2)

    return exchange


def race(seconds, target, tag, *roots):
    """The attacker's side of the destroy race: in each root, a directory of its own
    (ROOT/race-TAG, open to everyone) and a symlink beside it (ROOT/race-TAG.link -> target),
    swapped with renameat2(RENAME_EXCHANGE) over and over for `seconds`."""
    exchange, pairs = _renameat2(), []
    for root in roots:
        here, link = f"{root}/race-{tag}", f"{root}/race-{tag}.link"
        try:
            os.mkdir(here)
            os.chmod(here, 0o777)
            os.symlink(target, link)
        except OSError as exc:
            print(f"{root}: {exc}", file=sys.stderr, flush=True)
            continue
        pairs.append((here.encode(), link.encode()))
    print("racing", len(pairs), flush=True)
    swaps, failures, until = 0, 0, time.monotonic() + float(seconds)
    while pairs and time.monotonic() < until:
        for _ in range(1000):
            for here, link in pairs:
                if exchange(here, link) == 0:
                    swaps += 1
                else:
                    failures += 1
    return {"pairs": len(pairs), "swaps": swaps, "failures": failures}


def plant(tag, name, *roots):
    """The destroyed sandbox's side: its own file NAME inside the attacker's directory
    ROOT/race-TAG (created only while that name is the directory, never through the link)."""
    planted = {}
    for root in roots:
        here = f"{root}/race-{tag}"
        if not os.path.lexists(here):
            planted[root] = "absent"
            continue
        planted[root] = "not planted"
        until = time.monotonic() + 2
        while time.monotonic() < until:
            try:
                fd = os.open(
                    f"{here}/{name}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644
                )
            except OSError:
                continue
            os.close(fd)
            planted[root] = "planted"
            break
    return planted


if __name__ == "__main__":
    what, args = sys.argv[1], sys.argv[2:]
    print(json.dumps(globals()[what](*args)), flush=True)
