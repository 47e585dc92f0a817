"""The two login users of the SSH host tests and the sshd that lets them in (the `server`
fixture, tests/conftest.py: used by tests/ssh/, tests/platform/test_add_host.py,
tests/previews/test_ssh.py and tests/client/test_cli_ssh.py). Not a test module.

Two login users of their own (the shared test user of tests/ssh/sshd.py is left as it is):
`sandhub-test-sudo` may `sudo -n` anything (per-sandbox users) and finds the fake nvidia-smi
(tests/bin, two GPUs: idle, busy) first on its PATH; `sandhub-test-nosudo` may not (every
sandbox runs as it). Both are created once and kept, like the shared one.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.ssh.sshd import Sshd

SUDO_USER, PLAIN_USER = "sandhub-test-sudo", "sandhub-test-nosudo"
SUDOERS = Path("/etc/sudoers.d/sandhub-test-sudo")
TESTS = Path(__file__).resolve().parents[1]
FAKE_BIN = TESTS / "bin"
FIXTURES = TESTS / "fixtures" / "nvidia-smi"


def run_here(*argv: str) -> str:
    """A command on this machine (as root); its output."""
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60).stdout


def set_up_users() -> None:
    for user in (SUDO_USER, PLAIN_USER):
        if subprocess.run(["id", "-u", user], capture_output=True).returncode != 0:
            run_here("useradd", "--create-home", "--shell", "/bin/bash", user)
        run_here("usermod", "-p", "*", user)  # no password, yet not locked: sshd lets keys in
    SUDOERS.write_text(f"{SUDO_USER} ALL=(ALL) NOPASSWD: ALL\n")
    SUDOERS.chmod(0o440)
    run_here("visudo", "-cf", str(SUDOERS))
    home = Path(f"/home/{SUDO_USER}")
    state = f"FAKE_NVIDIA_SMI_STATE=idle,busy\nFAKE_NVIDIA_SMI_FIXTURES={FIXTURES}\n"
    for name, text in ((".bashrc", f"export PATH={FAKE_BIN}:$PATH\n"), (".fake-nvidia-smi", state)):
        (home / name).write_text(text)
        (home / name).chmod(0o644)  # written by root under umask 077: the user reads them


class ProvisionSshd(Sshd):
    """The test sshd, also letting the two users above in (same client keys)."""

    def _write_config(self) -> None:
        super()._write_config()
        allow = f"AllowUsers {self.username}"
        text = self.config_path.read_text().replace(allow, f"{allow} {SUDO_USER} {PLAIN_USER}")
        self.config_path.write_text(text)
