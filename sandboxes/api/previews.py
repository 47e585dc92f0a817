"""REST endpoints for previews: list and open a sandbox's previews, stop one, deploy an app.

Each builds the principal, calls one service (services.list_previews / get_preview_url /
stop_app / deploy_app) and renders its result with the preview's URL, built from the address
this request came to.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from pydantic import Field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from sandboxes import services
from sandboxes.api.base import ERRORS, TEAM_PARAM, ServiceView, errors, principal, valid
from sandboxes.api.serializers import (
    ErrorSerializer,
    FloatField,
    InlineFileSerializer,
    IntegerField,
    RestShape,
    StrictSerializer,
)
from sandboxes.contract import results
from sandboxes.contract.errors import InvalidInput
from sandboxes.contract.results import UploadFile
from sandboxes.contract.shapes import render
from sandboxes.policy.validation import MAX_COMMAND_CHARS, WORKSPACE

URL = (
    "where a browser opens it: signed in as a team member, or by anyone with this URL (its "
    "token) until expires_at"
)

# --- shapes ----------------------------------------------------------------------------------


class Preview(RestShape, source=results.PreviewInfo):
    url: str = Field(description="where team members signed in open it (no token)")


class PreviewLink(RestShape, source=results.PreviewLink, exclude=("token",)):
    url: str = Field(description=URL)


class DeployedApp(RestShape, source=results.DeployedApp, exclude=("token",)):
    url: str = Field(description=URL)


PreviewSerializer = Preview.drf_serializer
PreviewLinkSerializer = PreviewLink.drf_serializer
DeployedAppSerializer = DeployedApp.drf_serializer


class OpenPreviewSerializer(StrictSerializer):
    port = IntegerField(min_value=1, max_value=65535, help_text="Port inside the sandbox.")
    expires_seconds = IntegerField(
        required=False,
        allow_null=True,
        default=None,
        min_value=60,
        max_value=services.MAX_TOKEN_SECONDS,
        help_text=f"How long the URL's token stays valid (default "
        f"{services.DEFAULT_TOKEN_SECONDS}); a viewer's, or a read-only key's, at most "
        f"{services.VIEWER_TOKEN_SECONDS} (and that by default).",
    )
    public = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="true: anyone with the address may open it (team owners and admins, if the "
        "team allows public previews); false: no longer; null: unchanged.",
    )


class DeploySerializer(StrictSerializer):
    command = serializers.CharField(
        max_length=MAX_COMMAND_CHARS,
        trim_whitespace=False,
        help_text="Starts the app in the foreground (no '&' or nohup), serving on `port`.",
    )
    port = IntegerField(min_value=1, max_value=65535, help_text="Port the app listens on.")
    cwd = serializers.CharField(required=False, max_length=4096, default=WORKSPACE)
    env = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    wait_seconds = FloatField(
        required=False,
        default=services.DEFAULT_WAIT_SECONDS,
        min_value=1,
        max_value=services.MAX_WAIT_SECONDS,
        help_text="How long to wait for the port to answer.",
    )
    files = serializers.ListField(
        child=InlineFileSerializer(),
        required=False,
        max_length=1000,
        help_text=f"Files to write into {WORKSPACE} before starting.",
    )


def _base(request: Request) -> str:
    return request.build_absolute_uri("/")


def _preview(request: Request, info: results.PreviewInfo) -> dict[str, Any]:
    url = services.preview_url(_base(request), info.sandbox_id, info.port, None)
    return dict(PreviewSerializer(render(Preview, info, url=url)).data)


# --- views -----------------------------------------------------------------------------------


class PreviewListView(ServiceView):
    serializer_class = PreviewSerializer

    @extend_schema(
        summary="Open previews of a sandbox's ports",
        parameters=[TEAM_PARAM],
        responses={200: PreviewSerializer(many=True), 404: ERRORS[404]},
    )
    def get(self, request: Request, sandbox_id: str) -> Response:
        found = services.list_previews(principal(request), sandbox_id)
        page: list[Any] | None = self.paginate_queryset(found)  # type: ignore[arg-type]
        return self.get_paginated_response([_preview(request, info) for info in page or []])

    @extend_schema(
        summary="Open a preview of a port (or take the open one) and get its URL",
        description="The URL carries a token valid for expires_seconds (link_id names it: "
        "DELETE .../links/{link_id}/ revokes it); team members signed in need none. Whether "
        "anything listens on the port is not checked.",
        parameters=[TEAM_PARAM],
        request=OpenPreviewSerializer,
        responses={201: PreviewLinkSerializer, **errors(400, 403, 404, 409)},
    )
    def post(self, request: Request, sandbox_id: str) -> Response:
        data = valid(OpenPreviewSerializer, request)
        link = services.get_preview_url(
            principal(request),
            sandbox_id,
            data["port"],
            expires_seconds=data["expires_seconds"],
            public=data["public"],
        )
        url = services.preview_url(_base(request), link.sandbox_id, link.port, link.token)
        body = PreviewLinkSerializer(render(PreviewLink, link, url=url)).data
        return Response(body, status=status.HTTP_201_CREATED)


class PreviewDetailView(ServiceView):
    serializer_class = PreviewSerializer
    pagination_class = None

    @extend_schema(
        summary="Stop a preview (and the app deploy_app started on that port)",
        description="Its URL and every token of it stop working at once.",
        parameters=[TEAM_PARAM],
        responses={200: PreviewSerializer, **errors(403, 404, 502)},
    )
    def delete(self, request: Request, sandbox_id: str, port: int) -> Response:
        stopped = services.stop_app(principal(request), sandbox_id, port)
        return Response(_preview(request, stopped))


class DeployView(ServiceView):
    serializer_class = DeployedAppSerializer
    pagination_class = None

    @extend_schema(
        summary="Deploy a web app: start it, wait until its port answers, get its URL",
        description="Writes the files given, starts the command as a background command "
        "and waits up to wait_seconds for the port to answer. If the app exits or the port "
        "stays silent, the command is cancelled, no preview is left, and the 422 error has "
        "the end of its log. Deploying again on a port replaces the app there.",
        parameters=[TEAM_PARAM],
        request=DeploySerializer,
        responses={
            201: DeployedAppSerializer,
            422: OpenApiResponse(ErrorSerializer, description="the app did not come up"),
            **errors(400, 403, 404, 409, 502),
        },
    )
    def post(self, request: Request, sandbox_id: str) -> Response:
        data = valid(DeploySerializer, request)
        acting = principal(request)
        uploads = [_inline(index, item) for index, item in enumerate(data.pop("files", []))]
        if uploads:
            services.upload_files(acting, sandbox_id, uploads)
        app = services.deploy_app(acting, sandbox_id, **data)
        url = services.preview_url(_base(request), app.sandbox_id, app.port, app.token)
        body = DeployedAppSerializer(render(DeployedApp, app, url=url)).data
        return Response(body, status=status.HTTP_201_CREATED)


def _inline(index: int, item: dict[str, Any]) -> UploadFile:
    try:
        return UploadFile.inline(
            item["path"], item["content"], encoding=item["encoding"], executable=item["executable"]
        )
    except InvalidInput as exc:
        raise InvalidInput(f"files[{index}] ({item['path']}): {exc.message}") from exc
