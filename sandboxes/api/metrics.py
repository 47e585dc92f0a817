"""REST: a sandbox's usage metrics (services.get_sandbox_metrics): its samples as series, the
latest values and its limits; `live=true` takes a sample now."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from sandboxes import services
from sandboxes.api.base import TEAM_PARAM, ServiceView, errors, principal
from sandboxes.api.serializers import RestShape
from sandboxes.contract import usage
from sandboxes.contract.errors import InvalidInput
from sandboxes.contract.shapes import render

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}


class SandboxMetrics(RestShape, source=usage.SandboxMetrics):
    pass


SandboxMetricsSerializer = SandboxMetrics.drf_serializer

MINUTES_PARAM = OpenApiParameter(
    "minutes", int, description="How far back, in minutes (1 to a day; default 60)."
)
LIVE_PARAM = OpenApiParameter(
    "live", bool, description="Take a sample now first (a running sandbox only; default false)."
)


def query_minutes(request: Request) -> int:
    raw = request.query_params.get("minutes", "60").strip()
    if not raw.isdigit():
        raise InvalidInput(f"minutes must be a whole number of minutes; got {raw[:20]!r}")
    return int(raw)


def query_live(request: Request) -> bool:
    raw = request.query_params.get("live", "").strip().lower()
    if raw not in _TRUE | _FALSE:
        raise InvalidInput(f"live must be true or false; got {raw[:20]!r}")
    return raw in _TRUE


class MetricsView(ServiceView):
    serializer_class = SandboxMetricsSerializer
    pagination_class = None

    @extend_schema(
        summary="A sandbox's CPU, memory, disk and pids over time, with its limits",
        description="Samples are taken every SANDHUB_USAGE_SAMPLE_SECONDS of each running "
        "sandbox and kept a day. Series are aligned on `at`; cpu_percent is of the sandbox's "
        "CPU limit. Any team role may read them.",
        parameters=[MINUTES_PARAM, LIVE_PARAM, TEAM_PARAM],
        responses={200: SandboxMetricsSerializer, **errors(400, 404, 502)},
    )
    def get(self, request: Request, sandbox_id: str) -> Response:
        metrics = services.get_sandbox_metrics(
            principal(request), sandbox_id, query_minutes(request), query_live(request)
        )
        return Response(SandboxMetricsSerializer(render(SandboxMetrics, metrics)).data)
