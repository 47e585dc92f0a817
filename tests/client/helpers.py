"""Helpers of the client's tests: local trees with exact modes and nanosecond mtimes, what a
round trip must keep of them, the `sandhub` command run as a subprocess (the `cli_env`
fixture: tests/client/conftest.py), and `sandhub mcp` in a subprocess driven by a client.
Not a test module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from sandhub.tree import FILE, Rules, walk_local

from tests.live import ROOT

T0 = 1_700_000_000_123_456_789  # an mtime with every nanosecond set
CLIENT_DIR = ROOT / "client"  # on the subprocess's PYTHONPATH, installed or not


def write(root: Path, path: str, content: str | bytes = "x", mode: int = 0o644) -> Path:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content.encode() if isinstance(content, str) else content)
    target.chmod(mode)
    return target


def snapshot(root: Path, rules: Rules | None = None) -> dict[str, tuple]:
    """Everything a round trip must keep: kind, content, permission bits, mtime (ns)."""
    result = {}
    for path, entry in walk_local(root, rules or Rules(gitignore=False)).items():
        full = root / path
        content = full.read_bytes() if entry.kind == FILE else entry.target
        mtime = entry.mtime_ns if entry.kind == FILE else None  # dirs change as they fill
        result[path] = (entry.kind, content, entry.mode, mtime)
    return result


def make_tree(root: Path, files: int) -> None:
    for index in range(files):
        mode = 0o755 if index % 50 == 0 else 0o644
        target = write(root, f"pkg{index % 40}/mod{index}.py", f"value = {index}\n" * 3, mode)
        os.utime(target, ns=(T0 + index, T0 + index))
    (root / "pkg0/link").symlink_to("mod0.py")


def sandhub(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sandhub.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# `sandhub mcp` as the console script runs it, and the server's own main, which the CLI's
# mcp subcommand hands its arguments to.
CLI = ["-c", "import sys; from sandhub.cli import main; sys.exit(main())", "mcp"]
SERVER = ["-m", "sandhub.mcp_local"]


def local_server(server: str, key: str, roots: list[Path] | None, cwd: Path, **handlers) -> Client:
    """The local server in a subprocess; roots=None: `sandhub mcp` with its default root, the
    directory it runs in (what `claude mcp add sandhub -- sandhub mcp` gives)."""
    if roots is None:
        launch = CLI
    else:
        launch = [*SERVER, *(arg for root in roots for arg in ("--root", str(root)))]
    transport = StdioTransport(
        command=sys.executable,
        args=launch,
        env=server_env(server, key, cwd),
        cwd=str(cwd),
        keep_alive=False,
    )
    return Client(transport, timeout=120, **handlers)


def server_env(server: str, key: str, cwd: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDHUB_")}
    return env | {
        "SANDHUB_URL": server,
        "SANDHUB_API_KEY": key,
        "PYTHONPATH": os.pathsep.join([str(CLIENT_DIR), env.get("PYTHONPATH", "")]),
        # No stored login may leak in from the machine running the tests.
        "XDG_CONFIG_HOME": str(cwd / ".no-config"),
    }
