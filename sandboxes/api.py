"""The REST API (DRF) under /api/v1/: thin views over sandboxes.services.

Each view builds the acting principal (the API key's user, team and scopes, or a signed-in
user with their team), calls one service, and renders the result. Service errors become JSON
`{"detail": ..., "code": ...}` with the error's HTTP status.
"""

from __future__ import annotations

import itertools
import posixpath
from collections.abc import Iterator

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import StreamingHttpResponse
from django.urls import reverse
from django.utils.http import content_disposition_header
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from sandboxes import services
from sandboxes.api_serializers import (
    BackgroundCheckQuerySerializer,
    BackgroundCheckSerializer,
    CommandSerializer,
    ErrorSerializer,
    FileEntrySerializer,
    HostSerializer,
    RunCommandSerializer,
    SandboxCreateSerializer,
    SandboxSerializer,
    StartBackgroundSerializer,
    UploadFormSerializer,
    UploadResultSerializer,
)
from sandboxes.errors import InvalidInput, ServiceError
from sandboxes.results import UploadFile
from sandboxes.validation import WORKSPACE
from tenants.apikeys import clean_address, principal_for
from tenants.models import ApiKey, Channel, Membership
from tenants.principal import Principal

COMMAND_HISTORY_MAX = 500
ERRORS = {
    code: OpenApiResponse(ErrorSerializer, description=text)
    for code, text in [
        (400, "invalid input"),
        (403, "the role or the key's scopes do not allow it"),
        (404, "not found (another team's sandbox is not found either)"),
        (409, "quota or conflicting state"),
        (502, "the host failed"),
    ]
}
TEAM_PARAM = OpenApiParameter(
    "team", str, description="Browser sessions: the team to act in (default: your first team)."
)


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.authentication.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A Sandhub API key: Authorization: Bearer shk_...",
        }


def exception_handler(exc, context):
    """Service errors and oversized bodies as JSON; everything else as DRF does it."""
    if isinstance(exc, ServiceError):
        return Response({"detail": exc.message, "code": exc.code}, status=exc.http_status)
    if isinstance(exc, RequestDataTooBig):
        return Response(
            {"detail": f"the request body is too large: {exc}", "code": "too_large"},
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    return drf_exception_handler(exc, context)


def principal(request: Request) -> Principal:
    address = clean_address(request.META.get("REMOTE_ADDR"))
    if isinstance(request.auth, ApiKey):
        return principal_for(request.auth, Channel.API, address)
    # A browser session acts in ?team=<slug>, else in the user's first team. A team the user
    # is not in gives no team at all, which the services refuse like any non-member.
    memberships = Membership.objects.filter(user=request.user).order_by("created_at", "id")
    slug = request.query_params.get("team")
    if slug:
        memberships = memberships.filter(team__slug=slug)
    membership = memberships.select_related("team").first()
    team = membership.team if membership else None
    return Principal(user=request.user, team=team, channel=Channel.API, source_address=address)


class ServiceView(GenericAPIView):
    """Common ground: no queryset (the services query), list results paginated."""

    def paginated(self, items: list, serializer_class) -> Response:
        page = self.paginate_queryset(items)
        return self.get_paginated_response(serializer_class(page, many=True).data)


# --- sandboxes -------------------------------------------------------------------------------


class SandboxListView(ServiceView):
    serializer_class = SandboxSerializer

    @extend_schema(
        summary="List your team's sandboxes",
        parameters=[TEAM_PARAM],
        responses={200: SandboxSerializer(many=True), 403: ERRORS[403]},
    )
    def get(self, request: Request) -> Response:
        return self.paginated(services.list_sandboxes(principal(request)), SandboxSerializer)

    @extend_schema(
        summary="Create a sandbox and wait until it runs",
        parameters=[TEAM_PARAM],
        request=SandboxCreateSerializer,
        responses={201: SandboxSerializer, **{c: ERRORS[c] for c in (400, 403, 409, 502)}},
    )
    def post(self, request: Request) -> Response:
        data = _valid(SandboxCreateSerializer, request)
        info = services.create_sandbox(principal(request), **data)
        return Response(SandboxSerializer(info).data, status=status.HTTP_201_CREATED)


class SandboxDetailView(ServiceView):
    serializer_class = SandboxSerializer
    pagination_class = None

    @extend_schema(
        summary="Show a sandbox",
        parameters=[TEAM_PARAM],
        responses={200: SandboxSerializer, 404: ERRORS[404]},
    )
    def get(self, request: Request, sandbox_id: str) -> Response:
        info = services.get_sandbox(principal(request), sandbox_id)
        return Response(SandboxSerializer(info).data)

    @extend_schema(
        summary="Delete a sandbox and its files (its history stays)",
        parameters=[TEAM_PARAM],
        responses={200: SandboxSerializer, **{c: ERRORS[c] for c in (403, 404, 502)}},
    )
    def delete(self, request: Request, sandbox_id: str) -> Response:
        info = services.delete_sandbox(principal(request), sandbox_id)
        return Response(SandboxSerializer(info).data)


# --- commands --------------------------------------------------------------------------------


class CommandListView(ServiceView):
    serializer_class = CommandSerializer

    @extend_schema(
        summary="Command history of a sandbox, newest first",
        parameters=[TEAM_PARAM],
        responses={200: CommandSerializer(many=True), 404: ERRORS[404]},
    )
    def get(self, request: Request, sandbox_id: str) -> Response:
        commands = services.list_commands(principal(request), sandbox_id, limit=COMMAND_HISTORY_MAX)
        return self.paginated(commands, CommandSerializer)

    @extend_schema(
        summary="Run a shell command (bash -c) and wait for it",
        description="A non-zero exit is a normal result (status failed); a timeout kills the "
        "command in the sandbox (status timed_out).",
        parameters=[TEAM_PARAM],
        request=RunCommandSerializer,
        responses={201: CommandSerializer, **{c: ERRORS[c] for c in (400, 403, 404, 409, 502)}},
    )
    def post(self, request: Request, sandbox_id: str) -> Response:
        data = _valid(RunCommandSerializer, request)
        result = services.run_command(
            principal(request),
            sandbox_id,
            data["command"],
            cwd=data["cwd"],
            env=data.get("env"),
            timeout=data.get("timeout"),
            output_cap=data.get("output_cap"),
        )
        return Response(CommandSerializer(result).data, status=status.HTTP_201_CREATED)


class CommandDetailView(ServiceView):
    serializer_class = CommandSerializer
    pagination_class = None

    @extend_schema(
        summary="One command: its output, exit code and timings",
        parameters=[TEAM_PARAM],
        responses={200: CommandSerializer, 404: ERRORS[404]},
    )
    def get(self, request: Request, command_id: int) -> Response:
        result = services.get_command(principal(request), command_id)
        return Response(CommandSerializer(result).data)


# --- background commands ---------------------------------------------------------------------


class BackgroundStartView(ServiceView):
    serializer_class = CommandSerializer
    pagination_class = None

    @extend_schema(
        summary="Start a long-running shell command (bash -c) in the background",
        description="Returns at once (202) with the command's id; the command runs detached "
        "in the sandbox, its output goes to a log there, and it is killed after "
        "max_runtime_seconds. Follow it at the Location given "
        "(.../background/{command_id}/), cancel it with .../cancel/.",
        parameters=[
            TEAM_PARAM,
            OpenApiParameter(
                "Location",
                str,
                OpenApiParameter.HEADER,
                description="Where to check the command.",
                response=[202],
            ),
        ],
        request=StartBackgroundSerializer,
        responses={
            202: OpenApiResponse(CommandSerializer, description="started; status running"),
            **{c: ERRORS[c] for c in (400, 403, 404, 409, 502)},
        },
    )
    def post(self, request: Request, sandbox_id: str) -> Response:
        data = _valid(StartBackgroundSerializer, request)
        result = services.start_background(
            principal(request),
            sandbox_id,
            data["command"],
            cwd=data["cwd"],
            env=data.get("env"),
            max_runtime_seconds=data.get("max_runtime_seconds"),
        )
        response = Response(CommandSerializer(result).data, status=status.HTTP_202_ACCEPTED)
        response["Location"] = reverse("api:background-command", args=[sandbox_id, result.id])
        return response


class BackgroundDetailView(ServiceView):
    serializer_class = BackgroundCheckSerializer
    pagination_class = None

    @extend_schema(
        summary="Check a background command",
        description="Running or not, status, exit code once ended, the last tail_lines "
        "lines of its output, elapsed seconds. Read from the sandbox live while it runs.",
        parameters=[BackgroundCheckQuerySerializer, TEAM_PARAM],
        responses={200: BackgroundCheckSerializer, **{c: ERRORS[c] for c in (400, 404, 502)}},
    )
    def get(self, request: Request, sandbox_id: str, command_id: int) -> Response:
        query = BackgroundCheckQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        check = services.check_background(
            principal(request),
            sandbox_id,
            command_id,
            tail_lines=query.validated_data["tail_lines"],
        )
        return Response(BackgroundCheckSerializer(check).data)


class BackgroundCancelView(ServiceView):
    serializer_class = BackgroundCheckSerializer
    pagination_class = None

    @extend_schema(
        summary="Cancel a background command",
        description="Every process of the command gets SIGTERM, then SIGKILL 2 s later; it "
        "ends as cancelled. A command that already ended is left as it ended.",
        parameters=[TEAM_PARAM],
        request=None,
        responses={200: BackgroundCheckSerializer, **{c: ERRORS[c] for c in (403, 404, 502)}},
    )
    def post(self, request: Request, sandbox_id: str, command_id: int) -> Response:
        check = services.cancel_background(principal(request), sandbox_id, command_id)
        return Response(BackgroundCheckSerializer(check).data)


# --- files -----------------------------------------------------------------------------------

PATH_PARAM = OpenApiParameter("path", str, description=f"Path; relative ones start at {WORKSPACE}.")


class FilesView(ServiceView):
    serializer_class = FileEntrySerializer

    @extend_schema(
        summary="List a directory (or one file)",
        parameters=[PATH_PARAM, TEAM_PARAM],
        responses={200: FileEntrySerializer(many=True), 404: ERRORS[404]},
    )
    def get(self, request: Request, sandbox_id: str) -> Response:
        path = request.query_params.get("path", WORKSPACE)
        return self.paginated(
            services.list_files(principal(request), sandbox_id, path), FileEntrySerializer
        )

    @extend_schema(
        summary="Upload files",
        description="multipart/form-data: every file part is written into the directory "
        f"`path` (default {WORKSPACE}) under its file name. Any other content type: the raw "
        "body is the content of the file at `?path=`.",
        parameters=[PATH_PARAM, TEAM_PARAM],
        request={
            "multipart/form-data": UploadFormSerializer,
            "application/octet-stream": OpenApiTypes.BINARY,
        },
        responses={
            201: UploadResultSerializer,
            413: OpenApiResponse(ErrorSerializer, description="over the upload limit"),
            **{c: ERRORS[c] for c in (400, 403, 404, 502)},
        },
    )
    def post(self, request: Request, sandbox_id: str) -> Response:
        limit = settings.SANDHUB_MAX_TRANSFER_BYTES
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
        if declared > limit + 64 * 1024:  # multipart framing on top of the files' bytes
            return _too_large(limit)
        if request.content_type.startswith("multipart/form-data"):
            uploads = _multipart_files(request)
        else:
            uploads = _raw_file(request, limit)
            if uploads is None:
                return _too_large(limit)
        result = services.upload_files(principal(request), sandbox_id, uploads)
        return Response(UploadResultSerializer(result).data, status=status.HTTP_201_CREATED)


def _multipart_files(request: Request) -> list[UploadFile]:
    directory = request.data.get("path") or request.query_params.get("path") or WORKSPACE
    uploads = [
        UploadFile(path=posixpath.join(directory, part.name), content=part.read())
        for field in request.FILES
        for part in request.FILES.getlist(field)
    ]
    if not uploads:
        raise InvalidInput("no file parts in the multipart body")
    return uploads


def _raw_file(request: Request, limit: int) -> list[UploadFile] | None:
    path = request.query_params.get("path")
    if not path:
        raise InvalidInput("a raw upload needs ?path=<file path>")
    # Read the stream, not request.body: the body limit for files is the transfer limit,
    # not DATA_UPLOAD_MAX_MEMORY_SIZE (meant for JSON and form fields).
    content = request._request.read(limit + 1)
    if len(content) > limit:
        return None
    return [UploadFile(path=path, content=content)]


def _too_large(limit: int) -> Response:
    return Response(
        {"detail": f"uploads are limited to {limit} bytes per request", "code": "too_large"},
        status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
    )


class ChunkStream(StreamingHttpResponse):
    """A StreamingHttpResponse over a synchronous iterator that stays streaming under ASGI.

    Django's ASGI handler reads a sync iterator whole into memory before sending anything
    (StreamingHttpResponse.__aiter__); here each chunk is fetched in a worker thread instead,
    so a large download holds one chunk at a time. Under WSGI it is an ordinary stream.
    """

    async def __aiter__(self):
        chunks = iter(self.streaming_content)
        done = object()
        fetch = sync_to_async(next, thread_sensitive=False)
        while (part := await fetch(chunks, done)) is not done:
            yield part


class DownloadView(ServiceView):
    pagination_class = None

    @extend_schema(
        summary="Download one file, streamed",
        description="A URL that can be handed to a person: it works with an API key or a "
        "signed-in browser session of a team member.",
        parameters=[
            OpenApiParameter("path", str, required=True, description="The file's path."),
            TEAM_PARAM,
        ],
        responses={
            (200, "application/octet-stream"): OpenApiTypes.BINARY,
            **{c: ERRORS[c] for c in (400, 403, 404, 502)},
        },
    )
    def get(self, request: Request, sandbox_id: str) -> StreamingHttpResponse:
        path = request.query_params.get("path")
        if not path:
            raise InvalidInput("name the file with ?path=")
        chunks = services.open_file_stream(principal(request), sandbox_id, path)
        # The first chunk now: errors found on reading ("is a directory") are still a proper
        # error response rather than a stream that breaks off.
        first = next(chunks, b"")
        response = ChunkStream(_chain(first, chunks), content_type="application/octet-stream")
        response["Content-Disposition"] = content_disposition_header(
            as_attachment=True, filename=posixpath.basename(path.rstrip("/")) or "download"
        )
        return response


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    try:
        yield from itertools.chain([first], rest)
    finally:
        close = getattr(rest, "close", None)
        if close:
            close()


# --- hosts -----------------------------------------------------------------------------------


class HostListView(ServiceView):
    serializer_class = HostSerializer

    @extend_schema(
        summary="Hosts your team's sandboxes can run on, idlest first",
        parameters=[TEAM_PARAM],
        responses={200: HostSerializer(many=True), 403: ERRORS[403]},
    )
    def get(self, request: Request) -> Response:
        return self.paginated(services.list_hosts(principal(request)), HostSerializer)


def _valid(serializer_class, request: Request) -> dict:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)
