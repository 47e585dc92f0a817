"""E2B's own Python SDK (the `e2b` package from PyPI, unchanged) against a live Sandhub: the
platform under uvicorn on loopback (tests/conftest.py: asgi_server), a real Docker engine,
and the SDK in its documented self-hosted configuration: E2B_API_URL at the control API,
E2B_SANDBOX_URL at envd, the API key a Sandhub API key, HTTP/1.1 (uvicorn has no HTTP/2)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def e2b_env(asgi_server: str, world, monkeypatch_module) -> dict[str, str]:
    settings = {
        "E2B_API_URL": f"{asgi_server}/e2b",
        "E2B_SANDBOX_URL": f"{asgi_server}/e2b/envd",
        "E2B_API_KEY": world.keys["alice"],
        "E2B_HTTP_VERSION": "1.1",
        "E2B_DOMAIN": "sandhub.invalid",  # never resolved: both URLs above are given
    }
    for name, value in settings.items():
        monkeypatch_module.setenv(name, value)
    return settings


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.fixture(scope="module")
def sbx(e2b_env: dict[str, str]) -> Iterator[Any]:
    """One sandbox made by the SDK for the module, killed by it after."""
    from e2b import Sandbox

    sandbox = Sandbox.create(timeout=600)
    yield sandbox
    sandbox.kill()
