"""How a test run went as a whole (run_tests' `outcome`), and what to do next (`hint`).

The test command's own status says only whether it exited 0: pytest's "no tests collected"
(exit 5) read as "failed", with nothing to say the tests were never found. The signs of no
tests, by runner: pytest exit 5 ("no tests ran"), unittest's "NO TESTS RAN" (3.12+, exit 5)
or "Ran 0 tests", jest's "No tests found", go's "[no test files]" (go test exits 0 then);
a JUnit report with no test case says the same for any runner that writes one.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from sandboxes.contract.results import CommandResult

# pytest's exit codes (pytest.ExitCode): 2 interrupted (an error while collecting, say),
# 3 internal error, 4 usage error, 5 no tests collected.
_PYTEST_NO_TESTS = 5
_PYTEST_ERRORS = {2: "interrupted (often an error while collecting: an import failed)",
                  3: "an internal error", 4: "a usage error (a wrong option or path)"}  # fmt: skip
_NO_TESTS = re.compile(
    r"\bno tests ran\b|^NO TESTS RAN|^Ran 0 tests? in|No tests found|\[no test files\]",
    re.IGNORECASE | re.MULTILINE,
)


class Outcome(NamedTuple):
    outcome: str  # passed, failed, no_tests, timed_out, error
    hint: str


def classify(
    result: CommandResult, command: str, cwd: str, *, report_found: bool, total: int
) -> Outcome:
    """The run's outcome from the test command's result and its report's count of tests."""
    if result.status == "timed_out":
        return Outcome("timed_out", "the tests ran past the timeout: raise timeout, or run fewer")
    if result.status == "error":
        return Outcome("error", "")
    output = f"{result.stdout[-8192:]}\n{result.stderr[-8192:]}"
    pytest = "pytest" in command
    no_tests = (pytest and result.exit_code == _PYTEST_NO_TESTS) or bool(_NO_TESTS.search(output))
    if no_tests:
        return Outcome("no_tests", _no_tests_hint(command, cwd, pytest))
    if pytest and result.exit_code in _PYTEST_ERRORS:
        why = _PYTEST_ERRORS[result.exit_code]
        return Outcome("error", f"pytest could not run the tests: {why}; its output says more")
    if report_found and total == 0:  # another runner's report, without a single test case
        return Outcome("no_tests", _no_tests_hint(command, cwd, pytest))
    return Outcome("passed" if result.exit_code == 0 else "failed", "")


def _no_tests_hint(command: str, cwd: str, pytest: bool) -> str:
    found = (
        "pytest collects files named test_*.py or *_test.py, functions test_* and classes "
        "Test* in them, under the directory it runs in (or the paths it is given)"
        if pytest
        else "the runner found no test"
    )
    return (
        f"no tests were collected: `{command}` ran in {cwd}, and {found}. Point it at the "
        f"tests: give their directory as cwd, or their path in the command (e.g. "
        f"`python3 -m pytest -q tests/`), and check the files' names."
    )
