"""The agent's streams and memory are its own (before every other part of the agent).

The agent runs as the sandbox user, as every command does, and a process may open another
process's /proc/PID/fd/N (reopen its pipes, to read or to write), read its memory or ptrace
it whenever both have the same uid, unless the target is not dumpable. So the agent makes
itself non-dumpable (prctl PR_SET_DUMPABLE 0) first thing: protocol.BOOTSTRAP does, before the
agent's source is even read, and main again. Its /proc/PID/fd, fdinfo, environ, mem and the
like then belong to root, and ptrace is refused: no command can write a forged frame into
the result stream the platform reads, or take the requests off its input.

Nothing the agent does needs it to be dumpable: a process may always read its own /proc/self,
and signals need no dumpability (kill_agent, the sweeps). Its children are not dumpable
either after the fork, until their exec makes them (the sandbox user's own programs, as
ever). In between, a child that must write its own /proc/self/oom_score_adj (root's while it
is not dumpable: oom.py's preexec_fn) closes the agent's streams first, then becomes dumpable.
No child inherits the streams: the agent's copies are close-on-exec (os.dup), fds 0 and 1
are /dev/null, and every child gets its own fd 2.
"""

from __future__ import annotations

import contextlib
import os

_PR_GET_DUMPABLE, _PR_SET_DUMPABLE = 3, 4


def _load_libc():
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True)
    except Exception:  # no ctypes in this python: the agent cannot protect itself
        return None


LIBC = _load_libc()
_STREAMS: list[int] = []  # the agent's frame streams, closed in children before they open up


def keep_to_itself() -> bool:
    """Make this process non-dumpable; whether it is now."""
    if LIBC is None:
        return False
    LIBC.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    return LIBC.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) == 0


def guard_streams(*fds: int) -> None:
    """The agent's own streams: no child holds them once it may be looked into."""
    _STREAMS[:] = fds


def open_up_child() -> None:
    """In a forked child, before its exec (raw calls only): close the agent's streams, then
    become dumpable, so the child may write its own /proc/self files."""
    for fd in _STREAMS:
        with contextlib.suppress(OSError):
            os.close(fd)
    if LIBC is not None:
        LIBC.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
