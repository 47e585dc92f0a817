"""The usage charts in a real headless Chromium against the live server and the real Docker
engine: the sandbox page loads its charts (htmx, no inline script or style under the CSP),
each an SVG image labelled with its latest value and range, memory against the sandbox's
limit; the hosts page draws each host's load. Screenshots under the test's tmp_path."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from hosts.backends import reset_backends
from hosts.models import Host, Image
from sandboxes import services
from sandboxes.housekeeping import usage
from sandboxes.models import Sandbox
from tenants.models import Channel, Membership, Role, Team
from tenants.principal import Principal
from tests.web.helpers import off_loop

pytestmark = pytest.mark.docker

PASSWORD = "correct-horse-battery"


def make_world() -> dict[str, Any]:
    reset_backends()
    team = Team.objects.create(slug="alpha", name="Team Alpha")
    user = get_user_model().objects.create_user("alice", password=PASSWORD)
    Membership.objects.create(user=user, team=team, role=Role.VIEWER)
    owner = get_user_model().objects.create_user("olga", password=PASSWORD)
    Membership.objects.create(user=owner, team=team, role=Role.OWNER)
    Image.objects.create(name="python", reference=settings.SANDHUB_SANDBOX_IMAGE, is_default=True)
    Host.objects.create(name="local", kind="docker", endpoint=settings.SANDHUB_DOCKER_URL)
    principal = Principal(user=owner, team=team, channel=Channel.WEB)
    info = services.create_sandbox(principal, name="charted", memory_mb=256)
    usage.sample_round()  # two samples: CPU % needs a pair
    usage.sample_round()
    services.probe_all_hosts(Principal.system())  # a host sample
    return {"principal": principal, "sandbox": info.id}


def leftovers(world: dict[str, Any]) -> None:
    if Sandbox.objects.get(public_id=world["sandbox"]).status != "deleted":
        services.delete_sandbox(world["principal"], world["sandbox"])


@pytest.fixture
def world(live_db, settings) -> Any:
    settings.SANDHUB_BACKENDS = {"docker": "hosts.backends.docker.DockerBackend"}
    made = off_loop(make_world)
    yield made
    off_loop(leftovers, made)
    reset_backends()


def test_a_viewer_sees_the_sandbox_and_host_charts(asgi_server, world, chromium, screenshots):
    server, sandbox_id = asgi_server, world["sandbox"]
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    refused: list[str] = []
    page.on("console", lambda m: refused.append(m.text) if "Content Security" in m.text else None)
    page.goto(f"{server}/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("#login-submit")
    page.wait_for_url(f"{server}/")

    page.goto(f"{server}/sandboxes/{sandbox_id}/")
    memory = page.wait_for_selector("#chart-memory svg[role=img]")
    label = memory.get_attribute("aria-label") or ""
    assert label.startswith("Memory: ") and " of 256 MiB now; last 60 minutes: " in label, label
    assert page.locator("#chart-memory svg title").text_content() == label
    assert page.locator("#chart-memory polyline, #chart-memory circle").count() >= 1
    cpu = page.locator("#chart-cpu svg").get_attribute("aria-label") or ""
    assert cpu.startswith("CPU: ") and "%" in cpu, cpu
    assert page.locator("#usage-charts svg[role=img]").count() == 4
    box = memory.bounding_box()
    assert box is not None and box["width"] > 100 and box["height"] > 10  # usage.css applied
    screenshots(page, "sandbox-usage")

    page.goto(f"{server}/hosts/")
    host_cpu = page.wait_for_selector("#chart-local-cpu svg[role=img]")
    assert (host_cpu.get_attribute("aria-label") or "").startswith("CPU: ")
    screenshots(page, "hosts-usage")
    assert refused == []
    context.close()
