"""Reconciliation (sandboxes/housekeeping/reconcile.py): old orphans of this instance removed
and no one else's, sandboxes whose container vanished marked lost; on the in-memory backend,
then on the real Docker engine. Fixtures: tests/services/housekeeping/conftest.py."""

from __future__ import annotations

import uuid

import pytest

from hosts.backends import get_backend
from hosts.backends.base import LABEL_INSTANCE, SandboxSpec
from sandboxes import services, tasks
from sandboxes.models import Sandbox
from tenants.models import Channel
from tests.fakes import FakeBackend
from tests.services.housekeeping.helpers import INSTANCE, SYSTEM, audit_of, engine_has, status_of

# --- in-memory backend -----------------------------------------------------------------------


def _fake_container(backend: FakeBackend, sandbox_id: str, instance: str, age_s: float) -> str:
    spec = SandboxSpec(sandbox_id, "img", 1.0, 256, 64, False, labels={LABEL_INSTANCE: instance})
    key = backend.provision(spec)["container_id"]
    backend.sandboxes[key]["created"] -= age_s
    return key


def test_reconcile_removes_old_orphans_of_this_instance_only(
    fake_backend, as_alice, docker_host, settings
):
    settings.SANDHUB_ORPHAN_GRACE_SECONDS = 60
    backend = get_backend(docker_host)
    live = services.create_sandbox(as_alice)
    for box in fake_backend.sandboxes.values():  # the live sandbox is old too
        box["created"] -= 3600
    old_orphan = _fake_container(backend, "sb_orphan00000", INSTANCE, 3600)
    young_orphan = _fake_container(backend, "sb_young000000", INSTANCE, 5)
    elsewhere = _fake_container(backend, "sb_elsewhere00", "another-deployment", 3600)

    report = services.reconcile_hosts(SYSTEM)

    assert report.removed == ["sb_orphan00000"] and report.lost == []
    assert old_orphan not in fake_backend.sandboxes
    assert {young_orphan, elsewhere} <= set(fake_backend.sandboxes)
    assert status_of(live.id) == "running"
    row = audit_of("reconcile.orphan_removed")
    assert (row.channel, row.target_id) == (Channel.SYSTEM, "sb_orphan00000")


def test_reconcile_marks_a_sandbox_whose_container_vanished_lost(fake_backend, as_alice, team_a):
    info = services.create_sandbox(as_alice)
    kept = services.create_sandbox(as_alice)
    fake_backend.sandboxes.pop(Sandbox.objects.get(public_id=info.id).backend_state["container_id"])

    assert services.reconcile_hosts(SYSTEM).lost == [info.id]
    assert status_of(info.id) == "lost" and status_of(kept.id) == "running"
    row = audit_of("sandbox.lost")
    assert (row.team, row.target_id, row.channel) == (team_a, info.id, Channel.SYSTEM)
    # A lost sandbox can still be deleted by its owner, and is no longer reported.
    services.delete_sandbox(as_alice, info.id)
    assert services.reconcile_hosts(SYSTEM).lost == []


# --- on the real Docker engine ---------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.django_db
def test_real_reconcile_removes_orphans_and_finds_lost_sandboxes(
    real_docker, as_alice, engine, settings
):
    settings.SANDHUB_ORPHAN_GRACE_SECONDS = 0
    # An orphan: labelled as this deployment's sandbox, with a volume, and no Sandbox row.
    orphan_id = f"sb_orphan{uuid.uuid4().hex[:6]}"
    labels = {
        "org.sandhub.managed": "1",
        "org.sandhub.sandbox": orphan_id,
        LABEL_INSTANCE: INSTANCE,
    }
    engine.volumes.create(f"sandhub-{orphan_id}", labels=dict(labels))
    engine.containers.run(
        settings.SANDHUB_SANDBOX_IMAGE,
        name=f"sandhub-{orphan_id}",
        labels=labels,
        network_mode="none",
        volumes={f"sandhub-{orphan_id}": {"bind": "/workspace", "mode": "rw"}},
        detach=True,
    )
    # A sandbox whose container someone removed behind the platform's back (docker rm -f).
    vanished = services.create_sandbox(as_alice, memory_mb=128)
    engine.containers.get(f"sandhub-{vanished.id}").remove(force=True)
    kept = services.create_sandbox(as_alice, memory_mb=128)

    report = tasks.reconcile()

    assert report["removed"] == [orphan_id] and report["lost"] == [vanished.id]
    assert engine_has(engine, orphan_id) == (False, False)
    assert status_of(vanished.id) == "lost" and status_of(kept.id) == "running"
    assert engine_has(engine, kept.id) == (True, True)
    assert services.run_command(as_alice, kept.id, "echo still here").stdout == "still here\n"
    for sandbox_id in (vanished.id, kept.id):
        services.delete_sandbox(as_alice, sandbox_id)
    assert engine_has(engine, vanished.id) == (False, False)  # its volume went with it
