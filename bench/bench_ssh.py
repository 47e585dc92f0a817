"""The SSH connection layer against a real sshd on loopback (tests/ssh/sshd.py), in one run.

    .venv/bin/python bench/bench_ssh.py [--runs 200] [--nagle-runs 30] [--seconds 5]

Prints, from the same run: `run("echo hi")` on a pooled SshConnection; a bare paramiko exec
on the same TCP_NODELAY socket (what the wrapper adds); a bare paramiko exec on a socket of
paramiko's own making (Nagle on: what TCP_NODELAY saves); and commands per second from
10 threads sharing the one connection. Needs root (it starts sshd and a test user).
Figures on these machines vary between days: compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import paramiko
from _setup import ROOT, summary, thread_throughput, timings


def bare_exec(transport: paramiko.Transport, command: str) -> bytes:
    """One command the plainest paramiko way: open, exec, read to EOF, exit status, close."""
    channel = transport.open_session()
    try:
        channel.exec_command(command)
        output = b""
        while chunk := channel.recv(65536):
            output += chunk
        channel.recv_exit_status()
        return output
    finally:
        channel.close()


def nagle_transport(server, key: paramiko.PKey) -> paramiko.Transport:
    """A Transport on a socket paramiko opens itself: TCP_NODELAY off, as by default."""
    transport = paramiko.Transport((server.address, server.port))
    transport.start_client(timeout=10)
    transport.auth_publickey(server.username, key)
    return transport


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--nagle-runs", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
    from hosts.backends.ssh.keys import load_private_key
    from hosts.backends.ssh.pool import ConnectionPool
    from tests.ssh.sshd import Sshd

    server = Sshd().start()
    pool = ConnectionPool()
    try:
        target = server.target("ed25519")
        conn = pool.get(target)
        conn.run("true", timeout=10)  # warm up: first exec, shell caches

        def pooled() -> None:
            pool.get(target).run("echo hi", timeout=10)

        wrapped = timings(args.runs, pooled)
        bare = timings(args.runs, lambda: bare_exec(conn.transport, "echo hi"))
        nagle = nagle_transport(server, load_private_key(server.client_keys["ed25519"].text))
        try:
            bare_exec(nagle, "true")
            nagled = timings(args.nagle_runs, lambda: bare_exec(nagle, "echo hi"))
        finally:
            nagle.close()
        rate, errors = thread_throughput([pooled] * 10, args.seconds)
    finally:
        pool.close_all()
        server.close()

    print(summary("pooled SshConnection.run('echo hi')", wrapped))
    print(summary("bare paramiko exec, TCP_NODELAY socket", bare))
    print(summary("bare paramiko exec, paramiko's socket (Nagle)", nagled))
    print(f"10 threads on one connection: {rate:.0f} commands/s, {errors} errors")
    median = statistics.median
    print(
        f"ratios: run / bare {median(wrapped) / median(bare):.2f}; "
        f"Nagle / TCP_NODELAY {median(nagled) / median(bare):.1f}x"
    )


if __name__ == "__main__":
    main()
