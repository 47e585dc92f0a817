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

Used for every sqlite:// DATABASE_URL (platform_site/settings.py). Nothing in the project
needs a value back from an insert but the id: no db_default, no generated columns.
"""

from __future__ import annotations

from django.db.backends.sqlite3 import base, features


class DatabaseFeatures(features.DatabaseFeatures):
    can_return_columns_from_insert = False  # bulk_create follows it (no ids back on SQLite)


class DatabaseWrapper(base.DatabaseWrapper):
    features_class = DatabaseFeatures
