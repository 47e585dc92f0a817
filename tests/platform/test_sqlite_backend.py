"""The SQLite engine (platform_site/sqlite3): Django's, with inserts that commit in one step
(no RETURNING), the new id taken from the cursor. PostgreSQL keeps Django's own backend and
its RETURNING; the same tests check that, and that ids are right on either."""

from __future__ import annotations

import threading

import pytest
from django.conf import settings
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from tenants import audit
from tenants.models import AuditLog
from tenants.principal import Principal

SQLITE = connection.vendor == "sqlite"


def test_every_sqlite_database_url_gets_the_engine_and_postgresql_keeps_djangos():
    engine = settings.DATABASES["default"]["ENGINE"]
    if SQLITE:
        assert engine == "platform_site.sqlite3"
    else:
        assert engine == "django.db.backends.postgresql"
    assert connection.features.can_return_columns_from_insert is not SQLITE
    assert connection.features.can_return_rows_from_bulk_insert is not SQLITE


def test_an_sqlite_insert_has_no_returning_and_the_row_gets_its_own_id(as_alice: Principal):
    with CaptureQueriesContext(connection) as queries:
        first = audit.record(as_alice, "probe.first", details={"n": 1})
        second = audit.record(as_alice, "probe.second", details={"n": 2})
    inserts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    assert len(inserts) == 2
    assert all(("RETURNING" in sql) is not SQLITE for sql in inserts)
    assert first.pk is not None and second.pk == first.pk + 1
    assert AuditLog.objects.get(pk=first.pk).action == "probe.first"
    assert AuditLog.objects.get(pk=second.pk).details == {"n": 2}


@pytest.mark.django_db(transaction=True)
def test_ids_from_concurrent_inserts_are_each_their_own_row(as_alice: Principal):
    """lastrowid is per connection: threads inserting at once (each with its connection, as
    the web workers' service threads do) never get another thread's id."""
    seen: dict[str, int] = {}
    failures: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def insert_many(thread: int) -> None:
        try:
            start.wait(timeout=30)
            for n in range(40):
                action = f"probe.{thread}.{n}"
                row = audit.record(as_alice, action)
                with lock:
                    seen[action] = row.pk
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=insert_many, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures[0]
    assert len(seen) == 320 and len(set(seen.values())) == 320
    stored = dict(AuditLog.objects.filter(action__startswith="probe.").values_list("action", "id"))
    assert stored == seen
