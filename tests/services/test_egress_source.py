"""DatabasePolicySource (issue 27): how the proxy finds a connection's sandbox (by its
address on this machine's Docker engine, or by its credential) and what it may reach, under
its team's policy as it is now; refusals counted per destination and reason."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections

from hosts.models import Host
from sandboxes import services
from sandboxes.contract.errors import NotFound
from sandboxes.models import EgressRefusal, Sandbox
from tenants.models import AuditLog

pytestmark = pytest.mark.django_db

SOURCE = services.DatabasePolicySource()


def networked(principal, address: str, **create) -> Sandbox:
    info = services.create_sandbox(principal, **create)
    row = Sandbox.objects.get(public_id=info.id)
    row.backend_state = {**row.backend_state, "egress_address": address, "egress_gateway": "gw"}
    row.save(update_fields=["backend_state"])
    return row


@pytest.fixture
def two(fake_backend, as_alice, as_bob, networked_teams):
    services.add_secret(as_alice, name="A_KEY", hosts=["api.test"], value="a-value-1234")
    services.add_secret(as_bob, name="B_KEY", hosts=["api.test"], value="b-value-5678")
    a = networked(as_alice, "172.30.0.2", network="allowlist", allow=["pypi.org"])
    b = networked(as_bob, "172.31.0.2", network="public")
    return a, b


def test_by_token_finds_its_own_sandbox_only(two):
    a, b = two
    policy = SOURCE.by_token(a.public_id, a.egress_token)
    assert policy is not None and policy.sandbox_id == a.public_id
    assert policy.mode == "allowlist" and [r.pattern for r in policy.rules] == ["pypi.org"]
    [secret] = policy.secrets
    assert (secret.name, secret.value, secret.hosts) == (
        "A_KEY",
        "Bearer a-value-1234",
        ("api.test",),
    )
    assert policy.dns_answer == "gw" and policy.gateway == "gw"
    # One team's credential never opens the other's sandbox, nor a wrong or empty one.
    assert SOURCE.by_token(b.public_id, a.egress_token) is None
    assert SOURCE.by_token(a.public_id, b.egress_token) is None
    assert SOURCE.by_token(a.public_id, "") is None
    assert SOURCE.by_token("sb_missing", a.egress_token) is None
    policy_b = SOURCE.by_token(b.public_id, b.egress_token)
    assert policy_b is not None and [s.name for s in policy_b.secrets] == ["B_KEY"]
    assert policy_b.mode == "public" and policy_b.rules == ()


def test_by_address_finds_a_live_sandbox_on_this_machine(two, docker_host):
    a, b = two
    assert SOURCE.by_address("172.30.0.2").sandbox_id == a.public_id
    assert SOURCE.by_address("172.31.0.2").sandbox_id == b.public_id
    assert SOURCE.by_address("172.30.0.9") is None and SOURCE.by_address("") is None
    Host.objects.filter(pk=docker_host.pk).update(endpoint="tcp://10.0.0.5:2375")
    assert SOURCE.by_address("172.30.0.2") is None  # a remote engine's sandbox: not from here


def test_an_address_claimed_twice_is_trusted_for_neither(two):
    a, b = two
    Sandbox.objects.filter(pk=b.pk).update(backend_state={"egress_address": "172.30.0.2"})
    assert SOURCE.by_address("172.30.0.2") is None


def test_off_and_deleted_sandboxes_have_no_policy(two, as_alice):
    a, _ = two
    off = networked(as_alice, "172.30.0.3")
    assert SOURCE.by_address("172.30.0.3") is None and SOURCE.by_token(off.public_id, "") is None
    services.delete_sandbox(as_alice, a.public_id)
    assert SOURCE.by_token(a.public_id, a.egress_token) is None
    assert SOURCE.by_address("172.30.0.2") is None


def test_the_teams_policy_applies_at_once(two):
    a, b = two
    team_a, team_b = a.team, b.team
    team_a.egress_allowlist = ["github.com"]  # pypi.org no longer allowed
    team_a.save()
    assert SOURCE.by_token(a.public_id, a.egress_token).rules == ()
    team_b.egress_max_mode = "allowlist"
    team_b.save()
    assert SOURCE.by_token(b.public_id, b.egress_token) is None
    team_b.egress_max_mode, team_b.allow_network = "public", False
    team_b.save()
    assert SOURCE.by_token(b.public_id, b.egress_token) is None


def test_report_counts_per_destination_and_reason(two):
    a, b = two
    SOURCE.report({(a.public_id, "evil.test:443", "not allowed"): 3, ("sb_gone", "x:1", "r"): 1})
    SOURCE.report({(a.public_id, "evil.test:443", "not allowed"): 2})
    SOURCE.report({(a.public_id, "10.0.0.1:80", "private address"): 1})
    rows = {(r.destination, r.reason): r.count for r in EgressRefusal.objects.all()}
    assert rows == {("evil.test:443", "not allowed"): 5, ("10.0.0.1:80", "private address"): 1}


def test_report_from_worker_threads_loses_no_count(two, transactional_db):
    a, _ = two
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(5):
                SOURCE.report({(a.public_id, "busy.test:443", "not allowed"): 1})
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert EgressRefusal.objects.get(destination="busy.test:443").count == 20


def test_network_log(two, as_alice, as_victor, as_bob):
    a, _ = two
    SOURCE.report({(a.public_id, "evil.test:443", "not allowed"): 3})
    log = services.network_log(as_victor, a.public_id)  # viewers may read it
    assert (log.mode, log.allow) == ("allowlist", ["pypi.org"])
    assert [(r.destination, r.count) for r in log.refused] == [("evil.test:443", 3)]
    with pytest.raises(NotFound):
        services.network_log(as_bob, a.public_id)
    assert AuditLog.objects.filter(action="egress.network_log", outcome="not_found").exists()


def test_a_sandbox_without_a_token_is_never_found_by_one(two):
    a, _ = two
    Sandbox.objects.filter(pk=a.pk).update(egress_token="")
    for guess in ("", "\x00", "\x00no token"):
        assert SOURCE.by_token(a.public_id, guess) is None


def test_a_worker_threads_connection_is_closed_after_each_call(two, transactional_db, monkeypatch):
    """As a request's would be (with connections not kept between requests): nothing else
    closes the connections of the proxy's worker threads."""
    a, _ = two
    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0)
    seen: list[object] = []

    def worker() -> None:
        seen.append(SOURCE.by_token(a.public_id, a.egress_token))
        seen.append(connection.connection)  # this thread's, after the call
        connection.close()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen[0] is not None and seen[1] is None
