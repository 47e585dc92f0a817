"""REST endpoints for a sandbox's links: list its file links and preview tokens, make a file
link, revoke one (services.list_links / create_file_link / revoke_link).

A file link's URL is built from the address this request came to, as preview URLs are; it
downloads the file without a session or key, and is shown only in the answer that made it
(only its hash is kept).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from pydantic import Field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from sandboxes import services
from sandboxes.api.base import ERRORS, TEAM_PARAM, ServiceView, errors, principal, valid
from sandboxes.api.serializers import RestShape, StrictSerializer
from sandboxes.contract import links
from sandboxes.contract.shapes import render

# --- shapes ----------------------------------------------------------------------------------


class Link(RestShape, source=links.LinkInfo):
    pass


class FileLink(RestShape, source=links.FileLink, exclude=("token",)):
    url: str = Field(
        description="downloads the file, with no login, until expires_at (or until revoked): "
        "shown this once"
    )


LinkSerializer = Link.drf_serializer
FileLinkSerializer = FileLink.drf_serializer


class CreateFileLinkSerializer(StrictSerializer):
    path = serializers.CharField(
        max_length=4096,
        trim_whitespace=False,
        help_text="A regular file in the sandbox; relative paths start at /workspace.",
    )


# --- views -----------------------------------------------------------------------------------


class LinkListView(ServiceView):
    serializer_class = LinkSerializer

    @extend_schema(
        summary="A sandbox's working file links and preview tokens (not their secrets)",
        parameters=[TEAM_PARAM],
        responses={200: LinkSerializer(many=True), 404: ERRORS[404]},
    )
    def get(self, request: Request, sandbox_id: str) -> Response:
        found = services.list_links(principal(request), sandbox_id)
        page: list[Any] | None = self.paginate_queryset(found)  # type: ignore[arg-type]
        return self.get_paginated_response([dict(LinkSerializer(link).data) for link in page or []])

    @extend_schema(
        summary="Make a file link: a URL that downloads one file without a login",
        description="The link expires after the platform's file-link lifetime, stops "
        "working when the sandbox is deleted or its maker leaves the team or becomes a "
        "viewer, and can be revoked on its own (DELETE .../links/{link_id}/). Every "
        "download is audited. Needs write.",
        parameters=[TEAM_PARAM],
        request=CreateFileLinkSerializer,
        responses={201: FileLinkSerializer, **errors(400, 403, 404, 409, 502)},
    )
    def post(self, request: Request, sandbox_id: str) -> Response:
        data = valid(CreateFileLinkSerializer, request)
        made = services.create_file_link(principal(request), sandbox_id, data["path"])
        url = services.file_link_url(request.build_absolute_uri("/"), made.token)
        body = FileLinkSerializer(render(FileLink, made, url=url)).data
        return Response(body, status=status.HTTP_201_CREATED)


class LinkDetailView(ServiceView):
    serializer_class = LinkSerializer
    pagination_class = None

    @extend_schema(
        summary="Revoke one link (a file link or a preview token) of a sandbox",
        description="It stops working at once; the sandbox's other links do not. Its maker, "
        "or an owner or admin of the team, may.",
        parameters=[TEAM_PARAM],
        responses={200: LinkSerializer, **errors(400, 403, 404)},
    )
    def delete(self, request: Request, sandbox_id: str, link_id: str) -> Response:
        revoked = services.revoke_link(principal(request), sandbox_id, link_id)
        return Response(LinkSerializer(revoked).data)
