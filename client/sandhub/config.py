"""Where the client finds the platform and its API key.

SANDHUB_URL and SANDHUB_API_KEY in the environment win (CI, agents); otherwise what
`sandhub login` stored in $XDG_CONFIG_HOME/sandhub/config.json. The file holds a secret, so it
is written 0600 inside a 0700 directory, created that way rather than chmod-ed after (no
moment where another user could read it).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

URL_ENV = "SANDHUB_URL"
KEY_ENV = "SANDHUB_API_KEY"


class ConfigError(Exception):
    """No usable configuration: the message says what to set or run."""


@dataclass(frozen=True)
class Config:
    url: str  # the platform's base address, e.g. http://127.0.0.1:8000 (no /api/v1)
    key: str  # shk_...


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "sandhub" / "config.json"


def normalize_url(url: str) -> str:
    """The base address without a trailing slash (and without /mcp/ or /api/v1/, which people
    paste from the README's examples)."""
    url = url.strip().rstrip("/")
    for suffix in ("/mcp", "/api/v1"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"the platform's URL must start with http:// or https:// (got {url!r})")
    return url


def stored() -> dict[str, str]:
    """What `sandhub login` saved, or {} when nothing (or something unreadable) is there."""
    try:
        data = json.loads(config_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def load() -> Config:
    """The configuration in force: environment first, then the stored file."""
    saved = stored()
    url = os.environ.get(URL_ENV) or saved.get("url")
    key = os.environ.get(KEY_ENV) or saved.get("key")
    if not url or not key:
        missing = " and ".join(
            name for name, value in ((URL_ENV, url), (KEY_ENV, key)) if not value
        )
        raise ConfigError(f"{missing} not set: export it, or run `sandhub login`")
    return Config(url=normalize_url(url), key=key.strip())


def save(url: str, key: str) -> Path:
    """Store the URL and key for later runs (0600 file in a 0700 directory); returns its path."""
    path = config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)  # an existing directory may have been made wider
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(descriptor, 0o600)  # a leftover temporary file may have had another mode
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump({"url": normalize_url(url), "key": key.strip()}, handle)
            handle.write("\n")
        os.replace(temporary, path)  # atomic: a reader sees the old file or the new one
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path
