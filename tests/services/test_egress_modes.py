"""Egress modes at create (issue 27), on the in-memory backend: a mode within the team's
policy, an allow-list within the team's, what the backend is told, and bad input changing
nothing."""

from __future__ import annotations

import pytest

from hosts.backends.base import ExecResult
from sandboxes import services
from sandboxes.contract.errors import InvalidInput, PermissionDenied
from sandboxes.models import EgressRefusal, Sandbox, WarmContainer
from sandboxes.services.pip import with_network_hint
from tenants.models import AuditLog
from tests.services.conftest import TEAM_LIST

pytestmark = pytest.mark.django_db


def spec_of(fake_backend, sandbox_id: str):
    state = Sandbox.objects.get(public_id=sandbox_id).backend_state
    return fake_backend.sandboxes[state["container_id"]]["spec"]


def test_off_is_the_default_and_needs_no_proxy(fake_backend, as_alice, networked_teams):
    info = services.create_sandbox(as_alice)
    assert (info.network, info.network_mode) == (False, "off")
    spec = spec_of(fake_backend, info.id)
    assert spec.network is False and spec.egress is None
    assert Sandbox.objects.get(public_id=info.id).egress_token == ""


def test_true_means_public_where_the_team_allows_it(
    fake_backend, as_alice, networked_teams, deployment_ca
):
    info = services.create_sandbox(as_alice, network=True)
    assert (info.network, info.network_mode) == (True, "public")
    row = Sandbox.objects.get(public_id=info.id)
    spec = spec_of(fake_backend, info.id)
    assert spec.network is True and spec.egress is not None
    assert (spec.egress.mode, spec.egress.token, spec.egress.ca_pem) == (
        "public",
        row.egress_token,
        deployment_ca,
    )
    assert len(row.egress_token) >= 40
    assert (spec.egress.proxy_port, spec.egress.dns_port) == (3128, 5353)


def test_true_means_allowlist_under_an_allowlist_ceiling(fake_backend, as_alice, networked_teams):
    team_a, _ = networked_teams
    team_a.egress_max_mode = "allowlist"
    team_a.save()
    info = services.create_sandbox(as_alice, network=True)
    assert info.network_mode == "allowlist"
    row = Sandbox.objects.get(public_id=info.id)
    assert row.egress_allow == TEAM_LIST
    with pytest.raises(PermissionDenied, match="allowlist at most, not public"):
        services.create_sandbox(as_alice, network="public")


def test_no_network_team_may_have_only_off(fake_backend, as_alice, team_a):
    for asked in (True, "allowlist", "public"):
        with pytest.raises(PermissionDenied, match="may not give sandboxes network"):
            services.create_sandbox(as_alice, network=asked)
    assert services.create_sandbox(as_alice, network="off").network_mode == "off"


def test_a_narrower_allow_list(fake_backend, as_alice, networked_teams):
    asked = ["files.pythonhosted.org:443", "pypi.org:443", "github.com:22"]
    info = services.create_sandbox(as_alice, network="allowlist", allow=asked)
    assert Sandbox.objects.get(public_id=info.id).egress_allow == asked
    assert services.get_sandbox(as_alice, info.id).egress.allow == asked


@pytest.mark.parametrize(
    "allow,named",
    [
        (["example.com"], "example.com"),
        (["pythonhosted.org:443"], "pythonhosted.org:443"),  # the wildcard is below it only
        (["files.pythonhosted.org:80"], "files.pythonhosted.org:80"),  # a port it lacks
        (["github.com:80"], "github.com:80"),
        (["*"], "*"),
        (["*.org"], "*.org"),
    ],
)
def test_an_entry_outside_the_teams_list_is_refused(
    fake_backend, as_alice, networked_teams, allow, named
):
    before = (Sandbox.objects.count(), AuditLog.objects.filter(outcome="ok").count())
    with pytest.raises(PermissionDenied, match="not in team alpha's allow-list") as refused:
        services.create_sandbox(as_alice, network="allowlist", allow=allow)
    assert named in str(refused.value)
    assert (Sandbox.objects.count(), AuditLog.objects.filter(outcome="ok").count()) == before
    assert fake_backend.sandboxes == {}


@pytest.mark.parametrize(
    "network,allow,message",
    [
        ("allowlist", ["bad name!"], "allow: 'bad name!' is not a host name"),
        ("allowlist", ["pypi.org:99999"], "is not a port"),
        ("allowlist", "pypi.org", "must be a list"),
        ("allowlist", [], "at least one entry"),
        ("public", ["pypi.org"], "allowlist only"),
        ("sideways", None, "network must be"),
        (3, None, "network must be"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    fake_backend, as_alice, networked_teams, network, allow, message
):
    with pytest.raises(InvalidInput, match=message):
        services.create_sandbox(as_alice, network=network, allow=allow)
    assert Sandbox.objects.count() == 0 and fake_backend.sandboxes == {}
    assert not AuditLog.objects.filter(action="sandbox.create", outcome="ok").exists()
    [row] = AuditLog.objects.filter(action="sandbox.create")
    assert row.outcome == "invalid"


def test_allowlist_without_a_team_list_says_so(fake_backend, as_bob, networked_teams):
    with pytest.raises(InvalidInput, match="team beta has no allow-list yet"):
        services.create_sandbox(as_bob, network="allowlist")
    assert Sandbox.objects.count() == 0


def test_secrets_placeholders_reach_the_environment_never_the_values(
    fake_backend, as_alice, networked_teams
):
    services.add_secret(as_alice, name="API_KEY", hosts=["api.test"], value="value-of-alice")
    info = services.create_sandbox(as_alice, network="public", env={"OTHER": "x"})
    env = spec_of(fake_backend, info.id).env
    placeholder = services.list_secrets(as_alice)[0].placeholder
    assert env["API_KEY"] == placeholder and placeholder.startswith("sandhub-secret-")
    assert env["OTHER"] == "x" and "value-of-alice" not in str(env)
    # Without network the placeholder is useless: none is given.
    off = services.create_sandbox(as_alice, network=False)
    assert "API_KEY" not in spec_of(fake_backend, off.id).env


def test_a_snapshot_keeps_mode_and_allow_list(fake_backend, as_alice, networked_teams):
    info = services.create_sandbox(as_alice, network="allowlist", allow=["pypi.org"])
    snapshot = services.snapshot_sandbox(as_alice, info.id, name="keep")
    copy = services.create_sandbox(as_alice, snapshot=snapshot.id)
    row = Sandbox.objects.get(public_id=copy.id)
    assert (row.egress_mode, row.egress_allow) == ("allowlist", ["pypi.org"])
    public = services.create_sandbox(as_alice, snapshot=snapshot.id, network="public")
    assert Sandbox.objects.get(public_id=public.id).egress_allow == []


def test_get_sandbox_shows_the_most_refused(fake_backend, as_alice, as_victor, networked_teams):
    info = services.create_sandbox(as_alice, network="public")
    sandbox = Sandbox.objects.get(public_id=info.id)
    services.DatabasePolicySource().report(
        {(info.id, f"host{n}.test:443", "not allowed"): n + 1 for n in range(25)}
    )
    egress = services.get_sandbox(as_victor, info.id).egress
    assert egress is not None and egress.mode == "public" and len(egress.refused) == 20
    assert egress.refused[0].destination == "host24.test:443" and egress.refused[0].count == 25
    assert EgressRefusal.objects.filter(sandbox=sandbox).count() == 25
    assert services.list_sandboxes(as_alice)[0].egress is None  # the detail form only


def test_network_sandboxes_take_no_pool_member(fake_backend, as_alice, networked_teams):
    info = services.create_sandbox(as_alice, network="public")
    assert not WarmContainer.objects.filter(sandbox__public_id=info.id).exists()


def test_pip_failing_in_an_allowlist_sandbox_says_what_the_list_needs():
    failed = ExecResult(1, b"", b"ProxyError('403 Forbidden')", 0, 27, False, False, False, 1.0)
    sandbox = Sandbox(network=True, egress_mode="allowlist", egress_allow=["github.com"])
    hint = with_network_hint(sandbox, None, failed).stderr.decode()
    assert "reaches only its allow-list (github.com)" in hint and "pypi.org" in hint
