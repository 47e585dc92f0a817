"""REST endpoints that pause, resume and stop a sandbox (services.pause_sandbox /
resume_sandbox / stop_sandbox): POST .../pause/, .../resume/, .../stop/, no body. Any other
call on a paused or stopped sandbox resumes it first (its result's resumed_seconds)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from sandboxes import services
from sandboxes.api.base import TEAM_PARAM, ServiceView, errors, principal
from sandboxes.api.serializers import RestShape, Sandbox
from sandboxes.contract import lifecycle


class LifecycleChange(RestShape, source=lifecycle.LifecycleChange, types={"sandbox": Sandbox}):
    pass


LifecycleChangeSerializer = LifecycleChange.drf_serializer
_ANSWERS = {200: LifecycleChangeSerializer, **errors(403, 404, 409, 502)}


class _LifecycleView(ServiceView):
    serializer_class = LifecycleChangeSerializer
    pagination_class = None


class PauseView(_LifecycleView):
    @extend_schema(
        summary="Pause a sandbox: its processes freeze, its memory is kept",
        description="Any later call on it resumes it first. 409 while a foreground command "
        "runs (wait for it or cancel it; background commands freeze with it), or over the "
        "team's paused quota. Pausing a paused sandbox changes nothing (changed: false).",
        parameters=[TEAM_PARAM],
        request=None,
        responses=_ANSWERS,
    )
    def post(self, request: Request, sandbox_id: str) -> Response:
        change = services.pause_sandbox(principal(request), sandbox_id)
        return Response(LifecycleChangeSerializer(change).data)


class ResumeView(_LifecycleView):
    @extend_schema(
        summary="Resume a paused sandbox, or start a stopped one again",
        description="409 over the team's running quota, and for a deleted, failed or lost "
        "sandbox. A running one is left as it is (changed: false).",
        parameters=[TEAM_PARAM],
        request=None,
        responses=_ANSWERS,
    )
    def post(self, request: Request, sandbox_id: str) -> Response:
        change = services.resume_sandbox(principal(request), sandbox_id)
        return Response(LifecycleChangeSerializer(change).data)


class StopView(_LifecycleView):
    @extend_schema(
        summary="Stop a sandbox: its processes end, only its files are kept",
        description="Its background commands end (cancelled). Any later call on it starts "
        "it again. 409 while a foreground command runs, or over the team's stopped quota.",
        parameters=[TEAM_PARAM],
        request=None,
        responses=_ANSWERS,
    )
    def post(self, request: Request, sandbox_id: str) -> Response:
        change = services.stop_sandbox(principal(request), sandbox_id)
        return Response(LifecycleChangeSerializer(change).data)
