"""A team's egress policy (issue 27): every member reads it, owners and admins set the
allow-list, only a platform admin the maximum mode; the deployment CA made once; the
operator's name map read from the environment."""

from __future__ import annotations

import pytest

from platform_site.env import EnvError, env_host_map
from sandboxes import services
from sandboxes.contract.errors import InvalidInput, NotFound, PermissionDenied
from sandboxes.models import EgressAuthority
from sandboxes.services import egress_ca
from tenants.models import AuditLog, Team
from tenants.principal import Principal

pytestmark = pytest.mark.django_db


def test_members_read_the_policy(as_victor, networked_teams):
    info = services.get_team_egress(as_victor)
    assert (info.team, info.allow_network, info.max_mode) == ("alpha", True, "public")
    assert info.modes == ["off", "allowlist", "public"] and info.allowed_ranges == []


def test_modes_follow_the_policy(as_alice, as_bob, team_a, networked_teams):
    assert services.get_team_egress(as_bob).modes == ["off", "public"]  # no allow-list yet
    team_a.egress_max_mode = "allowlist"
    team_a.save()
    assert services.get_team_egress(as_alice).modes == ["off", "allowlist"]
    team_a.allow_network = False
    team_a.save()
    assert services.get_team_egress(as_alice).modes == ["off"]


def test_owners_and_admins_set_the_allow_list(as_alice, networked_teams):
    info = services.set_team_egress(as_alice, allowlist=["PyPI.org", " *.npmjs.org:443 "])
    assert info.allowlist == ["pypi.org", "*.npmjs.org:443"]
    assert Team.objects.get(slug="alpha").egress_allowlist == ["pypi.org", "*.npmjs.org:443"]
    [row] = AuditLog.objects.filter(action="egress.team.set")
    assert row.outcome == "ok" and row.details["allowlist"]["to"] == info.allowlist
    assert row.details["allowlist"]["from"][0] == "pypi.org"


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        ({"allowlist": ["not a name"]}, InvalidInput, "allowlist: 'not a name'"),
        ({"allowlist": "pypi.org"}, InvalidInput, "must be a list"),
        ({"allowlist": ["*"]}, InvalidInput, "network mode public"),
        ({"max_mode": "public"}, PermissionDenied, "only a platform admin"),
        ({"allowlist": ["a.test"], "max_mode": "off"}, PermissionDenied, "only a platform admin"),
        ({"allowed_ranges": ["10.20.0.0/16"]}, PermissionDenied, "only a platform admin"),
    ],
)
def test_refused_changes_change_nothing(as_alice, networked_teams, kwargs, error, message):
    with pytest.raises(error, match=message):
        services.set_team_egress(as_alice, **kwargs)
    team = Team.objects.get(slug="alpha")
    assert (team.egress_allowlist[0], team.egress_max_mode) == ("pypi.org", "public")
    assert not AuditLog.objects.filter(action="egress.team.set", outcome="ok").exists()


def test_members_viewers_and_read_only_keys_may_not_set_it(
    as_mallory, as_victor, as_read_only_key, networked_teams
):
    for principal in (as_mallory, as_victor, as_read_only_key):
        with pytest.raises(PermissionDenied):
            services.set_team_egress(principal, allowlist=["a.test"])
    assert Team.objects.get(slug="alpha").egress_allowlist[0] == "pypi.org"


def test_the_system_may_set_the_maximum(team_a, networked_teams):
    info = services.set_team_egress(Principal.system(team_a), max_mode="allowlist")
    assert info.max_mode == "allowlist" and Team.objects.get(pk=team_a.pk).egress_max_mode == (
        "allowlist"
    )
    with pytest.raises(InvalidInput, match="max_mode must be"):
        services.set_team_egress(Principal.system(team_a), max_mode="everything")


def test_the_system_may_allow_ranges_and_each_change_is_on_record(team_a, networked_teams):
    system = Principal.system(team_a)
    info = services.set_team_egress(system, allowed_ranges=["10.20.0.0/16", "fd00::/8"])
    assert info.allowed_ranges == ["10.20.0.0/16", "fd00::/8"]
    row = AuditLog.objects.get(action="egress.team.set", outcome="ok")
    assert row.details["allowed_ranges"] == {"from": [], "to": ["10.20.0.0/16", "fd00::/8"]}
    for bad in (["10.0.0.1/8"], "10.0.0.0/8", ["everything"]):
        with pytest.raises(InvalidInput, match="allowed_ranges"):
            services.set_team_egress(system, allowed_ranges=bad)
    assert Team.objects.get(pk=team_a.pk).egress_allowed_ranges == ["10.20.0.0/16", "fd00::/8"]


def test_the_deployment_ca_is_made_once(db):
    pytest.importorskip("egress.ca")
    first = egress_ca.ca_certificate()
    assert first.startswith("-----BEGIN CERTIFICATE-----")
    assert egress_ca.ca_certificate() == first and EgressAuthority.objects.count() == 1
    key = egress_ca.authority().key_encrypted
    assert "PRIVATE KEY" not in key  # encrypted at rest


def test_network_log_of_a_missing_sandbox(as_alice):
    with pytest.raises(NotFound):
        services.network_log(as_alice, "sb_000000000000")


def test_the_operators_name_map(monkeypatch):
    monkeypatch.setenv("X_HOSTS", "api.test=127.0.0.1, Files.Test.=::1")
    assert env_host_map("X_HOSTS") == {"api.test": "127.0.0.1", "files.test": "::1"}
    for bad in ("api.test", "api.test=", "=127.0.0.1", "api.test=localhost"):
        monkeypatch.setenv("X_HOSTS", bad)
        with pytest.raises(EnvError, match="X_HOSTS: .* is not name=ip"):
            env_host_map("X_HOSTS")
    monkeypatch.delenv("X_HOSTS")
    assert env_host_map("X_HOSTS") == {}


def test_a_concurrent_first_use_keeps_the_first_ca(db, monkeypatch):
    """Another process makes the CA between this one's look and its insert: the insert
    fails on the unique name and the other's CA is the one used."""
    ca = pytest.importorskip("egress.ca")
    real = ca.generate_ca
    winner, _ = real("the other process's")

    def generate_while_another_wins(common_name: str) -> tuple[str, str]:
        EgressAuthority.objects.create(cert_pem=winner, key_encrypted="made elsewhere")
        return real(common_name)

    monkeypatch.setattr(ca, "generate_ca", generate_while_another_wins)
    assert egress_ca.ca_certificate() == winner
    assert EgressAuthority.objects.count() == 1
