"""The systemd units of deploy/systemd/ pass `systemd-analyze verify` without a word, rendered
with this checkout's paths (verify checks that every ExecStart binary exists), and the
EnvironmentFile example names only settings the platform reads."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")
# What each unit is verified as: the web unit is a template, verified through an instance.
VERIFIED = ["sandhub-web@8001.service", "sandhub-worker.service", "sandhub-egress.service"]


def render(directory: Path, extra: str = "") -> Path:
    """The units with /opt/sandhub as this checkout and the env file in `directory`."""
    env_file = directory / "sandhub.env"
    env_file.write_text((UNITS / "sandhub.env.example").read_text())
    for unit in UNITS.glob("*.service"):
        text = unit.read_text().replace("/opt/sandhub", str(ROOT))
        text = text.replace("/etc/sandhub/sandhub.env", str(env_file))
        if extra:
            text = text.replace("\n[Install]", f"\n{extra}\n\n[Install]")
        (directory / unit.name).write_text(text)
    return directory


def verify(directory: Path) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None
    return subprocess.run(
        [ANALYZE, "verify", "--man=no", *(f"./{name}" for name in VERIFIED)],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
    )


@needs_analyze
def test_the_units_verify_without_any_warning(tmp_path):
    done = verify(render(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "" and done.stderr.strip() == "", done.stdout + done.stderr


@needs_analyze
def test_verify_would_report_a_broken_unit(tmp_path):
    """The check above can fail: an unknown key in the units is reported."""
    done = verify(render(tmp_path, extra="[Service]\nNoSuchSetting=1"))
    assert "NoSuchSetting" in done.stdout + done.stderr


def test_the_web_unit_runs_one_uvicorn_per_port_with_a_graceful_stop():
    web = (UNITS / "sandhub-web@.service").read_text()
    assert "ExecStart=/opt/sandhub/scripts/web.sh" in web
    assert "SANDHUB_BIND_PORT=%i" in web and "SANDHUB_WEB_WORKERS=1" in web
    graceful = int(re.search(r"UVICORN_TIMEOUT_GRACEFUL_SHUTDOWN=(\d+)", web)[1])
    stop = int(re.search(r"TimeoutStopSec=(\d+)", web)[1])
    assert graceful < stop  # uvicorn finishes its requests before systemd's SIGKILL
    worker = (UNITS / "sandhub-worker.service").read_text()
    assert "KillMode=mixed" in worker  # SIGTERM to qcluster's guard alone, which stops workers


def test_the_environment_example_names_only_settings_the_platform_reads():
    example = (UNITS / "sandhub.env.example").read_text()
    names = re.findall(r"^#?([A-Z][A-Z0-9_]+)=", example, flags=re.MULTILINE)
    sources = "".join(
        path.read_text()
        for folder in ("platform_site", "scripts")
        for path in (ROOT / folder).rglob("*")
        if path.suffix in (".py", ".sh")
    )
    read_by_uvicorn = {"FORWARDED_ALLOW_IPS"}
    unknown = [name for name in names if f'"{name}"' not in sources and name not in read_by_uvicorn]
    assert names and not unknown, unknown
