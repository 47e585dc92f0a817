"""What install_packages says when pip cannot reach a package index.

A sandbox made without network cannot reach any index: install_packages refuses at once with
what to do instead, rather than letting pip retry five times and end on "No matching
distribution found" (which reads as a wrong package name). An index on the sandbox's own
loopback (a server of its own serving wheels) is the exception. When pip fails on a network
error anyway (an allow-list, a firewall, a proxy), a plain hint follows its output.
"""

from __future__ import annotations

import dataclasses
import re
from urllib.parse import urlsplit

from hosts.backends.base import ExecResult
from sandboxes.contract.errors import Conflict
from sandboxes.models import Sandbox, SandboxStatus

WHEELS = (
    "upload the wheels (e.g. to /workspace/wheels) and install them with run_command: "
    "`pip install --user --no-index --find-links /workspace/wheels <package>`"
)
_LOOPBACK = {"localhost", "127.0.0.1", "::1"}
_GONE = {SandboxStatus.STOPPING, SandboxStatus.DELETED, SandboxStatus.ERROR, SandboxStatus.LOST}
# What pip (and urllib3 under it) prints when a connection fails, whichever way it does.
_NETWORK_ERROR = re.compile(
    rb"NewConnectionError|ConnectTimeoutError|ReadTimeoutError|ProxyError|"
    rb"Temporary failure in name resolution|Name or service not known|"
    rb"Network is unreachable|Connection refused|connection broken by|Max retries exceeded|"
    rb"No route to host"
)


def refuse_without_network(sandbox: Sandbox, index_url: str | None) -> None:
    """Conflict, saying what to do, when the sandbox cannot reach the index pip would use."""
    if sandbox.network or _on_loopback(index_url) or sandbox.status in _GONE:
        return  # a gone sandbox: the command's own refusal says so
    raise Conflict(
        f"sandbox {sandbox.public_id} has no network, so pip cannot reach a package index: "
        f"create a sandbox with network on (network=true, if your team allows it), or {WHEELS}"
    )


def _on_loopback(index_url: str | None) -> bool:
    if not index_url:
        return False
    try:
        host = urlsplit(index_url).hostname or ""
    except ValueError:
        return False
    return host in _LOOPBACK or host.startswith("127.")


def with_network_hint(sandbox: Sandbox, index_url: str | None, result: ExecResult) -> ExecResult:
    """pip's result, with a hint after its stderr when it failed on a network error."""
    if result.exit_code in (0, None) or not (
        _NETWORK_ERROR.search(result.stderr) or _NETWORK_ERROR.search(result.stdout)
    ):
        return result
    if _on_loopback(index_url):
        where = f"nothing in the sandbox answers at {index_url}"
    elif sandbox.egress_mode == "allowlist":
        allowed = ", ".join(sandbox.egress_allow) or "nothing"
        where = (
            f"the sandbox reaches only its allow-list ({allowed}); pip needs the index's host "
            "on it (PyPI: pypi.org and files.pythonhosted.org)"
        )
    elif sandbox.network:
        where = (
            "the sandbox's network is on, but the index is not reachable from it (the host's "
            "egress rules, a proxy or an allow-list may block it)"
        )
    else:
        where = "this sandbox has no network"
    hint = (
        f"\nsandhub: pip could not reach the package index: {where}. Point index_url at an "
        f"index the sandbox can reach, or {WHEELS}.\n"
    ).encode()
    return dataclasses.replace(
        result, stderr=result.stderr + hint, stderr_bytes=result.stderr_bytes + len(hint)
    )
