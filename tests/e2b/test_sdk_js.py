"""E2B's JavaScript SDK (the `e2b` package from the npm registry, unchanged, installed from
tests/e2b/js/package-lock.json by `make install`) against the live server: create,
commands.run with onStdout, a background command and its wait, files write/read/list, a
list by metadata, killing a command and the sandbox (tests/e2b/js/flow.mjs)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

HERE = Path(__file__).resolve().parent / "js"
NODE_MINIMUM = (20, 18)  # the SDK's engines: >=20.18.1


def node_version() -> tuple[int, int] | None:
    node = shutil.which("node")
    if node is None:
        return None
    text = subprocess.run([node, "--version"], capture_output=True, text=True).stdout
    major, minor, *_ = (int(part) for part in text.strip().lstrip("v").split("."))
    return major, minor


def test_the_usual_flow_through_e2b_js_sdk(e2b_env: dict[str, str]) -> None:
    version = node_version()
    if version is None or version < NODE_MINIMUM:
        pytest.skip(f"E2B's JS SDK needs Node.js 20.18 or newer; this machine has {version}")
    assert (HERE / "node_modules" / "e2b").is_dir(), "run `make install` (npm ci in tests/e2b/js)"
    done = subprocess.run(
        ["node", "flow.mjs"],
        cwd=HERE,
        env={**os.environ, **e2b_env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "JS SDK flow ok" in done.stdout, done.stdout + done.stderr
