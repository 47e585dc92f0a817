"""Helpers of the Docker backend's tests (fixtures: tests/docker/conftest.py). Not a test
module.

The tests need the Docker engine at SANDHUB_TEST_DOCKER_URL (default: the local socket) and
the image sandhub/sandbox:latest built there. If either is missing they fail, loudly: a
backend that was never exercised must not pass CI by skipping.
"""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import docker

from hosts.backends.base import ExecResult, SandboxSpec
from hosts.backends.docker import DockerBackend
from hosts.models import Host
from tests.memory import MIB

ENDPOINT = os.environ.get("SANDHUB_TEST_DOCKER_URL", "unix:///var/run/docker.sock")
IMAGE = os.environ.get("SANDHUB_TEST_IMAGE", "sandhub/sandbox:latest")
NO_PYTHON_IMAGE = "sandhub/test-no-python3:latest"
# Unique per run, so the safety net below only ever removes what this run created.
RUN_PREFIX = f"pytest-{uuid.uuid4().hex[:6]}-"


def remove_leftovers(client: docker.DockerClient) -> None:
    """Safety net: whatever a failed test left behind from this run."""
    name = f"sandhub-{RUN_PREFIX}"
    labels = {
        c.labels.get("org.sandhub.sandbox", "")
        for c in client.containers.list(all=True, filters={"name": name})
    }
    labels |= {v.name.removeprefix("sandhub-") for v in client.volumes.list(filters={"name": name})}
    # destroy removes everything a sandbox has: container, volume, network, disk image.
    cleaner = DockerBackend(Host(name="local", kind="docker", endpoint=ENDPOINT))
    for label in labels - {""}:
        with contextlib.suppress(Exception):
            cleaner.destroy({"sandbox_id": label})
    cleaner.close()


def make_spec(**overrides: Any) -> SandboxSpec:
    values: dict[str, Any] = {
        "sandbox_id": RUN_PREFIX + uuid.uuid4().hex[:8],
        "image_reference": IMAGE,
        "cpus": 1.0,
        "memory_mb": 256,
        "pids_limit": 128,
        "network": False,
        "env": {"SANDHUB_TEST": "yes"},
        "labels": {"org.sandhub.test": "1"},
    }
    values.update(overrides)
    return SandboxSpec(**values)


def run(
    backend: DockerBackend,
    state: dict[str, Any],
    script: str,
    *,
    timeout: float = 30,
    output_cap: int = MIB,
    **kwargs: Any,
) -> ExecResult:
    return backend.exec(
        state,
        ["bash", "-c", script],
        cwd="/workspace",
        env=kwargs.pop("env", {}),
        timeout=timeout,
        output_cap=output_cap,
        **kwargs,
    )


def processes(backend: DockerBackend, state: dict[str, Any]) -> str:
    return run(backend, state, "ps -eo pid,pgid,args").stdout.decode()


def make_tar(files: dict[str, tuple[bytes, int]], uid: int = 1000) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, (content, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), mode, time.time()
            info.uid = info.gid = uid
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def read_tar(chunks: Iterator[bytes]) -> dict[str, bytes]:
    result = {}
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as archive:
        for member in archive.getmembers():
            if member.isfile():
                handle = archive.extractfile(member)
                assert handle is not None
                result[member.name] = handle.read()
    return result
