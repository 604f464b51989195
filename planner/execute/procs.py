"""Local ranks as forked processes: start them, watch them, name the root cause when one fails, leave no orphans.

`run_forked(world, body, ...)` forks `world` children (multiprocessing ``fork``: no pickling, ~0.1 s a rank);
child r runs ``body(r)`` and pipes back its return value, or its error and traceback.  The parent waits on every
pipe and process sentinel until `timeout_s`.

When a rank fails, its peers usually fail soon after (their receives break or time out), sometimes before the
parent hears of the first one: a rank that raised closes its sockets as it exits, and gloo on the other ranks then
reports "Connection closed by peer", which can reach the parent first.  So after the first failure the parent
waits up to `GRACE_S` for the others, then reports in causal order: a rank that died without reporting, then a
rank that raised a primary error, then a rank whose error `secondary(text)` marks as a consequence (a broken or
timed-out receive or send, a closed connection); within each class, the error raised first (each child stamps its
error with the system-wide monotonic clock).  The others follow in one line each, consequences marked as such.
All children are then terminated (then killed).  Each child also gets PR_SET_PDEATHSIG, so none outlives a
killed parent, and leaves with ``os._exit`` so it never runs the parent's atexit handlers or pytest's teardown.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

# seconds a stopped child gets to exit before it is killed: a safety limit, not a knob of any result
GRACE_S = 2.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for the rendezvous of forked ranks)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent dies."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def how_it_ended(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def stop(procs) -> None:
    """Terminate, then kill, every process still alive; bounded (a few seconds)."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    end = time.monotonic() + 3.0
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5.0)


def _child(rank: int, body: Callable[[int], Any], conn, parent: int) -> None:
    status = 0
    try:
        die_with_parent()
        if os.getppid() != parent:
            os._exit(1)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        conn.send(("ok", body(rank)))
    except BaseException as exc:  # noqa: BLE001 - every failure goes to the parent
        status = 1
        try:
            # time.monotonic() is CLOCK_MONOTONIC, one clock for every process on the host: it orders the errors
            conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc(), time.monotonic()))
        except Exception:  # noqa: BLE001
            pass
    finally:
        try:
            conn.close()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status)


def run_forked(world: int, body: Callable[[int], Any], *, timeout_s: float, what: str,
               error: type[Exception], secondary: Callable[[str], bool] = lambda text: False,
               name: str = "opplan-rank") -> list[Any]:
    """Every rank's `body(rank)` result, in rank order; `error(message)` for the root cause of a failure or when
    `what` has not finished within `timeout_s` (see the module docstring)."""
    ctx = mp.get_context("fork")
    parent = os.getpid()
    procs, conns = [], []
    try:
        for r in range(world):
            recv_end, send_end = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(r, body, send_end, parent), name=f"{name}{r}", daemon=True)
            proc.start()
            send_end.close()
            procs.append(proc)
            conns.append(recv_end)
        outputs: dict[int, Any] = {}
        # rank -> (class, when, message): class 0 died, 1 raised, 2 a consequence; sorted, the first is the cause
        failures: dict[int, tuple[int, float, str]] = {}
        deadline = time.monotonic() + timeout_s
        grace_end: float | None = None
        while len(outputs) + len(failures) < world:
            waiting = [r for r in range(world) if r not in outputs and r not in failures]
            end = deadline if grace_end is None else min(deadline, grace_end)
            left = end - time.monotonic()
            ready = wait([conns[r] for r in waiting] + [procs[r].sentinel for r in waiting],
                         timeout=left) if left > 0 else []
            if not ready:
                if grace_end is None:
                    raise error(f"{what} timed out after {timeout_s:.0f}s; ranks {waiting} had not finished")
                break
            for r in waiting:
                if conns[r] in ready or conns[r].poll():
                    try:
                        msg = conns[r].recv()
                    except EOFError:
                        msg = None
                    if msg is not None and msg[0] == "ok":
                        outputs[r] = msg[1]
                        continue
                    if msg is not None:
                        frames = [ln.strip() for ln in msg[2].splitlines() if ln.strip().startswith("File ")]
                        where = f" (at {frames[-1]})" if frames else ""
                        when = msg[3] if len(msg) > 3 else time.monotonic()
                        failures[r] = (2 if secondary(msg[1]) else 1, when, f"rank {r} failed: {msg[1]}{where}")
                    else:
                        procs[r].join(1.0)
                        failures[r] = (0, time.monotonic(),
                                       f"rank {r} {how_it_ended(procs[r].exitcode)} before reporting a result")
                elif procs[r].sentinel in ready:
                    procs[r].join(1.0)
                    failures[r] = (0, time.monotonic(),
                                   f"rank {r} {how_it_ended(procs[r].exitcode)} before reporting a result")
            if failures and grace_end is None:
                grace_end = time.monotonic() + GRACE_S
        if failures:
            order = sorted(failures, key=lambda r: failures[r][:2])
            text = failures[order[0]][2]
            if len(order) > 1:
                text += "; then " + "; ".join(
                    failures[r][2].replace(" failed: ", " failed (a consequence): ", 1) if failures[r][0] == 2
                    else failures[r][2] for r in order[1:])
            raise error(text)
        return [outputs[r] for r in range(world)]
    finally:
        stop(procs)
        for c in conns:
            c.close()
