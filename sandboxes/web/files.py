"""The sandbox page's files: browse folders, upload several files, download a file or a
folder (tar / tar.gz, streamed), view a text file, create or edit a small one.

Downloads are streamed from the sandbox chunk by chunk (sandboxes/http/streaming.py);
uploads are handed to the service as file objects (Django spools big ones to disk), so no
transfer is held whole in memory by the page.
"""

from __future__ import annotations

import posixpath

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST

from sandboxes import services
from sandboxes.contract.errors import InvalidInput, ServiceError
from sandboxes.http.streaming import download as download_response
from sandboxes.services import UploadSource
from sandboxes.web.common import attach_error, refused
from sandboxes.web.principal import identity_for, principal_for, team_required
from sandboxes.web.sandbox import REFUSED_STATUSES, files_context, render_page
from sandboxes.web.sandbox_forms import EDIT_MAX_BYTES, WORKSPACE, FileForm, UploadForm

PATH_FIELDS = {"path": "path", "directory": "path", "file": "path", "byte": "content"}


def _path(request: HttpRequest) -> str:
    return request.GET.get("path") or WORKSPACE


def files_url(sandbox_id: str, directory: str) -> str:
    """The sandbox page showing `directory` in its files section."""
    query = "" if directory == WORKSPACE else "?" + urlencode({"path": directory})
    return reverse("web:sandbox", args=[sandbox_id]) + query + "#files"


def file_url(sandbox_id: str, path: str) -> str:
    """The page showing the file at `path`."""
    return reverse("web:sandbox-file", args=[sandbox_id]) + "?" + urlencode({"path": path})


@team_required
@require_GET
def browse(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    """The files section for ?path= (htmx swaps it in place); without htmx, the whole page."""
    if request.headers.get("HX-Request") != "true":
        return redirect(files_url(sandbox_id, _path(request)))
    principal = principal_for(request)
    try:
        info = services.get_sandbox(principal, sandbox_id)
    except ServiceError as exc:
        return refused(request, exc)
    context = {
        "sandbox": info,
        "running": info.status == "running",
        "upload_form": UploadForm(initial={"directory": _path(request)}),
        "file_form": FileForm(initial={"directory": _path(request)}),
        **files_context(request, sandbox_id, _path(request)),
    }
    return render(request, "web/sandbox/_files.html", context)


@team_required
@require_GET
def view(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    """A text file shown whole (up to EDIT_MAX_BYTES), with an edit form for writers."""
    principal = principal_for(request)
    path = _path(request)
    try:
        info = services.get_sandbox(principal, sandbox_id)
        content = services.read_file(principal, sandbox_id, path, max_bytes=EDIT_MAX_BYTES)
    except ServiceError as exc:
        return refused(request, exc)
    text = content.text()
    form = None
    if text is not None and content.eof and identity_for(request).can_write:
        form = FileForm(initial={"path": content.path, "content": text}).tall()
    return _file_page(request, info, content.path, text, content.size, content.eof, form)


def _file_page(
    request: HttpRequest,
    info: object,
    path: str,
    text: str | None,
    size: int,
    whole: bool,
    form: FileForm | None,
    status: int = 200,
) -> HttpResponse:
    context = {
        "sandbox": info,
        "path": path,
        "folder": posixpath.dirname(path) or "/",
        "text": text,
        "size": size,
        "whole": whole,
        "form": form,
        "edit_max": EDIT_MAX_BYTES,
    }
    return render(request, "web/sandbox/file.html", context, status=status)


@team_required
@require_POST
def save(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    """Save a file edited on its own page; errors are shown on that page."""
    principal = principal_for(request)
    form = FileForm(request.POST).tall()
    status = 400
    if form.is_valid():
        path = form.full_path()
        try:
            services.write_file(principal, sandbox_id, path, form.cleaned_data["content"])
        except ServiceError as exc:
            if exc.http_status in REFUSED_STATUSES:
                return refused(request, exc)
            attach_error(form, exc, PATH_FIELDS)
            status = exc.http_status
        else:
            messages.success(request, f"Saved {path}.")
            return redirect(file_url(sandbox_id, path))
    try:
        info = services.get_sandbox(principal, sandbox_id)
    except ServiceError as exc:
        return refused(request, exc)
    path = request.POST.get("path", "")
    return _file_page(request, info, path, None, 0, True, form, status=status)


@team_required
@require_POST
def new(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    """Create (or replace) a small text file from the files section of the sandbox page."""
    form = FileForm(request.POST)
    if not form.is_valid():
        return render_page(request, sandbox_id, status=400, file_form=form)
    path = form.full_path()
    try:
        services.write_file(principal_for(request), sandbox_id, path, form.cleaned_data["content"])
    except ServiceError as exc:
        if exc.http_status in REFUSED_STATUSES:
            return refused(request, exc)
        attach_error(form, exc, PATH_FIELDS)
        return render_page(request, sandbox_id, status=exc.http_status, file_form=form)
    messages.success(request, f"Saved {path}.")
    return redirect(files_url(sandbox_id, posixpath.dirname(path) or "/"))


@team_required
@require_POST
def upload(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    """The upload form's files, or files dropped on the files section (static/web/files.js
    asks for JSON: the script shows the message, the page stays)."""
    form = UploadForm(request.POST, request.FILES)
    dropped = request.headers.get("Accept") == "application/json"
    if not form.is_valid():
        if dropped:
            errors = [str(e) for messages_ in form.errors.values() for e in messages_]
            return JsonResponse({"error": " ".join(errors)}, status=400)
        return render_page(request, sandbox_id, status=400, upload_form=form)
    directory = form.cleaned_data["directory"] or WORKSPACE
    parts = form.cleaned_data["files"]
    try:
        sources = [
            # The browser's file name, never a path: one with a slash is refused, not followed.
            UploadSource(posixpath.join(directory, _name(part.name)), part, part.size)
            for part in parts
        ]
        result = services.upload_files(principal_for(request), sandbox_id, sources)
    except ServiceError as exc:
        if dropped:
            return JsonResponse({"error": exc.message}, status=exc.http_status)
        if exc.http_status in REFUSED_STATUSES:
            return refused(request, exc)
        attach_error(form, exc, {"": "files"})
        return render_page(request, sandbox_id, status=exc.http_status, upload_form=form)
    finally:
        for part in parts:
            part.close()
    count = len(result.paths)
    noun = "file" if count == 1 else "files"
    size = result.total_bytes
    done = f"Uploaded {count} {noun} ({size} bytes) to {directory}."
    if dropped:
        return JsonResponse({"message": done, "paths": result.paths})
    messages.success(request, done)
    return redirect(files_url(sandbox_id, directory))


def _name(name: str | None) -> str:
    if not name or "/" in name or name in (".", ".."):
        raise InvalidInput(f"{name!r} is not a file name")
    return name


@team_required
@require_GET
def download(request: HttpRequest, sandbox_id: str) -> HttpResponseBase:
    path = request.GET.get("path")
    if not path:
        return refused(request, InvalidInput("name the file to download with ?path="))
    try:
        # The service reads the first chunk before it returns: "is a directory" and engine
        # errors are still a proper page, not a download that breaks off.
        stream = services.open_file_stream(principal_for(request), sandbox_id, path)
    except ServiceError as exc:
        return refused(request, exc)
    return download_response(stream, path)


@team_required
@require_GET
def archive(request: HttpRequest, sandbox_id: str) -> HttpResponseBase:
    """A folder (or file) as one tar, or tar.gz with ?format=tgz."""
    path = request.GET.get("path") or WORKSPACE
    gzip = request.GET.get("format", "tgz") != "tar"
    try:
        stream = services.open_archive_stream(principal_for(request), sandbox_id, path, gzip=gzip)
    except ServiceError as exc:
        return refused(request, exc)
    suffix, kind = (".tar.gz", "application/gzip") if gzip else (".tar", "application/x-tar")
    name = path if path != "/" else "root"
    return download_response(stream, name, suffix=suffix, content_type=kind)
