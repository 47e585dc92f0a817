"""Tools that run things in a sandbox, streaming output as MCP notifications while they run."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from mcp_bridge import identity, junit
from mcp_bridge.args import (
    DEFAULT_OUTPUT_BYTES,
    Command,
    Cwd,
    Env,
    Files,
    MaxOutput,
    SandboxId,
    Timeout,
)
from mcp_bridge.runtime import call_streaming
from mcp_bridge.schemas import Command as CommandOut
from mcp_bridge.schemas import RunOnce, TestFailure, TestReport
from mcp_bridge.tools_files import to_uploads
from sandboxes import services
from sandboxes.errors import NotFound, ServiceError
from sandboxes.results import CommandResult
from sandboxes.validation import WORKSPACE

RUNS = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)
REPORT_MAX_BYTES = 4 * 1024 * 1024
TAIL_CHARS = 2000


def finished(result: CommandResult) -> CommandOut:
    """The command's result, or a tool error when it was killed by its timeout."""
    if result.status == "timed_out":
        so_far = (result.stdout + result.stderr)[-TAIL_CHARS:] or "(none)"
        raise ToolError(
            f"{result.error_message or 'timed out'} (command {result.id}); output so far: {so_far}"
        )
    return CommandOut.of(result)


def register(mcp: FastMCP) -> None:
    @mcp.tool(annotations=RUNS)
    async def run_command(
        command: Command,
        ctx: Context,
        sandbox_id: SandboxId = None,
        cwd: Cwd = WORKSPACE,
        env: Env = None,
        timeout: Timeout = None,
        max_output_bytes: MaxOutput = DEFAULT_OUTPUT_BYTES,
    ) -> CommandOut:
        """Run a shell command (bash -c) in a sandbox and wait for it. Output is streamed as
        progress and log notifications while it runs; the result has the exit code, stdout
        and stderr (long output keeps head and tail). A non-zero exit is a normal result;
        a timeout kills the command and is an error that includes the output so far."""

        def body(on_output) -> CommandOut:
            caller = identity.caller()
            result = services.run_command(
                caller.principal,
                caller.sandbox(sandbox_id),
                command,
                cwd=cwd,
                env=env,
                timeout=timeout,
                output_cap=max_output_bytes,
                on_output=on_output,
            )
            return finished(result)

        return await call_streaming(ctx, command[:60], timeout, body)

    @mcp.tool(annotations=RUNS)
    async def run_python(
        code: Annotated[
            str,
            Field(
                description="Python source, run with python3 -c.", min_length=1, max_length=100_000
            ),
        ],
        ctx: Context,
        sandbox_id: SandboxId = None,
        cwd: Cwd = WORKSPACE,
        env: Env = None,
        timeout: Timeout = None,
        max_output_bytes: MaxOutput = DEFAULT_OUTPUT_BYTES,
    ) -> CommandOut:
        """Run Python code with the sandbox's python3 and wait for it; same result and
        streaming as run_command."""

        def body(on_output) -> CommandOut:
            caller = identity.caller()
            result = services.run_python(
                caller.principal,
                caller.sandbox(sandbox_id),
                code,
                cwd=cwd,
                env=env,
                timeout=timeout,
                output_cap=max_output_bytes,
                on_output=on_output,
            )
            return finished(result)

        return await call_streaming(ctx, "python", timeout, body)

    @mcp.tool(annotations=RUNS)
    async def install_packages(
        packages: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=200)]],
            Field(
                description="pip requirements, e.g. ['requests==2.32.3', 'numpy'].",
                min_length=1,
                max_length=100,
            ),
        ],
        ctx: Context,
        sandbox_id: SandboxId = None,
        index_url: Annotated[
            str | None,
            Field(description="A package index URL instead of the default.", max_length=2000),
        ] = None,
        timeout: Timeout = None,
    ) -> CommandOut:
        """pip install Python packages for the sandbox user (pip install --user). Needs network
        access from the sandbox or a reachable index_url. A failed install is a result with a
        non-zero exit code and pip's message in stderr."""

        def body(on_output) -> CommandOut:
            caller = identity.caller()
            result = services.install_packages(
                caller.principal,
                caller.sandbox(sandbox_id),
                packages,
                index_url=index_url,
                timeout=timeout,
                on_output=on_output,
            )
            return finished(result)

        return await call_streaming(ctx, "pip install", timeout, body)

    @mcp.tool(annotations=RUNS)
    async def run_tests(
        ctx: Context,
        sandbox_id: SandboxId = None,
        command: Annotated[
            str,
            Field(
                description="Test command. With junit (the default) "
                "'--junitxml=<report>' is appended, which suits pytest.",
                min_length=1,
                max_length=10_000,
            ),
        ] = "python3 -m pytest -q",
        junit_report: Annotated[
            bool, Field(description="Append --junitxml to the command and read the report.")
        ] = True,
        report_path: Annotated[
            str | None,
            Field(
                description="Read a JUnit XML report the command writes itself (other test "
                "runners); nothing is appended then.",
                max_length=4096,
            ),
        ] = None,
        cwd: Cwd = WORKSPACE,
        env: Env = None,
        timeout: Timeout = None,
        max_output_bytes: MaxOutput = DEFAULT_OUTPUT_BYTES,
    ) -> TestReport:
        """Run a test suite (pytest by default) and return a structured summary: counts of
        passed, failed, errors and skipped, and each failing test's name and message, read
        from the JUnit XML report. Output streams while the tests run."""
        if report_path:
            report, full_command = report_path, command
        elif junit_report:
            report = f"/tmp/sandhub-junit-{uuid.uuid4().hex[:12]}.xml"
            full_command = f"{command} --junitxml={report}"
        else:
            report, full_command = None, command

        def body(on_output) -> TestReport:
            caller = identity.caller()
            target = caller.sandbox(sandbox_id)
            result = services.run_command(
                caller.principal,
                target,
                full_command,
                cwd=cwd,
                env=env,
                timeout=timeout,
                output_cap=max_output_bytes,
                on_output=on_output,
            )
            finished(result)
            summary, found = _summary(caller, target, report)
            return TestReport(
                sandbox_id=target,
                command=full_command,
                status=result.status,
                exit_code=result.exit_code,
                report_found=found,
                passed=summary.passed,
                failed=summary.failed,
                errors=summary.errors,
                skipped=summary.skipped,
                total=summary.total,
                failures=[TestFailure(**vars(f)) for f in summary.failures],
                stdout=result.stdout,
                stderr=result.stderr,
                duration_seconds=result.duration_seconds,
                command_id=result.id,
            )

        return await call_streaming(ctx, "tests", timeout, body)

    @mcp.tool(annotations=RUNS)
    async def run_once(
        command: Command,
        ctx: Context,
        files: Annotated[
            Files | None, Field(description="Files to write into /workspace before running.")
        ] = None,
        image: Annotated[
            str | None, Field(description="Image name; omit for the default.", max_length=100)
        ] = None,
        env: Env = None,
        timeout: Timeout = None,
        max_output_bytes: MaxOutput = DEFAULT_OUTPUT_BYTES,
    ) -> RunOnce:
        """Create a fresh sandbox, optionally write files into it, run one command, and delete
        the sandbox again, all in one call: for quick, throwaway runs."""
        uploads = to_uploads(files) if files else []

        def body(on_output) -> RunOnce:
            caller = identity.caller()
            info = services.create_sandbox(caller.principal, image=image)
            try:
                if uploads:
                    services.upload_files(caller.principal, info.id, uploads)
                result = services.run_command(
                    caller.principal,
                    info.id,
                    command,
                    env=env,
                    timeout=timeout,
                    output_cap=max_output_bytes,
                    on_output=on_output,
                )
            finally:
                deleted = _delete_quietly(caller, info.id)
            return RunOnce(sandbox_id=info.id, result=finished(result), deleted=deleted)

        return await call_streaming(ctx, command[:60], timeout, body)


def _summary(caller: identity.Caller, sandbox_id: str, report: str | None):
    if report is None:
        return junit.Summary(), False
    try:
        content = services.read_file(
            caller.principal, sandbox_id, report, max_bytes=REPORT_MAX_BYTES
        )
    except NotFound:
        return junit.Summary(), False
    if not content.eof:
        raise ToolError(f"the JUnit report {report} is over {REPORT_MAX_BYTES} bytes")
    try:
        return junit.parse(content.content), True
    except junit.ReportError as exc:
        raise ToolError(str(exc)) from exc


def _delete_quietly(caller: identity.Caller, sandbox_id: str) -> bool:
    try:
        services.delete_sandbox(caller.principal, sandbox_id)
    except ServiceError:
        return False  # recorded in the audit log; the cleanup task removes it later
    return True
