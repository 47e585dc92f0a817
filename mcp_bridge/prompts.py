"""Prompts: ready-made plans an agent (or its user) can start from, in terms of the tools."""

from __future__ import annotations

from typing import Annotated, Any

from fastmcp import FastMCP
from fastmcp.exceptions import PromptError
from fastmcp.prompts import Prompt
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from pydantic import Field


class PromptArguments(Middleware):
    """A prompt asked for without a required argument is refused naming it and what it is.

    FastMCP's own check raises a ValueError that the server's mask_error_details turns into
    "Error rendering prompt 'NAME'", which names nothing; this one runs first."""

    def __init__(self, server: FastMCP) -> None:
        self._server = server

    async def on_get_prompt(self, context: MiddlewareContext, call_next: CallNext) -> Any:
        prompt = await self._server.get_prompt(context.message.name)
        if prompt is not None:
            missing = missing_arguments(prompt, context.message.arguments or {})
            if missing:
                raise PromptError(missing)
        return await call_next(context)


def missing_arguments(prompt: Prompt, given: dict[str, Any]) -> str | None:
    """What to say when required arguments are missing (None when none is)."""
    wanted = [
        f"{argument.name} ({_first_line(argument.description)})"
        for argument in prompt.arguments or []
        if argument.required and argument.name not in given
    ]
    if not wanted:
        return None
    needs = "this argument" if len(wanted) == 1 else "these arguments"
    return f"The prompt {prompt.name!r} needs {needs}: {'; '.join(wanted)}."


def _first_line(description: str | None) -> str:
    """The argument's own description, without the JSON schema FastMCP appends to it."""
    return (description or "no description").split("\n")[0].strip().rstrip(".")


def register(mcp: FastMCP) -> None:
    @mcp.prompt(
        name="test-in-sandbox",
        description="Run a project's tests in a fresh sandbox and report the failures.",
    )
    def test_in_sandbox(
        project: Annotated[str, Field(description="The project directory or files to test.")] = ".",
        test_command: Annotated[str, Field(description="The test command.")] = (
            "python3 -m pytest -q"
        ),
    ) -> str:
        return (
            f"Run the tests of {project} in a Sandhub sandbox.\n"
            "1. create_sandbox; pass the id it returns as sandbox_id to every call below.\n"
            f"2. upload_files: the source files of {project} and its requirements/pyproject, "
            "keeping their relative paths.\n"
            "3. If it has dependencies, install_packages with them.\n"
            f"4. run_tests with command '{test_command}'.\n"
            "5. Report passed/failed/errors/skipped, and for each failing test its name, "
            "message and the likely cause in the code.\n"
            "6. delete_sandbox when done (or stop_sandbox to keep its files for later: any "
            "call on it starts it again)."
        )

    @mcp.prompt(
        name="debug-in-sandbox",
        description="Reproduce a failure in a sandbox, find its cause, and verify a fix.",
    )
    def debug_in_sandbox(
        problem: Annotated[str, Field(description="The error or wrong behaviour seen.")],
        sandbox_id: Annotated[
            str, Field(description="A sandbox to use; empty for a new one.")
        ] = "",
    ) -> str:
        where = (
            f"sandbox {sandbox_id} (if it is paused or stopped, the first call resumes it)"
            if sandbox_id
            else "a new sandbox (create_sandbox; keep the id it returns)"
        )
        return (
            f"Debug this problem in {where}, passing its id as sandbox_id to every call:"
            f"\n\n{problem}\n\n"
            "1. Reproduce it with the smallest command (run_command / run_python); read the "
            "exit code, stdout and stderr.\n"
            "2. Inspect files with list_files and read_file; the resource "
            "sandbox://<id>/logs shows the commands run so far.\n"
            "3. Change one thing at a time with write_file, rerun, and compare (before a "
            "risky step, fork_sandbox gives a copy to try it in).\n"
            "4. Once fixed, run the tests (run_tests) and report the cause and the fix."
        )

    @mcp.prompt(
        name="deploy-to-sandbox",
        description="Put a web application into a sandbox, start it and open it in a browser.",
    )
    def deploy_to_sandbox(
        app: Annotated[str, Field(description="The application directory or files.")] = ".",
        start_command: Annotated[
            str, Field(description="How to start it, e.g. 'python3 -m http.server 8000'.")
        ] = "",
        port: Annotated[
            int, Field(description="The port it listens on inside the sandbox.", ge=1, le=65535)
        ] = 8000,
    ) -> str:
        start = start_command or f"the application's usual start command (serving on {port})"
        return (
            f"Deploy {app} into a Sandhub sandbox and open it.\n"
            "1. create_sandbox with a lifetime_minutes that covers the need; pass the id it "
            "returns as sandbox_id to every call below.\n"
            f"2. If it has dependencies, upload its requirements and install_packages.\n"
            f"3. deploy_app with files: {app}'s files (relative paths kept), command: {start} "
            f"(in the foreground, no '&' or nohup), port: {port}. It waits until the port "
            "answers and returns the URL.\n"
            "4. If deploy_app fails, read the log tail in its error, fix the cause (write_file) "
            "and deploy_app again (it replaces the app on that port).\n"
            "5. Report the URL (get_preview_url makes a new one when its token expires) and the "
            "sandbox id; leave the sandbox running, or pause_sandbox it between uses (a visit "
            "to the URL resumes it, the app where it was). stop_app (with the sandbox_id and "
            "port) stops the app."
        )
