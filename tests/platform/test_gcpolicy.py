"""The web process's collector settings (platform_site/gcpolicy.py), checked in a fresh
interpreter that imports the ASGI application as a uvicorn worker does, so this test
process's own collector is left as it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from platform_site.gcpolicy import YOUNG_THRESHOLD

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import gc, json, weakref
import platform_site.asgi

class Node:
    pass

# A reference cycle made after start-up is still garbage the collector finds.
a, b = Node(), Node()
a.other, b.other = b, a
gone = weakref.ref(a)
del a, b
# Net new containers (kept: one freed at once does not count) start a young collection.
kept = [[None] for _ in range(3 * %(threshold)d)]
print(json.dumps({
    "threshold": gc.get_threshold(),
    "frozen": gc.get_freeze_count(),
    "cycle_collected": gone() is None,
}))
"""


def test_the_web_application_freezes_its_imports_and_collects_young_objects_less_often(
    tmp_path,
):
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'probe.sqlite3'}"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE % {"threshold": YOUNG_THRESHOLD}],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["threshold"][0] == YOUNG_THRESHOLD
    assert seen["frozen"] > 50_000  # Django and the MCP stack: far more than a bare interpreter
    assert seen["cycle_collected"]
