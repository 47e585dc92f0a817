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

from hosts.backends.agent.inside import HOLDER_PARTS, PARTS

_HERE = Path(__file__).resolve().parent / "inside"


@functools.cache
def agent_source() -> bytes:
    # The holder's program first, as a constant (inside/terminals.py starts it from there).
    holder = f"HOLDER_PROGRAM = {bundle(HOLDER_PARTS)!r}\n"
    return bundle(PARTS, holder).encode()


@functools.cache
def holder_source() -> str:
    """The terminal holder's program (inside/holder.py, shellholder.py), as the agent has it."""
    return bundle(HOLDER_PARTS)


def bundle(parts: tuple[str, ...], head: str = "") -> str:
    pieces = ["from __future__ import annotations\n", head]
    for name in parts:
        text = (_HERE / f"{name}.py").read_text()
        dropped: set[int] = set()
        for node in ast.parse(text).body:
            if isinstance(node, ast.ImportFrom) and (node.level or node.module == "__future__"):
                dropped.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        lines = text.splitlines(keepends=True)
        kept = [line for number, line in enumerate(lines, 1) if number not in dropped]
        pieces.append(f"# ---- inside/{name}.py\n" + "".join(kept))
    return "".join(pieces)


def agent_digest() -> str:
    """A short fingerprint of the agent's source (logs, HELLO checks)."""
    return hashlib.sha256(agent_source()).hexdigest()[:12]
