"""The platform's side of the agent's sync operations (protocol.py: manifest, remove).

Functions over an AgentClient rather than more methods on it: the client is the protocol's
machinery, these are two requests built on its calls.
"""

from __future__ import annotations

import json
import time

from hosts.backends.agent import protocol
from hosts.backends.agent.calls import Call, Collect
from hosts.backends.agent.client import CALL_TIMEOUT, AgentClient
from hosts.backends.base import ManifestEntry, ManifestPage


def manifest(
    client: AgentClient,
    root: str,
    *,
    top: str,
    after: str | None,
    limit: int,
    timeout: float = CALL_TIMEOUT,
) -> ManifestPage:
    """A page of the tree under root (base.SandboxBackend.manifest), reached from top (the
    workspace) without a link; NotADirectoryError."""
    body = {"op": "manifest", "root": root, "top": top, "after": after or "", "limit": limit}
    call = client._call(body, lambda rid: Collect(client, rid, protocol.CH_ENTRIES), timeout)
    assert isinstance(call, Collect)
    entries = [
        ManifestEntry(
            path=str(path),
            kind=str(kind),
            size=int(size),
            mtime=float(mtime),
            mode=int(mode),
            target=str(target),
        )
        for part in call.parts
        for path, kind, size, mtime, mode, target in json.loads(part)
    ]
    answer = call.body
    following = answer.get("next")
    return ManifestPage(
        exists=bool(answer.get("exists")),
        entries=entries,
        next=str(following) if following is not None else None,
    )


def remove(
    client: AgentClient, root: str, names: bytes, *, top: str, timeout: float = CALL_TIMEOUT
) -> int:
    """Remove the NUL-separated relative `names` under root, reached from top (the
    workspace) without a link; how many existed. NotADirectoryError for a link on the way."""
    deadline = time.monotonic() + timeout
    body = {"op": "remove", "root": root, "top": top}
    call = client._open(body, lambda rid: Call(client, rid))
    client._stream(call, names, deadline)
    return int(call.wait_body(deadline)["removed"])
