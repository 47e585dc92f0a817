"""REST endpoints for files: list, upload (multipart or a raw body), download (streamed),
delete, rename (move) and new folder."""

from __future__ import annotations

import contextlib
import posixpath
import tempfile

from django.conf import settings
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from sandboxes import services
from sandboxes.api.base import ERRORS, TEAM_PARAM, ServiceView, errors, principal, valid
from sandboxes.api.serializers import (
    ErrorSerializer,
    FileEntrySerializer,
    StrictSerializer,
    UploadFormSerializer,
    UploadResultSerializer,
)
from sandboxes.contract.errors import InvalidInput, ServiceError
from sandboxes.http.streaming import download
from sandboxes.policy.validation import WORKSPACE
from sandboxes.services import UploadSource

# --- delete, rename, new folder (FilesView takes DELETE) ---------------------------------


class FileChangeSerializer(serializers.Serializer):
    sandbox_id = serializers.CharField()
    action = serializers.ChoiceField(choices=["delete", "rename", "mkdir"])
    path = serializers.CharField(help_text="the path acted on (a rename's source), absolute")
    to = serializers.CharField(allow_null=True, help_text="a rename's destination, absolute")
    resumed_seconds = serializers.FloatField(allow_null=True)


class RenameSerializer(StrictSerializer):
    path = serializers.CharField(help_text=f"What to rename; relative paths start at {WORKSPACE}.")
    to = serializers.CharField(help_text="Its new path (not a folder to move it into).")


class MkdirSerializer(StrictSerializer):
    path = serializers.CharField(help_text="The new folder; missing folders on its way are made.")


INSIDE = f"Only inside {WORKSPACE} (not the folder itself), never through a symbolic link."


class FileDeleteMixin:
    @extend_schema(
        summary="Delete a file or a folder (with what it holds)",
        description=f"A link is removed, not what it points to. {INSIDE}",
        parameters=[
            OpenApiParameter("path", str, required=True, description="What to delete."),
            TEAM_PARAM,
        ],
        responses={200: FileChangeSerializer, **errors(400, 403, 404, 502)},
    )
    def delete(self, request: Request, sandbox_id: str) -> Response:
        path = request.query_params.get("path")
        if not path:
            raise InvalidInput("name what to delete with ?path=")
        result = services.delete_path(principal(request), sandbox_id, path)
        return Response(FileChangeSerializer(result).data)


# --- files -----------------------------------------------------------------------------------

PATH_PARAM = OpenApiParameter("path", str, description=f"Path; relative ones start at {WORKSPACE}.")


class FilesView(FileDeleteMixin, ServiceView):
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
            **errors(400, 403, 404, 502),
        },
    )
    def post(self, request: Request, sandbox_id: str) -> Response:
        limit = settings.SANDHUB_MAX_TRANSFER_BYTES
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
        if declared > limit + 64 * 1024:  # multipart framing on top of the files' bytes
            raise TooLarge(limit)
        # Files are streamed to the sandbox from where Django spooled them (memory up to
        # FILE_UPLOAD_MAX_MEMORY_SIZE, then disk): never whole in this process's memory.
        with contextlib.ExitStack() as spools:
            if request.content_type.startswith("multipart/form-data"):
                uploads: list[UploadSource] | None = _multipart_files(request)
            else:
                uploads = _raw_file(request, limit, spools)
            if uploads is None:
                raise TooLarge(limit)
            result = services.upload_files(principal(request), sandbox_id, uploads)
        return Response(UploadResultSerializer(result).data, status=status.HTTP_201_CREATED)


def _multipart_files(request: Request) -> list[UploadSource]:
    directory = request.data.get("path") or request.query_params.get("path") or WORKSPACE
    uploads = [
        UploadSource(path=posixpath.join(directory, part.name), stream=part, size=part.size)
        for field in request.FILES
        for part in request.FILES.getlist(field)
    ]
    if not uploads:
        raise InvalidInput("no file parts in the multipart body")
    return uploads


def _raw_file(
    request: Request, limit: int, spools: contextlib.ExitStack
) -> list[UploadSource] | None:
    path = request.query_params.get("path")
    if not path:
        raise InvalidInput("a raw upload needs ?path=<file path>")
    # Read the stream, not request.body: the body limit for files is the transfer limit,
    # not DATA_UPLOAD_MAX_MEMORY_SIZE (meant for JSON and form fields). Spooled: 1 MiB in
    # memory, the rest on disk.
    spool = spools.enter_context(tempfile.SpooledTemporaryFile(max_size=1024 * 1024))  # noqa: SIM115 (closed by the caller's ExitStack)
    size = 0
    while chunk := request._request.read(64 * 1024):
        size += len(chunk)
        if size > limit:
            return None
        spool.write(chunk)
    spool.seek(0)
    return [UploadSource(path=path, stream=spool, size=size)]


class TooLarge(ServiceError):
    """An upload over the limit, refused before it is read (and before any service ran:
    base.exception_handler records it)."""

    code = "too_large"
    http_status = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE

    def __init__(self, limit: int) -> None:
        super().__init__(f"uploads are limited to {limit} bytes per request")


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
            **errors(400, 403, 404, 502),
        },
    )
    def get(self, request: Request, sandbox_id: str) -> StreamingHttpResponse:
        path = request.query_params.get("path")
        if not path:
            raise InvalidInput("name the file with ?path=")
        # The service reads the first chunk before it returns: errors found on reading ("is a
        # directory") are still a proper error response rather than a stream that breaks off.
        chunks = services.open_file_stream(principal(request), sandbox_id, path)
        return download(chunks, path)


class FileRenameView(ServiceView):
    pagination_class = None
    serializer_class = RenameSerializer

    @extend_schema(
        summary="Rename or move a file or folder",
        description=f"An existing destination is refused (409), never replaced. {INSIDE}",
        parameters=[TEAM_PARAM],
        request=RenameSerializer,
        responses={200: FileChangeSerializer, **errors(400, 403, 404, 409, 502)},
    )
    def post(self, request: Request, sandbox_id: str) -> Response:
        data = valid(RenameSerializer, request)
        result = services.rename_path(principal(request), sandbox_id, data["path"], data["to"])
        return Response(FileChangeSerializer(result).data)


class FileMkdirView(ServiceView):
    pagination_class = None
    serializer_class = MkdirSerializer

    @extend_schema(
        summary="Create a folder",
        description=f"An existing one is refused (409). {INSIDE}",
        parameters=[TEAM_PARAM],
        request=MkdirSerializer,
        responses={201: FileChangeSerializer, **errors(400, 403, 409, 502)},
    )
    def post(self, request: Request, sandbox_id: str) -> Response:
        data = valid(MkdirSerializer, request)
        result = services.make_directory(principal(request), sandbox_id, data["path"])
        return Response(FileChangeSerializer(result).data, status=status.HTTP_201_CREATED)
