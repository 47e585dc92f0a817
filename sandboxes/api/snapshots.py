"""REST endpoints for snapshots: list and take (POST with sandbox_id and name), show, delete
(services.list_snapshots / snapshot_sandbox / get_snapshot / delete_snapshot). A sandbox
starts from one with POST /api/v1/sandboxes/ and snapshot_id."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from sandboxes import services
from sandboxes.api.base import ERRORS, TEAM_PARAM, ServiceView, errors, principal, valid
from sandboxes.api.serializers import RestShape, StrictSerializer
from sandboxes.contract import snapshots
from sandboxes.policy.validation import MAX_NAME_CHARS


class Snapshot(RestShape, source=snapshots.SnapshotInfo):
    pass


SnapshotSerializer = Snapshot.drf_serializer


class TakeSnapshotSerializer(StrictSerializer):
    sandbox_id = serializers.CharField(max_length=40, help_text="The running sandbox to keep.")
    name = serializers.CharField(
        max_length=MAX_NAME_CHARS, help_text="Unique among the team's snapshots."
    )


class SnapshotListView(ServiceView):
    serializer_class = SnapshotSerializer

    @extend_schema(
        summary="Your team's snapshots, newest first",
        parameters=[TEAM_PARAM],
        responses={200: SnapshotSerializer(many=True), 403: ERRORS[403]},
    )
    def get(self, request: Request) -> Response:
        return self.paginated(services.list_snapshots(principal(request)), SnapshotSerializer)

    @extend_schema(
        summary="Take a snapshot of a running sandbox: its files kept under a name",
        description="The workspace (and on Docker the home directory, where pip --user "
        "installs) is copied while the sandbox's processes are paused; a command running "
        "meanwhile goes on afterwards. Team quotas limit the number of snapshots and the "
        "disk they take: over them, nothing is kept (409). Needs write.",
        parameters=[TEAM_PARAM],
        request=TakeSnapshotSerializer,
        responses={201: SnapshotSerializer, **errors(400, 403, 404, 409, 502)},
    )
    def post(self, request: Request) -> Response:
        data = valid(TakeSnapshotSerializer, request)
        made = services.snapshot_sandbox(principal(request), data["sandbox_id"], data["name"])
        return Response(SnapshotSerializer(made).data, status=status.HTTP_201_CREATED)


class SnapshotDetailView(ServiceView):
    serializer_class = SnapshotSerializer
    pagination_class = None

    @extend_schema(
        summary="Show a snapshot",
        parameters=[TEAM_PARAM],
        responses={200: SnapshotSerializer, **errors(400, 404)},
    )
    def get(self, request: Request, snapshot_id: str) -> Response:
        found = services.get_snapshot(principal(request), snapshot_id)
        return Response(SnapshotSerializer(found).data)

    @extend_schema(
        summary="Delete a snapshot and its files (sandboxes made from it keep theirs)",
        parameters=[TEAM_PARAM],
        responses={200: SnapshotSerializer, **errors(400, 403, 404, 409, 502)},
    )
    def delete(self, request: Request, snapshot_id: str) -> Response:
        gone = services.delete_snapshot(principal(request), snapshot_id)
        return Response(SnapshotSerializer(gone).data)
