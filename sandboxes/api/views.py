"""REST endpoints for sandboxes, commands, background commands, workflows and hosts: each
builds the principal, calls one service and renders its result (files: files.py)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from sandboxes import services
from sandboxes.api.base import ERRORS, TEAM_PARAM, ServiceView, errors, principal, valid
from sandboxes.api.serializers import (
    BackgroundCheckQuerySerializer,
    BackgroundCheckSerializer,
    CommandSerializer,
    HostSerializer,
    RunOnceResultSerializer,
    RunOnceSerializer,
    RunTestsSerializer,
    SandboxCreateSerializer,
    SandboxSerializer,
    StartBackgroundSerializer,
    TestReportSerializer,
)
from sandboxes.api.terminals import RunCommandInSessionSerializer
from sandboxes.contract.errors import InvalidInput
from sandboxes.contract.results import UploadFile
from sandboxes.services import workflows

COMMAND_HISTORY_MAX = 500


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
        responses={201: SandboxSerializer, **errors(400, 403, 409, 502)},
    )
    def post(self, request: Request) -> Response:
        data = valid(SandboxCreateSerializer, request)
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
        responses={200: SandboxSerializer, **errors(403, 404, 502)},
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
        request=RunCommandInSessionSerializer,
        responses={201: CommandSerializer, **errors(400, 403, 404, 409, 502)},
    )
    def post(self, request: Request, sandbox_id: str) -> Response:
        data = valid(RunCommandInSessionSerializer, request)
        result = services.run_command(
            principal(request),
            sandbox_id,
            data["command"],
            cwd=data["cwd"],
            env=data.get("env"),
            timeout=data.get("timeout"),
            output_cap=data.get("output_cap"),
            session=data["session"],
            stdin=data["stdin"],
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
            **errors(400, 403, 404, 409, 502),
        },
    )
    def post(self, request: Request, sandbox_id: str) -> Response:
        data = valid(StartBackgroundSerializer, request)
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
        responses={200: BackgroundCheckSerializer, **errors(400, 404, 502)},
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
        responses={200: BackgroundCheckSerializer, **errors(403, 404, 502)},
    )
    def post(self, request: Request, sandbox_id: str, command_id: int) -> Response:
        check = services.cancel_background(principal(request), sandbox_id, command_id)
        return Response(BackgroundCheckSerializer(check).data)


# --- workflows -------------------------------------------------------------------------------


class RunTestsView(ServiceView):
    serializer_class = TestReportSerializer
    pagination_class = None

    @extend_schema(
        summary="Run a test suite and summarise its JUnit report",
        description="Runs the test command (pytest by default, with --junitxml appended) and "
        "waits for it; the answer has the counts of passed, failed, errors and skipped, each "
        "failing test's name and message, and the command's output. A run that timed out "
        "has status timed_out and no counts.",
        parameters=[TEAM_PARAM],
        request=RunTestsSerializer,
        responses={200: TestReportSerializer, **errors(400, 403, 404, 409, 502)},
    )
    def post(self, request: Request, sandbox_id: str) -> Response:
        # The serializer's fields are the workflow's own arguments.
        report = workflows.run_tests(
            principal(request), sandbox_id, **valid(RunTestsSerializer, request)
        )
        return Response(TestReportSerializer(report).data)


class RunOnceView(ServiceView):
    serializer_class = RunOnceResultSerializer
    pagination_class = None

    @extend_schema(
        summary="Run one command in a throwaway sandbox",
        description="Creates a fresh sandbox, writes the files given into /workspace, runs "
        "the command, and deletes the sandbox again, whatever happened (deleted false: it is "
        "removed later).",
        parameters=[TEAM_PARAM],
        request=RunOnceSerializer,
        responses={200: RunOnceResultSerializer, **errors(400, 403, 409, 502)},
    )
    def post(self, request: Request) -> Response:
        data = valid(RunOnceSerializer, request)
        data["files"] = [_inline(index, item) for index, item in enumerate(data.get("files", []))]
        once = workflows.run_once(principal(request), **data)
        return Response(RunOnceResultSerializer(once).data)


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


def _inline(index: int, item: dict[str, Any]) -> UploadFile:
    try:
        return UploadFile.inline(
            item["path"], item["content"], encoding=item["encoding"], executable=item["executable"]
        )
    except InvalidInput as exc:
        raise InvalidInput(f"files[{index}] ({item['path']}): {exc.message}") from exc
