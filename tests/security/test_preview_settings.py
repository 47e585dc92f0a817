"""Start-up says what the previews' settings get wrong (issue 24): a preview domain on the
platform's own site (registrable domain) is a system check Warning (manage.py check and
migrate) and one log line when the web process loads the proxy; shares of the proxy's
threads that cannot fit are refused at start."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys

import pytest
from django.core.management import call_command

from sandboxes.proxy import sites
from tests.live import ROOT


@pytest.mark.parametrize(
    ("host", "site"),
    [
        ("sandhub.example.com", "example.com"),
        ("8000-sb-x.preview.sandhub.example.com", "example.com"),
        ("SandHub.Example.COM.", "example.com"),
        (".example.com", "example.com"),  # ALLOWED_HOSTS' "this and its subdomains"
        ("sandhub.example.co.uk", "example.co.uk"),
        ("x.sandhub-preview.com.au", "sandhub-preview.com.au"),
        ("8000-sb-x.sandhub-preview.net", "sandhub-preview.net"),
        ("example.com:8443", "example.com"),
        ("8000-sb-x.preview.localhost", "preview.localhost"),
        ("8000-sb-x.localhost", "8000-sb-x.localhost"),
        ("localhost", "localhost"),
        ("127.0.0.1", None),
        ("[::1]", None),
        ("::1", None),
        ("*", None),
        ("", None),
    ],
)
def test_the_site_of_a_host_name(host, site):
    assert sites.site_of(host) == site


SHARED = [
    ("preview.sandhub.example.com", ["sandhub.example.com"]),
    ("sandhub.example.com", [".sandhub.example.com"]),
    ("previews.example.co.uk", ["127.0.0.1", "app.example.co.uk"]),
    ("preview.localhost", ["app.preview.localhost"]),
]
APART = [
    ("", ["sandhub.example.com"]),
    ("sandhub-preview.net", ["sandhub.example.com"]),
    ("previews.other.co.uk", ["app.example.co.uk"]),
    ("localhost", ["localhost", "127.0.0.1"]),
    ("preview.localhost", ["localhost", "[::1]"]),
    ("preview.example.com", ["*", "10.0.0.1"]),
]


@pytest.mark.parametrize(("domain", "hosts"), SHARED)
def test_a_preview_domain_on_the_platforms_site_is_a_warning(settings, domain, hosts):
    settings.SANDHUB_PREVIEW_DOMAIN, settings.ALLOWED_HOSTS = domain, hosts
    [warning] = sites.check_preview_site()
    assert warning.id == "sandhub.W024" and warning.level == logging.WARNING
    assert domain in warning.msg and "sandhub-preview.net" in warning.hint


@pytest.mark.parametrize(("domain", "hosts"), APART)
def test_a_preview_domain_of_its_own_is_fine(settings, domain, hosts):
    settings.SANDHUB_PREVIEW_DOMAIN, settings.ALLOWED_HOSTS = domain, hosts
    assert sites.check_preview_site() == []


def test_manage_py_check_shows_it(settings):
    settings.SANDHUB_PREVIEW_DOMAIN = "preview.sandhub.example.com"
    settings.ALLOWED_HOSTS = ["sandhub.example.com"]
    out, err = io.StringIO(), io.StringIO()
    call_command("check", stdout=out, stderr=err)
    said = out.getvalue() + err.getvalue()
    assert "sandhub.W024" in said and "preview.sandhub.example.com" in said


def test_the_web_process_logs_it_once(settings, caplog):
    settings.SANDHUB_PREVIEW_DOMAIN = "preview.sandhub.example.com"
    settings.ALLOWED_HOSTS = ["sandhub.example.com"]
    with caplog.at_level(logging.WARNING, logger="sandhub.previews"):
        sites.log_shared_site()
    [line] = [r for r in caplog.records if r.name == "sandhub.previews"]
    assert "example.com" in line.getMessage() and "\n" not in line.getMessage()
    caplog.clear()
    settings.SANDHUB_PREVIEW_DOMAIN = "sandhub-preview.net"
    sites.log_shared_site()
    assert caplog.records == []


def _settings_with(**env: str) -> subprocess.CompletedProcess:
    """Import the settings module in a fresh interpreter with these variables."""
    return subprocess.run(
        [sys.executable, "-c", "import platform_site.settings"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_shares_that_cannot_fit_in_the_pool_are_refused_at_start():
    assert _settings_with().returncode == 0  # the defaults fit
    too_many = _settings_with(SANDHUB_PREVIEW_THREADS="100", SANDHUB_PREVIEW_TEAM_CONNECTIONS="30")
    assert too_many.returncode != 0
    assert "SANDHUB_PREVIEW_TEAM_CONNECTIONS (30) x 2 threads" in too_many.stderr
    assert "at least 120" in too_many.stderr
    inverted = _settings_with(
        SANDHUB_PREVIEW_SANDBOX_CONNECTIONS="30", SANDHUB_PREVIEW_TEAM_CONNECTIONS="20"
    )
    assert inverted.returncode != 0 and "must not exceed" in inverted.stderr
