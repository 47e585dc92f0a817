"""Names, labels and the sandbox user: what ties a container and a volume to their sandbox.

Each sandbox is one container plus one named volume (and, with network, one network), all
called `sandhub-<sandbox id>` and labelled with the sandbox id. A warm-pool member is made
under its pool id and renamed after the sandbox that claims it; its labels (fixed at
creation) keep the pool id.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any

from hosts.backends.base import LABEL_POOL, SandboxGone

# The sandbox user, in the container and (no user namespaces) on the host. It must be no
# account of the host, or a sandbox's processes and files would be that account's there:
# above every range Debian and systemd give accounts (regular users end at 60000, nobody is
# 65534), below the subordinate ids useradd hands out for rootless containers (100000 and up,
# /etc/subuid), and small enough for plain tar headers (< 8**7). The image's `sandbox` user
# (images/sandbox/Dockerfile) has the same ids.
SANDBOX_UID = 99999
SANDBOX_GID = 99999
SANDBOX_USER = f"{SANDBOX_UID}:{SANDBOX_GID}"
WORKSPACE = "/workspace"
# Background jobs' files; processes of a job carry SANDHUB_JOB_ID=<job id>. Not in the volume,
# where they showed in the tenant's file lists, downloads, sync and previews: on a tmpfs of
# their own (JOBS_MOUNT, size-capped, counted in the sandbox's memory like /tmp), which no
# snapshot or fork copies and a stop empties (a stop ends every job anyway). Containers made
# before it have no such mount: their new jobs go to /tmp (LEGACY_JOBS_DIR); a job dict keeps
# the directory it was started in, so jobs from the volume's .sandhub/jobs still poll.
JOBS_MOUNT = "/run/sandhub"
JOBS_DIR = f"{JOBS_MOUNT}/jobs"
LEGACY_JOBS_DIR = "/tmp/.sandhub/jobs"
NAME_PREFIX = "sandhub-"

LABEL_MANAGED = "org.sandhub.managed"
LABEL_SANDBOX = "org.sandhub.sandbox"
# Limits are repeated as labels so a probe learns them from one list call, without an
# inspect per container.
LABEL_MEMORY = "org.sandhub.memory_bytes"
LABEL_NANO_CPUS = "org.sandhub.nano_cpus"


def identity_labels(sandbox_id: str) -> dict[str, str]:
    return {LABEL_MANAGED: "1", LABEL_SANDBOX: sandbox_id}


def jobs_dir(state: dict[str, Any]) -> str:
    """Where the sandbox's new background jobs go: its state says so from provision on."""
    return str(state.get("jobs_dir") or LEGACY_JOBS_DIR)


def names(state: dict[str, Any]) -> tuple[str, str]:
    """(container ref, volume name) from a state; a bare sandbox_id is enough (reconciliation)."""
    fallback = NAME_PREFIX + state["sandbox_id"] if state.get("sandbox_id") else ""
    container = state.get("container_id") or state.get("container_name") or fallback
    volume = state.get("volume") or fallback
    return container, volume


def network_name(state: dict[str, Any]) -> str:
    """The sandbox's own network; "" for a sandbox without one (made without network)."""
    if "network" in state:
        return str(state["network"] or "")
    # A bare sandbox id (reconciliation, a discarded pool member): the network it would have.
    return NAME_PREFIX + state["sandbox_id"] if state.get("sandbox_id") else ""


def parse_created(value: Any) -> float | None:
    """Unix time of an engine's RFC 3339 creation time (volumes, networks); None if unreadable."""
    with contextlib.suppress(TypeError, ValueError):
        return datetime.fromisoformat(str(value)).timestamp()
    return None


def container_ref(state: dict[str, Any]) -> str:
    container, _ = names(state)
    if not container:
        raise SandboxGone("the sandbox has no container recorded")
    return container


def claimed_pool_member(summary: dict[str, Any]) -> bool:
    """A warm-pool container that a sandbox has claimed: the claim renamed it.

    An idle member is named after the pool id written in its labels (`sandhub-<pool id>`);
    a claim renames it after the sandbox, and its labels keep the pool id.
    """
    labels = summary.get("Labels") or {}
    if labels.get(LABEL_POOL) != "1":
        return False
    container_names = [name.lstrip("/") for name in summary.get("Names") or []]
    return NAME_PREFIX + labels.get(LABEL_SANDBOX, "") not in container_names


def idle_pool_member(summary: dict[str, Any]) -> bool:
    labels = summary.get("Labels") or {}
    return labels.get(LABEL_POOL) == "1" and not claimed_pool_member(summary)
