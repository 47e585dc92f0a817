"""Input checks shared by every service: each failure is an InvalidInput that says what is
wrong, raised before anything changes."""

from __future__ import annotations

import posixpath
import re
from typing import Any

from django.conf import settings

from sandboxes.contract.errors import InvalidInput

WORKSPACE = "/workspace"
SANDBOX_ID_RE = re.compile(r"^sb_[a-z0-9]{6,29}$")
SNAPSHOT_ID_RE = re.compile(r"^snap_[a-z0-9]{6,27}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A pip requirement: name, extras, version specifiers, markers. Never an option ("-...").
PACKAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-\[\],<>=!~*+ ;:'\"()@/]*$")
MAX_COMMAND_CHARS = 100_000
MAX_NAME_CHARS = 100


def sandbox_id(value: Any) -> str:
    if not isinstance(value, str) or not SANDBOX_ID_RE.match(value):
        raise InvalidInput(
            f"malformed sandbox id {str(value)[:40]!r}: ids look like sb_ followed by "
            "lowercase letters and digits"
        )
    return value


def no_nul(value: str, what: str) -> str:
    if "\x00" in value:
        raise InvalidInput(f"{what} contains a NUL byte")
    return value


def command(value: Any, what: str = "command") -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a string")
    if not value.strip():
        raise InvalidInput(f"{what} is empty")
    if len(value) > MAX_COMMAND_CHARS:
        raise InvalidInput(f"{what} is longer than {MAX_COMMAND_CHARS} characters")
    return no_nul(value, what)


def timeout(value: Any, what: str = "timeout") -> float:
    if value is None:
        return float(settings.SANDHUB_DEFAULT_TIMEOUT_SECONDS)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{what} must be a number of seconds")
    maximum = settings.SANDHUB_MAX_TIMEOUT_SECONDS
    if not 0 < value <= maximum:
        raise InvalidInput(f"{what} must be between 0 and {maximum} seconds; got {value}")
    return float(value)


def output_cap(value: Any) -> int:
    maximum = settings.SANDHUB_OUTPUT_CAP_BYTES
    if value is None:
        return maximum
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise InvalidInput(f"output cap must be an integer between 1 and {maximum} bytes")
    return value


def path(value: Any, what: str = "path", *, under_workspace: bool = False) -> str:
    """An absolute, normalised path; relative ones are taken from /workspace."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty string")
    no_nul(value, what)
    if len(value) > 4096:
        raise InvalidInput(f"{what} is longer than 4096 characters")
    full = posixpath.normpath(posixpath.join(WORKSPACE, value))
    if full.startswith("//"):
        full = full[1:]
    if under_workspace and not (full == WORKSPACE or full.startswith(WORKSPACE + "/")):
        raise InvalidInput(f"{what} must be inside {WORKSPACE}; got {value!r}")
    return full


def env(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInput("env must be a mapping of names to string values")
    if len(value) > 200:
        raise InvalidInput("env has more than 200 variables")
    for name, item in value.items():
        if not isinstance(name, str) or not ENV_NAME_RE.match(name):
            raise InvalidInput(f"env name {str(name)[:40]!r} is not a valid variable name")
        if not isinstance(item, str):
            raise InvalidInput(f"env value of {name} must be a string")
        no_nul(item, f"env value of {name}")
    return dict(value)


def name(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_NAME_CHARS:
        raise InvalidInput(f"name must be a string of at most {MAX_NAME_CHARS} characters")
    return no_nul(value.strip(), "name")


MAX_METADATA_ENTRIES = 50
MAX_METADATA_KEY_CHARS = 128
MAX_METADATA_VALUE_CHARS = 1024


def metadata(value: Any) -> dict[str, str]:
    """A sandbox's labels: at most 50 string keys (1-128 characters) and string values (at
    most 1024); None is none."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInput("metadata must be an object of strings")
    if len(value) > MAX_METADATA_ENTRIES:
        raise InvalidInput(f"metadata has more than {MAX_METADATA_ENTRIES} entries")
    for key, item in value.items():
        if not isinstance(key, str) or not 0 < len(key) <= MAX_METADATA_KEY_CHARS:
            raise InvalidInput(f"metadata keys are 1 to {MAX_METADATA_KEY_CHARS} characters")
        if not isinstance(item, str) or len(item) > MAX_METADATA_VALUE_CHARS:
            raise InvalidInput(
                f"metadata {key[:40]!r}: values are strings of at most "
                f"{MAX_METADATA_VALUE_CHARS} characters"
            )
        no_nul(key, "metadata key")
        no_nul(item, "metadata value")
    return dict(value)


def packages(value: Any) -> list[str]:
    if isinstance(value, str):
        value = value.split()
    if not isinstance(value, list) or not value:
        raise InvalidInput("packages must be a non-empty list of requirement strings")
    if len(value) > 100:
        raise InvalidInput("at most 100 packages per call")
    for item in value:
        if not isinstance(item, str) or not PACKAGE_RE.match(item.strip()) or len(item) > 200:
            raise InvalidInput(f"{str(item)[:60]!r} is not a package requirement")
    return [item.strip() for item in value]


def positive_int(value: Any, what: str, *, minimum: int = 0, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInput(f"{what} must be an integer of at least {minimum}")
    if maximum is not None and value > maximum:
        raise InvalidInput(f"{what} must be at most {maximum}")
    return value
