"""Writes compiled before their transaction opens, run back to back inside it.

On SQLite one writer holds the database's write lock from its first statement to its commit.
A transaction of ORM writes keeps it across the Python between them (building each statement,
signals, model instances); a thread that loses the GIL there keeps every writer of every
process waiting. bench/bench_load.py showed it: with a command's history update and its audit
row written by the ORM in one transaction, the load's p99 went from 143 to 387 ms. Compiled
first, the two statements run within a few microseconds of Python of each other.

Only plain INSERTs and UPDATEs of concrete fields, as the ORM itself would issue them: values
go through each field's get_db_prep_save, auto_now(_add) fields are filled.
"""

from __future__ import annotations

from typing import Any, cast

from django.db import connections, router, transaction
from django.db.models import Model, QuerySet
from django.db.models.sql import InsertQuery, UpdateQuery

Statement = tuple[str, tuple[Any, ...]]


def insert(obj: Model) -> Statement:
    """The INSERT that obj.save() would issue for a new row (its id is not read back)."""
    model = type(obj)
    using = router.db_for_write(model, instance=obj)
    fields = [f for f in model._meta.local_concrete_fields if not f.primary_key]
    for field in fields:
        setattr(obj, field.attname, field.pre_save(obj, True))  # auto_now_add and the like
    query = InsertQuery(model)
    query.insert_values(fields, [obj])
    (sql, params), *_ = query.get_compiler(using=using).as_sql()
    return sql, tuple(params)


def update(queryset: QuerySet[Any], values: dict[str, Any]) -> Statement:
    """The UPDATE that queryset.update(**values) would issue."""
    query = cast(UpdateQuery, queryset.query.chain(UpdateQuery))
    query.add_update_values(values)
    sql, params = query.get_compiler(queryset.db).as_sql()
    return sql, tuple(params)


def run_together(statements: list[Statement], using: str = "default") -> None:
    """The statements in one transaction, with nothing but the cursor calls between them."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        for sql, params in statements:
            cursor.execute(sql, params)
