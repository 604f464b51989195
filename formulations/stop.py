"""Stopping the running solves from outside: the command's Ctrl-C, not the solver's.

CP-SAT catches SIGINT itself by default, stops its solve, and then leaves the process's SIGINT handler at SIG_DFL,
so the next Ctrl-C kills the process without a word.  A command that handles Ctrl-C itself (plan-solve during its
search) runs the search inside `stop_control`: the backends then leave SIGINT to Python and run each solve inside
`stoppable`, and `request_stop` (called from the command's signal watcher thread while the main thread waits in the
solver) stops every running solve at once.  Outside `stop_control` nothing changes.

A stop lasts: once requested, `stop_requested` says so until the outermost `stop_control` ends, and every solve
started after it is stopped as it starts (it returns what it has, like a solve at its time limit).  A search that
keeps its best on a stop without an exception (plan-compare's) checks `stop_requested` where it would check its
clock, and ends as if its time were up.

The state is per process, like the signal it stands for.  `SearchStopped` is what the command's SIGINT handler
raises in the main thread once the solve has returned: a `BaseException`, so that a phase's guard against its own
bugs (``except Exception``) lets it through to the search, which keeps its best plan.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

__all__ = ["SearchStopped", "controlled", "raise_outside_solves", "request_stop", "stop_control", "stop_requested",
           "stoppable"]


class SearchStopped(BaseException):  # noqa: N818 - a request, not an error
    """The user asked the search to stop and keep the best plan found so far (the first Ctrl-C)."""


# reentrant: the SIGINT handler runs in the main thread, maybe while the main thread holds the lock (a plain lock
# would deadlock there); each section under it is a few dictionary and flag operations
_lock = threading.RLock()
_depth = 0  # nested `stop_control`s
_running: dict[int, Callable[[], None]] = {}
_next_key = 0
_pending: BaseException | None = None  # raised when the last running solve returns
_stopped = False  # a stop was requested inside the current `stop_control`


def controlled() -> bool:
    """Whether a caller handles Ctrl-C (a backend then leaves SIGINT alone)."""
    return _depth > 0


@contextlib.contextmanager
def stop_control() -> Iterator[None]:
    """The caller handles Ctrl-C for the length of the block (see the module docstring)."""
    global _depth, _stopped
    with _lock:
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _stopped = False


def stop_requested() -> bool:
    """Whether a stop was requested inside the current `stop_control` (False outside one)."""
    return _stopped


@contextlib.contextmanager
def stoppable(stop: Callable[[], None]) -> Iterator[None]:
    """Run a solve that `stop()` (thread-safe, asynchronous: CP-SAT's ``stop_search``) ends early."""
    global _next_key
    with _lock:
        key = _next_key
        _next_key += 1
        _running[key] = stop
        stop_now = _stopped
    if stop_now:  # a solve started after the stop returns what it has at once
        stop()
    try:
        yield
    finally:
        global _pending
        with _lock:
            _running.pop(key, None)
            pending = _pending if not _running else None
            if pending is not None:
                _pending = None
        if pending is not None:
            raise pending


def raise_outside_solves(exc: BaseException) -> None:
    """Raise `exc` now, or, while a solve runs, stop the solves and raise it when they return: a signal handler may
    run inside a solver's callback (Python code the solver calls), where an exception breaks the solver itself.  A
    `KeyboardInterrupt` replaces a pending `SearchStopped`, never the other way round."""
    global _pending
    with _lock:
        deferred = bool(_running)
        if deferred and (_pending is None or isinstance(exc, KeyboardInterrupt)):
            _pending = exc
    if not deferred:
        raise exc
    request_stop()


def request_stop() -> None:
    """Stop every running solve now (from any thread), and, inside `stop_control`, every solve started later."""
    global _stopped
    with _lock:
        stops = list(_running.values())
        _stopped = _stopped or _depth > 0
    for stop in stops:
        stop()
