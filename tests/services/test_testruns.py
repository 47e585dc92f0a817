"""run_tests' outcome and hint (sandboxes/services/testruns.py): no tests collected is told
apart from failing tests, for pytest, unittest, jest and go; pytest's own errors too."""

from __future__ import annotations

import pytest

from sandboxes.contract.results import CommandResult
from sandboxes.services.testruns import classify


def ran(exit_code: int | None, stdout: str = "", status: str | None = None) -> CommandResult:
    if status is None:
        status = "succeeded" if exit_code == 0 else "failed"
    return CommandResult.model_construct(
        status=status, exit_code=exit_code, stdout=stdout, stderr=""
    )


PYTEST = "python3 -m pytest -q"


@pytest.mark.parametrize(
    ("command", "result", "report", "expected"),
    [
        (PYTEST, ran(5, "\nno tests ran in 0.01s\n"), (True, 0), "no_tests"),
        (PYTEST, ran(5), (False, 0), "no_tests"),  # no report, no output: the code says it
        ("python3 -m unittest", ran(5, "\nNO TESTS RAN\n"), (False, 0), "no_tests"),
        ("python3 -m unittest", ran(0, "Ran 0 tests in 0.000s\n\nOK\n"), (False, 0), "no_tests"),
        ("npx jest", ran(1, "No tests found, exiting with code 1\n"), (False, 0), "no_tests"),
        ("go test ./...", ran(0, "?   \texample.com/x\t[no test files]\n"), (False, 0), "no_tests"),
        ("mytests --xml r.xml", ran(1), (True, 0), "no_tests"),  # a report without a case
        (PYTEST, ran(0, "3 passed in 0.1s\n"), (True, 3), "passed"),
        (PYTEST, ran(1, "1 failed, 2 passed\n"), (True, 3), "failed"),
        (PYTEST, ran(2, "ERROR collecting test_x.py\n"), (True, 0), "error"),
        (PYTEST, ran(4, "ERROR: file or directory not found: nope\n"), (False, 0), "error"),
        ("make check", ran(5, "five\n"), (False, 0), "failed"),  # 5 means nothing to make
        (PYTEST, ran(None, status="timed_out"), (False, 0), "timed_out"),
    ],
)
def test_the_outcome_of_a_run(command, result, report, expected) -> None:
    found, total = report
    outcome = classify(result, command, "/workspace/empty", report_found=found, total=total)
    assert outcome.outcome == expected


def test_no_tests_says_where_it_looked_and_how_to_point_at_the_tests() -> None:
    outcome = classify(ran(5), PYTEST, "/workspace/empty", report_found=True, total=0)
    assert "`python3 -m pytest -q` ran in /workspace/empty" in outcome.hint
    assert "test_*.py" in outcome.hint and "cwd" in outcome.hint
    assert classify(ran(1), PYTEST, "/workspace", report_found=True, total=2).hint == ""
