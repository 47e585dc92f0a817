"""The sandhub client's configuration (login file, environment) and command-line parsing, and
that the package imports nothing of Django or the platform."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from sandhub import config
from sandhub.cli import remote_spec


def test_login_file_is_private_and_the_environment_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.delenv("SANDHUB_URL", raising=False)
    monkeypatch.delenv("SANDHUB_API_KEY", raising=False)
    with pytest.raises(config.ConfigError, match="SANDHUB_URL and SANDHUB_API_KEY not set"):
        config.load()

    path = config.save("http://h:8000/mcp/", "shk_saved")

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert config.load() == config.Config("http://h:8000", "shk_saved")
    monkeypatch.setenv("SANDHUB_API_KEY", "shk_env")
    assert config.load().key == "shk_env"


def test_remote_specs():
    assert remote_spec("sb_abc:proj/x") == ("sb_abc", "proj/x")
    assert remote_spec("scratch:") == ("scratch", "/workspace")
    assert remote_spec("./a:b") is None and remote_spec("/tmp/x") is None


def test_the_client_imports_no_django_and_no_platform_code():
    modules = "sandhub.cli, sandhub.sync, sandhub.api, sandhub.transfer, sandhub.progress"
    forbidden = ("django", "sandboxes", "tenants", "hosts", "mcp_bridge", "platform_site")
    code = (
        f"import sys; import {modules}; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {forbidden!r}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "client")
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd="/"
    )
    assert (result.returncode, result.stdout.strip()) == (0, "[]"), result.stderr
