"""URLs of the sandbox page, its files, jobs, previews, links and command history, and of file
links themselves.

Included by sandboxes/web/urls.py into the "web" namespace, at the site root.
"""

from __future__ import annotations

from django.urls import path

from sandboxes.web import (
    file_ops,
    files,
    jobs,
    lifecycle,
    links,
    previews,
    sandbox,
    sandbox_run,
    snapshots,
    terminals,
    usage,
)

S = "sandboxes/<str:sandbox_id>/"

urlpatterns = [
    path(S, sandbox.page, name="sandbox"),
    path(S + "extend/", sandbox.extend, name="sandbox-extend"),
    path(S + "pause/", lifecycle.pause, name="sandbox-pause"),
    path(S + "resume/", lifecycle.resume, name="sandbox-resume"),
    path(S + "stop/", lifecycle.stop, name="sandbox-stop"),
    path(S + "snapshot/", snapshots.take, name="sandbox-snapshot"),
    path(S + "run/", sandbox_run.run, name="sandbox-run"),
    path(S + "commands/", sandbox.history, name="sandbox-commands"),
    path(S + "usage/", usage.sandbox_usage, name="sandbox-usage"),
    path(S + "commands/<int:command_id>/", sandbox.command, name="sandbox-command"),
    path(S + "files/", files.browse, name="sandbox-files"),
    path(S + "files/view/", files.view, name="sandbox-file"),
    path(S + "files/save/", files.save, name="sandbox-file-save"),
    path(S + "files/new/", files.new, name="sandbox-file-new"),
    path(S + "files/upload/", files.upload, name="sandbox-upload"),
    path(S + "files/download/", files.download, name="sandbox-download"),
    path(S + "files/archive/", files.archive, name="sandbox-archive"),
    path(S + "files/delete/", file_ops.delete, name="sandbox-file-delete"),
    path(S + "files/rename/", file_ops.rename, name="sandbox-file-rename"),
    path(S + "files/mkdir/", file_ops.mkdir, name="sandbox-mkdir"),
    path(S + "files/link/", links.create, name="sandbox-file-link"),
    path(S + "jobs/start/", jobs.start, name="sandbox-job-start"),
    path(S + "jobs/<int:command_id>/", jobs.job, name="sandbox-job"),
    path(S + "jobs/<int:command_id>/tail/", jobs.tail, name="sandbox-job-tail"),
    path(S + "jobs/<int:command_id>/cancel/", jobs.cancel, name="sandbox-job-cancel"),
    path(S + "previews/new/", previews.open_port, name="sandbox-preview-new"),
    path(S + "previews/deploy/", previews.deploy, name="sandbox-deploy"),
    path(S + "previews/<int:port>/open/", previews.open_preview, name="sandbox-preview-open"),
    path(S + "previews/<int:port>/stop/", previews.stop, name="sandbox-preview-stop"),
    path(S + "links/<str:link_id>/revoke/", links.revoke, name="sandbox-link-revoke"),
    path(S + "terminals/", terminals.section, name="sandbox-terminals"),
    path(S + "terminals/new/", terminals.open_new, name="sandbox-terminal-new"),
    path(S + "terminals/<str:terminal_id>/", terminals.page, name="terminal"),
    path(S + "terminals/<str:terminal_id>/close/", terminals.close, name="terminal-close"),
    # A file link: downloads one file without a session (the token is the credential).
    path("links/<str:token>/", links.open_link, name="file-link"),
]
