"""How good the prediction was: a measured run set against its plan (no torch here; `runner` calls it).

Figures (all seconds or bytes; the keys of `run.json` they become):

* `op_seconds`        op -> its measured duration: its median over the measured repetitions (the compute event of
                      the op in the trace, our runtime's per-op cost included) times its rank's load factor = the
                      rank's mean busy time over the repetitions / the sum of its ops' medians.  On a loaded machine
                      a rank is preempted now and then inside some op; the median keeps one unlucky repetition from
                      making an op look expensive, and the factor spreads the time lost over the rank's ops in
                      proportion to their typical time, so that the ops of a rank still add up to its busy time (the
                      medians alone summed to a third of it on the MoE at load 8 on 2 vCPUs).  `plan-solve
                      --measured run.json` reads this mapping (`planner.cost.measured`), so a run can be re-planned
                      from what really happened.  `op_seconds_median` and `load_factor` (per rank) are beside it;
                      `op_rank` says which rank ran each op.
* `simulated_busy_s`  per rank: the plan's compute time of the ops that rank ran (placement lengths x tick), beside
                      `busy_s`, the measured one (the median repetition's); `busy_ratio` = measured / simulated.
* `measured_vs_simulated` = measured makespan / simulated makespan.
* `time_breakdown`    per rank, where the median repetition's time went (`planner.execute.run_breakdown`).
* `op_deviations`     the ops whose measured time is furthest from their planned one (absolute seconds, largest
                      first): what to fix in the cost model, or why a re-plan from measured times moves ops.
* `predicted_peak_bytes` per rank: the plan's memory model (`planner.schedule.memory`) on the plan's own times, the
                      peak of each device summed over the devices the rank runs (one device per rank unless `--nproc`
                      folds several together, when the sum is an upper bound); beside `peak_tensor_bytes`, the rank's
                      measured peak (`planner.execute.memory_meter`), and `peak_ratio` = measured / predicted.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from planner.cost.model import build_instance
from planner.execute.dist import RankResult
from planner.execute.partition import Partition
from planner.ir.graph import OpGraph
from planner.ir.hardware import load_topology
from planner.ir.topology import Topology
from planner.ir.units import format_bytes, format_time
from planner.schedule.memory import memory_intervals, memory_profile
from planner.schedule.plan import Plan

__all__ = ["TOP_DEVIATIONS", "load_factors", "measured_op_seconds", "predicted_peak_bytes", "prediction_quality",
           "summary_lines"]

# how many ops the report lists furthest from their planned time: a format
TOP_DEVIATIONS = 10


def measured_op_seconds(results: Sequence[RankResult], statistic=statistics.fmean) -> dict[str, float]:
    """op -> `statistic` (mean) over the measured repetitions of its compute time (each op runs on one rank)."""
    samples: dict[str, list[float]] = {}
    for res in results:
        for run in res.runs:
            for kind, name, s, e in run.events:
                if kind == "op":
                    samples.setdefault(name, []).append(e - s)
    return {name: statistic(v) for name, v in samples.items()}


def load_factors(results: Sequence[RankResult], medians: Mapping[str, float]) -> list[float]:
    """Per rank: its mean busy time over the measured repetitions / the sum of its ops' median times (1 for a rank
    with no ops); see `op_seconds` in the module docstring."""
    out = []
    for res in results:
        ops = {name for run in res.runs for kind, name, _, _ in run.events if kind == "op"}
        typical = sum(medians[name] for name in ops)
        busy = statistics.fmean(run.busy_s for run in res.runs) if res.runs else 0.0
        out.append(busy / typical if typical > 0 and busy > 0 else 1.0)
    return out


def _planned_op_seconds(plan: Plan) -> dict[str, float]:
    """op -> the plan's duration for it; ops inside a cluster task (no own placement) are left out."""
    tick = plan.tick_s or 1.0
    return {p.task: (p.end_tick - p.start_tick) * tick for p in plan.placements
            if not plan.task_ops or len(plan.task_ops.get(p.task, (p.task,))) == 1}


def predicted_peak_bytes(plan: Plan, graph: OpGraph) -> list[int] | None:
    """Per planned device, the memory model's peak on the plan's own times; None when the plan's tasks are not the
    graph's ops (a cluster plan) or the plan has no tick."""
    if plan.tick_s is None or any(p.task not in graph.index for p in plan.placements):
        return None
    hw = Path(plan.hardware_path) if plan.hardware_path else None
    topology = load_topology(hw) if hw is not None and hw.is_file() else Topology.identical(len(plan.device_names))
    if topology.num_devices != len(plan.device_names):
        topology = Topology.identical(len(plan.device_names))
    instance = build_instance(graph, topology, tick_s=plan.tick_s)
    index = instance.task_index
    n = instance.num_tasks
    device_of, start, end = [-1] * n, [0] * n, [0] * n
    for p in plan.placements:
        t = index[p.task]
        device_of[t], start[t], end[t] = p.device, p.start_tick, p.end_tick
    if min(device_of, default=0) < 0:
        return None
    profile = memory_profile(instance, memory_intervals(instance, device_of, start, end))
    return [int(b) for b in profile.peak_bytes]


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def prediction_quality(plan: Plan, partition: Partition, results: Sequence[RankResult], median_index: int,
                       graph: OpGraph, measured_makespan_s: float, simulated_makespan_s: float | None
                       ) -> dict[str, Any]:
    """The report keys of the module docstring."""
    world = partition.world_size
    medians = measured_op_seconds(results, statistics.median)
    factors = load_factors(results, medians)
    op_s = {op: t * factors[partition.rank_of_op[op]] for op, t in medians.items()}
    planned = _planned_op_seconds(plan) if plan.time_unit == "s" else {}
    rank_of = partition.rank_of_op
    sim_busy = [0.0] * world
    for op, seconds in planned.items():
        if op in rank_of:
            sim_busy[rank_of[op]] += seconds
    busy = [res.runs[median_index].busy_s for res in results]
    compared = sorted((op for op in op_s if op in planned), key=lambda op: (-abs(op_s[op] - planned[op]), op))
    deviations = [{"op": op, "op_type": graph.op(op).op_type, "rank": rank_of[op], "measured_s": op_s[op],
                   "simulated_s": planned[op], "ratio": _ratio(op_s[op], planned[op])}
                  for op in compared[:TOP_DEVIATIONS]]
    peaks = predicted_peak_bytes(plan, graph)
    predicted: list[int] | None = None
    if peaks is not None:
        predicted = [0] * world
        for d, b in enumerate(peaks):
            predicted[partition.rank_of_device[d]] += b
    measured_peak = [res.peak_tensor_bytes for res in results]
    return {
        "measured_vs_simulated": _ratio(measured_makespan_s, simulated_makespan_s),
        "simulated_busy_s": sim_busy if planned else None,
        "busy_ratio": [_ratio(b, s) for b, s in zip(busy, sim_busy, strict=True)] if planned else None,
        "op_seconds": op_s,
        "op_seconds_median": medians,
        "load_factor": factors,
        "op_rank": {op: rank_of[op] for op in op_s},
        "op_deviations": deviations,
        "peak_tensor_bytes": measured_peak,
        "fixed_tensor_bytes": [res.fixed_tensor_bytes for res in results],
        "predicted_peak_bytes": predicted,
        "predicted_peak_bytes_per_device": peaks,
        "peak_ratio": [_ratio(m, p) for m, p in zip(measured_peak, predicted, strict=True)] if predicted else None,
    }


def summary_lines(report: Mapping[str, Any]) -> list[str]:
    """What plan-run prints about the prediction (times and bytes through the project's formatters)."""
    lines = []
    ratio = report.get("measured_vs_simulated")
    if ratio is not None:
        lines.append(f"measured / simulated makespan: {ratio:.2f}")
    sim = report.get("simulated_busy_s")
    if sim is not None:
        lines.append("busy per rank, measured / simulated: " + ", ".join(
            f"{format_time(b)} / {format_time(s)}" for b, s in zip(report["busy_s"], sim, strict=True)))
    for row in report.get("time_breakdown") or ():
        t = {k: format_time(v) for k, v in row.items() if k.endswith("_s") and isinstance(v, float)}
        lines.append(f"rank {row['rank']}: {t['end_s']} = ops {t['ops_s']} + receive waits {t['recv_early_s']} "
                     f"(for the sender) + {t['recv_late_s']} (transport) + sends {t['send_s']} + posting receives "
                     f"{t['post_s']} + tail {t['tail_s']} + loop {t['other_s']}; simulated busy {t['sim_busy_s']}, "
                     f"idle {t['sim_idle_s']}")
    predicted = report.get("predicted_peak_bytes")
    lines.append("peak tensor bytes per rank, measured" + (" / predicted: " if predicted else ": ") + ", ".join(
        f"{format_bytes(m)}" + (f" / {format_bytes(predicted[r])}" if predicted else "")
        for r, m in enumerate(report["peak_tensor_bytes"])))
    devs = report.get("op_deviations") or []
    if devs:
        lines.append("ops furthest from their planned time (measured / planned):")
        for d in devs[:5]:
            lines.append(f"  {d['op']} ({d['op_type']}, rank {d['rank']}): {format_time(d['measured_s'])} / "
                         f"{format_time(d['simulated_s'])}")
    return lines
