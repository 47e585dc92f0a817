"""Workflows: services made of other services, offered alike by every interface.

run_tests runs a test suite and summarises its JUnit report; run_once creates a throwaway
sandbox, runs one command in it and deletes it. One call is one act, so it leaves ONE audit
row: the steps run without their own rows (`unaudited`), their bodies filling in this call's
audit entry instead (target sandbox, command id, status, ...). The row is written with the
first step's change, in its transaction; the workflow's end (its details, or a failure) is
a second row that continues it.
"""

from __future__ import annotations

import uuid
from typing import ParamSpec, TypeVar

from hosts.backends.base import OutputCallback
from sandboxes.contract.errors import InvalidInput, NotFound, ServiceError
from sandboxes.contract.results import RunOnceResult, TestReport, UploadFile
from sandboxes.policy.validation import WORKSPACE
from sandboxes.services import junit, testruns
from sandboxes.services.commands import run_command
from sandboxes.services.files import read_file, upload_files
from sandboxes.services.removal import delete_soon
from sandboxes.services.sandboxes import create_sandbox
from tenants.auditing import audited, current, unaudited
from tenants.principal import Principal
from tenants.ratelimits import rate_limited

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_TEST_COMMAND = "python3 -m pytest -q"
REPORT_MAX_BYTES = 4 * 1024 * 1024


@audited("command.tests", "sandbox")
def run_tests(
    principal: Principal,
    sandbox_id: str,
    command: str = DEFAULT_TEST_COMMAND,
    *,
    junit_report: bool = True,
    report_path: str | None = None,
    cwd: str = WORKSPACE,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    output_cap: int | None = None,
    on_output: OutputCallback | None = None,
) -> TestReport:
    """Run a test suite and summarise it: counts of passed, failed, errors and skipped, and
    each failing test, read from its JUnit XML report.

    junit_report appends `--junitxml=<report>` to the command (suits pytest); report_path
    names a report the command writes itself (other runners; nothing is appended then). A
    test command that timed out gives a report with status timed_out and no counts.
    """
    if report_path:
        report, full_command = report_path, command
    elif junit_report:
        report = f"/tmp/sandhub-junit-{uuid.uuid4().hex[:12]}.xml"
        full_command = f"{command} --junitxml={report}"
    else:
        report, full_command = None, command
    result = unaudited(run_command)(
        principal,
        sandbox_id,
        full_command,
        cwd=cwd,
        env=env,
        timeout=timeout,
        output_cap=output_cap,
        on_output=on_output,
    )
    summary, found = junit.empty(), False
    if report is not None and result.status != "timed_out":
        summary, found = _read_report(principal, sandbox_id, report)
    counts = {outcome: summary.counts[outcome] for outcome in junit.OUTCOMES}
    run = testruns.classify(result, command, cwd, report_found=found, total=summary.total)
    current().details.update(
        {"report": report, "report_found": found, **counts, "outcome": run.outcome}
    )
    return TestReport(
        report_found=found,
        **counts,
        total=summary.total,
        failures=summary.failures,
        result=result,
        outcome=run.outcome,
        hint=run.hint,
    )


def _read_report(principal: Principal, sandbox_id: str, report: str) -> tuple[junit.Summary, bool]:
    try:
        content = unaudited(read_file)(principal, sandbox_id, report, max_bytes=REPORT_MAX_BYTES)
    except NotFound:
        return junit.empty(), False
    if not content.eof:
        raise InvalidInput(f"the JUnit report {report} is over {REPORT_MAX_BYTES} bytes")
    try:
        return junit.parse(content.content), True
    except junit.ReportError as exc:
        raise InvalidInput(str(exc)) from exc


@rate_limited("sandbox.create")
@audited("command.once", "sandbox")
def run_once(
    principal: Principal,
    command: str,
    *,
    files: list[UploadFile] | None = None,
    image: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    output_cap: int | None = None,
    on_output: OutputCallback | None = None,
) -> RunOnceResult:
    """Create a fresh sandbox, write `files` into /workspace, run one command and delete the
    sandbox again, whatever happened. The host removes its container right after the answer
    (services/removal.py); a sandbox that could not even be marked deleted is said so
    (deleted false) and removed later by the cleanup task."""
    # run_once itself is rate limited as a creation: its step skips the second check.
    info = unaudited(create_sandbox)(principal, image=image)
    try:
        if files:
            unaudited(upload_files)(principal, info.id, files)
        result = unaudited(run_command)(
            principal,
            info.id,
            command,
            env=env,
            timeout=timeout,
            output_cap=output_cap,
            on_output=on_output,
            once=True,
        )
    finally:
        deleted = _delete(principal, info.id)
    return RunOnceResult(sandbox_id=info.id, result=result, deleted=deleted)


def _delete(principal: Principal, sandbox_id: str) -> bool:
    try:
        delete_soon(principal, sandbox_id)
    except ServiceError as exc:
        current().details["delete_error"] = exc.message
        return False
    current().details["deleted"] = True
    return True
