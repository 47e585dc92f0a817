"""The team web pages' URLs (namespace "web"), mounted at the site root."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, include, path

from sandboxes.web import account, deleted, egress, home, hosts, keys, snapshots, team

app_name = "web"

urlpatterns: list[URLPattern | URLResolver] = [
    path("login/", account.LoginView.as_view(), name="login"),
    path("logout/", account.LogoutView.as_view(), name="logout"),
    path("password/", account.PasswordChangeView.as_view(), name="password-change"),
    path("password/done/", account.PasswordChangeDoneView.as_view(), name="password-change-done"),
    path("switch-team/", account.switch_team, name="team-switch"),
    path("", home.home, name="home"),
    path("sandboxes/create/", home.create, name="sandbox-create"),
    path("sandboxes/deleted/", deleted.deleted_sandboxes, name="sandboxes-deleted"),
    path("sandboxes/<str:sandbox_id>/delete/", home.delete, name="sandbox-delete"),
    path("snapshots/<str:snapshot_id>/new/", snapshots.create_from, name="snapshot-create-from"),
    path("snapshots/<str:snapshot_id>/delete/", snapshots.delete, name="snapshot-delete"),
    path("hosts/", hosts.hosts, name="hosts"),
    path("keys/", keys.keys, name="keys"),
    path("keys/<int:key_id>/revoke/", keys.revoke, name="key-revoke"),
    path("team/", team.members, name="team"),
    path("team/members/add/", team.add_member, name="team-member-add"),
    path("team/members/<int:membership_id>/role/", team.change_role, name="team-member-role"),
    path("team/members/<int:membership_id>/remove/", team.remove_member, name="team-member-remove"),
    path("team/audit/", team.audit_log, name="team-audit"),
    path("team/commands/", team.commands, name="team-commands"),
    path("team/network/", egress.network, name="team-network"),
    path("team/network/allowlist/", egress.save_allowlist, name="team-allowlist"),
    path("team/network/secrets/", egress.add_secret, name="team-secret-add"),
    path(
        "team/network/secrets/<int:secret_id>/delete/",
        egress.delete_secret,
        name="team-secret-delete",
    ),
    # The sandbox page, its files, jobs and command history, and file links.
    path("", include("sandboxes.web.sandbox_urls")),
]
