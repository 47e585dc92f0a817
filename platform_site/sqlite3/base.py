"""Django's SQLite backend, with inserts that do not use RETURNING.

An INSERT ... RETURNING holds SQLite's write lock from its first step, which writes the row,
until Python has fetched the returned id: SQLite commits when the statement finishes, and
the fetch is a second step. Between the two the thread has to win the GIL back, and under
load (20 MCP clients, ten service threads per web worker) that took milliseconds while every
other writer of every process waited, SQLite's busy handler sleeping 1, 2, 5, 10... ms
between tries. bench/bench_load.py measured: the command-history insert 12 ms on average
(p99 135 ms), the load's p99 376-451 ms. A plain INSERT commits inside its one step, with the
GIL released; Django then reads the new id from cursor.lastrowid, which is the cursor's own.
Same load: that insert 4 ms on average (p99 33 ms), the load's p99 252-259 ms.

Writers take turns (writers.py): a transaction (BEGIN IMMEDIATE, as settings say) holds a
turn from its start to its commit or rollback, a lone write statement outside one for its
own step, so they wait on locks that are handed over at once instead of in SQLite's busy
handler, whose sleeps grow to 100 ms.

Used for every sqlite:// DATABASE_URL (platform_site/settings.py). Nothing in the project
needs a value back from an insert but the id: no db_default, no generated columns.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.sqlite3 import base, features

from platform_site.sqlite3.writers import Turn

_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLAC")  # the first six letters of a write


class DatabaseFeatures(features.DatabaseFeatures):
    can_return_columns_from_insert = False  # bulk_create follows it (no ids back on SQLite)


class TurnTakingCursor(base.SQLiteCursorWrapper):
    """A lone write statement (outside a transaction) takes a turn for its own step."""

    turn: Turn

    def execute(self, query: str, params: Any = None) -> Any:
        if self.connection.in_transaction or query.lstrip()[:6].upper() not in _WRITES:
            return super().execute(query, params)
        self.turn.take()
        try:
            return super().execute(query, params)
        finally:
            self.turn.give()

    def executemany(self, query: str, param_list: Any) -> Any:
        if self.connection.in_transaction or query.lstrip()[:6].upper() not in _WRITES:
            return super().executemany(query, param_list)
        self.turn.take()
        try:
            return super().executemany(query, param_list)
        finally:
            self.turn.give()


class DatabaseWrapper(base.DatabaseWrapper):
    features_class = DatabaseFeatures

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        connection = super().get_new_connection(conn_params)
        self.turn = Turn(self.settings_dict["NAME"], conn_params.get("timeout", 5.0))
        return connection

    def create_cursor(self, name: str | None = None) -> Any:
        cursor = self.connection.cursor(factory=TurnTakingCursor)
        cursor.turn = self.turn
        return cursor

    def _start_transaction_under_autocommit(self) -> None:
        self.turn.take()
        try:
            super()._start_transaction_under_autocommit()  # type: ignore[misc]  # not in django-stubs
        except BaseException:
            self.turn.give()
            raise

    def _commit(self) -> None:
        try:
            super()._commit()  # type: ignore[misc]  # not in django-stubs
        finally:
            self._give_unless_open()

    def _rollback(self) -> None:
        try:
            super()._rollback()  # type: ignore[misc]  # not in django-stubs
        finally:
            self._give_unless_open()

    def _close(self) -> None:
        try:
            super()._close()  # type: ignore[misc]  # not in django-stubs
        finally:
            turn = getattr(self, "turn", None)
            if turn is not None:
                turn.give()

    def _give_unless_open(self) -> None:
        # A failed COMMIT (SQLITE_BUSY from a writer outside the queue) leaves the
        # transaction open: the turn is kept until it ends.
        if self.connection is None or not self.connection.in_transaction:
            self.turn.give()
