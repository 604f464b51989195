"""Where a rank's time went: one measured repetition split into compute, receives, sends and the rest.

No torch here (`runner` calls it with the ranks' results).  Per rank, of one repetition (the median one), seconds:

* `ops_s`        the op spans of the trace (`run_node`: our runtime's per-op work and the kernels);
* `recv_early_s` receive waits before the sending op had ended on its rank (the ranks on one clock,
                 `RankRun.start_s`): the plan's dependency wait, which the simulation has too (idle time);
* `recv_late_s`  receive waits after the sending op had ended: the transport and the receiver's wake-up, what the
                 link (latency + bytes / bandwidth) is to price; a receive whose sender ran on the same rank, or
                 whose sending op is unknown, counts here whole;
* `send_s`       packing and posting the sends after an op and reaping completed ones (the sender's side);
* `post_s`       posting receives (gloo's `irecv`: at the start of the repetition and before the ops the plan
                 has data arrive for; the receiver's side);
* `tail_s`       the end of the repetition: receives never read, waiting for the last sends to complete;
* `other_s`      the rest of the rank's end time: the loop between ops (checking reads, releasing tensors, the
                 trace's bookkeeping).

Beside it the plan's figures for the devices the rank runs: `sim_busy_s` (its ops' planned seconds),
`sim_idle_s` (its last task's end - busy: waits for data and for the plan's order) and `sim_end_s`, so each part
can be set against the simulation's.  `per_op_other_s` = other_s / ops, `per_send_s` = send_s / send events:
`per_post_s` = post_s / receives: the runtime's costs per op and per transfer that a cost model prices (or does
not).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from planner.execute.dist import RankResult
from planner.execute.partition import Partition
from planner.ir.graph import OpGraph
from planner.schedule.plan import Plan

__all__ = ["time_breakdown"]


def _producers(graph: OpGraph) -> dict[str, str]:
    return {t: op.name for op in graph.ops for t in op.outputs if t}


def time_breakdown(plan: Plan, partition: Partition, results: Sequence[RankResult], index: int,
                   graph: OpGraph) -> list[dict[str, Any]]:
    """Per rank, the parts of repetition `index` (module docstring), rounded to 0.1 us."""
    starts = [res.runs[index].start_s for res in results]
    aligned = all(starts) and max(starts) - min(starts) < 1.0
    shift = [s - min(starts) if aligned else 0.0 for s in starts]
    op_end: dict[str, tuple[int, float]] = {}
    for res in results:
        for kind, name, _s, e in res.runs[index].events:
            if kind == "op":
                op_end[name] = (res.rank, e + shift[res.rank])
    producer = _producers(graph)
    tick = plan.tick_s or 1.0
    sim_busy = [0.0] * partition.world_size
    sim_end = [0.0] * partition.world_size
    for p in plan.placements:
        r = partition.rank_of_device[p.device]
        sim_busy[r] += (p.end_tick - p.start_tick) * tick
        sim_end[r] = max(sim_end[r], p.end_tick * tick)
    rows = []
    for res in results:
        run = res.runs[index]
        r = res.rank
        parts = {"op": 0.0, "send": 0.0, "post": 0.0, "tail": 0.0}
        counts = {"op": 0, "send": 0, "recv": 0}
        early = late = 0.0
        for kind, name, s, e in run.events:
            counts[kind] = counts.get(kind, 0) + 1
            if kind != "recv":
                parts[kind] = parts.get(kind, 0.0) + (e - s)
                continue
            src = op_end.get(producer.get(name, ""))
            if src is None or src[0] == r:
                late += e - s
                continue
            ready = src[1] - shift[r]  # the sending op's end on this rank's clock
            early += max(0.0, min(e, ready) - s)
            late += max(0.0, e - max(s, ready))
        other = run.end_s - sum(parts.values()) - early - late
        rows.append({
            "rank": r, "end_s": run.end_s, "ops_s": parts["op"], "recv_early_s": early, "recv_late_s": late,
            "send_s": parts["send"], "post_s": parts["post"], "tail_s": parts["tail"], "other_s": other,
            "ops": counts["op"], "recvs": counts["recv"], "send_events": counts["send"],
            "per_op_other_s": other / counts["op"] if counts["op"] else None,
            "per_send_s": parts["send"] / counts["send"] if counts["send"] else None,
            "per_post_s": parts["post"] / counts["recv"] if counts["recv"] else None,
            "sim_busy_s": sim_busy[r], "sim_idle_s": max(0.0, sim_end[r] - sim_busy[r]), "sim_end_s": sim_end[r],
        })
    return [{k: (round(v, 7) if isinstance(v, float) else v) for k, v in row.items()} for row in rows]
