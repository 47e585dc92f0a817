"""REST endpoints for terminals and shell sessions: list, open and close a sandbox's
terminals (services.list_terminals / open_terminal / close_terminal; the terminal itself is
used in the browser, over the websocket its page opens), list and close shell sessions
(services.list_sessions / close_session), and run_command's body with `session` and `stdin`.
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from pydantic import Field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from sandboxes import services
from sandboxes.api.base import ERRORS, TEAM_PARAM, ServiceView, errors, principal, valid
from sandboxes.api.serializers import (
    IntegerField,
    RestShape,
    RunCommandSerializer,
    StrictSerializer,
)
from sandboxes.contract import terminals
from sandboxes.contract.shapes import render


class Terminal(RestShape, source=terminals.TerminalResult):
    url: str = Field(description="the terminal's page: open it in a browser signed in")


class Session(RestShape, source=terminals.SessionResult):
    pass


TerminalSerializer = Terminal.drf_serializer
SessionSerializer = Session.drf_serializer


class OpenTerminalSerializer(StrictSerializer):
    cols = IntegerField(required=False, default=80, min_value=2, max_value=1000)
    rows = IntegerField(required=False, default=24, min_value=1, max_value=500)


class RunCommandInSessionSerializer(RunCommandSerializer):
    """run_command's body: the command and its options, a session, stdin."""

    session = serializers.CharField(
        required=False,
        allow_null=True,
        default=None,
        trim_whitespace=False,
        help_text="Run it in the long-lived shell of this name (started in /workspace on "
        "first use): cwd, variables and shell state carry over between calls; cwd is then "
        "the session's own. Lowercase letters, digits and '-'. Omitted: a fresh shell.",
    )
    stdin = serializers.CharField(
        required=False,
        allow_null=True,
        default=None,
        allow_blank=True,
        trim_whitespace=False,
        help_text=f"Text given to the command's standard input (at most "
        f"{services.MAX_STDIN_BYTES} bytes).",
    )


def _terminal(request: Request, info: terminals.TerminalResult) -> dict:
    page = reverse("web:terminal", kwargs={"sandbox_id": info.sandbox_id, "terminal_id": info.id})
    return dict(
        TerminalSerializer(render(Terminal, info, url=request.build_absolute_uri(page))).data
    )


class TerminalListView(ServiceView):
    serializer_class = TerminalSerializer

    @extend_schema(
        summary="A sandbox's open terminals",
        description="Terminals that ended on their own (their shell exited, or idle past the "
        "team's idle timeout) are closed and not listed.",
        parameters=[TEAM_PARAM],
        responses={200: TerminalSerializer(many=True), 404: ERRORS[404]},
    )
    def get(self, request: Request, sandbox_id: str) -> Response:
        found = services.list_terminals(principal(request), sandbox_id)
        page: list[Any] | None = self.paginate_queryset(found)  # type: ignore[arg-type]
        return self.get_paginated_response([_terminal(request, t) for t in page or []])

    @extend_schema(
        summary="Open a terminal (a shell on a PTY in the sandbox) to use in the browser",
        description="Members and up. It runs until closed, its shell exits, or it is left "
        "unattended for the team's idle timeout; a sandbox has at most "
        "SANDHUB_MAX_TERMINALS_PER_SANDBOX open at once (409 beyond).",
        parameters=[TEAM_PARAM],
        request=OpenTerminalSerializer,
        responses={201: TerminalSerializer, **errors(400, 403, 404, 409, 502)},
    )
    def post(self, request: Request, sandbox_id: str) -> Response:
        data = valid(OpenTerminalSerializer, request)
        opened = services.open_terminal(principal(request), sandbox_id, **data)
        return Response(_terminal(request, opened), status=status.HTTP_201_CREATED)


class TerminalDetailView(ServiceView):
    serializer_class = TerminalSerializer
    pagination_class = None

    @extend_schema(
        summary="Close a terminal: its shell and what it started end",
        parameters=[TEAM_PARAM],
        responses={200: TerminalSerializer, **errors(403, 404, 502)},
    )
    def delete(self, request: Request, sandbox_id: str, terminal_id: str) -> Response:
        closed = services.close_terminal(principal(request), sandbox_id, terminal_id)
        return Response(_terminal(request, closed))


class SessionListView(ServiceView):
    serializer_class = SessionSerializer

    @extend_schema(
        summary="A sandbox's shell sessions (run a command with `session` to start one)",
        parameters=[TEAM_PARAM],
        responses={200: SessionSerializer(many=True), 404: ERRORS[404]},
    )
    def get(self, request: Request, sandbox_id: str) -> Response:
        return self.paginated(
            services.list_sessions(principal(request), sandbox_id), SessionSerializer
        )


class SessionDetailView(ServiceView):
    serializer_class = SessionSerializer
    pagination_class = None

    @extend_schema(
        summary="Close a shell session: its shell and what it started end",
        description="The next command with its name starts a new session in /workspace.",
        parameters=[TEAM_PARAM],
        responses={200: SessionSerializer, **errors(400, 403, 404, 502)},
    )
    def delete(self, request: Request, sandbox_id: str, name: str) -> Response:
        closed = services.close_session(principal(request), sandbox_id, name)
        return Response(SessionSerializer(closed).data)
