"""Metrics for people: what `plan-inspect`, `plan-solve` and `plan-simulate` print, each figure defined once.

The figures and the one place each is defined, so that every command that prints one prints the same number:

* **lower bound** — of the *op graph* (never of a coarsened one): `SchedulingInstance.trivial_lower_bound_tick`
  (max(critical path, total work / total speed)), raised by whatever the planner proved (the decomposition bound);
  a plan file carries it (`Plan.lower_bound_tick`) and every command reports the plan's own bound on the plan's
  own hardware.  `bound_note` says which bound a summary holds.
* **critical path** — of the op graph, each op at its fastest device, communication free
  (`SchedulingInstance.critical_path_tick`).  The coarsening's estimates (`clustering_summary`) are a different
  figure and are named so.
* **parameter bytes** — `param_bytes_as_placed`: what the planner's memory model holds (each op's parameters on
  its device; an initializer read by k ops is counted k times, because those ops may sit on k devices).  This is
  the figure in memory errors, `plan-whatif` and the capacity bound.  `param_bytes` (each initializer once) is the
  model's own size, printed beside it by `plan-inspect`.
* **memory peaks** — per device, from the simulated timeline of the plan (`Timeline.peak_memory_bytes`), the same
  curve the Gantt picture draws.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from planner.cost.instance import SchedulingInstance
from planner.ir.graph import OpGraph
from planner.ir.op_workload import has_flop_rule


def param_bytes_as_placed(instance: SchedulingInstance) -> int:
    """Parameter bytes as the planner's memory model holds them (see the module docstring)."""
    return int(instance.param_bytes.sum())


OP_GRAPH_BOUND = "op graph: max(critical path, work bound) and any bound the planner proved"


def inspect_summary(graph: OpGraph, instance: SchedulingInstance, *, top: int = 10) -> dict[str, Any]:
    """Totals, bounds on the given hardware, heaviest ops and estimated op types, as plain JSON-able values.

    Times are in the instance's time unit (seconds for ONNX models): the critical path uses each op's fastest
    device and free communication; the work bound is total work / total device speed.  Both are lower bounds on
    any plan's makespan.
    """
    tick = instance.tick_s or 1.0
    fastest = instance.min_duration_tick()
    heaviest = sorted(range(graph.num_ops), key=lambda i: (-int(fastest[i]), i))[:top]
    estimated = Counter(op.op_type for op in graph.ops if op.estimated)
    return {
        "model": graph.source.path if graph.source else graph.name,
        "num_ops": graph.num_ops,
        "num_edges": len(graph.edges),
        "total_flops": int(graph.total_flops),
        "param_bytes": int(graph.param_bytes),
        "param_bytes_as_placed": param_bytes_as_placed(instance),
        "activation_bytes": int(graph.activation_bytes),
        "op_types": dict(Counter(op.op_type for op in graph.ops).most_common()),
        "hardware": {"devices": list(instance.device_names), "tick": tick, "time_unit": instance.time_unit},
        "critical_path": instance.critical_path_tick() * tick,
        "work_bound": instance.work_bound_tick() * tick,
        "serial_time_fastest_device": float(fastest.sum()) * tick,
        "heaviest_ops": [
            {"name": graph.ops[i].name, "op_type": graph.ops[i].op_type, "time": int(fastest[i]) * tick,
             "flops": graph.ops[i].flops}
            for i in heaviest
        ],
        "estimated_op_types": dict(estimated.most_common()),
        "estimated_why": {t: estimated_why(graph, t) for t in estimated},
    }


def estimated_why(graph: OpGraph, op_type: str) -> str:
    """Why the ops of `op_type` are estimated, as the cost model really treats them: no FLOP rule (timed by the
    bytes they move), FLOPs counted on shapes bounded at import (data-dependent sizes, If/Loop bodies), or shapes
    the rule could not read (timed by bytes)."""
    ops = [op for op in graph.ops if op.op_type == op_type and op.estimated]
    ruled = [op for op in ops if has_flop_rule(op.op_type, op.domain)]
    shaped = [op.flops > 0 or all(t in graph.tensors for t in (*op.reads, *op.writes)) for op in ruled]
    reasons = []
    if len(ruled) < len(ops):
        reasons.append("no FLOP rule, costed by bytes moved")
    if any(shaped):
        reasons.append("FLOPs counted on shapes bounded at import, not known")
    if not all(shaped):
        reasons.append("shapes unknown to its FLOP rule, costed by bytes moved")
    return "; ".join(reasons)


def plan_summary(plan, timeline, instance: SchedulingInstance, *, baselines: dict[str, int] | None = None,
                 extra: dict[str, Any] | None = None, bound_note: str = OP_GRAPH_BOUND) -> dict[str, Any]:
    """What `plan-solve` and `plan-simulate` print: quality, per-device busy time and memory, bytes per link.

    Times are in the instance's unit (seconds for ONNX models).  `gap` = (makespan - bound) / makespan with the
    plan's bound (of the op graph: module docstring); `bound_note` says which bound that is.  `instance` is the
    op-level instance the timeline was simulated on.
    """
    tick = instance.tick_s or 1.0
    devices = []
    for d, name in enumerate(instance.device_names):
        devices.append({
            "device": name,
            "tasks": sum(1 for p in timeline.placements if p.device == d),
            "busy": timeline.busy_tick[d] * tick,
            "busy_fraction": timeline.busy_tick[d] / timeline.makespan_tick if timeline.makespan_tick else 0.0,
            "peak_memory_bytes": int(timeline.peak_memory_bytes[d]) if hasattr(timeline, "peak_memory_bytes") else 0,
            "capacity_bytes": int(instance.capacity_bytes[d]),
        })
    links = [{"src": instance.device_names[a], "dst": instance.device_names[b], "bytes": int(n)}
             for (a, b), n in sorted(timeline.link_bytes.items()) if n]
    out = {
        "method": plan.method,
        "solver": plan.solver,
        "status": plan.status,
        "time_unit": instance.time_unit,
        "makespan": plan.makespan_tick * tick,
        "lower_bound": plan.lower_bound_tick * tick,
        "gap": plan.gap,
        "lower_bound_of": bound_note,
        "makespan_tick": plan.makespan_tick,
        "lower_bound_tick": plan.lower_bound_tick,
        "solve_time_s": plan.solve_time_s,
        "bubble_ratio": timeline.bubble_ratio,
        "devices": devices,
        "param_bytes_as_placed": param_bytes_as_placed(instance),
        "peak_memory_bytes": max((d["peak_memory_bytes"] for d in devices), default=0),
        "bytes_across_links": int(sum(link["bytes"] for link in links)),
        "links": links,
    }
    if baselines:
        out["baselines"] = {k: v * tick for k, v in baselines.items()}
    if extra:
        out.update(extra)
    return out


def clustering_summary(result) -> dict[str, Any]:
    """What `plan-inspect --clusters` prints about a `CoarseningResult` (times in the instance's unit).

    `critical_path` is the op graph's, as `plan-inspect` defines it (fastest device, free links).  The
    `critical_path_estimate_*` figures are the coarsener's own, a different quantity: each task at its mean
    duration over eligible devices and every edge at the most common cross-device link ('ops' is the op graph with
    every edge cut, 'clusters' the cluster graph with only the edges between clusters cut).
    """
    tick = result.fine.tick_s or 1.0
    sizes = sorted(result.sizes, reverse=True)
    return {
        "num_ops": result.fine.num_tasks,
        "num_linear_clusters": result.num_linear_clusters,
        "num_clusters_after_repair": result.num_repaired_clusters,
        "num_clusters": result.num_clusters,
        "largest_clusters": sizes[:10],
        "mean_cluster_size": sum(sizes) / len(sizes) if sizes else 0,
        "cut_bytes": int(result.cut_bytes),
        "total_edge_bytes": int(result.fine.edge_bytes.sum()) if result.fine.edges else 0,
        "critical_path": result.fine.critical_path_tick() * tick,
        "critical_path_before": result.critical_path_before_tick * tick,
        "critical_path_after": result.critical_path_after_tick * tick,
        "time_unit": result.fine.time_unit,
        "clusters": {name: len(ops) for name, ops in result.instance.task_ops.items()},
    }
