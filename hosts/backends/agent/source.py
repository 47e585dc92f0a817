"""The agent's source as sent into a sandbox: the modules of `inside/` as ONE program.

The parts are joined in the order of inside.PARTS, each without its relative imports of the
parts before it (and without its own `from __future__` line: the bundle starts with one), so
the result needs nothing but the standard library. Built once per process.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

from hosts.backends.agent.inside import PARTS

_HERE = Path(__file__).resolve().parent / "inside"


@functools.cache
def agent_source() -> bytes:
    pieces = ["from __future__ import annotations\n"]
    for name in PARTS:
        text = (_HERE / f"{name}.py").read_text()
        dropped: set[int] = set()
        for node in ast.parse(text).body:
            if isinstance(node, ast.ImportFrom) and (node.level or node.module == "__future__"):
                dropped.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        lines = text.splitlines(keepends=True)
        kept = [line for number, line in enumerate(lines, 1) if number not in dropped]
        pieces.append(f"# ---- inside/{name}.py\n" + "".join(kept))
    return "".join(pieces).encode()


def agent_digest() -> str:
    """A short fingerprint of the agent's source (logs, HELLO checks)."""
    return hashlib.sha256(agent_source()).hexdigest()[:12]
