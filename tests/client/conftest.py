"""Fixtures of the client's tests against a live platform (test_cli_live.py on Docker,
test_cli_ssh.py on SSH hosts): the environment the `sandhub` command runs in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CLIENT = Path(__file__).resolve().parents[2] / "client"


@pytest.fixture(scope="module")
def cli_env(asgi_server, world, tmp_path_factory) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDHUB_")}
    python_path = os.pathsep.join(filter(None, [str(CLIENT), env.get("PYTHONPATH")]))
    return env | {
        "SANDHUB_URL": asgi_server,
        "SANDHUB_API_KEY": world.keys["alice"],
        "XDG_CONFIG_HOME": str(tmp_path_factory.mktemp("config")),  # no stored login
        "PYTHONPATH": python_path,  # the checkout's client, installed or not
    }
