"""Every module of the product stands in a layer of the import-linter contract "layers"
(pyproject.toml), so `make lint` checks its imports: a new module cannot fall outside."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def contract() -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]} | {"_roots": config["root_packages"]}


def product_modules(roots: list[str]) -> list[str]:
    modules = []
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if len(parts) > 1:  # a root package's own __init__ holds nothing
                modules.append(".".join(parts))
    return modules


def layered(layers: list[str]) -> set[str]:
    return {name for layer in layers for name in re.split(r"[\s:|]+", layer) if name}


def outside(modules: list[str], names: set[str]) -> list[str]:
    return [m for m in modules if not any(m == n or m.startswith(n + ".") for n in names)]


def test_every_module_of_the_product_is_in_a_layer() -> None:
    config = contract()
    modules = product_modules(config["_roots"])
    assert len(modules) > 150
    assert outside(modules, layered(config["layers"]["layers"])) == []


def test_the_check_sees_a_module_outside_the_layers() -> None:
    names = layered(["sandboxes.services : sandboxes.api", "tenants.models | hosts.backends"])
    modules = ["sandboxes.api.views", "sandboxes.newthing", "hosts.backends.x.y", "hosts.admin"]
    assert outside(modules, names) == ["sandboxes.newthing", "hosts.admin"]
