"""Delete, rename and new folder on an SSH host against a real sshd on loopback (a Unix user
per sandbox on a shared host): they work as the sandbox user, and a link out of /workspace
(to /etc, or to the sandbox user's home outside it) never takes them outside."""

from __future__ import annotations

import pytest

from sandboxes import services
from sandboxes.contract.errors import Conflict, InvalidInput, NotFound

pytestmark = pytest.mark.sshd


def shell(principal, sandbox_id: str, command: str) -> str:
    result = services.run_command(principal, sandbox_id, command)
    assert result.exit_code == 0, result.stderr
    return result.stdout


@pytest.mark.django_db(transaction=True)
def test_file_operations_on_an_ssh_host(pinned, as_alice, as_bob) -> None:
    sandbox_id = services.create_sandbox(as_alice).id
    try:
        services.write_file(as_alice, sandbox_id, "src/a.txt", "a")
        services.make_directory(as_alice, sandbox_id, "made/deep")
        services.rename_path(as_alice, sandbox_id, "src/a.txt", "made/deep/b.txt")
        assert shell(as_alice, sandbox_id, "cat /workspace/made/deep/b.txt") == "a"
        with pytest.raises(Conflict):
            services.make_directory(as_alice, sandbox_id, "made")
        with pytest.raises(NotFound):
            services.delete_path(as_bob, sandbox_id, "made")

        shell(as_alice, sandbox_id, "mkdir -p ../outside && echo k > ../outside/keep")
        shell(as_alice, sandbox_id, "ln -s /etc /workspace/out && ln -s ../outside /workspace/up")
        for link in ("out", "up"):
            with pytest.raises(InvalidInput, match="symbolic link"):
                services.make_directory(as_alice, sandbox_id, f"{link}/made")
            with pytest.raises(InvalidInput, match="symbolic link"):
                services.rename_path(as_alice, sandbox_id, "made", f"{link}/made")
        with pytest.raises(InvalidInput, match="symbolic link"):
            services.delete_path(as_alice, sandbox_id, "up/keep")
        with pytest.raises(InvalidInput, match="symbolic link"):
            services.rename_path(as_alice, sandbox_id, "up/keep", "stolen")
        assert shell(as_alice, sandbox_id, "cat ../outside/keep") == "k\n"

        services.delete_path(as_alice, sandbox_id, "up")  # the link, not what it points to
        services.delete_path(as_alice, sandbox_id, "made")
        assert shell(as_alice, sandbox_id, "ls /workspace; cat ../outside/keep") == "out\nsrc\nk\n"
    finally:
        services.delete_sandbox(as_alice, sandbox_id)
