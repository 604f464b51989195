"""Chrome trace JSON (Trace Event Format) of a `Timeline`; opens in Perfetto (ui.perfetto.dev) and chrome://tracing.

Layout: one process per device (``pid`` = device index, named by the device), thread 0 = compute, thread 1 =
communication.  Each task is a complete event (``ph: "X"``) on its device's compute thread; each transfer is a
complete event on the *sending* device's communication thread (named ``src->dst``, args: edge, bytes,
destination).  Memory in use is a counter track (``ph: "C"``, name ``memory``) per device.  Metadata events
(``ph: "M"``) name processes and threads and fix their sort order.

``ts`` and ``dur`` are microseconds: tick * tick_s * 1e6 when the instance has seconds per tick, else one tick is
shown as one microsecond (abstract task-graph units).
"""

from __future__ import annotations

import json
import os
from typing import Any

from planner.schedule.actions import try_parse_action
from planner.schedule.atomic import atomic_write_text
from planner.schedule.timeline import Timeline

COMPUTE_TID = 0
COMM_TID = 1


def _category(task: str) -> str:
    a = try_parse_action(task)
    return a.kind.value if a is not None else "task"


def chrome_trace(timeline: Timeline) -> dict[str, Any]:
    """The trace as a JSON-ready dict ``{"traceEvents": [...], "displayTimeUnit": "ms", ...}``."""
    scale = timeline.tick_s * 1e6 if timeline.tick_s is not None else 1.0

    def us(tick: int) -> float:
        v = tick * scale
        return int(v) if float(v).is_integer() else v

    names = timeline.device_names
    events: list[dict[str, Any]] = []
    for d, name in enumerate(names):
        events.append({"ph": "M", "name": "process_name", "pid": d, "tid": 0, "args": {"name": name}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": d, "tid": 0, "args": {"sort_index": d}})
        events.append({"ph": "M", "name": "thread_name", "pid": d, "tid": COMPUTE_TID, "args": {"name": "compute"}})
        events.append({"ph": "M", "name": "thread_name", "pid": d, "tid": COMM_TID,
                       "args": {"name": "communication"}})
    for p in sorted(timeline.placements, key=lambda p: (p.device, p.start_tick, p.end_tick)):
        args: dict[str, Any] = {"start_tick": p.start_tick, "end_tick": p.end_tick}
        if p.stage is not None:
            args["stage"] = p.stage
        events.append({"ph": "X", "name": p.task, "cat": _category(p.task), "pid": p.device, "tid": COMPUTE_TID,
                       "ts": us(p.start_tick), "dur": us(p.end_tick - p.start_tick), "args": args})
    for x in timeline.transfers:
        events.append({
            "ph": "X", "name": f"{x.src_task}->{x.dst_task}", "cat": "comm", "pid": x.src_device, "tid": COMM_TID,
            "ts": us(x.start_tick), "dur": us(x.end_tick - x.start_tick),
            "args": {"edge": x.edge, "bytes": x.size_bytes, "to": names[x.dst_device],
                     "start_tick": x.start_tick, "end_tick": x.end_tick},
        })
    for d, row in enumerate(timeline.memory.steps):
        for tick, used in row:
            events.append({"ph": "C", "name": "memory", "pid": d, "tid": 0, "ts": us(tick),
                           "args": {"bytes": used}})
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "instance": timeline.instance_name,
            "makespan_tick": timeline.makespan_tick,
            "tick_s": timeline.tick_s,
            "time_unit": timeline.time_unit,
            "bubble_ratio": timeline.bubble_ratio,
            "link_contention": timeline.link_contention,
        },
    }


def write_chrome_trace(timeline: Timeline, path: str | os.PathLike[str]) -> None:
    """Write the Chrome trace JSON to `path` (atomically)."""
    atomic_write_text(path, json.dumps(chrome_trace(timeline)) + "\n")
