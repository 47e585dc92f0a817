"""URLs of the REST API, mounted at /api/v1/ by platform_site/urls.py."""

from django.urls import path

from sandboxes.api import (
    egress,
    files,
    lifecycle,
    links,
    metrics,
    previews,
    snapshots,
    sync,
    terminals,
    views,
)

app_name = "api"
urlpatterns = [
    path("sandboxes/", views.SandboxListView.as_view(), name="sandboxes"),
    path("sandboxes/<str:sandbox_id>/", views.SandboxDetailView.as_view(), name="sandbox"),
    path("sandboxes/<str:sandbox_id>/pause/", lifecycle.PauseView.as_view(), name="pause"),
    path("sandboxes/<str:sandbox_id>/resume/", lifecycle.ResumeView.as_view(), name="resume"),
    path("sandboxes/<str:sandbox_id>/stop/", lifecycle.StopView.as_view(), name="stop"),
    path("sandboxes/<str:sandbox_id>/commands/", views.CommandListView.as_view(), name="commands"),
    path(
        "sandboxes/<str:sandbox_id>/background/",
        views.BackgroundStartView.as_view(),
        name="background",
    ),
    path(
        "sandboxes/<str:sandbox_id>/background/<int:command_id>/",
        views.BackgroundDetailView.as_view(),
        name="background-command",
    ),
    path(
        "sandboxes/<str:sandbox_id>/background/<int:command_id>/cancel/",
        views.BackgroundCancelView.as_view(),
        name="background-cancel",
    ),
    path("sandboxes/<str:sandbox_id>/run-tests/", views.RunTestsView.as_view(), name="run-tests"),
    path("sandboxes/<str:sandbox_id>/files/", files.FilesView.as_view(), name="files"),
    path(
        "sandboxes/<str:sandbox_id>/files/rename/",
        files.FileRenameView.as_view(),
        name="files-rename",
    ),
    path(
        "sandboxes/<str:sandbox_id>/files/mkdir/", files.FileMkdirView.as_view(), name="files-mkdir"
    ),
    path(
        "sandboxes/<str:sandbox_id>/files/download",
        files.DownloadView.as_view(),
        name="download",
    ),
    path("sandboxes/<str:sandbox_id>/manifest/", sync.ManifestView.as_view(), name="manifest"),
    path("sandboxes/<str:sandbox_id>/sync/", sync.SyncUploadView.as_view(), name="sync"),
    path(
        "sandboxes/<str:sandbox_id>/sync/delete/",
        sync.SyncDeleteView.as_view(),
        name="sync-delete",
    ),
    path(
        "sandboxes/<str:sandbox_id>/sync/download/",
        sync.SyncDownloadView.as_view(),
        name="sync-download",
    ),
    path(
        "sandboxes/<str:sandbox_id>/previews/",
        previews.PreviewListView.as_view(),
        name="previews",
    ),
    path(
        "sandboxes/<str:sandbox_id>/previews/<int:port>/",
        previews.PreviewDetailView.as_view(),
        name="preview",
    ),
    path("sandboxes/<str:sandbox_id>/deploy/", previews.DeployView.as_view(), name="deploy"),
    path("sandboxes/<str:sandbox_id>/links/", links.LinkListView.as_view(), name="links"),
    path("sandboxes/<str:sandbox_id>/metrics/", metrics.MetricsView.as_view(), name="metrics"),
    path(
        "sandboxes/<str:sandbox_id>/links/<str:link_id>/",
        links.LinkDetailView.as_view(),
        name="link",
    ),
    path(  # terminals and shell sessions (api/terminals.py)
        "sandboxes/<str:sandbox_id>/terminals/",
        terminals.TerminalListView.as_view(),
        name="terminals",
    ),
    path(
        "sandboxes/<str:sandbox_id>/terminals/<str:terminal_id>/",
        terminals.TerminalDetailView.as_view(),
        name="terminal",
    ),
    path(
        "sandboxes/<str:sandbox_id>/sessions/", terminals.SessionListView.as_view(), name="sessions"
    ),
    path(
        "sandboxes/<str:sandbox_id>/sessions/<str:name>/",
        terminals.SessionDetailView.as_view(),
        name="session",
    ),
    path(  # the egress policy (api/egress.py)
        "sandboxes/<str:sandbox_id>/network/", egress.NetworkLogView.as_view(), name="network"
    ),
    path("team/egress/", egress.TeamEgressView.as_view(), name="team-egress"),
    path("team/secrets/", egress.SecretListView.as_view(), name="team-secrets"),
    path("team/secrets/<int:secret_id>/", egress.SecretDetailView.as_view(), name="team-secret"),
    path("commands/<int:command_id>/", views.CommandDetailView.as_view(), name="command"),
    path("run-once/", views.RunOnceView.as_view(), name="run-once"),
    path("hosts/", views.HostListView.as_view(), name="hosts"),
    path("snapshots/", snapshots.SnapshotListView.as_view(), name="snapshots"),
    path("snapshots/<str:snapshot_id>/", snapshots.SnapshotDetailView.as_view(), name="snapshot"),
]
