"""REST for the egress policy: a sandbox's network log, the team's allow-list (team admins
change it), and the team's secrets bound to destinations (a value goes in on POST and never
comes back out). Each view calls one service (sandboxes/services/egress*.py)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from sandboxes import services
from sandboxes.api.base import TEAM_PARAM, ServiceView, errors, principal, valid
from sandboxes.api.serializers import RestShape, StrictSerializer
from sandboxes.contract import egress_results as egress
from sandboxes.contract.shapes import render

MAX_RULES = 200
MAX_SECRET_CHARS = 8192


class NetworkLog(RestShape, source=egress.NetworkLogInfo):
    pass


class TeamEgress(RestShape, source=egress.TeamEgressInfo):
    pass


class Secret(RestShape, source=egress.SecretInfo):
    pass


NetworkLogSerializer = NetworkLog.drf_serializer
TeamEgressSerializer = TeamEgress.drf_serializer
SecretSerializer = Secret.drf_serializer


class TeamEgressChangeSerializer(StrictSerializer):
    allowlist = serializers.ListField(
        child=serializers.CharField(max_length=260),
        required=False,
        max_length=MAX_RULES,
        help_text='The whole new allow-list: rules "name[:ports]", e.g. "pypi.org", '
        '"*.pythonhosted.org:443", "github.com:22,443".',
    )


class SecretCreateSerializer(StrictSerializer):
    name = serializers.CharField(
        max_length=100, help_text="The environment variable the sandbox sees (a placeholder)."
    )
    hosts = serializers.ListField(
        child=serializers.CharField(max_length=260),
        min_length=1,
        max_length=50,
        help_text='Names the value is sent to, e.g. "api.openai.com", "*.example.com".',
    )
    value = serializers.CharField(
        max_length=MAX_SECRET_CHARS,
        trim_whitespace=False,
        write_only=True,
        help_text="The secret itself: stored encrypted, never returned.",
    )
    header = serializers.CharField(
        max_length=100, required=False, help_text="The request header it goes in."
    )
    template = serializers.CharField(
        max_length=200,
        required=False,
        help_text='How the header\'s value is made from the secret, e.g. "Bearer {value}".',
    )
    team_wide = serializers.BooleanField(
        required=False,
        help_text="For every member's sandboxes (team admins), not only yours.",
    )


class NetworkLogView(ServiceView):
    serializer_class = NetworkLogSerializer
    pagination_class = None

    @extend_schema(
        summary="A sandbox's network: its mode, allow-list and refused connections",
        description="Refused connections are counted per destination and reason, the most "
        "refused first. Any team role may read it.",
        parameters=[TEAM_PARAM],
        responses={200: NetworkLogSerializer, **errors(404)},
    )
    def get(self, request: Request, sandbox_id: str) -> Response:
        log = services.network_log(principal(request), sandbox_id)
        return Response(NetworkLogSerializer(render(NetworkLog, log)).data)


class TeamEgressView(ServiceView):
    serializer_class = TeamEgressSerializer
    pagination_class = None

    @extend_schema(
        summary="The team's network policy: the most a sandbox may have, the allow-list",
        parameters=[TEAM_PARAM],
        responses={200: TeamEgressSerializer, **errors(403)},
    )
    def get(self, request: Request) -> Response:
        info = services.get_team_egress(principal(request))
        return Response(TeamEgressSerializer(render(TeamEgress, info)).data)

    @extend_schema(
        summary="Change the team's allow-list (team owners and admins, a key with admin scope)",
        description="The most network mode (max_mode) and the address ranges a team may "
        "reach are a platform administrator's to set, in the admin.",
        parameters=[TEAM_PARAM],
        request=TeamEgressChangeSerializer,
        responses={200: TeamEgressSerializer, **errors(400, 403)},
    )
    def patch(self, request: Request) -> Response:
        data = valid(TeamEgressChangeSerializer, request)
        info = services.set_team_egress(principal(request), allowlist=data.get("allowlist"))
        return Response(TeamEgressSerializer(render(TeamEgress, info)).data)


class SecretListView(ServiceView):
    serializer_class = SecretSerializer

    @extend_schema(
        summary="The team's secrets you can use (values are never shown)",
        parameters=[TEAM_PARAM],
        responses={200: SecretSerializer(many=True), **errors(403)},
    )
    def get(self, request: Request) -> Response:
        found = [render(Secret, s) for s in services.list_secrets(principal(request))]
        return self.paginated(found, SecretSerializer)

    @extend_schema(
        summary="Store a secret bound to destination hosts",
        description="The sandbox sees only a placeholder in $NAME; the egress proxy puts the "
        "real value in the header on requests to the hosts given. The value is stored "
        "encrypted and never returned.",
        parameters=[TEAM_PARAM],
        request=SecretCreateSerializer,
        responses={201: SecretSerializer, **errors(400, 403, 409)},
    )
    def post(self, request: Request) -> Response:
        data = valid(SecretCreateSerializer, request)
        info = services.add_secret(principal(request), **data)
        return Response(SecretSerializer(render(Secret, info)).data, status=status.HTTP_201_CREATED)


class SecretDetailView(ServiceView):
    serializer_class = SecretSerializer
    pagination_class = None

    @extend_schema(
        summary="Delete a secret",
        parameters=[TEAM_PARAM],
        request=None,
        responses={204: None, **errors(403, 404)},
    )
    def delete(self, request: Request, secret_id: int) -> Response:
        services.delete_secret(principal(request), secret_id)
        return Response(status=status.HTTP_204_NO_CONTENT)
