"""Adding a host in one step, for fleets set up by script (`manage.py add_host`): platform
admins only, audited, and nothing saved until the host has shown it is the one meant and works.

An SSH host is never trusted on first use. `read_host_key` reads the key the host presents
(no login, nothing saved) so the admin can compare it with the key on the machine itself;
`add_host` with that fingerprint reads the key again and refuses a different one before any
secret is sent, logs in, probes, and only then saves the credential (encrypted) and the host
with its key pinned, in one transaction. A Docker engine (unix://, tcp:// with TLS material,
ssh://) is probed the same way before it is saved. Every refusal leaves an audit row that
says what the host presented; no secret ever reaches a message or a row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import SplitResult, urlsplit

from django.db import IntegrityError
from django.utils import timezone

from hosts.backends import backend_class
from hosts.backends.base import BackendError, HostKey, HostKeyRejected, ProbeResult
from hosts.models import Credential, Host
from sandboxes.contract.errors import (
    BackendFailure,
    Conflict,
    InvalidInput,
    NotFound,
    PermissionDenied,
)
from sandboxes.contract.results import HostInfo, HostKeyInfo
from sandboxes.housekeeping import probes
from sandboxes.policy import access
from sandboxes.services.hosts import _host_info
from tenants.auditing import AUDIT_READ, audited, change, current
from tenants.models import Team
from tenants.principal import Principal

SSH_PORT = 22
DOCKER_SCHEMES = ("unix", "tcp", "ssh")
NOTHING_SAVED = "nothing was saved"


@dataclass(frozen=True)
class LoginSecret:
    """How Sandhub logs in to a new host: a Credential's kind and secret. Never in repr()."""

    kind: str  # a Credential.Kind value
    secret: str = field(repr=False)
    passphrase: str = field(default="", repr=False)  # a private key's, if it has one

    @classmethod
    def password(cls, password: str) -> LoginSecret:
        return cls(Credential.Kind.PASSWORD, password)

    @classmethod
    def private_key(cls, text: str, passphrase: str = "") -> LoginSecret:
        return cls(Credential.Kind.PRIVATE_KEY, text, passphrase)

    @classmethod
    def docker_tls(cls, ca: str, cert: str, key: str) -> LoginSecret:
        """TLS material in the JSON the Docker backend reads (as admin's credential form)."""
        return cls(Credential.Kind.DOCKER_TLS, json.dumps({"ca": ca, "cert": cert, "key": key}))


@dataclass(frozen=True)
class _Endpoint:
    kind: str  # "ssh" | "docker"
    stored: str  # what Host.endpoint holds: "address:port" for SSH, the URL for Docker
    scheme: str
    username: str  # the SSH login; "" for Docker


@audited("host.key.read", "host", kind=AUDIT_READ)
def read_host_key(principal: Principal, endpoint: str) -> HostKeyInfo:
    """The key the SSH host at `endpoint` (ssh://USER@ADDRESS[:PORT]) presents, read during
    key exchange: no login, nothing saved. The admin compares its fingerprint with the one
    `ssh-keygen -lf` prints on the host before adding it with `add_host(fingerprint=...)`."""
    _require_admin(principal)
    where = _endpoint("ssh", endpoint)
    current().details["endpoint"] = where.stored
    # The backend wants a login to be built; reading the key never uses it.
    login = Credential(kind=Credential.Kind.PASSWORD, username=where.username)
    login.set_secret("")
    key = _fetch_key(Host(name=where.stored, kind="ssh", endpoint=where.stored, credential=login))
    current().details.update({"fingerprint": key.fingerprint, "key_type": key.key_type})
    return HostKeyInfo(
        host=where.stored, key_type=key.key_type, fingerprint=key.fingerprint, pinned=""
    )


@audited("host.add", "host")
def add_host(
    principal: Principal,
    name: str,
    endpoint: str,
    *,
    kind: str = "",
    login: LoginSecret | None = None,
    fingerprint: str = "",
    base_dir: str = "",
    team: str = "",
    max_sandboxes: int | None = None,
) -> HostInfo:
    """Check the host, then save it (and its credential) in one transaction.

    kind: "ssh" or "docker"; empty: "ssh" for an ssh:// endpoint, else "docker". An SSH host
    needs `login` (password or private key) and `fingerprint` (SHA256:..., compared with the
    key the host presents before any login); a Docker engine over tcp:// needs TLS material,
    over unix:// or ssh:// nothing (ssh:// uses the keys and known_hosts of the user Sandhub
    runs as). `team`: a team's slug, for a host private to it. The probe must pass; its
    details (sudo, per-sandbox users, isolation, GPUs, engine version) come back in `details`.
    """
    _require_admin(principal)
    where = _endpoint(kind, endpoint)
    current().details.update({"name": name, "kind": where.kind, "endpoint": where.stored})
    owner = _team(team)
    current().team = owner
    _check_name(name)
    _check_login(where, login)
    credential = _credential(name, where, login)
    host = Host(
        name=name,
        kind=where.kind,
        endpoint=where.stored,
        credential=credential,
        team=owner,
        base_dir=_base_dir(where, base_dir),
    )
    if max_sandboxes is not None:
        host.max_sandboxes = _max_sandboxes(max_sandboxes)
    if where.kind == "ssh":
        _pin(host, fingerprint)
    elif fingerprint:
        raise InvalidInput("only an SSH host has a host key to pin; a Docker engine has none")
    result = _probe(host)
    _save(host, credential, result)
    current().target("host", host.pk)
    return _host_info(host).model_copy(update={"details": result.details})


# --- checks ----------------------------------------------------------------------------------


def _require_admin(principal: Principal) -> None:
    current().target("host", "")
    if not access.is_platform_admin(principal):
        raise PermissionDenied("only platform admins add hosts")


def _endpoint(kind: str, endpoint: str) -> _Endpoint:
    text = (endpoint or "").strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise InvalidInput(f"{text!r} is not a host URL") from None
    if parts.password is not None:
        raise InvalidInput("no password in the endpoint: secrets never go on a command line")
    kind = kind or ("ssh" if parts.scheme == "ssh" else "docker")
    if kind == "ssh":
        return _ssh_endpoint(text, parts, port)
    if kind != "docker":
        raise InvalidInput(f"host kind must be ssh or docker, not {kind!r}")
    if parts.scheme not in DOCKER_SCHEMES or not (parts.hostname or parts.path):
        raise InvalidInput(
            f"{text!r} is not a Docker endpoint: unix:///var/run/docker.sock, "
            "tcp://ADDRESS:2376 or ssh://USER@ADDRESS"
        )
    return _Endpoint("docker", text, parts.scheme, parts.username or "")


def _ssh_endpoint(text: str, parts: SplitResult, port: int | None) -> _Endpoint:
    if parts.scheme != "ssh" or not parts.username or not parts.hostname:
        raise InvalidInput(f"{text!r} is not an SSH endpoint: ssh://USER@ADDRESS[:PORT]")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise InvalidInput(f"{text!r}: an SSH endpoint has no path (ssh://USER@ADDRESS[:PORT])")
    address = parts.hostname
    port = port or SSH_PORT
    stored = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
    return _Endpoint("ssh", stored, "ssh", parts.username)


def _team(slug: str) -> Team | None:
    if not slug:
        return None
    team = Team.objects.filter(slug=slug).first()
    if team is None:
        raise NotFound(f"no team with slug {slug!r}")
    return team


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name.strip() or len(name) > 200 or name != name.strip():
        raise InvalidInput("a host's name is 1 to 200 characters, no surrounding spaces")
    if Host.objects.filter(name=name).exists():
        raise Conflict(f"a host named {name} exists already")
    # The credential is named after its host: one made by hand may hold the name.
    if Credential.objects.filter(name=name).exists():
        raise Conflict(f"a credential named {name} exists already: pick another host name")


def _check_login(where: _Endpoint, login: LoginSecret | None) -> None:
    kind = login.kind if login is not None else None
    if where.kind == "ssh":
        if kind not in (Credential.Kind.PASSWORD, Credential.Kind.PRIVATE_KEY):
            raise InvalidInput("an SSH host needs a login: a private key or a password")
        if login is not None and not login.secret:
            raise InvalidInput("the SSH login's password or key is empty")
    elif where.scheme == "tcp":
        if kind != Credential.Kind.DOCKER_TLS:
            raise InvalidInput(
                "a Docker engine over tcp:// is added only with TLS material (CA, client "
                "certificate and key): a plain TCP engine is root for anyone who reaches it"
            )
    elif login is not None:
        how = (
            "the local socket needs none"
            if where.scheme == "unix"
            else "the Docker SDK logs in with the keys and known_hosts of the user Sandhub runs as"
        )
        raise InvalidInput(f"a Docker engine over {where.scheme}:// takes no credential: {how}")


def _credential(name: str, where: _Endpoint, login: LoginSecret | None) -> Credential | None:
    if login is None:
        return None
    credential = Credential(name=name, kind=login.kind, username=where.username)
    credential.set_secret(login.secret)  # encrypted from here on
    credential.set_passphrase(login.passphrase)
    return credential


def _base_dir(where: _Endpoint, base_dir: str) -> str:
    if not base_dir:
        return ""
    if where.kind != "ssh":
        raise InvalidInput("a base directory is for SSH hosts (Docker sandboxes have volumes)")
    if not base_dir.startswith("/") or base_dir.rstrip("/") == "" or "\x00" in base_dir:
        raise InvalidInput(
            f"the base directory must be an absolute path other than /: {base_dir!r}"
        )
    return base_dir


def _max_sandboxes(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput("max_sandboxes must be a whole number of at least 1")
    return value


def _normal_fingerprint(value: str) -> str:
    text = (value or "").strip()
    if not text.startswith("SHA256:") or len(text) <= len("SHA256:"):
        raise InvalidInput(
            "an SSH host is added with its host key's SHA256 fingerprint (SHA256:...), compared "
            "with what `ssh-keygen -lf` prints on the host: read the key first, nothing is "
            "saved then"
        )
    return text.rstrip("=")  # ssh-keygen prints none; other tools pad the base64


# --- talking to the host ---------------------------------------------------------------------


def _fetch_key(host: Host) -> HostKey:
    """What the host presents, read without a login (no secret is sent)."""
    try:
        backend = backend_class(host.kind)(host)
    except BackendError as exc:
        raise InvalidInput(str(exc)) from exc
    try:
        return backend.fetch_host_key()
    except BackendError as exc:
        raise BackendFailure(f"could not read the host key of {host.endpoint}: {exc}") from exc
    finally:
        backend.close()


def _pin(host: Host, fingerprint: str) -> None:
    """Pin `fingerprint` if it is the key the host presents; else refuse before any login."""
    wanted = _normal_fingerprint(fingerprint)
    key = _fetch_key(host)
    current().details.update(
        {"fingerprint": wanted, "presented": key.fingerprint, "key_type": key.key_type}
    )
    if key.fingerprint != wanted:
        raise Conflict(_mismatch(host.endpoint, key.key_type, key.fingerprint, wanted))
    host.host_key_pinned = host.host_key_seen = key.fingerprint
    host.host_key_type = key.key_type  # the server is asked for this key from now on
    host.host_key_seen_at = timezone.now()


def _mismatch(where: str, key_type: str, presented: str, wanted: str) -> str:
    return (
        f"{where} presented the host key {key_type} {presented}, not {wanted}: {NOTHING_SAVED} "
        "and no login was sent. Compare again with the key on the host (`ssh-keygen -lf "
        "/etc/ssh/ssh_host_*_key.pub`, the one of this type): if the host was reinstalled "
        "that is its new key; if not, something may stand between you and the host"
    )


def _probe(host: Host) -> ProbeResult:
    """Log in (SSH: with the pin just checked) and probe; the probe must pass."""
    try:
        backend = backend_class(host.kind)(host)
    except BackendError as exc:
        raise InvalidInput(f"{host.endpoint}: {exc}") from exc
    try:
        result = backend.probe()
    except HostKeyRejected as exc:  # the key changed since it was read a moment ago
        current().details["presented"] = exc.fingerprint
        raise Conflict(
            _mismatch(host.endpoint, exc.key_type, exc.fingerprint, host.host_key_pinned)
        ) from exc
    except BackendError as exc:  # login refused, key unusable, host gone
        text = str(exc) if host.endpoint in str(exc) else f"{host.endpoint}: {exc}"
        raise BackendFailure(f"{text}; {NOTHING_SAVED}") from exc
    finally:
        backend.close()  # the saved host gets connections of its own
    if not result.healthy:
        current().details["probe_error"] = result.error[:1000]
        raise BackendFailure(
            f"{host.endpoint} did not pass its probe: {result.error or 'no detail'}; "
            f"{NOTHING_SAVED}"
        )
    return result


def _save(host: Host, credential: Credential | None, result: ProbeResult) -> None:
    try:
        with change() as draft:  # the host, its credential and the host.add row together
            if credential is not None:
                credential.save()
                host.credential = credential
            host.save()
            draft.target("host", host.pk)
            probes.record_probe(host, result)  # health, load, sudo, GPUs, as probes store them
    except IntegrityError as exc:
        raise Conflict(f"a host or credential named {host.name} was added meanwhile") from exc
