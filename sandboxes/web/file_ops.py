"""The files section's operations: delete a file or folder, rename (move) one, make a folder.

Plain form posts (each row's Delete asks first, data-confirm; Rename is a small form in a
<details>, so all of it works without JavaScript): the answer is the sandbox page at the
folder the operation was asked from, with what happened or why not as a message. Another
team's sandbox and a viewer's post get the refusal page; a refused operation (a missing
file, an existing destination, a path through a link) is a message above the files.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from sandboxes import services
from sandboxes.contract.errors import ServiceError
from sandboxes.web.common import refused
from sandboxes.web.files import files_url
from sandboxes.web.principal import principal_for, team_required
from sandboxes.web.sandbox_forms import WORKSPACE
from tenants.principal import Principal


def _folder(request: HttpRequest) -> str:
    """The folder the form was posted from: where the page goes back to."""
    folder = request.POST.get("directory") or WORKSPACE
    return posixpath.normpath(folder) if folder.startswith("/") else WORKSPACE


def _within(folder: str, typed: str) -> str:
    """A path typed in the form: absolute as typed, relative from the folder shown."""
    typed = typed.strip()
    if not typed:  # nothing typed is refused by the service, never taken as the folder
        return ""
    return typed if typed.startswith("/") else posixpath.join(folder, typed)


def _act(
    request: HttpRequest,
    sandbox_id: str,
    folder: str,
    action: Callable[[Principal], object],
    done: str,
) -> HttpResponse:
    principal = principal_for(request)
    try:
        # The sandbox first: another team's (404) or a viewer's post (403) is refused as a
        # page; after that, a refused operation is said above the files.
        services.get_sandbox(principal, sandbox_id)
    except ServiceError as exc:
        return refused(request, exc)
    try:
        action(principal)
    except ServiceError as exc:
        if exc.http_status == 403:
            return refused(request, exc)
        messages.error(request, exc.message)
    else:
        messages.success(request, done)
    return redirect(files_url(sandbox_id, folder))


@team_required
@require_POST
def delete(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    folder = _folder(request)
    path = _within(folder, request.POST.get("path", ""))
    return _act(
        request,
        sandbox_id,
        folder,
        lambda principal: services.delete_path(principal, sandbox_id, path),
        f"Deleted {path}.",
    )


@team_required
@require_POST
def rename(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    """Rename within the folder (a bare name), or move (a path; relative from the folder)."""
    folder = _folder(request)
    path = _within(folder, request.POST.get("path", ""))
    typed = request.POST.get("to", "").strip()
    to = _within(posixpath.dirname(path), typed)
    return _act(
        request,
        sandbox_id,
        folder,
        lambda principal: services.rename_path(principal, sandbox_id, path, to),
        f"Renamed {path} to {to}.",
    )


@team_required
@require_POST
def mkdir(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    folder = _folder(request)
    typed = request.POST.get("name", "").strip()
    path = _within(folder, typed)
    return _act(
        request,
        sandbox_id,
        folder,
        lambda principal: services.make_directory(principal, sandbox_id, path),
        f"Created folder {path}.",
    )
