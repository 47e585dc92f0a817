"""DockerBackend against the real engine and the real sandbox image.

These tests need the Docker engine at SANDHUB_TEST_DOCKER_URL (default: the local socket) and
the image sandhub/sandbox:latest built there. If either is missing they fail, loudly: a
backend that was never exercised must not pass CI by skipping.

No database is needed: the Host is never saved.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import statistics
import tarfile
import time
import uuid
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import docker
import docker.errors
import pytest

from hosts.backends.base import (
    BackendError,
    ExecResult,
    SandboxGone,
    SandboxSpec,
    Unsupported,
)
from hosts.backends.docker import DockerBackend
from hosts.backends.docker import exec as docker_backend
from hosts.models import Credential, Host

pytestmark = pytest.mark.docker

ENDPOINT = os.environ.get("SANDHUB_TEST_DOCKER_URL", "unix:///var/run/docker.sock")
IMAGE = os.environ.get("SANDHUB_TEST_IMAGE", "sandhub/sandbox:latest")
# Unique per run, so the safety net below only ever removes what this run created.
RUN_PREFIX = f"pytest-{uuid.uuid4().hex[:6]}-"
MIB = 1024 * 1024


# --- fixtures ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    """A plain SDK client, to look at what the backend did from the outside."""
    try:
        client = docker.DockerClient(base_url=ENDPOINT, timeout=60)
        client.ping()
    except Exception as exc:
        pytest.fail(f"these tests need a Docker engine at {ENDPOINT}: {exc}")
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"these tests need the image {IMAGE}: build it from images/sandbox")
    yield client
    _remove_leftovers(client)
    client.close()


def _remove_leftovers(client: docker.DockerClient) -> None:
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


@pytest.fixture(scope="module")
def backend(engine: docker.DockerClient) -> Iterator[DockerBackend]:
    instance = DockerBackend(Host(name="local", kind="docker", endpoint=ENDPOINT))
    yield instance
    instance.close()


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


@pytest.fixture
def spec() -> SandboxSpec:
    return make_spec()


@pytest.fixture
def sandbox(backend: DockerBackend, spec: SandboxSpec) -> Iterator[dict[str, Any]]:
    state = backend.provision(spec)
    try:
        yield state
    finally:
        backend.destroy(state)


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


# --- provisioning ------------------------------------------------------------------------------
def test_provision_hardens_the_container(
    backend: DockerBackend,
    engine: docker.DockerClient,
    spec: SandboxSpec,
    sandbox: dict[str, Any],
) -> None:
    name = f"sandhub-{spec.sandbox_id}"
    assert sandbox["container_name"] == name and sandbox["volume"] == name
    attrs = engine.containers.get(sandbox["container_id"]).attrs
    config, host_config = attrs["Config"], attrs["HostConfig"]
    assert config["User"] == "99999:99999"
    assert config["WorkingDir"] == "/workspace"
    assert "SANDHUB_TEST=yes" in config["Env"]
    assert config["Labels"]["org.sandhub.managed"] == "1"
    assert config["Labels"]["org.sandhub.sandbox"] == spec.sandbox_id
    assert config["Labels"]["org.sandhub.test"] == "1"
    assert host_config["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in host_config["SecurityOpt"]
    assert host_config["ReadonlyRootfs"] is True
    assert host_config["Memory"] == 256 * MIB
    assert host_config["MemorySwap"] == 256 * MIB
    assert host_config["NanoCpus"] == 1_000_000_000
    assert host_config["PidsLimit"] == 128
    assert host_config["NetworkMode"] == "none"
    assert set(host_config["Tmpfs"]) == {"/tmp", "/home/sandbox"}
    mounts = {m["Destination"]: m for m in attrs["Mounts"]}
    assert mounts["/workspace"]["Type"] == "volume" and mounts["/workspace"]["Name"] == name
    assert backend.status(sandbox) == "running"

    result = run(
        backend,
        sandbox,
        "id -u; id -g; grep -E '^Cap(Eff|Prm)' /proc/self/status; "
        "grep NoNewPrivs /proc/self/status; ls /sys/class/net; "
        "touch /rootfs-write 2>&1 || echo rootfs-read-only; "
        "touch /tmp/t ~/h /workspace/w && echo writable",
    )
    lines = result.stdout.decode()
    assert result.exit_code == 0, result
    assert lines.startswith("99999\n99999\n")
    assert "CapPrm:\t0000000000000000" in lines and "CapEff:\t0000000000000000" in lines
    assert "NoNewPrivs:\t1" in lines
    assert "\nlo\n" in lines and "eth0" not in lines  # network none: loopback only
    assert "rootfs-read-only" in lines
    assert "writable" in lines


def test_network_on_request(backend: DockerBackend, engine: docker.DockerClient) -> None:
    spec = make_spec(network=True)
    state = backend.provision(spec)
    try:
        attrs = engine.containers.get(state["container_id"]).attrs
        assert attrs["HostConfig"]["NetworkMode"] == f"sandhub-{spec.sandbox_id}"
        assert "eth0" in run(backend, state, "ls /sys/class/net").stdout.decode()
    finally:
        backend.destroy(state)


def test_pip_user_install_works_on_the_read_only_rootfs(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    # A hand-made wheel (no network, no index): pip --user must land in the tmpfs home and
    # its console script in ~/.local/bin must be executable.
    wheel = io.BytesIO()
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("sandhub_probe.py", "def main():\n    print('probe ok')\n")
        info = "sandhub_probe-0.1.dist-info/"
        archive.writestr(
            info + "METADATA", "Metadata-Version: 2.1\nName: sandhub-probe\nVersion: 0.1\n"
        )
        archive.writestr(
            info + "WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        archive.writestr(
            info + "entry_points.txt", "[console_scripts]\nsandhub-probe = sandhub_probe:main\n"
        )
        archive.writestr(info + "RECORD", "")
    backend.put_files(
        sandbox,
        "/workspace/wheels",
        make_tar({"sandhub_probe-0.1-py3-none-any.whl": (wheel.getvalue(), 0o644)}),
    )
    result = run(
        backend,
        sandbox,
        "pip install --user --no-index -q /workspace/wheels/sandhub_probe-0.1-py3-none-any.whl"
        " && ~/.local/bin/sandhub-probe",
        timeout=120,
    )
    assert result.exit_code == 0, result
    assert result.stdout.decode().strip().endswith("probe ok")


def test_unknown_image_fails_cleanly(backend: DockerBackend, engine: docker.DockerClient) -> None:
    spec = make_spec(image_reference="sandhub/does-not-exist:never")
    with pytest.raises(BackendError, match="sandhub/does-not-exist:never is not present"):
        backend.provision(spec)
    name = f"sandhub-{spec.sandbox_id}"
    assert engine.containers.list(all=True, filters={"name": name}) == []
    assert engine.volumes.list(filters={"name": name}) == []


def test_provision_refuses_an_existing_sandbox_without_touching_it(
    backend: DockerBackend, spec: SandboxSpec, sandbox: dict[str, Any]
) -> None:
    run(backend, sandbox, "echo keep > /workspace/keep")
    with pytest.raises(BackendError, match="already exists"):
        backend.provision(spec)
    assert run(backend, sandbox, "cat /workspace/keep").stdout == b"keep\n"


def test_destroy_removes_everything_and_is_idempotent(
    backend: DockerBackend, engine: docker.DockerClient
) -> None:
    state = backend.provision(make_spec())
    backend.destroy(state)
    assert backend.status(state) == "missing"
    with pytest.raises(docker.errors.NotFound):
        engine.containers.get(state["container_name"])
    with pytest.raises(docker.errors.NotFound):
        engine.volumes.get(state["volume"])
    backend.destroy(state)  # again: nothing left, no error
    with pytest.raises(SandboxGone):
        run(backend, state, "true")
    with pytest.raises(SandboxGone):
        list(backend.get_files(state, "/workspace"))


def test_status_of_a_stopped_sandbox(
    backend: DockerBackend, engine: docker.DockerClient, sandbox: dict[str, Any]
) -> None:
    engine.containers.get(sandbox["container_id"]).stop(timeout=0)
    assert backend.status(sandbox) == "stopped"
    with pytest.raises(BackendError, match="not running"):
        run(backend, sandbox, "true")


def test_files_persist_in_workspace_across_a_restart(
    backend: DockerBackend, engine: docker.DockerClient, sandbox: dict[str, Any]
) -> None:
    run(backend, sandbox, "echo kept > /workspace/notes.txt; echo gone > /tmp/scratch")
    engine.containers.get(sandbox["container_id"]).restart(timeout=0)
    assert backend.status(sandbox) == "running"
    result = run(backend, sandbox, "cat /workspace/notes.txt; ls /tmp")
    assert result.stdout == b"kept\n"


# --- commands ----------------------------------------------------------------------------------
def test_echo(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    result = run(
        backend,
        sandbox,
        "echo hello; echo oops >&2; pwd; echo $GREETING; exit 3",
        env={"GREETING": "hi there"},
    )
    assert result.exit_code == 3
    assert result.stdout == b"hello\n/workspace\nhi there\n"
    assert result.stderr == b"oops\n"
    assert result.stdout_bytes == len(result.stdout) and not result.stdout_truncated
    assert not result.timed_out


def test_argv_is_not_reinterpreted(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    argv = ["printf", "%s|", "a b", "$HOME", "'q'", "*"]
    result = backend.exec(sandbox, argv, cwd="/", env={}, timeout=10, output_cap=MIB)
    assert result.stdout == b"a b|$HOME|'q'|*|"


def test_bad_cwd_is_a_failed_command(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    result = backend.exec(sandbox, ["pwd"], cwd="/nope", env={}, timeout=10, output_cap=MIB)
    assert result.exit_code != 0 and b"/nope" in result.stderr


def test_exec_is_cheap(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    timings = []
    for _ in range(10):
        started = time.monotonic()
        result = backend.exec(
            sandbox, ["true"], cwd="/workspace", env={}, timeout=10, output_cap=1024
        )
        timings.append(time.monotonic() - started)
        assert result.exit_code == 0
    median = statistics.median(timings)
    print(f"exec true: median {median * 1000:.0f} ms, min {min(timings) * 1000:.0f} ms")
    assert median < 0.5


def test_concurrent_commands_share_one_backend(sandbox: dict[str, Any]) -> None:
    # A fresh instance, so the lazy client is also created under contention.
    shared = DockerBackend(Host(name="local", kind="docker", endpoint=ENDPOINT))

    def worker(n: int) -> list[bytes]:
        return [
            shared.exec(
                sandbox,
                ["sh", "-c", f"echo {n}-{i}; echo e{n}-{i} >&2"],
                cwd="/",
                env={},
                timeout=30,
                output_cap=MIB,
            ).stdout
            for i in range(8)
        ]

    try:
        with ThreadPoolExecutor(max_workers=6) as pool:
            results = list(pool.map(worker, range(6)))
        clients = {id(shared.engine.client()) for _ in range(3)}
    finally:
        shared.close()
    assert results == [[f"{n}-{i}\n".encode() for i in range(8)] for n in range(6)]
    assert len(clients) == 1


def test_non_utf8_output_is_kept_as_bytes(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    result = run(backend, sandbox, r"printf '\xff\xfe\x00ok\x80'; printf '\xc3\x28' >&2")
    assert result.stdout == b"\xff\xfe\x00ok\x80"
    assert result.stderr == b"\xc3\x28"


def test_on_output_streams_both_streams(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    seen: list[tuple[str, bytes]] = []
    result = run(
        backend,
        sandbox,
        "for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.05; done",
        on_output=lambda stream, chunk: seen.append((stream, chunk)),
    )
    assert b"".join(c for s, c in seen if s == "stdout") == result.stdout == b"out1\nout2\nout3\n"
    assert b"".join(c for s, c in seen if s == "stderr") == result.stderr == b"err1\nerr2\nerr3\n"


def test_stdin(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    data = bytes(range(256)) * 100
    result = run(backend, sandbox, "sha256sum; printenv SANDHUB_STDIN || echo unset", stdin=data)
    assert result.stdout.decode().split()[0] == hashlib.sha256(data).hexdigest()
    assert result.stdout.decode().split()[-1] == "unset"  # not leaked to the command
    with pytest.raises(Unsupported):
        run(backend, sandbox, "cat", stdin=b"x" * (docker_backend.MAX_STDIN_BYTES + 1))


def test_timeout_kills_the_command(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    started = time.monotonic()
    result = run(backend, sandbox, "echo before; sleep 600", timeout=2)
    elapsed = time.monotonic() - started
    assert result.timed_out
    assert result.exit_code in (None, 124, 137)
    assert result.stdout == b"before\n"
    assert 2 <= elapsed < 5
    assert "sleep 600" not in processes(backend, sandbox)


def test_timeout_kills_backgrounded_children(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    # `&` keeps the group; setsid leaves it (found by the marker); env -i drops the marker but
    # keeps the output pipe (found by the pipe).
    script = "sleep 601 & setsid sleep 602 >/dev/null 2>&1 & env -i sleep 603 & sleep 600"
    started = time.monotonic()
    result = run(backend, sandbox, script, timeout=2)
    assert result.timed_out and time.monotonic() - started < 5
    left = processes(backend, sandbox)
    for marker in ("sleep 600", "sleep 601", "sleep 602", "sleep 603"):
        assert marker not in left, left


def test_children_holding_the_output_do_not_hold_the_caller(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    started = time.monotonic()
    result = run(
        backend,
        sandbox,
        "sleep 611 & env -i sleep 612 & nohup sleep 613 >/dev/null 2>&1 & echo started",
        timeout=20,
    )
    assert time.monotonic() - started < 2
    assert result.exit_code == 0 and not result.timed_out
    assert result.stdout == b"started\n"
    left = processes(backend, sandbox)
    assert "sleep 611" not in left and "sleep 612" not in left
    assert "sleep 613" in left  # detached properly: a server the user meant to keep


def test_a_child_busy_before_its_redirect_is_given_time(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    # `cmd >log &` holds the pipes from the fork until the redirect; here the child computes
    # for some milliseconds first (runnable the whole time, well within the sweep's CPU
    # allowance), like a child that is slow to be scheduled under load. It must survive;
    # one that computes on with the pipes must not.
    started = time.monotonic()
    result = run(
        backend,
        sandbox,
        "(i=0; while [ $i -lt 10000 ]; do i=$((i + 1)); done; exec sleep 614 >/dev/null 2>&1) &"
        " (while :; do :; done) & echo started",
        timeout=20,
    )
    assert time.monotonic() - started < 3
    assert result.exit_code == 0 and result.stdout == b"started\n"
    left = processes(backend, sandbox)
    assert "sleep 614" in left
    # The spinning subshell (its command line is this script's) was killed after its grace.
    assert "echo started" not in left


def test_callers_own_deadline(
    backend: DockerBackend, sandbox: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Make the caller's deadline come before the in-sandbox one: timeout 30 + 2 - 31 = 1 s.
    monkeypatch.setattr(docker_backend, "_CLIENT_GRACE", -31.0)
    started = time.monotonic()
    result = run(backend, sandbox, "echo early; sleep 621 & sleep 620", timeout=30)
    assert time.monotonic() - started < 3
    assert result.timed_out and result.exit_code is None
    assert result.stdout == b"early\n"
    monkeypatch.undo()
    left = processes(backend, sandbox)
    assert "sleep 620" not in left and "sleep 621" not in left


def test_huge_output_is_capped_in_bounded_memory(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    chunks = 0

    def count(stream: str, chunk: bytes) -> None:
        nonlocal chunks
        chunks += 1

    before = _reset_peak_rss()
    result = run(
        backend, sandbox, "head -c 50000000 /dev/zero | tr '\\0' x; echo done >&2", on_output=count
    )
    growth = _peak_rss() - before
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes == 50_000_000
    assert result.stdout_truncated
    assert len(result.stdout) < MIB + 100  # head + tail + the "bytes cut" marker
    assert result.stdout.startswith(b"x" * 1000) and result.stdout.endswith(b"x" * 1000)
    assert result.stderr == b"done\n"
    assert chunks > 100
    print(f"peak RSS growth while streaming 50 MB: {growth / MIB:.1f} MiB")
    assert growth < 20 * MIB


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"{field} not in /proc/self/status")


def _reset_peak_rss() -> int:
    """Reset the peak (VmHWM) if the kernel lets us; return the baseline to compare with."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return _status_kb("VmRSS")
    except OSError:
        return _status_kb("VmHWM")


def _peak_rss() -> int:
    return _status_kb("VmHWM")


def test_fork_bomb_is_contained(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    other = backend.provision(make_spec())
    try:
        # The shell returns at once (the bomb runs in the background); what matters is that
        # the call comes back, the bomb dies, and both sandboxes still answer.
        started = time.monotonic()
        run(backend, sandbox, ":(){ :|:& };:", timeout=5)
        assert time.monotonic() - started < 12
        # Right away: the exec must not come back while the bomb, or the zombies it leaves
        # (charged to the pids limit until reaped), still take the pids this one needs.
        alive = run(backend, sandbox, "echo alive")
        assert alive.stdout == b"alive\n", alive
        neighbour = run(backend, other, "echo neighbour")
        assert neighbour.stdout == b"neighbour\n", neighbour
        count = run(backend, sandbox, "ps -e --no-headers | wc -l").stdout.decode()
        assert int(count) < 10  # the bomb is gone, not merely capped
    finally:
        backend.destroy(other)


def test_memory_hog_is_killed(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    result = run(
        backend, sandbox, "python3 -c \"x = b'x' * (1 << 30); print('survived')\"", timeout=60
    )
    assert result.exit_code == 137, result
    assert not result.timed_out
    assert b"survived" not in result.stdout
    assert run(backend, sandbox, "echo alive").stdout == b"alive\n"


# --- files -------------------------------------------------------------------------------------
def test_upload_download_round_trip(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    files = {
        "a.txt": (b"hello\n", 0o644),
        "sub/dir/blob.bin": (os.urandom(300_000) + bytes(range(256)), 0o600),
        "run.sh": (b"#!/bin/sh\necho ran\n", 0o755),
        "empty": (b"", 0o644),
    }
    backend.put_files(sandbox, "/workspace/up/load", make_tar(files))
    downloaded = read_tar(backend.get_files(sandbox, "/workspace/up/load"))
    assert downloaded == {f"load/{name}": content for name, (content, _) in files.items()}
    result = run(
        backend,
        sandbox,
        "./up/load/run.sh && stat -c '%u:%g %a %n' up/load/a.txt up/load/sub "
        "&& echo more >> up/load/a.txt && echo appended",
    )
    assert result.exit_code == 0, result
    lines = result.stdout.decode()
    assert "ran\n" in lines and "appended" in lines
    assert "99999:99999 644 up/load/a.txt" in lines
    assert "99999:99999" in lines.splitlines()[2]  # the implicit parent directory too


def test_root_owned_archive_becomes_the_sandbox_users(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    archive = make_tar({"root.txt": (b"r", 0o4755)}, uid=0)
    backend.put_files(sandbox, "/workspace", archive)
    result = run(backend, sandbox, "stat -c '%u:%g %a' root.txt && echo w >> root.txt")
    assert result.exit_code == 0, result
    assert result.stdout == b"99999:99999 755\n"


def test_upload_refuses_device_nodes(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("null")
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
        archive.addfile(info)
    with pytest.raises(BackendError, match="not a file"):
        backend.put_files(sandbox, "/workspace", buffer.getvalue())


def test_upload_outside_workspace_is_a_clear_error(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    archive = make_tar({"a": (b"a", 0o644)})
    for place in ("/tmp", "/usr/local/x", "/workspace/../etc"):
        with pytest.raises(BackendError, match="only be uploaded under /workspace"):
            backend.put_files(sandbox, place, archive)
    run(backend, sandbox, "mkdir /workspace/locked && chmod 555 /workspace/locked")
    with pytest.raises(BackendError, match="cannot create directory /workspace/locked/x"):
        backend.put_files(sandbox, "/workspace/locked/x", archive)


def test_download_from_tmpfs(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    # The engine's get_archive cannot see tmpfs mounts; the backend falls back to tar inside.
    run(
        backend,
        sandbox,
        "mkdir -p /tmp/out/d && printf one > /tmp/out/1 && printf two > "
        "/tmp/out/d/2 && printf home > ~/h",
    )
    assert read_tar(backend.get_files(sandbox, "/tmp/out")) == {"out/1": b"one", "out/d/2": b"two"}
    assert read_tar(backend.get_files(sandbox, "/home/sandbox/h")) == {"h": b"home"}
    with pytest.raises(FileNotFoundError):
        backend.get_files(sandbox, "/tmp/missing")


def test_missing_paths(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    with pytest.raises(FileNotFoundError):
        list(backend.get_files(sandbox, "/workspace/nope"))
    with pytest.raises(FileNotFoundError):
        backend.list_dir(sandbox, "/workspace/nope")


def test_list_dir(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    result = run(
        backend,
        sandbox,
        "mkdir -p d/sub && printf 12345 > d/five && ln -s five d/link && chmod 640 d/five "
        "&& touch d/$'\\xff'raw d/'new\nline'",
    )
    assert result.exit_code == 0, result
    entries = {e.name: e for e in backend.list_dir(sandbox, "/workspace/d")}
    assert set(entries) == {"sub", "five", "link", "\\xffraw", "new\nline"}
    assert entries["sub"].kind == "dir"
    assert entries["five"].kind == "file" and entries["five"].size == 5
    assert entries["five"].mode == "640" and entries["five"].path == "/workspace/d/five"
    assert entries["link"].kind == "link"
    assert abs(entries["five"].mtime - time.time()) < 120
    (single,) = backend.list_dir(sandbox, "/workspace/d/five")
    assert single.name == "five" and single.size == 5
    assert backend.list_dir(sandbox, "/workspace/d/sub") == []


# --- host --------------------------------------------------------------------------------------
def test_probe(backend: DockerBackend, spec: SandboxSpec, sandbox: dict[str, Any]) -> None:
    result = backend.probe()
    assert result.healthy, result.error
    assert result.sandboxes_running >= 1
    assert result.memory_percent is not None and 0 < result.memory_percent <= 100
    assert result.cpu_percent is not None and 0 < result.cpu_percent <= 100
    assert result.gpu_percent is None
    assert spec.sandbox_id in backend.list_sandbox_ids()


def test_probe_counts_claimed_pool_members_at_their_size_and_idle_ones_apart(
    backend: DockerBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    idle = backend.provision_pool_member(make_spec(memory_mb=256, cpus=1.0))
    member = backend.provision_pool_member(make_spec(memory_mb=256, cpus=1.0))
    plain = backend.provision(make_spec(memory_mb=128, cpus=0.5))
    states = [idle, member, plain]
    try:
        backend.claim_pool_member(member, make_spec(memory_mb=512, cpus=0.75))
        # Only this test's containers, whatever else runs on the engine meanwhile.
        api = backend.engine.api()
        listed, inspect = api.containers, api.inspect_container
        inspected: list[str] = []

        def ours(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
            found = listed(*args, **kwargs)
            return [c for c in found if any(RUN_PREFIX in n for n in c["Names"])]

        def counting(container: str) -> dict[str, Any]:
            inspected.append(container)
            return inspect(container)

        monkeypatch.setattr(api, "containers", ours)
        monkeypatch.setattr(api, "inspect_container", counting)
        result = backend.probe()
    finally:
        monkeypatch.undo()
        for state in states:
            backend.destroy(state)
    assert result.healthy, result.error
    assert result.sandboxes_running == 2  # the plain sandbox and the claimed member
    assert result.details["memory_committed_bytes"] == (512 + 128) * MIB
    assert result.details["cpus_committed"] == 1.25
    assert result.details["pool_idle"] == 1
    assert result.details["pool_memory_bytes"] == 256 * MIB
    assert result.details["pool_cpus"] == 1.0
    assert inspected == [member["container_id"]]  # labels suffice for the others


def test_probe_of_an_unreachable_engine_does_not_raise() -> None:
    bogus = DockerBackend(Host(name="bogus", kind="docker", endpoint="unix:///nonexistent.sock"))
    result = bogus.probe()
    assert not result.healthy
    assert result.error
    bogus.close()


def test_tls_material_is_written_privately_and_removed() -> None:
    credential = Credential(name="tls", kind=Credential.Kind.DOCKER_TLS)
    credential.set_secret('{"ca": "CA PEM", "cert": "CERT PEM", "key": "KEY PEM"}')
    host = Host(name="tls", kind="docker", endpoint="tcp://127.0.0.1:9", credential=credential)
    tls_backend = DockerBackend(host)
    config = tls_backend.engine._tls_config()
    directory = tls_backend.engine._tls_dir
    assert directory and os.stat(directory).st_mode & 0o777 == 0o700
    assert config.cert is not None
    key_path = config.cert[1]
    with open(key_path) as handle:
        assert handle.read() == "KEY PEM"
    assert os.stat(key_path).st_mode & 0o777 == 0o600
    assert not tls_backend.probe().healthy  # nothing listens there; reported, not raised
    tls_backend.close()
    assert not os.path.exists(directory)


def test_provision_timing(backend: DockerBackend) -> None:
    started = time.monotonic()
    state = backend.provision(make_spec())
    provisioned = time.monotonic() - started
    started = time.monotonic()
    backend.destroy(state)
    destroyed = time.monotonic() - started
    print(f"provision {provisioned * 1000:.0f} ms, destroy {destroyed * 1000:.0f} ms")
    assert provisioned < 10
