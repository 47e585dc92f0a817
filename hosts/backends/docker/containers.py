"""Sandbox containers and volumes: create with the sandbox's isolation, inspect, remove, list.

Each sandbox is one container plus one named volume, both called `sandhub-<sandbox id>`:

- the container runs as the sandbox user (names.SANDBOX_UID, no account of the host) with
  every capability dropped, no-new-privileges, a read-only root filesystem, memory (without
  swap), cpu and pids limits; /tmp and /home/sandbox are size-limited tmpfs so pip --user works;
- no network unless the team allows it; then a network of its own that routes only to the
  platform's egress proxy (network.py), the proxy's variables, DNS and trust bundle
  (container_egress.py);
- /workspace is the named volume, because `put_archive` into a tmpfs mount reports success but
  the files never show up in the container (moby#22020); on a local engine the volume is a
  filesystem of the sandbox's disk size (disk.py).

Reconciliation. `list_managed` lists every container, volume and network labelled
org.sandhub.managed=1, and every disk, with its creation time, its deployment
(org.sandhub.instance) and the state that destroy() needs to remove exactly that one.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container

from hosts.backends.base import (
    LABEL_INSTANCE,
    LABEL_POOL,
    BackendError,
    ManagedResource,
    SandboxSpec,
)
from hosts.backends.docker import container_egress, local
from hosts.backends.docker.disk import DEFAULT_DISK_MB, Disks
from hosts.backends.docker.engine import Engine
from hosts.backends.docker.names import (
    JOBS_DIR,
    JOBS_MOUNT,
    LABEL_MANAGED,
    LABEL_MEMORY,
    LABEL_NANO_CPUS,
    LABEL_SANDBOX,
    NAME_PREFIX,
    SANDBOX_GID,
    SANDBOX_UID,
    SANDBOX_USER,
    WORKSPACE,
    identity_labels,
    names,
    network_name,
    parse_created,
)
from hosts.backends.docker.network import Networks
from hosts.backends.docker.network_rules import Fence

# Disks copied from snapshots while their containers are made (a few at once per process).
_DISK_COPIES = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sandhub-disk-copy")


class Containers:
    """Lifecycle of sandbox containers and volumes on one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.networks = Networks(engine)
        self.disks = Disks(engine)

    # --- lifecycle ---------------------------------------------------------------------------
    def provision(
        self, spec: SandboxSpec, disk_source: Path | None = None, move_source: bool = False
    ) -> dict[str, Any]:
        """Create and start the sandbox; disk_source: the image its disk is a copy of (a
        snapshot's), else a new empty one; move_source: the image itself becomes the disk
        where it can (a fork's own snapshot: disk.py)."""
        container_egress.refuse_unsupported(spec, self.networks.firewall, self.engine.host)
        name = NAME_PREFIX + spec.sandbox_id
        client = self.engine.client()
        network = name if spec.network else ""
        disk_mb = (spec.disk_mb or DEFAULT_DISK_MB) if self.disks.enabled else None
        created: list[Callable[[], None]] = []  # undo steps, newest last
        fence: Fence | None = None
        try:
            with self.engine.errors(f"creating sandbox {spec.sandbox_id}"):
                self._refuse_existing(client, name)
                if network:
                    # Fenced before the container exists: it never runs unfenced.
                    labels = {**spec.labels, **_ids(spec), **container_egress.network_labels(spec)}
                    fence = self.networks.create(client, network, labels)
                    created.append(lambda: self.networks.remove(network))
                volume_options: dict[str, Any] = {}
                disk: Future[dict[str, str]] | None = None
                if disk_mb:
                    disk = self._make_disk(
                        name, disk_mb, {**spec.labels, **_ids(spec)}, disk_source, move_source
                    )
                    created.append(lambda: self._remove_disk(name, disk))
                    options = self.disks.bind_options(name)
                    volume_options = {"driver": "local", "driver_opts": options}
                client.volumes.create(name=name, labels=_ids(spec), **volume_options)
                created.append(lambda: self._remove_volume(name))
                container = self._create_container(client, spec, name, fence, bool(disk_mb))
                created.append(lambda: self._remove_container(container.id))
                if disk is not None:
                    disk.result()  # mounted before the container starts on it
                container.start()
                self.check_started(container)
        except BaseException:
            for undo in reversed(created):
                with contextlib.suppress(Exception):
                    undo()
            raise
        return {
            "container_id": container.id,
            "container_name": name,
            "volume": name,
            "network": network,
            "disk_mb": disk_mb,
            "jobs_dir": JOBS_DIR,  # on the JOBS_MOUNT tmpfs (names.py)
            **container_egress.egress_state(container, fence),
        }

    def _make_disk(
        self, name: str, size_mb: int, labels: dict[str, str], source: Path | None, move: bool
    ) -> Future[dict[str, str]]:
        """The sandbox's disk, made now; or, a snapshot's copy, made while the engine makes
        the volume and the container (the copy, and the loop device's set-up, which flushes
        it: about 0.6 s a GB together, as long as the engine's part or longer)."""
        if source is None:
            done: Future[dict[str, str]] = Future()
            done.set_result(self.disks.create(name, size_mb, labels))
            return done
        return _DISK_COPIES.submit(
            self.disks.create, name, size_mb, labels, source=source, move=move
        )

    def _remove_disk(self, name: str, making: Future[dict[str, str]] | None) -> None:
        if making is not None:
            futures.wait([making])  # a copy still running would leave its image behind
        self.disks.remove(name)

    def _refuse_existing(self, client: docker.DockerClient, name: str) -> None:
        # Volume creation is idempotent in the engine, so without this check a failed
        # provision would "clean up" (delete) the workspace of a sandbox that already exists.
        for collection in (client.containers, client.volumes):
            with contextlib.suppress(docker.errors.NotFound):
                collection.get(name)
                raise BackendError(f"{name} already exists on host {self.engine.host}")
        if self.networks.exists(client, name):
            raise BackendError(f"network {name} already exists on host {self.engine.host}")

    def _create_container(
        self,
        client: docker.DockerClient,
        spec: SandboxSpec,
        name: str,
        fence: Fence | None,
        own_disk: bool,
    ) -> Container:
        memory = spec.memory_mb * 1024 * 1024
        nano_cpus = int(spec.cpus * 1_000_000_000)
        labels = {
            **spec.labels,
            **identity_labels(spec.sandbox_id),
            LABEL_MEMORY: str(memory),
            LABEL_NANO_CPUS: str(nano_cpus),
        }
        try:
            return client.containers.create(
                spec.image_reference,
                name=name,
                user=SANDBOX_USER,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                mem_limit=memory,
                memswap_limit=memory,  # equal to mem_limit: no swap at all
                nano_cpus=nano_cpus,
                pids_limit=spec.pids_limit,
                network_mode=fence.network if fence else "none",
                read_only=True,
                tmpfs=self._tmpfs(spec),
                # nocopy on a disk of its own: the engine would otherwise give the volume the
                # owner of the image's /workspace, whoever that is; the disk's is the sandbox
                # user already. A plain volume takes it from the image (root otherwise).
                volumes={name: {"bind": WORKSPACE, "mode": "rw,nocopy" if own_disk else "rw"}},
                working_dir=WORKSPACE,
                # environment, and with egress dns and the trust bundle's mounts.
                **container_egress.container_options(spec, fence),
                labels=labels,
                # Sandboxes are long-lived workspaces: bring them back after an engine restart.
                restart_policy={"Name": "unless-stopped"},
            )
        except docker.errors.ImageNotFound as exc:
            raise BackendError(
                f"image {spec.image_reference} is not present on host {self.engine.host} "
                "(nothing is pulled: build or load it there first)"
            ) from exc

    def _tmpfs(self, spec: SandboxSpec) -> dict[str, str]:
        # tmpfs pages count against the container's memory limit, so the sizes only stop one
        # directory from taking all of it. exec: pip --user puts scripts in ~/.local/bin and
        # builds run helpers from /tmp; noexec would break both and protect nothing, since
        # /workspace is executable anyway.
        size = int(self.engine.host.options.get("tmpfs_mb", max(16, spec.memory_mb // 2)))
        common = f"rw,exec,nosuid,nodev,size={size}m"
        return {
            "/tmp": f"{common},mode=1777",
            "/home/sandbox": f"{common},mode=0755,uid={SANDBOX_UID},gid={SANDBOX_GID}",
            # Background jobs' files, out of /workspace (names.JOBS_DIR).
            JOBS_MOUNT: f"{common},mode=0700,uid={SANDBOX_UID},gid={SANDBOX_GID}",
        }

    def check_started(self, container: Container) -> None:
        container.reload()
        if container.status == "running":
            return
        logs = container.logs(tail=20).decode("utf-8", "replace").strip()
        code = container.attrs.get("State", {}).get("ExitCode")
        raise BackendError(
            f"container {container.name} stopped right after start (exit code {code}); "
            f"the image must keep running on its own (e.g. CMD sleep infinity). Logs: {logs}"
        )

    def destroy(self, state: dict[str, Any]) -> None:
        container, volume = names(state)
        network = network_name(state)
        disk = state.get("disk") or volume  # a disk is named after its volume
        with self.engine.errors("removing sandbox"):
            if container:
                self._remove_container(container)
            if network:
                self.networks.remove(network)
            if volume:
                self._remove_volume(volume)
            if disk and local.is_local(self.engine.host):
                self.disks.remove(disk)

    def _remove_container(self, ref: str) -> None:
        with contextlib.suppress(docker.errors.NotFound):
            self.engine.api().remove_container(ref, force=True, v=True)

    def _remove_volume(self, name: str) -> None:
        # Right after a forced container removal the engine may still count the volume as in
        # use for a moment (409); retry briefly instead of leaking it.
        for attempt in range(20):
            try:
                self.engine.api().remove_volume(name, force=True)
                return
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as exc:
                if exc.status_code != 409 or attempt == 19:
                    raise
                time.sleep(0.1)

    # --- reconciliation ----------------------------------------------------------------------
    def list_sandbox_ids(self) -> Iterable[str]:
        """Ids of every sandhub container (running or not), volume, network and disk."""
        return sorted({r.label_id for r in self.list_managed()})

    def list_managed(self) -> list[ManagedResource]:
        api = self.engine.api()
        selector = {"label": f"{LABEL_MANAGED}=1"}
        with self.engine.errors("listing sandhub containers and volumes"):
            containers = api.containers(all=True, filters=selector)
            volumes = api.volumes(filters=selector).get("Volumes") or []
        found = [_container_resource(c) for c in containers]
        # Networks before volumes before disks: reconciliation removes an orphan's parts in
        # this order after its container, and a disk goes with its volume.
        found += self.networks.managed()
        found += [_volume_resource(v) for v in volumes]
        found += self.disks.managed()
        return [r for r in found if r.label_id]


def _ids(spec: SandboxSpec) -> dict[str, str]:
    return identity_labels(spec.sandbox_id)


def _container_resource(summary: dict[str, Any]) -> ManagedResource:
    labels = summary.get("Labels") or {}
    container_names = summary.get("Names") or [""]
    return ManagedResource(
        kind="container",
        label_id=labels.get(LABEL_SANDBOX, ""),
        name=container_names[0].lstrip("/"),
        created_at=float(summary["Created"]) if summary.get("Created") else None,
        instance=labels.get(LABEL_INSTANCE, ""),
        pool=labels.get(LABEL_POOL) == "1",
        running=summary.get("State") == "running",
        state={"container_id": summary["Id"]},
    )


def _volume_resource(summary: dict[str, Any]) -> ManagedResource:
    labels = summary.get("Labels") or {}
    created = parse_created(summary.get("CreatedAt"))
    return ManagedResource(
        kind="volume",
        label_id=labels.get(LABEL_SANDBOX, ""),
        name=summary.get("Name", ""),
        created_at=created,
        instance=labels.get(LABEL_INSTANCE, ""),
        pool=labels.get(LABEL_POOL) == "1",
        state={"volume": summary.get("Name", "")},
    )
