"""Is requirements.lock closed under dependencies? Exit 1, naming what is missing, if not.

`make install` installs the lock with --no-deps, so nothing the lock leaves out is ever
installed, and nothing is resolved on the day. This walks the requirements from the two
pyproject.toml files (the platform with its dev extra, the client and its build backend)
through the metadata of the installed, locked packages, extras included (drf-pydantic needs
`pydantic[email]`, which needs email-validator: `pip check` does not follow extras), and
reports every requirement whose package is not pinned in the lock, or pinned at a version
the requirement does not allow, or installed at another version than the pin.

    .venv/bin/python scripts/check_lock.py        # after make install (it runs this)
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")

# A package's requirements (Requires-Dist strings), or None when it is not installed.
RequiresOf = Callable[[str], "list[str] | None"]


def locked_pins(text: str) -> dict[str, Version]:
    """name -> pinned version, from a pip-compile lock (`name==version \\` lines)."""
    pins = {}
    for line in text.splitlines():
        match = _PIN.match(line)
        if match:
            pins[canonicalize_name(match[1])] = Version(match[2])
    return pins


def root_requirements(root: Path = ROOT) -> list[str]:
    """What the project asks for: the platform with its dev extra, the client, its builder."""
    platform = tomllib.loads((root / "pyproject.toml").read_text())
    client = tomllib.loads((root / "client" / "pyproject.toml").read_text())
    return [
        *platform["project"]["dependencies"],
        *platform["project"]["optional-dependencies"]["dev"],
        *client["project"]["dependencies"],
        *client["build-system"]["requires"],
    ]


def _applies(requirement: Requirement, extras: frozenset[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in extras or {""})


def problems(
    roots: Iterable[str],
    pins: dict[str, Version],
    requires_of: RequiresOf,
    installed_version: Callable[[str], Version | None] = lambda name: None,
) -> list[str]:
    """Every way the lock fails to cover the requirements reachable from `roots`."""
    found: list[str] = []
    seen: set[tuple[str, frozenset[str]]] = set()
    stack = [(Requirement(text), "pyproject.toml") for text in roots]
    while stack:
        requirement, wanted_by = stack.pop()
        name = canonicalize_name(requirement.name)
        extras = frozenset(requirement.extras)
        pin = pins.get(name)
        if pin is None:
            found.append(f"{requirement} (wanted by {wanted_by}) is not in the lock")
            continue
        if not requirement.specifier.contains(pin, prereleases=True):
            found.append(f"{requirement} (wanted by {wanted_by}) does not allow the pin {pin}")
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        installed = installed_version(name)
        if installed is not None and installed != pin:
            found.append(f"{name} is installed at {installed}, the lock pins {pin}")
        requires = requires_of(name)
        if requires is None:
            found.append(f"{name}=={pin} is pinned but not installed: its requirements are unknown")
            continue
        label = f"{name}[{','.join(sorted(extras))}]" if extras else name
        for text in requires:
            child = Requirement(text)
            if _applies(child, extras):
                stack.append((child, label))
    return sorted(set(found))


def _installed_requires(name: str) -> list[str] | None:
    try:
        return importlib.metadata.distribution(name).requires or []
    except importlib.metadata.PackageNotFoundError:
        return None


def _installed_version(name: str) -> Version | None:
    try:
        return Version(importlib.metadata.version(name))
    except importlib.metadata.PackageNotFoundError:
        return None


def main() -> int:
    found = problems(
        root_requirements(), locked_pins(LOCK.read_text()), _installed_requires, _installed_version
    )
    if not found:
        return 0
    print("requirements.lock is not closed under dependencies:", file=sys.stderr)
    for line in found:
        print(f"  {line}", file=sys.stderr)
    print("Run 'make lock' to pin what is missing, then 'make install' again.", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
