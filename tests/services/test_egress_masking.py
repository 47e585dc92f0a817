"""Stored secret values are masked where commands are recorded and returned (issue 27):
the command, its output, its audit row; a background command's too."""

from __future__ import annotations

import pytest

from sandboxes import services
from sandboxes.models import CommandExecution, EgressAuthority
from sandboxes.services.masking import MaskedOutput, Masker
from tenants.models import AuditLog

pytestmark = pytest.mark.django_db

VALUE = "sk-live-mask-me-0123456789"
OTHERS = "ghp-another-members-own-42"


@pytest.fixture
def sandbox_id(fake_backend, as_alice, as_mallory):
    services.add_secret(as_alice, name="TEAM_KEY", hosts=["api.test"], value=VALUE, team_wide=True)
    services.add_secret(as_mallory, name="MALLORY_OWN", hosts=["git.test"], value=OTHERS)
    return services.create_sandbox(as_alice).id


def test_a_command_and_its_output_are_masked(sandbox_id, as_alice):
    result = services.run_command(as_alice, sandbox_id, f"echo {VALUE} and {OTHERS}")
    assert result.stdout == "[secret TEAM_KEY] and [secret MALLORY_OWN]\n"
    assert result.command == "echo [secret TEAM_KEY] and [secret MALLORY_OWN]"
    row = CommandExecution.objects.get(pk=result.id)
    assert VALUE not in row.command + row.stdout + row.stderr
    assert OTHERS not in row.command + row.stdout
    audit = AuditLog.objects.filter(action="command.run").last()
    assert audit is not None and VALUE not in str(audit.details)
    assert "[secret TEAM_KEY]" in audit.details["command"]
    history = services.list_commands(as_alice, sandbox_id)[0]
    assert VALUE not in history.command + history.stdout


def test_a_value_given_as_environment_is_masked_in_output(sandbox_id, as_alice):
    result = services.run_command(as_alice, sandbox_id, "printenv X", env={"X": VALUE})
    assert result.stdout == "[secret TEAM_KEY]\n"
    assert VALUE not in CommandExecution.objects.get(pk=result.id).stdout


def test_live_output_is_masked(sandbox_id, as_alice):
    chunks: list[bytes] = []
    services.run_command(
        as_alice, sandbox_id, f"echo {VALUE}", on_output=lambda _, data: chunks.append(data)
    )
    assert b"".join(chunks) == b"[secret TEAM_KEY]\n"


def test_a_background_command_is_masked(sandbox_id, as_alice):
    started = services.start_background(as_alice, sandbox_id, f"echo {VALUE}")
    assert VALUE not in started.command and "[secret TEAM_KEY]" in started.command
    audit = AuditLog.objects.filter(action="command.background.start").last()
    assert audit is not None and VALUE not in str(audit.details)
    check = services.check_background(as_alice, sandbox_id, started.id)
    assert VALUE not in check.output + check.command


def test_another_teams_values_are_not_its_business(fake_backend, as_bob, sandbox_id):
    other = services.create_sandbox(as_bob).id
    assert services.run_command(as_bob, other, f"echo {VALUE}").stdout == f"{VALUE}\n"


def test_a_value_inside_another_is_masked_whole():
    masker = Masker([("SHORT", "abcd"), ("LONG", "xxabcdxx")])
    assert masker.text("xxabcdxx abcd") == "[secret LONG] [secret SHORT]"
    assert masker.data(b"abcd") == b"[secret SHORT]"
    assert not Masker([]) and Masker([]).text("abcd") == "abcd"


def test_a_session_runs_the_command_as_given_and_records_it_masked(sandbox_id, as_alice):
    services.run_command(as_alice, sandbox_id, f"export TOKEN={VALUE}", session="work")
    result = services.run_command(as_alice, sandbox_id, "echo $TOKEN", session="work")
    assert result.stdout == "[secret TEAM_KEY]\n"  # the shell got the value, the record not
    assert not CommandExecution.objects.filter(command__contains=VALUE).exists()


def test_a_requirement_carrying_a_value_is_masked(fake_backend, as_alice, team_a, sandbox_id):
    team_a.allow_network = True
    team_a.save()
    EgressAuthority.objects.create(cert_pem="unused", key_encrypted="unused")
    networked = services.create_sandbox(as_alice, network="public").id
    result = services.install_packages(as_alice, networked, [VALUE])
    assert VALUE not in result.command and "[secret TEAM_KEY]" in result.command
    audit = AuditLog.objects.filter(action="command.install").last()
    assert audit is not None and audit.details["packages"] == ["[secret TEAM_KEY]"]
    assert VALUE not in str(audit.details)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64])
def test_a_value_split_between_live_chunks_is_masked(size):
    masker = Masker([("K", "secret-value"), ("S", "value-x")])
    got: list[bytes] = []
    live = MaskedOutput(lambda _, data: got.append(data), masker)
    text = b"a secret-value, secret-value-x and value-x; secret-valu"
    for start in range(0, len(text), size):
        live("stdout", text[start : start + size])
    live.flush()
    assert b"".join(got) == b"a [secret K], [secret K]-x and [secret S]; secret-valu"
