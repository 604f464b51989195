"""Ctrl-C during a search: the first stops it and keeps the best plan found so far, the second aborts.

`ctrl_c_in_search` wraps a search in a command.  The first SIGINT says so in one line on stderr,
stops the running solves at once (`formulations.stop.request_stop`, from a watcher thread: the main thread may be
waiting inside the solver, where Python runs no signal handler) and raises `SearchStopped` in the main thread once
no solve runs (`formulations.stop.raise_outside_solves`: never inside a solver's callback); the search catches it
and returns its incumbent, which the command writes as usual.  A search that keeps its best without an exception
(plan-compare's, whose incumbents live in many nested loops) passes ``by_exception=False``: the first SIGINT then
only stops the solves, for the rest of the block too, and the search ends as if its time were up
(`formulations.stop.stop_requested`).  A second SIGINT raises `KeyboardInterrupt` (the same way as `SearchStopped`):
the command says ``interrupted`` and exits 130, writing nothing.  After the block, Python's own SIGINT handling is
back (CP-SAT's handler, which would leave SIG_DFL behind, is never installed).
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
from collections.abc import Iterator

from formulations.stop import SearchStopped, raise_outside_solves, request_stop, stop_control

STOPPING_LINE = "interrupted: stopping the search; the best plan found so far is written (Ctrl-C again aborts)"


def _watch(reader: socket.socket) -> None:
    """Stop the running solves as soon as a SIGINT arrives (Python's C-level handler writes its number here)."""
    while True:
        try:
            data = reader.recv(64)
        except OSError:
            return
        if not data:
            return
        if signal.SIGINT in data:
            request_stop()


@contextlib.contextmanager
def ctrl_c_in_search(*, by_exception: bool = True) -> Iterator[None]:
    """See the module docstring.  Only in the main thread (signals are delivered there); elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    presses = 0

    def on_sigint(_signum, _frame) -> None:
        nonlocal presses
        presses += 1
        request_stop()
        if presses > 1:
            raise_outside_solves(KeyboardInterrupt())
            return
        print(STOPPING_LINE, file=sys.stderr, flush=True)
        if by_exception:
            raise_outside_solves(SearchStopped())

    reader, writer = socket.socketpair()
    writer.setblocking(False)
    watcher = threading.Thread(target=_watch, args=(reader,), name="sigint-watcher", daemon=True)
    old_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    old_handler = signal.signal(signal.SIGINT, on_sigint)
    watcher.start()
    try:
        with stop_control():
            yield
    finally:
        signal.signal(signal.SIGINT, old_handler)
        signal.set_wakeup_fd(old_fd)
        writer.close()  # ends the watcher: recv returns b""
        watcher.join(timeout=5)
        reader.close()
