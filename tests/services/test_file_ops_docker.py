"""Delete, rename and new folder on the real Docker engine (sandboxes/services/file_ops.py):
they act as the sandbox user, and a link /workspace/out -> /etc never takes them outside
/workspace, with the sandbox agent and without it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandboxes import services
from sandboxes.contract.errors import Conflict, InvalidInput, NotFound
from sandboxes.models import Sandbox

pytestmark = [pytest.mark.docker, pytest.mark.django_db]


@pytest.fixture(params=["agent", "plain"])
def sandbox(request, settings, real_docker, as_alice) -> Iterator[str]:
    settings.SANDHUB_AGENT = request.param == "agent"
    info = services.create_sandbox(as_alice, memory_mb=256)
    yield info.id
    if Sandbox.objects.get(public_id=info.id).status != "deleted":
        services.delete_sandbox(as_alice, info.id)


def shell(principal, sandbox_id: str, command: str) -> str:
    result = services.run_command(principal, sandbox_id, command)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_rename_mkdir_and_delete_inside_the_workspace(as_alice, sandbox) -> None:
    services.write_file(as_alice, sandbox, "src/a.txt", "hello\n")
    services.make_directory(as_alice, sandbox, "new/deep")
    moved = services.rename_path(as_alice, sandbox, "src/a.txt", "new/deep/b.txt")
    assert (moved.path, moved.to) == ("/workspace/src/a.txt", "/workspace/new/deep/b.txt")
    assert shell(as_alice, sandbox, "cat /workspace/new/deep/b.txt") == "hello\n"
    owner = shell(as_alice, sandbox, "stat -c %U /workspace/new/deep; id -un").split()
    assert owner[0] == owner[1], "the folder belongs to the sandbox user"
    services.rename_path(as_alice, sandbox, "new", "renamed")
    with pytest.raises(Conflict, match="already exists"):
        services.rename_path(as_alice, sandbox, "src", "renamed")
    with pytest.raises(NotFound, match="not found"):
        services.rename_path(as_alice, sandbox, "nothing", "x")
    with pytest.raises(InvalidInput, match="is a file, not a folder"):
        services.make_directory(as_alice, sandbox, "renamed/deep/b.txt/sub")
    services.delete_path(as_alice, sandbox, "renamed")
    assert shell(as_alice, sandbox, "ls /workspace") == "src\n"
    with pytest.raises(NotFound):
        services.delete_path(as_alice, sandbox, "renamed")


def test_a_link_to_etc_does_not_take_them_outside(as_alice, sandbox) -> None:
    shell(as_alice, sandbox, "ln -s /etc /workspace/out && echo x > /workspace/x")
    before = shell(as_alice, sandbox, "ls -la /etc | md5sum")
    with pytest.raises(InvalidInput, match="symbolic link"):
        services.delete_path(as_alice, sandbox, "out/hostname")
    with pytest.raises(InvalidInput, match="symbolic link"):
        services.rename_path(as_alice, sandbox, "out/hostname", "stolen")
    with pytest.raises(InvalidInput, match="symbolic link"):
        services.rename_path(as_alice, sandbox, "x", "out/x")
    with pytest.raises(InvalidInput, match="symbolic link"):
        services.make_directory(as_alice, sandbox, "out/made")
    with pytest.raises(InvalidInput, match="inside /workspace"):
        services.make_directory(as_alice, sandbox, "/etc/made")
    with pytest.raises(InvalidInput, match=r"'\.\.'"):
        services.delete_path(as_alice, sandbox, "out/../../etc/hostname")
    assert shell(as_alice, sandbox, "ls -la /etc | md5sum") == before
    # The link itself is an entry of /workspace: renamed and deleted as a link.
    services.rename_path(as_alice, sandbox, "out", "out2")
    services.delete_path(as_alice, sandbox, "out2")
    assert shell(as_alice, sandbox, "ls /workspace; test -f /etc/hostname && echo kept") == (
        "x\nkept\n"
    )
