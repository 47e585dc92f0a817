"""Reads compiled once (dbkit/prepared.py): the same objects as the ORM's own iteration,
one query each time, per-thread compilation, and a clear refusal of placeholders that do not
reach the SQL as they are."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections
from django.db.models import Model
from django.test.utils import CaptureQueriesContext

from dbkit.prepared import PreparedRead
from sandboxes import services
from sandboxes.policy import access
from tenants import apikeys
from tenants.models import ApiKey, Membership, Role

pytestmark = pytest.mark.django_db(transaction=True)


def _fields(obj: Model) -> dict:
    return {f.attname: getattr(obj, f.attname) for f in obj._meta.concrete_fields}


def test_a_prepared_read_makes_what_the_queryset_makes(fake_backend, as_alice, as_bob):
    mine = services.create_sandbox(as_alice).id
    services.create_sandbox(as_bob)
    expected = access.sandboxes_of(as_alice).get(public_id=mine)

    found = access._team_sandbox.first(as_alice.team.pk, mine)

    assert found is not None and _fields(found) == _fields(expected)
    # select_related relations come filled in, without another query.
    with CaptureQueriesContext(connection) as queries:
        assert _fields(found.host) == _fields(expected.host)
        assert _fields(found.image) == _fields(expected.image)
        assert found.team == as_alice.team and found.owner == as_alice.user
    assert len(queries) == 0
    assert found._state.db == "default" and not found._state.adding


def test_other_values_find_other_rows_or_none(fake_backend, as_alice, as_bob):
    mine = services.create_sandbox(as_alice).id
    theirs = services.create_sandbox(as_bob).id
    assert access._team_sandbox.first(as_alice.team.pk, mine).public_id == mine
    assert access._team_sandbox.first(as_bob.team.pk, theirs).public_id == theirs
    # Another team's id is not found with this team's value: the team is a parameter.
    assert access._team_sandbox.first(as_alice.team.pk, theirs) is None
    assert access._team_sandbox.first(as_bob.team.pk, mine) is None
    services.delete_sandbox(as_alice, mine)
    assert access._team_sandbox.first(as_alice.team.pk, mine) is None  # visible() holds


def test_each_read_is_one_query_that_django_logs(alice, team_a):
    new = apikeys.create_key(alice, team_a)
    with CaptureQueriesContext(connection) as queries:
        key = apikeys.authenticate(new.plaintext)
    key_reads = [q["sql"] for q in queries if "tenants_apikey" in q["sql"]]
    assert key == new.key and len(key_reads) == 1  # the other one: the lockout's cache
    assert new.key.prefix in key_reads[0]  # logged with this call's value
    # The annotation (the membership's role) is set as QuerySet iteration sets it.
    assert (
        key.member_role == Role.ADMIN
        or key.member_role == Membership.objects.get(user=alice, team=team_a).role
    )
    Membership.objects.filter(user=alice, team=team_a).delete()
    assert apikeys.authenticate(new.plaintext) is None  # read afresh, membership gone


def test_a_closed_connection_is_opened_again(alice, team_a):
    new = apikeys.create_key(alice, team_a)
    assert apikeys.authenticate(new.plaintext) == new.key
    connection.close()
    assert apikeys.authenticate(new.plaintext) == new.key


def test_every_thread_compiles_for_its_own_connection(alice, team_a):
    new = apikeys.create_key(alice, team_a)
    results, used = [], []

    def read() -> None:
        try:
            results.append(apikeys.authenticate(new.plaintext))
            used.append(apikeys._key_by_prefix._local.compiled.connection)
            assert used[-1] is connections["default"]
        finally:
            connections.close_all()

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [new.key] * 4
    assert len({id(conn) for conn in used}) == 4


@pytest.mark.parametrize(
    "build, placeholder",
    [
        # icontains wraps the value in %...%: it is not the parameter as given.
        (lambda name: ApiKey.objects.filter(name__icontains=name), "\x00name"),
        # Used twice: which one would a value replace?
        (lambda name: ApiKey.objects.filter(name=name, prefix=name), "\x00name"),
    ],
)
def test_a_placeholder_that_is_not_one_plain_parameter_is_refused(build, placeholder):
    read = PreparedRead(build, placeholder)
    with pytest.raises(ValueError, match="exact lookup"):
        read.first("anything")
