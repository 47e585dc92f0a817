"""The job page's time limit says what it means for the job as it stands: a promise while
the job runs ("will be stopped after 600 s if still running"), what happened once it ended."""

from __future__ import annotations

import pytest

from sandboxes import services
from sandboxes.web.jobs import runtime_note


def limit_text(page: str) -> str:
    return page.split('id="job-limit">', 1)[1].split("</span>", 1)[0]


@pytest.mark.django_db
def test_a_running_job_is_not_said_to_be_stopped(login, sandbox, alice, as_alice):
    job = services.start_background(
        as_alice, sandbox, "echo started; sleep 30", max_runtime_seconds=600
    )
    client = login(alice)
    for url in (
        f"/sandboxes/{sandbox}/jobs/{job.id}/",
        f"/sandboxes/{sandbox}/jobs/{job.id}/tail/",
    ):
        page = client.get(url).content.decode()
        assert limit_text(page) == "(will be stopped after 600 s if still running)"
        assert "(stopped after" not in page
    services.cancel_background(as_alice, sandbox, job.id)
    page = client.get(f"/sandboxes/{sandbox}/jobs/{job.id}/").content.decode()
    assert limit_text(page) == "(cancelled before its time limit)"


@pytest.mark.django_db
def test_an_ended_job_says_what_happened(login, sandbox, alice, as_alice):
    job = services.start_background(as_alice, sandbox, "echo quick", max_runtime_seconds=60)
    page = login(alice).get(f"/sandboxes/{sandbox}/jobs/{job.id}/").content.decode()
    assert limit_text(page) == "(ended by itself, within its time limit of 60 s)"


@pytest.mark.django_db
def test_a_timed_out_job_names_its_limit(sandbox, as_alice):
    job = services.start_background(as_alice, sandbox, "echo quick", max_runtime_seconds=60)
    check = services.check_background(as_alice, sandbox, job.id)
    timed_out = check.model_copy(update={"status": "timed_out", "running": False})
    assert runtime_note(timed_out) == "stopped after 60 s: its time limit"
    errored = check.model_copy(update={"status": "error", "running": False})
    assert runtime_note(errored) == "ended without running to its time limit"
