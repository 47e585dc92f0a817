"""Sandboxes as Docker containers, driven through the docker SDK over the host's endpoint.

Each sandbox is one container plus one named volume, both called `sandhub-<sandbox id>`:

- the container runs as uid/gid 1000 with every capability dropped, no-new-privileges, a
  read-only root filesystem, memory (without swap), cpu and pids limits, and no network unless
  the team allows it; /tmp and /home/sandbox are size-limited tmpfs so pip --user works;
- /workspace is the named volume, because `put_archive` into a tmpfs mount reports success but
  the files never show up in the container (moby#22020).

Commands run through a small POSIX sh wrapper (see `_WRAPPER`) that enforces the timeout inside
the container with coreutils `timeout` and then sweeps up processes the command left behind:
those still holding its output pipes, and after a timeout also every process carrying the
exec's marker in its environment. The caller keeps its own deadline too: if the stream is still
open `timeout + _KILL_AFTER + _CLIENT_GRACE` seconds after the start, it stops reading and kills
every process carrying the marker from a second exec.

Measured on the development machine (engine 20.10, cgroup v1): exec of `true` ~45 ms,
provision ~170 ms, destroy ~45 ms.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import logging
import os
import posixpath
import shutil
import socket
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import docker
import docker.errors
import docker.tls
import requests

from hosts.backends.base import (
    LABEL_POOL,
    BackendError,
    ExecResult,
    FileEntry,
    HeadTailBuffer,
    OutputCallback,
    ProbeResult,
    SandboxBackend,
    SandboxGone,
    SandboxSpec,
    Unsupported,
)
from hosts.backends.docker_background import DockerBackgroundMixin
from hosts.backends.docker_pool import DockerPoolMixin

logger = logging.getLogger(__name__)

SANDBOX_UID = 1000
SANDBOX_GID = 1000
SANDBOX_USER = f"{SANDBOX_UID}:{SANDBOX_GID}"
WORKSPACE = "/workspace"
NAME_PREFIX = "sandhub-"

LABEL_MANAGED = "org.sandhub.managed"
LABEL_SANDBOX = "org.sandhub.sandbox"
# Limits are repeated as labels so a probe learns them from one list call, without an
# inspect per container.
LABEL_MEMORY = "org.sandhub.memory_bytes"
LABEL_NANO_CPUS = "org.sandhub.nano_cpus"

MARKER_ENV = "SANDHUB_EXEC_ID"
STDIN_ENV = "SANDHUB_STDIN"
# stdin travels base64-encoded in one environment variable, which Linux caps at 128 KiB
# (MAX_ARG_STRLEN); 64 KiB of raw bytes stays well under it once encoded.
MAX_STDIN_BYTES = 64 * 1024

_CLIENT_TIMEOUT = 60  # seconds, per engine request (not per command: exec streams have their own)
_KILL_AFTER = 2.0  # SIGTERM first; SIGKILL this long after, inside the container
_CLIENT_GRACE = 3.0  # on top of timeout + _KILL_AFTER before the caller gives up on the stream
_READ_SIZE = 64 * 1024
_ARCHIVE_CHUNK = 64 * 1024
_INTERNAL_TIMEOUT = 30.0  # mkdir, listing, kill sweeps
_LISTING_CAP = 16 * 1024 * 1024
_MISSING_EXIT = 44  # what _LIST and _EXISTS exit with for "no such path"

# Runs every command: sh -c _WRAPPER sandhub-exec CWD TIMEOUT KILL_AFTER ARGV...
# - cd in here so a bad cwd is an ordinary failed command with a message, like in a shell;
# - `timeout` puts the command in its own process group and signals the whole group, so
#   children backgrounded with `&` die with it;
# - in every case, whatever still holds our stdout/stderr pipes is killed: it would keep the
#   stream open (and the caller waiting) although the command is done. This needs no marker,
#   so `env -i` does not escape it. Processes that redirected their output
#   (`nohup server >log 2>&1 &`) keep running;
# - after a timeout, every other process carrying this exec's marker is killed too (that
#   catches what left the group, e.g. with setsid).
#
# The pipe sweep forks nothing (glob, `test -ef`, builtins only; dash exits on a failed fork),
# so it works when a fork bomb has used up the pids limit. It lists /proc, tests each process,
# and goes round again until a round is quiet: nothing held the pipes, every process that is
# new since the previous listing could be looked at, no process was spared in the previous
# round, and every process it killed has been reaped. Each condition closes a race seen under
# load:
# - a listed process may fork and exit before it is tested; its child is in no listing yet.
#   A fork bomb's processes do just that, so "found nobody" alone ended the sweep while the
#   bomb carried on in processes no round had listed. A process that was already listed in
#   the previous round was tested there (and killed, if it held the pipes), so only a new
#   one that is gone or exiting when tested can have passed the pipes on unseen;
# - killed processes stay zombies, charged to the pids limit, until tini reaps them: exiting
#   before that leaves the next exec unable to fork;
# - `cmd >log &` holds the pipes from the fork until its redirection, a millisecond of CPU
#   that under load may come late: a holder that is running or runnable (R) or in
#   uninterruptible sleep (D) and has had less than _SWEEP_SPARE_CPU_MS of CPU in all is
#   spared, for up to _SWEEP_SPARE_CS centiseconds after the command ended (not at all after
#   a timeout). Counting its CPU rather than the time that passed keeps a starved child safe
#   on a loaded host, and still kills soon a child that computes on with the pipes. A holder
#   that is sleeping (S) or stopped is waiting on something else and is killed at once.
# The sweep gives up after _SWEEP_LIMIT_CS centiseconds, within the caller's _CLIENT_GRACE.
# Time comes from /proc/uptime (read, no fork); rounds do not sleep, as sleep would fork.
_SWEEP_SPARE_CPU_MS = 100
_SWEEP_SPARE_CS = 100
_SWEEP_LIMIT_CS = 300
_WRAPPER = r"""
cd "$1" || exit 126
t=$2; k=$3; shift 3
s=${SANDHUB_STDIN-}; unset SANDHUB_STDIN
if [ -n "$s" ]; then
    printf %s "$s" | base64 -d | timeout -k "$k" "$t" "$@"
else
    timeout -k "$k" "$t" "$@"
fi
rc=$?
me=$$
clock() { read -r now _ < /proc/uptime; now=${now%.*}${now#*.}; }
sweep_pipes() {  # $1: centiseconds during which young running holders are spared
    clock; spare=$((now + $1)) end=$((now + LIMIT))
    listed= killed= spared=
    while :; do
        busy=$spared spared= cur= dead=
        for d in /proc/[0-9]*; do
            p=${d#/proc/}
            [ "$p" = "$me" ] && continue
            cur="$cur $p "
            case $killed in *" $p "*) dead="$dead $p "; busy=1; continue ;; esac
            if [ "$d/fd/1" -ef "/proc/$me/fd/1" ] || [ "$d/fd/2" -ef "/proc/$me/fd/2" ]; then
                busy=1
                if [ "$now" -lt "$spare" ]; then
                    { read -r line < "$d/stat"; } 2>/dev/null || continue
                    ran=0; { read -r ran _ < "$d/schedstat"; } 2>/dev/null
                    state=${line##*) }
                    case $state in
                    [RD]*) [ "$ran" -ge CPU_NS ] || { spared=1; continue; } ;;
                    esac
                fi
                kill -KILL "$p" 2>/dev/null; dead="$dead $p "
            elif [ ! -r "$d/fd" ]; then
                # Gone, exiting or a zombie by now: if it is new since the last listing, it
                # may have been a holder that forked and exited between the listing and here.
                case $listed in *" $p "*) ;; *) busy=1 ;; esac
            fi
        done
        [ -n "$busy" ] || return 0
        clock; [ "$now" -lt "$end" ] || return 1
        listed=$cur killed=$dead
    done
}
case $rc in
124|137)
    sweep_pipes 0
    for f in $(grep -lzxF "SANDHUB_EXEC_ID=$SANDHUB_EXEC_ID" /proc/[0-9]*/environ 2>/dev/null); do
        p=${f#/proc/}; p=${p%/environ}
        [ "$p" = "$me" ] || kill -KILL "$p" 2>/dev/null
    done ;;
*)
    sweep_pipes SPARE ;;
esac
exit $rc
"""
_WRAPPER = (
    _WRAPPER.replace("SPARE", str(_SWEEP_SPARE_CS))
    .replace("LIMIT", str(_SWEEP_LIMIT_CS))
    .replace("CPU_NS", str(_SWEEP_SPARE_CPU_MS * 1_000_000))
)

# Kills every process whose environment carries the marker given as $1, in rounds until none
# is left (a fork bomb keeps making more).
_KILL_MARKED = r"""
round=0
while [ $round -lt 50 ]; do
    round=$((round + 1))
    pids=$(grep -lzxF "SANDHUB_EXEC_ID=$1" /proc/[0-9]*/environ 2>/dev/null) || break
    for f in $pids; do
        p=${f#/proc/}; kill -KILL "${p%/environ}" 2>/dev/null
    done
done
exit 0
"""

# One find per listing, NUL-separated so any byte may appear in a name.
_LIST = r"""
fmt='%y\0%s\0%T@\0%m\0%f\0%p\0'
if [ -d "$1" ]; then exec find "$1" -mindepth 1 -maxdepth 1 -printf "$fmt"; fi
if [ -e "$1" ] || [ -L "$1" ]; then exec find "$1" -maxdepth 0 -printf "$fmt"; fi
echo "no such file or directory: $1" >&2; exit 44
"""
_LIST_FIELDS = 6
_KINDS = {"f": "file", "d": "dir", "l": "link"}

_EXISTS = r"""
[ -e "$1" ] || [ -L "$1" ] || exit 44
"""

# Names members after the basename of the path, as the engine's get_archive does.
_TAR = r"""
cd "$(dirname "$1")" && exec tar -cf - -- "$(basename "$1")"
"""

_MKDIR = r"""
mkdir -p -- "$1" || exit 1
[ -w "$1" ] || { echo "$1 is not writable by the sandbox user" >&2; exit 1; }
"""


class _Deadline(Exception):
    """The caller's own deadline passed while the command's stream was still open."""


class DockerBackend(DockerBackgroundMixin, DockerPoolMixin, SandboxBackend):
    kind = "docker"

    def __init__(self, host) -> None:
        super().__init__(host)
        self._lock = threading.Lock()
        self._client_obj: docker.DockerClient | None = None
        self._tls_dir: str | None = None

    # --- connection --------------------------------------------------------------------------
    def _client(self) -> docker.DockerClient:
        with self._lock:
            if self._client_obj is None:
                self._client_obj = self._connect()
            return self._client_obj

    def _api(self) -> docker.APIClient:
        return self._client().api

    def _connect(self) -> docker.DockerClient:
        """A client for the host's endpoint; the SDK asks the engine its API version here."""
        tls = self._tls_config()
        timeout = int(self.host.options.get("docker_timeout", _CLIENT_TIMEOUT))
        try:
            return docker.DockerClient(base_url=self.host.endpoint, timeout=timeout, tls=tls)
        except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
            self._drop_tls_dir()
            raise BackendError(
                f"cannot reach the docker engine of host {self.host} at {self.host.endpoint}: {exc}"
            ) from exc

    def _tls_config(self) -> docker.tls.TLSConfig | bool:
        credential = self.host.credential
        if credential is None:
            return False
        if credential.kind != "docker_tls":
            raise BackendError(
                f"host {self.host} has a {credential.kind} credential; a docker host takes "
                "docker_tls material (JSON with ca, cert and key)"
            )
        try:
            material = json.loads(credential.get_secret())
            pems = {name: material[name] for name in ("ca", "cert", "key")}
        except (ValueError, KeyError, TypeError) as exc:
            raise BackendError(
                f"credential {credential.name} must be JSON with PEM strings ca, cert and key"
            ) from exc
        # The SDK (and requests under it) take file paths, read on each new connection, so the
        # files live in a private directory for as long as the client does.
        self._drop_tls_dir()
        self._tls_dir = tempfile.mkdtemp(prefix="sandhub-tls-")  # mode 0700
        paths = {}
        for name, pem in pems.items():
            paths[name] = os.path.join(self._tls_dir, f"{name}.pem")
            descriptor = os.open(paths[name], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as handle:
                handle.write(pem)
        return docker.tls.TLSConfig(
            client_cert=(paths["cert"], paths["key"]), ca_cert=paths["ca"], verify=True
        )

    def _drop_tls_dir(self) -> None:
        if self._tls_dir:
            shutil.rmtree(self._tls_dir, ignore_errors=True)
            self._tls_dir = None

    def close(self) -> None:
        with self._lock:
            client, self._client_obj = self._client_obj, None
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()
            self._drop_tls_dir()

    @contextlib.contextmanager
    def _engine(self, what: str) -> Iterator[None]:
        """Turn SDK and transport errors into BackendError that says what was being done."""
        try:
            yield
        except BackendError:
            raise
        except docker.errors.APIError as exc:
            raise BackendError(f"{what} failed on host {self.host}: {_explain(exc)}") from exc
        except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
            raise BackendError(
                f"{what} failed: docker engine of host {self.host} "
                f"({self.host.endpoint}) is unreachable: {exc}"
            ) from exc

    # --- lifecycle ---------------------------------------------------------------------------
    def provision(self, spec: SandboxSpec) -> dict[str, Any]:
        name = NAME_PREFIX + spec.sandbox_id
        client = self._client()
        created: list[Callable[[], None]] = []  # undo steps, newest last
        try:
            with self._engine(f"creating sandbox {spec.sandbox_id}"):
                self._refuse_existing(client, name)
                client.volumes.create(name=name, labels=_identity_labels(spec.sandbox_id))
                created.append(lambda: self._remove_volume(name))
                container = self._create_container(client, spec, name)
                created.append(lambda: self._remove_container(container.id))
                container.start()
                self._check_started(container)
        except BaseException:
            for undo in reversed(created):
                with contextlib.suppress(Exception):
                    undo()
            raise
        return {"container_id": container.id, "container_name": name, "volume": name}

    def _refuse_existing(self, client: docker.DockerClient, name: str) -> None:
        # Volume creation is idempotent in the engine, so without this check a failed
        # provision would "clean up" (delete) the workspace of a sandbox that already exists.
        for collection in (client.containers, client.volumes):
            with contextlib.suppress(docker.errors.NotFound):
                collection.get(name)
                raise BackendError(f"{name} already exists on host {self.host}")

    def _create_container(self, client: docker.DockerClient, spec: SandboxSpec, name: str):
        memory = spec.memory_mb * 1024 * 1024
        nano_cpus = int(spec.cpus * 1_000_000_000)
        labels = {
            **spec.labels,
            **_identity_labels(spec.sandbox_id),
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
                network_mode="bridge" if spec.network else "none",
                read_only=True,
                tmpfs=self._tmpfs(spec),
                volumes={name: {"bind": WORKSPACE, "mode": "rw"}},
                working_dir=WORKSPACE,
                environment=dict(spec.env),
                labels=labels,
                # Sandboxes are long-lived workspaces: bring them back after an engine restart.
                restart_policy={"Name": "unless-stopped"},
            )
        except docker.errors.ImageNotFound as exc:
            raise BackendError(
                f"image {spec.image_reference} is not present on host {self.host} "
                "(nothing is pulled: build or load it there first)"
            ) from exc

    def _tmpfs(self, spec: SandboxSpec) -> dict[str, str]:
        # tmpfs pages count against the container's memory limit, so the sizes only stop one
        # directory from taking all of it. exec: pip --user puts scripts in ~/.local/bin and
        # builds run helpers from /tmp; noexec would break both and protect nothing, since
        # /workspace is executable anyway.
        size = int(self.host.options.get("tmpfs_mb", max(16, spec.memory_mb // 2)))
        common = f"rw,exec,nosuid,nodev,size={size}m"
        return {
            "/tmp": f"{common},mode=1777",
            "/home/sandbox": f"{common},mode=0755,uid={SANDBOX_UID},gid={SANDBOX_GID}",
        }

    def _check_started(self, container) -> None:
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
        container, volume = _names(state)
        with self._engine("removing sandbox"):
            if container:
                self._remove_container(container)
            if volume:
                self._remove_volume(volume)

    def _remove_container(self, ref: str) -> None:
        with contextlib.suppress(docker.errors.NotFound):
            self._api().remove_container(ref, force=True, v=True)

    def _remove_volume(self, name: str) -> None:
        # Right after a forced container removal the engine may still count the volume as in
        # use for a moment (409); retry briefly instead of leaking it.
        for attempt in range(20):
            try:
                self._api().remove_volume(name, force=True)
                return
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as exc:
                if exc.status_code != 409 or attempt == 19:
                    raise
                time.sleep(0.1)

    def status(self, state: dict[str, Any]) -> str:
        container, _ = _names(state)
        if not container:
            return "missing"
        with self._engine("inspecting sandbox"):
            try:
                info = self._api().inspect_container(container)
            except docker.errors.NotFound:
                return "missing"
        return "running" if info.get("State", {}).get("Status") == "running" else "stopped"

    # --- commands ----------------------------------------------------------------------------
    def exec(
        self,
        state: dict[str, Any],
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        timeout: float,
        output_cap: int,
        on_output: OutputCallback | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run argv as the sandbox user.

        stdin, if given, is handed to the command through the environment (base64), so it is
        limited to MAX_STDIN_BYTES; larger input raises Unsupported (upload a file instead).
        On timeout, exit_code is the kill code from inside the container (124 after SIGTERM,
        137 after SIGKILL) or None when the caller's own deadline had to cut the stream.
        """
        if not argv:
            raise BackendError("empty command")
        if timeout <= 0:
            raise BackendError("timeout must be positive")
        if stdin is not None and len(stdin) > MAX_STDIN_BYTES:
            raise Unsupported(
                f"stdin of {len(stdin)} bytes is over the docker backend's {MAX_STDIN_BYTES}-byte "
                "limit; upload a file and redirect from it instead"
            )
        container = _container_ref(state)
        marker = uuid.uuid4().hex
        environment = {**env, MARKER_ENV: marker}
        if stdin:
            environment[STDIN_ENV] = base64.b64encode(stdin).decode()
        command = [
            "sh",
            "-c",
            _WRAPPER,
            "sandhub-exec",
            cwd,
            f"{timeout:.3f}",
            f"{_KILL_AFTER:g}",
            *argv,
        ]
        out, err = HeadTailBuffer(output_cap), HeadTailBuffer(output_cap)
        started = time.monotonic()
        deadline = started + timeout + _KILL_AFTER + _CLIENT_GRACE
        exec_id, finished = self._run(
            container, command, environment, deadline, out, err, on_output, marker
        )
        duration = time.monotonic() - started
        exit_code = self._exit_code(exec_id, finished)
        # `timeout` exits 124 (or 137 if SIGKILL was needed); a command may exit so itself,
        # e.g. 137 when the OOM killer hits it, but not after running for the whole timeout.
        timed_out = not finished or (exit_code in (124, 137) and duration >= timeout)
        return ExecResult(
            exit_code=exit_code,
            stdout=out.getvalue(),
            stderr=err.getvalue(),
            stdout_bytes=out.total,
            stderr_bytes=err.total,
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            timed_out=timed_out,
            duration_seconds=duration,
        )

    def _run(
        self,
        container: str,
        command: list[str],
        environment: dict[str, str],
        deadline: float,
        out: HeadTailBuffer,
        err: HeadTailBuffer,
        on_output: OutputCallback | None,
        marker: str | None,
    ) -> tuple[str, bool]:
        """Start an exec and pump its output until EOF or the deadline.

        Returns (exec id, finished); finished is False when the deadline cut the stream, in
        which case the marked processes have been killed.
        """
        exec_id, stream = self._start(container, command, environment)
        buffers = {1: out, 2: err}
        names = {1: "stdout", 2: "stderr"}
        try:
            for kind, chunk in stream.frames(lambda: deadline):
                buffers.get(kind, err).write(chunk)
                if on_output is not None:
                    on_output(names.get(kind, "stderr"), chunk)
            return exec_id, True
        except _Deadline:
            stream.close()
            if marker:
                self._kill_marked(container, marker)
            return exec_id, False
        except BaseException:
            # A failing callback or an interrupt must not leave the command running.
            stream.close()
            if marker:
                self._kill_marked(container, marker)
            raise
        finally:
            stream.close()

    def _start(
        self, container: str, command: list[str], environment: dict[str, str]
    ) -> tuple[str, _ExecStream]:
        api = self._api()
        with self._engine("running a command"):
            try:
                exec_id = api.exec_create(
                    container,
                    command,
                    stdout=True,
                    stderr=True,
                    stdin=False,
                    tty=False,
                    environment=environment,
                    user=SANDBOX_USER,
                    workdir="/",
                )["Id"]
            except docker.errors.NotFound as exc:
                raise SandboxGone(f"sandbox container {container} no longer exists") from exc
            except docker.errors.APIError as exc:
                if exc.status_code == 409:
                    raise BackendError(f"sandbox container {container} is not running") from exc
                raise
            return exec_id, _ExecStream(api.exec_start(exec_id, socket=True))

    def _kill_marked(self, container: str, marker: str) -> None:
        """Best effort, from a second exec: the caller already has its answer (timed out)."""
        sink = HeadTailBuffer(4096)
        try:
            self._run(
                container,
                ["sh", "-c", _KILL_MARKED, "sandhub-kill", marker],
                {},
                time.monotonic() + _INTERNAL_TIMEOUT,
                sink,
                sink,
                None,
                None,
            )
        except Exception:
            logger.warning(
                "could not kill the processes of exec %s in %s on host %s",
                marker,
                container,
                self.host,
                exc_info=True,
            )

    def _exit_code(self, exec_id: str, finished: bool) -> int | None:
        """The exec's exit code; the engine may record it a moment after the stream closes."""
        api = self._api()
        for _ in range(100 if finished else 1):
            with self._engine("reading a command's exit code"):
                info = api.exec_inspect(exec_id)
            if not info.get("Running"):
                return info.get("ExitCode") if finished else None
            time.sleep(0.01)
        return None

    def _internal(
        self, state: dict[str, Any], script: str, *args: str, cap: int = 64 * 1024
    ) -> tuple[int | None, bytes, str]:
        """Run one of our own scripts; (exit code, stdout, stderr as text)."""
        result = self.exec(
            state,
            ["sh", "-c", script, "sandhub", *args],
            cwd="/",
            env={},
            timeout=_INTERNAL_TIMEOUT,
            output_cap=cap,
        )
        if result.timed_out:
            raise BackendError(f"the sandbox did not answer within {_INTERNAL_TIMEOUT:g} s")
        if result.stdout_truncated:
            raise BackendError("the answer was too large")
        return result.exit_code, result.stdout, result.stderr.decode("utf-8", "replace").strip()

    # --- files -------------------------------------------------------------------------------
    def put_files(self, state: dict[str, Any], dest_dir: str, tar_stream: bytes) -> None:
        """Unpack into dest_dir, which must be /workspace or below.

        Everything else writable in a sandbox is tmpfs, where the engine's archive upload
        reports success but the files never appear (moby#22020): refuse rather than lose them.
        """
        container = _container_ref(state)
        dest_dir = posixpath.normpath(dest_dir)
        if dest_dir != WORKSPACE and not dest_dir.startswith(WORKSPACE + "/"):
            raise BackendError(
                f"files can only be uploaded under {WORKSPACE}, not into {dest_dir} "
                "(the docker engine cannot write into the sandbox's tmpfs mounts)"
            )
        archive = _owned_by_sandbox(tar_stream)
        if dest_dir != WORKSPACE:  # the volume's root always exists; skip the round trip
            code, _, message = self._internal(state, _MKDIR, dest_dir)
            if code != 0:
                raise BackendError(f"cannot create directory {dest_dir}: {message}")
        with self._engine(f"writing files into {dest_dir}"):
            try:
                ok = self._api().put_archive(container, dest_dir, archive)
            except docker.errors.NotFound as exc:
                raise SandboxGone(f"sandbox container {container} no longer exists") from exc
        if not ok:
            raise BackendError(f"the engine refused the archive for {dest_dir}")

    def get_files(self, state: dict[str, Any], path: str) -> Iterator[bytes]:
        """A tar of path, requested right away so a missing path raises here, not mid-stream.

        The engine cannot see into tmpfs mounts (/tmp, /home/sandbox) and answers "not found"
        for them; when the path does exist inside, tar runs in the sandbox instead.
        """
        container = _container_ref(state)
        api = self._api()
        invisible = False
        with self._engine(f"reading {path}"):
            try:
                chunks, _stat = api.get_archive(container, path, chunk_size=_ARCHIVE_CHUNK)
            except docker.errors.NotFound:
                self._require_container(container)
                invisible = True
        if not invisible:
            return self._guarded(chunks, f"reading {path}")
        code, _, message = self._internal(state, _EXISTS, path)
        if code == _MISSING_EXIT:
            raise FileNotFoundError(path)
        if code != 0:
            raise BackendError(f"cannot read {path}: {message}")
        return self._tar_in_sandbox(container, path)

    def _tar_in_sandbox(self, container: str, path: str) -> Iterator[bytes]:
        """tar's output, streamed; each read may wait up to _INTERNAL_TIMEOUT for the next."""
        _, stream = self._start(container, ["sh", "-c", _TAR, "sandhub-tar", path], {})
        errors = HeadTailBuffer(4096)
        try:
            for kind, chunk in stream.frames(lambda: time.monotonic() + _INTERNAL_TIMEOUT):
                if kind == 1:
                    yield chunk
                else:
                    errors.write(chunk)
        except _Deadline as exc:
            raise BackendError(f"reading {path} stalled") from exc
        finally:
            stream.close()
        if errors.total:
            message = errors.getvalue().decode("utf-8", "replace").strip()
            raise BackendError(f"reading {path}: {message}")

    def _guarded(self, chunks: Iterable[bytes], what: str) -> Iterator[bytes]:
        with self._engine(what):
            yield from chunks

    def _require_container(self, container: str) -> None:
        try:
            self._api().inspect_container(container)
        except docker.errors.NotFound as exc:
            raise SandboxGone(f"sandbox container {container} no longer exists") from exc

    def list_dir(self, state: dict[str, Any], path: str) -> list[FileEntry]:
        code, listing, message = self._internal(state, _LIST, path, cap=_LISTING_CAP)
        if code == _MISSING_EXIT:
            raise FileNotFoundError(path)
        if code != 0 and not listing:
            raise BackendError(f"cannot list {path}: {message}")
        # Unreadable subdirectories make find exit 1 but still list the rest: keep what we got.
        return _parse_listing(listing)

    # --- host --------------------------------------------------------------------------------
    def probe(self) -> ProbeResult:
        """Health, and what the host's sandboxes have been given, from one list call.

        Sandboxes are the running sandhub containers that are not idle warm-pool members: an
        idle member is capacity on hand, not load, so it is counted apart (in details) and
        not in the committed figures. A claimed member is a sandbox like any other, but its
        limit labels are the pool's (labels are fixed at creation and a claim changes the
        limits), so its limits come from an inspect: one per claimed member, none otherwise.
        """
        try:
            api = self._api()
            api.ping()
            info = api.info()
            running = api.containers(filters={"label": f"{LABEL_MANAGED}=1", "status": "running"})
            sandboxes = [c for c in running if not _idle_pool_member(c)]
            idle = [c for c in running if _idle_pool_member(c)]
            memory, nano_cpus = self._committed(sandboxes)
            idle_memory, idle_nano_cpus = self._committed(idle)
        except Exception as exc:  # a probe reports, it never raises
            return ProbeResult(healthy=False, error=str(exc) or type(exc).__name__)
        mem_total = int(info.get("MemTotal") or 0)
        ncpu = int(info.get("NCPU") or 0)
        return ProbeResult(
            healthy=True,
            cpu_percent=min(100.0, nano_cpus / (ncpu * 1e9) * 100) if ncpu else None,
            memory_percent=min(100.0, memory / mem_total * 100) if mem_total else None,
            gpu_percent=None,
            sandboxes_running=len(sandboxes),
            details={
                "server_version": info.get("ServerVersion", ""),
                "ncpu": ncpu,
                "mem_total_bytes": mem_total,
                "memory_committed_bytes": memory,
                "cpus_committed": nano_cpus / 1e9,
                "pool_idle": len(idle),
                "pool_memory_bytes": idle_memory,
                "pool_cpus": idle_nano_cpus / 1e9,
                "containers_running": info.get("ContainersRunning", 0),
                "cgroup_version": info.get("CgroupVersion", ""),
            },
        )

    def _committed(self, containers: list[dict[str, Any]]) -> tuple[int, int]:
        """Sum of memory and cpu limits: from the labels where they still hold, else inspect.

        Labels hold for a container made for its sandbox or an idle pool member; a claimed
        pool member, or a container without them, is inspected.
        """
        memory = nano_cpus = 0
        for summary in containers:
            labels = summary.get("Labels") or {}
            if (
                LABEL_MEMORY in labels
                and LABEL_NANO_CPUS in labels
                and not _claimed_pool_member(summary)
            ):
                memory += int(labels[LABEL_MEMORY])
                nano_cpus += int(labels[LABEL_NANO_CPUS])
                continue
            with contextlib.suppress(docker.errors.NotFound):  # removed since the list
                config = self._api().inspect_container(summary["Id"])["HostConfig"]
                memory += int(config.get("Memory") or 0)
                nano_cpus += int(config.get("NanoCpus") or 0)
        return memory, nano_cpus

    def list_sandbox_ids(self) -> Iterable[str]:
        """Ids of every sandhub container (running or not) and every sandhub volume."""
        api = self._api()
        selector = {"label": f"{LABEL_MANAGED}=1"}
        with self._engine("listing sandboxes"):
            containers = api.containers(all=True, filters=selector)
            volumes = api.volumes(filters=selector).get("Volumes") or []
        ids = {(c.get("Labels") or {}).get(LABEL_SANDBOX) for c in containers}
        ids |= {(v.get("Labels") or {}).get(LABEL_SANDBOX) for v in volumes}
        return sorted(i for i in ids if i)


class _ExecStream:
    """Reads a hijacked exec connection and splits the engine's multiplexed frames.

    Frames are an 8-byte header (stream 1 = stdout, 2 = stderr; 4-byte big-endian length) and
    a payload. Reads go through the HTTP response's buffered reader when there is one: it may
    already hold the first output bytes, read along with the response headers, which reading
    the raw socket (as the SDK's own stream helpers do) would lose.
    """

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        response = getattr(sock, "_response", None)
        fp = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
        self._reader = fp if isinstance(fp, io.BufferedReader) else None
        self._response = response
        # The object whose timeout bounds a blocking read (socket, SSL socket, SSH channel).
        self._timed = getattr(sock, "_sock", sock)
        self._header = bytearray()
        self._kind = 0
        self._left = 0
        self._closed = False

    def frames(self, deadline: Callable[[], float]) -> Iterator[tuple[int, bytes]]:
        """(stream, chunk) pairs until EOF; `deadline()` is asked before each read."""
        while True:
            data = self._read(deadline())
            if not data:
                return
            yield from self._split(data)

    def _read(self, deadline: float) -> bytes:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _Deadline
        self._timed.settimeout(remaining)
        try:
            if self._reader is not None:
                return self._reader.read1(_READ_SIZE)
            if hasattr(self._sock, "recv"):
                return self._sock.recv(_READ_SIZE)
            return self._sock.read(_READ_SIZE) or b""
        except TimeoutError as exc:
            raise _Deadline from exc

    def _split(self, data: bytes) -> Iterator[tuple[int, bytes]]:
        view = memoryview(data)
        while view:
            if self._left == 0:
                need = 8 - len(self._header)
                self._header += view[:need]
                view = view[need:]
                if len(self._header) < 8:
                    return
                self._kind = self._header[0]
                self._left = int.from_bytes(self._header[4:8], "big")
                self._header.clear()
                continue
            piece = view[: self._left]
            view = view[len(piece) :]
            self._left -= len(piece)
            yield self._kind, bytes(piece)

    def close(self) -> None:
        # The connection was hijacked: it can never go back to the pool, so close it for good.
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._timed.shutdown(socket.SHUT_RDWR)
        for closable in (self._response, self._sock, self._timed):
            with contextlib.suppress(Exception):
                if closable is not None:
                    closable.close()


def _identity_labels(sandbox_id: str) -> dict[str, str]:
    return {LABEL_MANAGED: "1", LABEL_SANDBOX: sandbox_id}


def _claimed_pool_member(summary: dict[str, Any]) -> bool:
    """A warm-pool container that a sandbox has claimed: the claim renamed it.

    An idle member is named after the pool id written in its labels (`sandhub-<pool id>`);
    a claim renames it after the sandbox, and its labels keep the pool id.
    """
    labels = summary.get("Labels") or {}
    if labels.get(LABEL_POOL) != "1":
        return False
    names = [name.lstrip("/") for name in summary.get("Names") or []]
    return NAME_PREFIX + labels.get(LABEL_SANDBOX, "") not in names


def _idle_pool_member(summary: dict[str, Any]) -> bool:
    labels = summary.get("Labels") or {}
    return labels.get(LABEL_POOL) == "1" and not _claimed_pool_member(summary)


def _names(state: dict[str, Any]) -> tuple[str, str]:
    """(container ref, volume name) from a state; a bare sandbox_id is enough (reconciliation)."""
    fallback = NAME_PREFIX + state["sandbox_id"] if state.get("sandbox_id") else ""
    container = state.get("container_id") or state.get("container_name") or fallback
    volume = state.get("volume") or fallback
    return container, volume


def _container_ref(state: dict[str, Any]) -> str:
    container, _ = _names(state)
    if not container:
        raise SandboxGone("the sandbox has no container recorded")
    return container


def _explain(exc: docker.errors.APIError) -> str:
    return str(exc.explanation or exc)


def _owned_by_sandbox(tar_stream: bytes) -> bytes:
    """The archive with every member owned by the sandbox user and no set-id bits.

    The engine extracts as root and keeps the owners written in the archive, and the sandbox
    user cannot chown (no capabilities), so root-owned files would be stuck read-only. Parent
    directories the archive only implies are created root-owned too, so they are added as
    members. Archives that are already right (what the services build) go through as they
    are, uncopied. Device nodes and fifos are refused: nothing in a workspace needs them.
    """
    try:
        with tarfile.open(fileobj=io.BytesIO(tar_stream), mode="r:*") as archive:
            members = archive.getmembers()
            for member in members:
                if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
                    raise BackendError(
                        f"archive member {member.name} is not a file, directory or link"
                    )
                if _member_path(member).split("/")[0] == "..":
                    raise BackendError(f"archive member {member.name} leaves the destination")
            listed = {_member_path(m) for m in members if m.isdir()}
            implied = {d for m in members for d in _parents(_member_path(m))} - listed
            if not implied and all(_well_owned(m) for m in members):
                return tar_stream
            return _rebuilt(archive, members, listed)
    except tarfile.TarError as exc:
        raise BackendError(f"not a valid tar archive: {exc}") from exc


def _rebuilt(archive: tarfile.TarFile, members: list[tarfile.TarInfo], listed: set[str]) -> bytes:
    output = io.BytesIO()
    with tarfile.open(fileobj=output, mode="w", format=tarfile.PAX_FORMAT) as out:
        for member in members:
            for parent in _parents(_member_path(member)):
                if parent not in listed:
                    listed.add(parent)
                    directory = tarfile.TarInfo(parent)
                    directory.type, directory.mode, directory.mtime = (
                        tarfile.DIRTYPE,
                        0o755,
                        member.mtime,
                    )
                    out.addfile(_owned(directory))
            content = archive.extractfile(member) if member.isfile() else None
            out.addfile(_owned(member), content)
    return output.getvalue()


def _owned(member: tarfile.TarInfo) -> tarfile.TarInfo:
    member.uid, member.gid = SANDBOX_UID, SANDBOX_GID
    member.uname = member.gname = "sandbox"
    member.mode &= 0o1777
    return member


def _member_path(member: tarfile.TarInfo) -> str:
    return posixpath.normpath(member.name.lstrip("/")).removeprefix("./")


def _parents(path: str) -> list[str]:
    """Ancestors of a relative archive path, outermost first ("a/b/c" -> ["a", "a/b"])."""
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts)) if parts[i] not in ("", ".", "..")]


def _well_owned(member: tarfile.TarInfo) -> bool:
    return member.uid == SANDBOX_UID and member.gid == SANDBOX_GID and not member.mode & 0o6000


def _parse_listing(listing: bytes) -> list[FileEntry]:
    fields = listing.split(b"\0")
    if fields and fields[-1] == b"":
        fields.pop()
    entries = []
    for i in range(0, len(fields) - _LIST_FIELDS + 1, _LIST_FIELDS):
        kind, size, mtime, mode, name, path = fields[i : i + _LIST_FIELDS]
        entries.append(
            FileEntry(
                name=name.decode("utf-8", "backslashreplace"),
                path=path.decode("utf-8", "backslashreplace"),
                kind=_KINDS.get(kind.decode(), "other"),
                size=int(size),
                mtime=float(mtime),
                mode=mode.decode(),
            )
        )
    return entries
