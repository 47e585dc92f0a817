"""A sandbox's own envd host name (49983-<sandbox id>.<preview domain>, as E2B's SDKs address
a sandbox when no E2B_SANDBOX_URL is set) reaches envd for that sandbox only; any other port
on the domain stays a preview, and without a preview domain nothing is routed by host."""

from __future__ import annotations

import httpx2 as httpx
import pytest

from e2b_compat.auth import envd_token
from e2b_compat.proto import filesystem_pb2 as fs

pytestmark = pytest.mark.docker
DOMAIN = "e2b.localhost"


def list_dir(asgi_server: str, host: str, token: str, extra: dict | None = None):
    return httpx.post(
        f"{asgi_server}/filesystem.Filesystem/ListDir",
        content=fs.ListDirRequest(path="/workspace").SerializeToString(),
        headers={
            "Host": host,
            "Content-Type": "application/proto",
            "X-Access-Token": token,
            **(extra or {}),
        },
        timeout=30,
    )


def test_the_envd_host_of_a_sandbox(sbx, world, asgi_server, settings) -> None:
    settings.SANDHUB_PREVIEW_DOMAIN = DOMAIN  # the live server runs in this process
    sbx.files.write("routed.txt", "by host\n")
    token = envd_token(world.rows["alice"], sbx.sandbox_id)
    for label in (sbx.sandbox_id, sbx.sandbox_id.replace("_", "-")):  # E2B's, Sandhub's
        answer = list_dir(asgi_server, f"49983-{label}.{DOMAIN}", token)
        assert answer.status_code == 200, answer.text
        names = [e.name for e in fs.ListDirResponse.FromString(answer.content).entries]
        assert "routed.txt" in names
    # The host names the sandbox: a header naming another cannot redirect the token.
    other = list_dir(
        asgi_server,
        f"49983-{sbx.sandbox_id}.{DOMAIN}",
        token,
        {"E2b-Sandbox-Id": "sb_0000ghost000"},
    )
    assert other.status_code == 200
    # Another port is a preview (nothing listens there), not envd.
    preview = list_dir(asgi_server, f"8000-{sbx.sandbox_id}.{DOMAIN}", token)
    assert preview.status_code != 200 and b"entries" not in preview.content
    settings.SANDHUB_PREVIEW_DOMAIN = ""
    unrouted = list_dir(asgi_server, f"49983-{sbx.sandbox_id}.{DOMAIN}", token)
    assert unrouted.status_code in (400, 404) and b"routed.txt" not in unrouted.content
