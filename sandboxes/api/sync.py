"""REST endpoints of tree sync (the `sandhub` client): manifest, tar upload, delete, download.

Thin: each calls one service of sandboxes.services.sync. The upload's body is a raw tar read
from the request stream in chunks (never request.body, never whole in memory); the download
is a streamed tar.
"""

from __future__ import annotations

from typing import IO, Any, cast

from django.conf import settings
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from sandboxes import services
from sandboxes.api.base import TEAM_PARAM, ServiceView, errors, principal, valid
from sandboxes.api.serializers import ErrorSerializer, StrictSerializer
from sandboxes.contract.errors import InvalidInput
from sandboxes.contract.sync import Manifest
from sandboxes.http.streaming import download

ROOT_PARAM = OpenApiParameter(
    "path", str, required=True, description="The sync root: a directory under /workspace."
)


class ManifestEntrySerializer(serializers.Serializer):
    path = serializers.CharField(help_text="relative to the root, POSIX, never ..")
    kind = serializers.ChoiceField(["file", "dir", "link"])
    size = serializers.IntegerField()
    mtime = serializers.FloatField(help_text="seconds since the epoch")
    mode = serializers.IntegerField(help_text="permission bits (0o7777)")
    target = serializers.CharField(required=False, help_text="links only")


class ManifestSerializer(serializers.Serializer):
    path = serializers.CharField()
    exists = serializers.BooleanField()
    entries = ManifestEntrySerializer(many=True)
    next = serializers.CharField(allow_null=True, help_text="`after` of the next page")


class SyncUploadSerializer(serializers.Serializer):
    path = serializers.CharField()
    files = serializers.IntegerField()
    bytes = serializers.IntegerField()


class SyncPathsSerializer(StrictSerializer):
    path = serializers.CharField(help_text="The sync root: a directory under /workspace.")
    paths = serializers.ListField(
        child=serializers.CharField(trim_whitespace=False),
        max_length=services.MAX_PATHS,
        help_text="Entries relative to the root.",
    )


class SyncDeleteSerializer(serializers.Serializer):
    path = serializers.CharField()
    deleted = serializers.IntegerField()


def render_manifest(manifest: Manifest) -> dict[str, Any]:
    entries = []
    for entry in manifest.entries:
        row: dict[str, Any] = {
            "path": entry.path,
            "kind": entry.kind,
            "size": entry.size,
            "mtime": entry.mtime,
            "mode": entry.mode,
        }
        if entry.kind == "link":
            row["target"] = entry.target
        entries.append(row)
    return {
        "path": manifest.path,
        "exists": manifest.exists,
        "entries": entries,
        "next": manifest.next,
    }


def _root(request: Request) -> str:
    path = request.query_params.get("path")
    if not path:
        raise InvalidInput("name the sync root with ?path=")
    return path


class ManifestView(ServiceView):
    pagination_class = None
    serializer_class = ManifestSerializer

    @extend_schema(
        summary="A page of a directory tree's entries (sync)",
        description="Files, directories and links under `path` (recursive, links not "
        "followed), sorted by relative path (bytewise), those after `after`. A missing root "
        'answers exists false and no entries; a file is refused (400). Follow "next".',
        parameters=[
            ROOT_PARAM,
            OpenApiParameter("after", str, description="The previous page's `next`."),
            OpenApiParameter("limit", int, description=f"1 to {services.MANIFEST_MAX}"),
            TEAM_PARAM,
        ],
        responses={200: ManifestSerializer, **errors(400, 403, 404, 409, 502)},
    )
    def get(self, request: Request, sandbox_id: str) -> Response:
        limit_text = request.query_params.get("limit") or "1000"
        try:
            limit = int(limit_text)
        except ValueError:
            raise InvalidInput(f"limit must be an integer, not {limit_text[:20]!r}") from None
        manifest = services.tree_manifest(
            principal(request),
            sandbox_id,
            _root(request),
            after=request.query_params.get("after") or None,
            limit=limit,
        )
        return Response(render_manifest(manifest))


class SyncUploadView(ServiceView):
    pagination_class = None
    serializer_class = SyncUploadSerializer

    @extend_schema(
        summary="Write a tar's members under a directory (sync)",
        description="The body is a tar (application/x-tar): exactly its members are written "
        "under `path` (created with its parents), with their modes and mtimes; regular "
        "files, directories and symbolic links only, never through a link.",
        parameters=[ROOT_PARAM, TEAM_PARAM],
        request={"application/x-tar": OpenApiTypes.BINARY},
        responses={
            200: SyncUploadSerializer,
            413: OpenApiResponse(ErrorSerializer, description="over the transfer limit"),
            **errors(400, 403, 404, 409, 502),
        },
    )
    def post(self, request: Request, sandbox_id: str) -> Response:
        limit = settings.SANDHUB_MAX_TRANSFER_BYTES
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
        if declared > limit:
            raise services.TooLarge(f"an upload is limited to {limit} bytes per request")
        # The raw request stream (never request.body): the service reads it in chunks.
        result = services.sync_upload(
            principal(request), sandbox_id, _root(request), _body(request)
        )
        return Response(SyncUploadSerializer(result).data)


def _body(request: Request) -> IO[bytes]:
    """The request body as a stream, never request.body: under ASGI the file Django spooled
    it to (seekable: the service need not copy it), else the request's own reader."""
    raw = request._request
    spooled = getattr(raw, "_stream", None)
    seekable = getattr(spooled, "seekable", lambda: False)()
    if seekable and not getattr(raw, "_read_started", True):
        return cast(IO[bytes], spooled)
    return cast(IO[bytes], raw)  # HttpRequest.read()


class SyncDeleteView(ServiceView):
    pagination_class = None
    serializer_class = SyncDeleteSerializer

    @extend_schema(
        summary="Delete entries under a directory (sync)",
        description="Files, links (not what they point to) and directories (with what they "
        "hold) named relative to `path`; never anything outside it.",
        parameters=[TEAM_PARAM],
        request=SyncPathsSerializer,
        responses={200: SyncDeleteSerializer, **errors(400, 403, 404, 409, 502)},
    )
    def post(self, request: Request, sandbox_id: str) -> Response:
        data = valid(SyncPathsSerializer, request)
        result = services.sync_delete(principal(request), sandbox_id, data["path"], data["paths"])
        return Response(SyncDeleteSerializer(result).data)


class SyncDownloadView(ServiceView):
    pagination_class = None
    # What it reads (its answer is a tar): OPTIONS describes a POST through it.
    serializer_class = SyncPathsSerializer

    @extend_schema(
        summary="Download chosen entries as one tar, streamed (sync)",
        description="A tar (pax) of exactly the entries named relative to `path` (a "
        "directory without its content), named by those paths, modes and mtimes kept.",
        parameters=[TEAM_PARAM],
        request=SyncPathsSerializer,
        responses={
            (200, "application/x-tar"): OpenApiTypes.BINARY,
            **errors(400, 403, 404, 409, 502),
        },
    )
    def post(self, request: Request, sandbox_id: str) -> StreamingHttpResponse:
        data = valid(SyncPathsSerializer, request)
        chunks = services.open_sync_download(
            principal(request), sandbox_id, data["path"], data["paths"]
        )
        return download(chunks, "sync", suffix=".tar", content_type="application/x-tar")
