"""URLs of the REST API, mounted at /api/v1/ by platform_site/urls.py."""

from django.urls import path

from sandboxes import api

app_name = "api"
urlpatterns = [
    path("sandboxes/", api.SandboxListView.as_view(), name="sandboxes"),
    path("sandboxes/<str:sandbox_id>/", api.SandboxDetailView.as_view(), name="sandbox"),
    path("sandboxes/<str:sandbox_id>/commands/", api.CommandListView.as_view(), name="commands"),
    path(
        "sandboxes/<str:sandbox_id>/background/",
        api.BackgroundStartView.as_view(),
        name="background",
    ),
    path(
        "sandboxes/<str:sandbox_id>/background/<int:command_id>/",
        api.BackgroundDetailView.as_view(),
        name="background-command",
    ),
    path(
        "sandboxes/<str:sandbox_id>/background/<int:command_id>/cancel/",
        api.BackgroundCancelView.as_view(),
        name="background-cancel",
    ),
    path("sandboxes/<str:sandbox_id>/files/", api.FilesView.as_view(), name="files"),
    path(
        "sandboxes/<str:sandbox_id>/files/download",
        api.DownloadView.as_view(),
        name="download",
    ),
    path("commands/<int:command_id>/", api.CommandDetailView.as_view(), name="command"),
    path("hosts/", api.HostListView.as_view(), name="hosts"),
]
