"""The egress proxy's trust bundle of a sandbox, kept on this machine and bound into its
container read-only (hosts/backends/egress.py says what it holds and why).

One file per sandbox network, `<SANDHUB_VAR_DIR>/egress/<network name>.crt`: written when the
network is made, removed with the network (network.Networks.remove), so destroy and the
reconciliation of a leftover network remove it too. The directory is the platform's (0700);
the file is 0644, since the sandbox user reads it inside through the bind mount (the engine
mounts it as root: the directory's mode does not matter there). A bundle holds certificates
only, nothing secret. The probe's repair (network.Networks.ensure_all) removes bundles whose
network is gone (a network removed by hand).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from django.conf import settings

from hosts.backends.base import BackendError
from hosts.backends.egress import trust_bundle


def bundle_dir() -> Path:
    return Path(settings.VAR_DIR) / "egress"


def bundle_path(network: str) -> Path:
    if not network or "/" in network or network.startswith("."):
        raise BackendError(f"no trust bundle for network {network!r}")
    return bundle_dir() / f"{network}.crt"


def write_bundle(network: str, ca_pem: str) -> Path:
    """The bundle for the network's sandbox, written whole (a new file moved into place)."""
    path = bundle_path(network)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial = path.with_suffix(".part")
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(trust_bundle(ca_pem))
        os.chmod(partial, 0o644)  # whatever the umask took away
        os.replace(partial, path)
    except OSError as exc:
        raise BackendError(f"writing the trust bundle {path} failed: {exc}") from exc
    return path.resolve()


def bundle_networks() -> list[str]:
    """The networks that have a bundle here (leftovers included)."""
    return sorted(path.stem for path in bundle_dir().glob("*.crt"))


def remove_bundle(network: str) -> None:
    with contextlib.suppress(FileNotFoundError, BackendError):
        bundle_path(network).unlink()
