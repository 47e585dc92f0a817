"""Workflow services (run_tests, run_once) with the in-memory backend: one audit row per
call, the JUnit summary, cleanup, and their REST endpoints (the selection: test_selection.py)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from hosts.backends.base import BackendError
from sandboxes import services
from sandboxes.contract.errors import InvalidInput, NotFound, PermissionDenied
from sandboxes.contract.results import UploadFile
from sandboxes.models import Sandbox, SandboxStatus
from sandboxes.services import junit, removal, workflows
from tenants import apikeys
from tenants.models import AuditLog
from tests.fakes import FakeBackend

pytestmark = pytest.mark.django_db

REPORT = b"""<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
  <testcase classname="test_calc" name="test_add" time="0.001"/>
  <testcase classname="test_calc" name="test_add_wrong" time="0.001">
    <failure message="assert 4 == 5">def test_add_wrong():
&gt;       assert add(2, 2) == 5</failure>
  </testcase>
  <testcase classname="test_calc" name="test_boom"><error message="boom"/></testcase>
  <testcase classname="test_calc" name="test_later"><skipped message="later"/></testcase>
</testsuite></testsuites>
"""


@pytest.fixture
def sandbox(fake_backend, as_alice):
    return services.create_sandbox(as_alice, name="work")


def rows_since(start: int) -> list[AuditLog]:
    return list(AuditLog.objects.filter(id__gt=start).order_by("id"))


def last_id() -> int:
    return AuditLog.objects.order_by("-id").values_list("id", flat=True).first() or 0


def opened_and_closed(start: int) -> tuple[AuditLog, AuditLog]:
    """A workflow's two rows: the one its first change wrote in its transaction, and the end
    that continues it (the log is append-only)."""
    opened, closed = rows_since(start)
    assert opened.action == closed.action and closed.details["continues"] == opened.pk
    return opened, closed


# --- run_tests -------------------------------------------------------------------------------


def test_run_tests_reads_the_report_and_leaves_its_row_with_the_command(sandbox, as_alice):
    services.write_file(as_alice, sandbox.id, "report.xml", REPORT)
    start = last_id()
    report = workflows.run_tests(as_alice, sandbox.id, "echo ran", report_path="report.xml")
    result = report.result
    assert (result.status, result.stdout, report.report_found) == ("succeeded", "ran\n", True)
    assert (report.passed, report.failed, report.errors, report.skipped) == (1, 1, 1, 1)
    assert report.total == 4 and result.command == "echo ran"
    assert [(f.name, f.kind) for f in report.failures] == [
        ("test_calc.test_add_wrong", "failure"),
        ("test_calc.test_boom", "error"),
    ]
    assert report.failures[0].message == "assert 4 == 5"
    assert "assert add(2, 2) == 5" in report.failures[0].details
    opened, closed = opened_and_closed(start)
    assert [(r.outcome, r.target_id) for r in (opened, closed)] == [("ok", sandbox.id)] * 2
    # The command's record and the opening row went in together: it names the command.
    assert opened.details["command_id"] == result.id and "report_found" not in opened.details
    details = closed.details
    assert details["command_id"] == result.id and details["report_found"] is True
    assert (details["passed"], details["failed"]) == (1, 1)


def test_run_tests_appends_junitxml_and_says_when_no_report_came(sandbox, as_alice, monkeypatch):
    interpret = FakeBackend._interpret

    def like_coreutils(self, box, argv, env, timeout):  # the fake's own wording differs
        out, err, code, timed_out = interpret(self, box, argv, env, timeout)
        return (
            out,
            err.replace(b"no such file", b"stat: No such file or directory"),
            code,
            timed_out,
        )

    monkeypatch.setattr(FakeBackend, "_interpret", like_coreutils)
    report = workflows.run_tests(as_alice, sandbox.id, "echo no report")
    assert report.result.command.startswith("echo no report --junitxml=/tmp/sandhub-junit-")
    assert not report.report_found and report.total == 0 and report.failures == []
    plain = workflows.run_tests(as_alice, sandbox.id, "echo plain", junit_report=False)
    assert plain.result.command == "echo plain" and not plain.report_found


def test_run_tests_that_time_out_read_no_report(sandbox, as_alice):
    services.write_file(as_alice, sandbox.id, "report.xml", REPORT)
    report = workflows.run_tests(
        as_alice, sandbox.id, "sleep 5", report_path="report.xml", timeout=1
    )
    assert report.result.status == "timed_out" and not report.report_found
    assert report.total == 0


def test_a_hostile_or_broken_report_is_refused(sandbox, as_alice):
    services.write_file(as_alice, sandbox.id, "dtd.xml", b'<!DOCTYPE x [<!ENTITY a "b">]><x/>')
    services.write_file(as_alice, sandbox.id, "broken.xml", b"<testsuite><testcase>")
    with pytest.raises(InvalidInput, match="DTD"):
        workflows.run_tests(as_alice, sandbox.id, "echo x", report_path="dtd.xml")
    start = last_id()
    with pytest.raises(InvalidInput, match="not well-formed"):
        workflows.run_tests(as_alice, sandbox.id, "echo x", report_path="broken.xml")
    opened, closed = opened_and_closed(start)
    assert (opened.outcome, closed.outcome) == ("ok", "invalid")  # it ran; its report did not do


def test_viewers_may_not_run_tests(sandbox, as_victor):
    start = last_id()
    with pytest.raises(PermissionDenied):
        workflows.run_tests(as_victor, sandbox.id)
    assert [(r.action, r.outcome) for r in rows_since(start)] == [("command.tests", "forbidden")]


def test_junit_counts_at_most_the_first_failures():
    cases = "".join(f'<testcase name="t{i}"><failure message="m"/></testcase>' for i in range(60))
    summary = junit.parse(f"<testsuite>{cases}</testsuite>".encode())
    assert summary.counts["failed"] == 60 and summary.total == 60
    assert len(summary.failures) == junit.MAX_FAILURES and summary.failures[0].name == "t0"


# --- run_once --------------------------------------------------------------------------------


def test_run_once_creates_runs_deletes_on_record(fake_backend, as_alice):
    start = last_id()
    once = workflows.run_once(as_alice, "echo hi", files=[UploadFile("in/a.txt", b"x")])
    assert once.deleted and once.result.stdout == "hi\n" and once.result.ok
    assert Sandbox.objects.get(public_id=once.sandbox_id).status == SandboxStatus.DELETED
    assert removal.wait_for_removals()  # the host's part runs after the answer
    assert fake_backend.sandboxes == {}
    opened, closed = opened_and_closed(start)
    assert [(r.action, r.outcome, r.target_id) for r in (opened, closed)] == [
        ("command.once", "ok", once.sandbox_id)
    ] * 2
    assert closed.details["deleted"] is True and closed.details["command"] == "echo hi"


def test_a_workflow_that_dies_midway_left_the_row_of_its_first_change(fake_backend, as_alice):
    class Died(BaseException):  # a worker killed: nothing after this point runs
        pass

    def die(*args, **kwargs):
        raise Died

    start = last_id()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(workflows, "delete_soon", die)
        with pytest.raises(Died):
            workflows.run_once(as_alice, "echo hi")
    (opened,) = rows_since(start)
    created = Sandbox.objects.get(public_id=opened.target_id)  # the sandbox it made is named
    assert (opened.action, opened.outcome, created.status) == ("command.once", "ok", "running")


def test_run_once_leaves_a_removal_the_host_refuses_to_reconciliation(
    fake_backend, as_alice, monkeypatch, caplog
):
    def refuse(self, state):
        raise BackendError("engine says no")

    monkeypatch.setattr(FakeBackend, "destroy", refuse)
    start = last_id()
    once = workflows.run_once(as_alice, "echo hi")
    assert once.deleted and once.result.stdout == "hi\n"
    sandbox = Sandbox.objects.get(public_id=once.sandbox_id)
    assert sandbox.status == SandboxStatus.DELETED and "background" in sandbox.status_message
    assert removal.wait_for_removals()
    # Still on the host, belonging to a deleted sandbox: an orphan for reconciliation.
    assert len(fake_backend.sandboxes) == 1
    assert "reconciliation will" in caplog.text and "engine says no" in caplog.text
    _, row = opened_and_closed(start)
    assert row.outcome == "ok" and row.details["deleted"] is True


def test_run_once_says_when_the_sandbox_could_not_be_deleted(fake_backend, as_alice, monkeypatch):
    def gone(principal, sandbox_id):
        raise NotFound(f"sandbox {sandbox_id} not found")

    monkeypatch.setattr(workflows, "delete_soon", gone)
    start = last_id()
    once = workflows.run_once(as_alice, "echo hi")
    assert not once.deleted and once.result.stdout == "hi\n"
    _, row = opened_and_closed(start)
    assert row.outcome == "ok" and "not found" in row.details["delete_error"]


def test_run_once_deletes_the_sandbox_when_the_command_cannot_run(fake_backend, as_alice):
    with pytest.raises(InvalidInput):
        workflows.run_once(as_alice, "echo hi", files=[UploadFile("/etc/passwd", b"x")])
    assert removal.wait_for_removals()
    assert fake_backend.sandboxes == {}
    assert not Sandbox.objects.exclude(status=SandboxStatus.DELETED).exists()


# --- the REST endpoints ----------------------------------------------------------------------


@pytest.fixture
def client(alice, team_a) -> APIClient:
    api = APIClient()
    plaintext = apikeys.create_key(alice, team_a).plaintext
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return api


def test_rest_run_tests(sandbox, as_alice, client):
    services.write_file(as_alice, sandbox.id, "report.xml", REPORT)
    url = f"/api/v1/sandboxes/{sandbox.id}/run-tests/"
    response = client.post(url, {"command": "echo ran", "report_path": "report.xml"}, "json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["passed"], body["failed"], body["errors"], body["skipped"]) == (1, 1, 1, 1)
    assert body["failures"][0] == {
        "name": "test_calc.test_add_wrong",
        "kind": "failure",
        "message": "assert 4 == 5",
        "details": body["failures"][0]["details"],
    }
    assert body["result"]["stdout"] == "ran\n" and body["result"]["channel"] == "api"
    refused = client.post(url, {"comand": "echo"}, "json")
    assert refused.status_code == 400 and "comand" in refused.json()["fields"]
    missing = client.post("/api/v1/sandboxes/sb_doesnotexist/run-tests/", {}, "json")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"


def test_rest_run_once(fake_backend, client):
    files = [
        {"path": "a.txt", "content": "hi"},
        {"path": "run.sh", "content": "ZWNobw==", "encoding": "base64", "executable": True},
    ]
    response = client.post("/api/v1/run-once/", {"command": "echo once", "files": files}, "json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["deleted"] is True and body["result"]["stdout"] == "once\n"
    assert body["result"]["id"] and body["result"]["channel"] == "api"
    assert removal.wait_for_removals()  # the container goes after the answer, on a thread
    assert fake_backend.sandboxes == {}
    bad = [{"path": "x.bin", "content": "%%%", "encoding": "base64"}]
    refused = client.post("/api/v1/run-once/", {"command": "true", "files": bad}, "json")
    assert refused.status_code == 400 and "not base64" in refused.json()["detail"]
