"""How the app's side of a preview can fail, and the status each failure answers.

They surface from inside task groups (the exchange runs its two directions as tasks), so
they arrive wrapped in an ExceptionGroup: `first_failure` finds them there. Anything else
that escapes is a bug of the proxy and stays loud.
"""

from __future__ import annotations


class ProxyFailure(Exception):
    """The app's side broke: the browser gets `status` with this message (or, when the
    answer had begun, a connection cut short)."""

    status = 502


class AppFailed(ProxyFailure):
    """The app broke off, or answered something that is no HTTP."""


class PortBroken(ProxyFailure):
    """The port stream itself failed (the backend's transport)."""


class AppTimedOut(ProxyFailure):
    """Nothing came from the app for the read timeout."""

    status = 504


def first_failure(exc: BaseException) -> ProxyFailure | None:
    """The first ProxyFailure in an exception or (nested) exception group."""
    if isinstance(exc, ProxyFailure):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = first_failure(inner)
            if found is not None:
                return found
    return None
