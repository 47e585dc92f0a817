"""A sync root reached through a symbolic link (issue 24), on the real Docker engine, with
the sandbox agent and without it: /workspace/out -> /etc, or -> a directory outside the
workspace that the sandbox user may write, given as the root of a sync delete or download,
is refused with a clear error; nothing outside is deleted, nothing is read. The manifest
refuses it too (it did for the root itself already), and so does a link further up."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandboxes import services
from sandboxes.contract.errors import InvalidInput
from sandboxes.models import Sandbox
from tenants.models import AuditLog

pytestmark = [pytest.mark.docker, pytest.mark.django_db]

OUTSIDE = "/tmp/outside"  # the sandbox user's to write, outside /workspace
STAGE = (
    f"mkdir -p {OUTSIDE}/sub /workspace/real && echo keep > {OUTSIDE}/victim.txt"
    f" && echo keep > {OUTSIDE}/sub/f && ln -s {OUTSIDE} /workspace/out"
    f" && ln -s /etc /workspace/etc && ln -s {OUTSIDE} /workspace/real/via"
)
# root -> the link on its way: the root itself, or a directory further up
ROOTS = {"out": "out", "etc": "etc", "out/sub": "out", "real/via": "real/via"}
NAMES = ["victim.txt", "sub", "f", "passwd", "hostname"]


@pytest.fixture(params=["agent", "plain"])
def sandbox(request, settings, real_docker, as_alice) -> Iterator[str]:
    settings.SANDHUB_AGENT = request.param == "agent"
    info = services.create_sandbox(as_alice, memory_mb=256)
    yield info.id
    if Sandbox.objects.get(public_id=info.id).status != "deleted":
        services.delete_sandbox(as_alice, info.id)


def outside(as_alice, sandbox: str) -> str:
    return services.run_command(as_alice, sandbox, f"find {OUTSIDE} | sort").stdout


@pytest.mark.parametrize("root, link", ROOTS.items())
def test_sync_delete_and_download_refuse_a_root_through_a_link(
    as_alice, sandbox: str, root: str, link: str
) -> None:
    assert services.run_command(as_alice, sandbox, STAGE).exit_code == 0
    before = outside(as_alice, sandbox)
    with pytest.raises(InvalidInput) as deleting:
        services.sync_delete(as_alice, sandbox, root, NAMES)
    assert deleting.value.message.startswith(f"cannot delete under /workspace/{root}: ")
    assert f"/workspace/{link} is a symbolic link" in deleting.value.message
    assert "never reached through one" in deleting.value.message
    with pytest.raises(InvalidInput) as reading:
        services.open_sync_download(as_alice, sandbox, root, NAMES)
    assert f"/workspace/{link} is a symbolic link" in reading.value.message
    with pytest.raises(InvalidInput, match="is a symbolic link"):
        services.tree_manifest(as_alice, sandbox, root)
    assert outside(as_alice, sandbox) == before  # nothing outside deleted
    assert "victim.txt" in before and "sub/f" in before
    rows = AuditLog.objects.filter(action__in=["files.sync.delete", "files.sync.download"])
    assert {row.outcome for row in rows} == {"invalid"}
