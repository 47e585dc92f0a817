"""How a command ended, beyond its exit code: what a result says so that an agent reading it
knows why, and what to do next.

Out of memory: the sandbox agent (hosts/backends/agent/inside/oom.py) and the background job
runner (hosts/backends/jobscripts.py) append a line starting with OOM_NOTE to a command's
stderr (a job's log) when it died of SIGKILL while the sandbox's memory cgroup counted an OOM
kill: 137 alone cannot tell the OOM killer from `kill -9`.
"""

from __future__ import annotations

# The same words as inside/oom.py's OOM_NOTE (tests/backends/test_outcomes.py checks it).
OOM_NOTE = "sandhub: the command was killed because the sandbox ran out of memory"
OUT_OF_MEMORY = (
    "the OOM killer ended it: the sandbox ran out of memory (a line in stderr or the log says "
    "so); use a bigger sandbox or less memory"
)


def killed_for_memory(exit_code: int | None, output: str) -> bool:
    """Whether a command that ended with exit_code and this stderr (or log tail) was taken by
    the OOM killer, as the sandbox told it."""
    return exit_code == 137 and OOM_NOTE in output[-4096:]


# Test runs (run_tests): how the run went as a whole, beside the test command's own status.
TEST_OUTCOME = (
    "passed, failed, no_tests (the runner collected no test: see hint), timed_out, or error "
    "(the runner could not run the tests, e.g. a missing module or a bad option)"
)
TEST_HINT = "what to do next when the outcome alone does not say it (empty otherwise)"
