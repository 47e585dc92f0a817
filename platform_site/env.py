"""Small typed readers for settings taken from the environment.

Each one rejects a malformed value with an error that names the variable, so a typo in a
deployment fails at start-up instead of silently falling back to a default.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from pathlib import Path

from platform_site.private_files import private_directory, write_private_file


class EnvError(ValueError):
    pass


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise EnvError(f"{name} must be one of 1/0, true/false, yes/no, on/off; got {raw!r}")


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, default).strip().lower() or default
    if value not in choices:
        raise EnvError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
    return value


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise EnvError(f"{name} must be an integer; got {raw!r}") from exc
    if minimum is not None and value < minimum:
        raise EnvError(f"{name} must be at least {minimum}; got {value}")
    return value


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_token(name: str, *, min_length: int = 32) -> str:
    """A bearer token an operator sets ("" when unset: the feature it guards is off). A short
    one, or one with spaces, is refused: it would be guessed, or fail to match in a header."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return ""
    if len(raw) < min_length or any(char.isspace() or not char.isprintable() for char in raw):
        raise EnvError(
            f"{name} must be at least {min_length} printable characters without spaces "
            "(e.g. the output of `openssl rand -hex 32`)"
        )
    return raw


def env_host_map(name: str) -> dict[str, str]:
    """A map of names to IP addresses written "name=ip,name=ip" (the egress proxy's operator
    overrides); an entry that is not a name and an address is an error naming it."""
    mapping: dict[str, str] = {}
    for entry in env_list(name):
        host, sep, address = (part.strip() for part in entry.partition("="))
        try:
            ipaddress.ip_address(address)
        except ValueError:
            address = ""
        if not sep or not host or not address:
            raise EnvError(f"{name}: {entry!r} is not name=ip (like api.test=127.0.0.1)")
        mapping[host.lower().rstrip(".")] = address
    return mapping


def secret_from_file(name: str, path: Path, generate) -> str:
    """The variable's value, else the content of `path`, generated there on first use.

    Lets a fresh checkout run without any configuration while keeping the secret out of
    the repository (`var/` is ignored by git).
    """
    value = os.environ.get(name)
    if value:
        return value
    if path.exists():
        return path.read_text().strip()
    private_directory(path.parent)
    value = generate()
    write_private_file(path, value + "\n")
    return value


def generate_django_secret() -> str:
    return secrets.token_urlsafe(50)
