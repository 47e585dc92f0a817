"""The connection to one host's Docker engine, and the mapping of its errors to BackendError.

One client per host per process, made on first use: the SDK asks the engine its API version
when it connects. TLS material from the host's credential is written to a private directory
for as long as the client lives, since the SDK (and requests under it) only take file paths.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import docker
import docker.errors
import docker.tls
import requests

from hosts.backends.base import BackendError

if TYPE_CHECKING:
    from hosts.models import Host

_CLIENT_TIMEOUT = 60  # seconds, per engine request (not per command: exec streams have their own)


class Engine:
    """The engine of one host. `host` is replaced by the backend when the registry hands it a
    fresh row (flags, options), so readers always see the caller's copy."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._lock = threading.Lock()
        self._client_obj: docker.DockerClient | None = None
        self._tls_dir: str | None = None

    def client(self) -> docker.DockerClient:
        with self._lock:
            if self._client_obj is None:
                self._client_obj = self._connect()
            return self._client_obj

    def api(self) -> docker.APIClient:
        return self.client().api

    def _connect(self) -> docker.DockerClient:
        """A client for the host's endpoint; the SDK asks the engine its API version here."""
        tls = self._tls_config()
        timeout = int(self.host.options.get("docker_timeout", _CLIENT_TIMEOUT))
        try:
            client = docker.DockerClient.__new__(docker.DockerClient)
            client.api = _EngineApi(base_url=self.host.endpoint, timeout=timeout, tls=tls)
            return client
        except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
            self._drop_tls_dir()
            raise BackendError(
                f"cannot reach the docker engine of host {self.host} at {self.host.endpoint}: "
                f"{_tls_hint(exc)}{exc}"
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
    def errors(self, what: str) -> Iterator[None]:
        """Turn SDK and transport errors into BackendError that says what was being done."""
        try:
            yield
        except BackendError:
            raise
        except docker.errors.APIError as exc:
            raise BackendError(f"{what} failed on host {self.host}: {explain(exc)}") from exc
        except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
            raise BackendError(
                f"{what} failed: docker engine of host {self.host} "
                f"({self.host.endpoint}) is unreachable: {exc}"
            ) from exc


# What an SSL error's text means for an operator adding an engine, before its raw text.
_TLS_HINTS = (
    ("CERTIFICATE_VERIFY_FAILED", "TLS: the engine's certificate is not signed by the CA given "
     "(or does not name this address). "),
    ("ALERT_BAD_CERTIFICATE", "TLS: the engine refused the client certificate (not signed by "
     "the CA the engine trusts). "),
    ("ALERT_CERTIFICATE_REQUIRED", "TLS: the engine wants a client certificate. "),
)  # fmt: skip


def _tls_hint(exc: BaseException) -> str:
    text = str(exc)
    return next((hint for marker, hint in _TLS_HINTS if marker in text), "")


class _EngineApi(docker.APIClient):
    """The SDK's client, keeping the host's CA for its engine: requests otherwise lets
    REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE (set on many machines for the public CAs) replace a
    session's CA file on every request, and a TLS engine's own CA then fails verification."""

    def merge_environment_settings(
        self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any
    ) -> Any:
        return super().merge_environment_settings(
            url, proxies, stream, self.verify if verify is None else verify, cert
        )


def explain(exc: docker.errors.APIError) -> str:
    return str(exc.explanation or exc)
