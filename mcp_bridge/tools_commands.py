"""Tools that run things in a sandbox, streaming output as MCP notifications while they run."""

from __future__ import annotations

from typing import Annotated

from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from mcp_bridge import identity
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
from mcp_bridge.schemas import RunOnce, TestReport
from mcp_bridge.tools_files import to_uploads
from mcp_bridge.tools_sessions import Session, Stdin
from sandboxes import services
from sandboxes.contract.results import CommandResult
from sandboxes.policy.validation import WORKSPACE
from sandboxes.services import workflows

RUNS = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)
TAIL_CHARS = 2000


def finished(result: CommandResult) -> CommandOut:
    """The command's result, or a tool error when it was killed by its timeout."""
    if result.status == "timed_out":
        so_far = (result.stdout + result.stderr)[-TAIL_CHARS:] or "(none)"
        raise ToolError(
            f"{result.error_message or 'timed out'} (command {result.id}); output so far: {so_far}"
        )
    return CommandOut.model_validate(result)


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
        session: Session = None,
        stdin: Stdin = None,
    ) -> CommandOut:
        """Run a shell command (bash -c) in a sandbox and wait for it. Output is streamed as
        progress and log notifications while it runs; the result has the exit code, stdout
        and stderr (long output keeps head and tail). A non-zero exit is a normal result;
        a timeout kills the command and is an error that includes the output so far. With
        `session`, it runs in a long-lived shell that keeps cd and export between calls."""

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
                session=session,
                stdin=stdin,
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
        ] = workflows.DEFAULT_TEST_COMMAND,
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

        def body(on_output) -> TestReport:
            caller = identity.caller()
            report = workflows.run_tests(
                caller.principal,
                caller.sandbox(sandbox_id),
                command,
                junit_report=junit_report,
                report_path=report_path,
                cwd=cwd,
                env=env,
                timeout=timeout,
                output_cap=max_output_bytes,
                on_output=on_output,
            )
            finished(report.result)  # a tool error when the tests timed out
            return TestReport.model_validate(report)

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
            once = workflows.run_once(
                caller.principal,
                command,
                files=uploads,
                image=image,
                env=env,
                timeout=timeout,
                output_cap=max_output_bytes,
                on_output=on_output,
            )
            finished(once.result)
            return RunOnce.model_validate(once)

        return await call_streaming(ctx, command[:60], timeout, body)
