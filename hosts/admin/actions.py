"""Admin actions that call a service per selected object and report each outcome."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TypeVar

from django.contrib import admin, messages
from django.http import HttpRequest

from sandboxes.contract.errors import ServiceError

logger = logging.getLogger(__name__)
T = TypeVar("T")


def apply_each(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    objects: Iterable[T],
    call: Callable[[T], str],
) -> None:
    """Run a service call per selected object and report every outcome with message_user.

    One failing object must not hide what happened to the others, so errors are collected
    instead of raised; `call` returns a short description of what it did.
    """
    done: list[str] = []
    failed: list[str] = []
    for obj in objects:
        try:
            done.append(call(obj))
        except ServiceError as exc:  # the services map backend failures to these
            failed.append(f"{obj}: {exc}")
        except Exception as exc:  # a bug: log the trace, still report the rest
            logger.exception("admin action on %r failed", obj)
            failed.append(f"{obj}: unexpected {type(exc).__name__}: {exc}")
    if done:
        modeladmin.message_user(request, "; ".join(done), messages.SUCCESS)
    if failed:
        modeladmin.message_user(request, "Failed: " + "; ".join(failed), messages.ERROR)
