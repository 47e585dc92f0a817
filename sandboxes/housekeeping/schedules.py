"""The django-q2 schedules of the lifecycle tasks, created after every `migrate`.

`ensure_schedules` runs on post_migrate (see apps.py), so a fresh database, a test database
and a database flushed by a test all get them. It is idempotent by name and never changes an
existing schedule: an admin may retune one (interval, next run) or stop it (repeats = 0) in
Django admin and a later migrate keeps that. Delete one to have the next migrate recreate it.

The first run of each is one interval after creation, not at once: a worker started right
after migrate (or by a test) does not reconcile hosts before anything is set up.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.apps.registry import Apps
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS
from django.utils import timezone

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScheduleSpec:
    name: str
    func: str
    minutes: int


SCHEDULES = (
    ScheduleSpec("sandhub.sweep", "sandboxes.tasks.sweep", 1),
    ScheduleSpec("sandhub.probe_hosts", "sandboxes.tasks.probe_hosts", 1),
    ScheduleSpec("sandhub.refill_pools", "sandboxes.tasks.refill_pools", 1),
    ScheduleSpec("sandhub.reconcile", "sandboxes.tasks.reconcile", 5),
    # Background commands whose supervisor was lost (see sandboxes.tasks.supervise_background).
    ScheduleSpec("sandhub.recover_background", "sandboxes.tasks.recover_background", 1),
    # Usage charts: every SANDHUB_USAGE_SAMPLE_SECONDS, in whole minutes; a shorter interval
    # is several rounds in one run (sandboxes/housekeeping/usage.py).
    ScheduleSpec(
        "sandhub.sample_usage",
        "sandboxes.tasks.sample_usage",
        max(1, round(settings.SANDHUB_USAGE_SAMPLE_SECONDS / 60)),
    ),
)


def ensure_schedules(
    apps: Apps | None = None, using: str = DEFAULT_DB_ALIAS, **kwargs: Any
) -> list[str]:
    """Create the missing schedules; the names of those created."""
    if apps is None:
        from django.apps import apps as installed

        apps = installed
    try:
        schedule_model = apps.get_model("django_q", "Schedule")
    except LookupError:  # django_q not migrated (yet) in this database
        return []
    created = []
    manager = schedule_model.objects.using(using)
    for spec in SCHEDULES:
        if manager.filter(name=spec.name).exists():
            continue
        manager.create(
            name=spec.name,
            func=spec.func,
            schedule_type="I",  # Schedule.MINUTES
            minutes=spec.minutes,
            repeats=-1,
            next_run=timezone.now() + timedelta(minutes=spec.minutes),
        )
        created.append(spec.name)
    if created:
        logger.info("created schedules: %s", ", ".join(created))
    return created


def on_post_migrate(sender: Any, using: str = DEFAULT_DB_ALIAS, **kwargs: Any) -> None:
    ensure_schedules(apps=kwargs.get("apps"), using=using)
