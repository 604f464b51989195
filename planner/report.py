"""Metrics for people: model inspection summaries (what `plan-inspect` prints)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from planner.cost.instance import SchedulingInstance
from planner.ir.graph import OpGraph


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
    }
