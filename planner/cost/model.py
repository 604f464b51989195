"""The cost model: `OpGraph` + `Topology` -> `SchedulingInstance` in integer ticks.

* Compute: `compute_time_s` (roofline + launch overhead) per (op, device), or a measured time per op name that
  overrides it (`measured_s`, from `planner/cost/measured.py`), or a task graph's given duration.
* Communication: per edge, the tensors it carries; per ordered device pair, a link class with latency and
  bandwidth.  `SchedulingInstance.comm_tick` turns those into ticks (latency + bytes / bandwidth, rounded up).
* Memory: an op's parameter bytes (initializers it reads; an initializer shared by two ops placed on one device
  is counted twice, which errs on the safe side) and its output activation bytes.

The tick.  Every formulation sees integer ticks.  For ONNX models the default tick is the smallest power of ten
seconds (at least 1 ns) for which a whole step run serially on the slowest device stays within
`MAX_SERIAL_TICKS` = 10^6 ticks: small enough that rounding each op up to whole ticks changes a step by well under
1 %, large enough that CP-SAT's horizon stays far below 10^7.  Each op takes at least one tick.  For task graphs
the tick is the file's own time unit (`tick_s` = 1 unit), divided by 10, 100 or 1000 when durations have decimals.
`tick_s` is always "time units per tick" and `time_unit` names the unit ('s' for ONNX models).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from planner.cost.compute import compute_time_s, devices_by_spec
from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.errors import InputError
from planner.ir.graph import OpGraph
from planner.ir.topology import Topology

# The instance's time resolution, a definition rather than a knob: the serial time on the fastest device is
# about this many integer ticks (every exact model counts in ticks), and no tick is shorter than MIN_TICK_S.
MAX_SERIAL_TICKS = 1_000_000
MIN_TICK_S = 1e-9


def compute_seconds(graph: OpGraph, topology: Topology, measured_s: Mapping[str, float] | None = None) -> np.ndarray:
    """float64 [n_ops, n_devices]: time of each op on each device, in the graph's time unit.

    Devices with an identical spec share one computation (an 8-GPU node costs the graph once, not 8 times).
    """
    measured_s = measured_s or {}
    unknown = [name for name in measured_s if name not in graph.index]
    if unknown:
        raise InputError(f"measured profile names {len(unknown)} ops that the model does not have, e.g. "
                         f"{unknown[:3]}", fix="profile the same model file")
    out = np.empty((graph.num_ops, topology.num_devices), dtype=np.float64)
    for devices in devices_by_spec(topology):
        dev = topology.devices[devices[0]]
        column = np.fromiter((compute_time_s(op, dev) for op in graph.ops), dtype=np.float64, count=graph.num_ops)
        out[:, devices] = column[:, None]
    for name, seconds in measured_s.items():
        out[graph.index[name], :] = seconds
    return out


def choose_tick_s(serial_s: float) -> float:
    """Smallest power of ten (>= MIN_TICK_S) that keeps `serial_s` within MAX_SERIAL_TICKS ticks."""
    if serial_s <= 0:
        return MIN_TICK_S
    exponent = math.ceil(math.log10(serial_s / MAX_SERIAL_TICKS) - 1e-12)
    return max(MIN_TICK_S, 10.0**exponent)


def _taskgraph_scale(graph: OpGraph) -> int:
    """Ticks per time unit for a task graph: 1, 10, 100 or 1000 so that every duration and comm is whole."""
    values = [op.duration or 0.0 for op in graph.ops] + [e.comm or 0.0 for e in graph.edges]
    for scale in (1, 10, 100, 1000):
        if all(abs(v * scale - round(v * scale)) < 1e-9 for v in values):
            return scale
    return 1000


def _duration_ticks(
    graph: OpGraph, topology: Topology, measured_s: Mapping[str, float] | None, tick_s: float | None
) -> tuple[np.ndarray, float, str]:
    """(op x device durations in ticks, the tick, the time unit): a task graph keeps its own unit at a tick that
    makes every given time whole; a real model runs in seconds with every op at least one tick."""
    is_taskgraph = graph.source is not None and graph.source.kind == "taskgraph"
    seconds = compute_seconds(graph, topology, measured_s)
    if is_taskgraph:
        scale = _taskgraph_scale(graph)
        unit = graph.source.time_unit if graph.source else "unit"
        tick = 1.0 / scale
    else:
        unit = "s"
        serial_s = float(seconds.max(axis=1).sum()) if seconds.size else 0.0
        tick = tick_s if tick_s is not None else choose_tick_s(serial_s)
    duration = np.ceil(seconds / tick - 1e-9).astype(np.int64)
    if not is_taskgraph:
        duration = np.maximum(duration, 1)  # every real op occupies its device for at least one tick
    return duration, tick, unit


def _edge_pairs(
    graph: OpGraph, tick: float
) -> tuple[tuple[tuple[int, int], ...], dict[tuple[int, int], list[str]], dict[str, int], np.ndarray]:
    """One edge per (src, dst) pair, carrying the union of its tensors and the sum of given comm times:
    (pairs in first-seen order, each pair's tensors, each tensor's bytes, each pair's fixed comm ticks)."""
    idx = graph.index
    pair_tensors: dict[tuple[int, int], list[str]] = {}
    pair_fixed: dict[tuple[int, int], float] = {}
    tensor_bytes: dict[str, int] = {}
    for e in graph.edges:
        key = (idx[e.src], idx[e.dst])
        tensors = pair_tensors.setdefault(key, [])
        if e.tensor not in tensors:
            tensors.append(e.tensor)
        tensor_bytes[e.tensor] = e.size_bytes
        pair_fixed[key] = pair_fixed.get(key, 0.0) + (e.comm or 0.0)
    pairs = tuple(pair_tensors)
    fixed = np.array([math.ceil(pair_fixed[p] / tick - 1e-9) for p in pairs], dtype=np.int64)
    return pairs, pair_tensors, tensor_bytes, fixed


def _link_classes(topology: Topology, tick: float) -> tuple[np.ndarray, list[float], list[float], list[str]]:
    """Link classes: 0 = same device, then one class per distinct (latency, bandwidth) pair in device order;
    returns (device x device class, each class's latency in ticks, bytes per tick, name)."""
    n_dev = topology.num_devices
    link_class = np.zeros((n_dev, n_dev), dtype=np.int64)
    classes: dict[tuple[float, float], int] = {}
    latency = [0.0]
    bandwidth = [math.inf]
    names = ["local"]
    for a in range(n_dev):
        for b in range(n_dev):
            if a == b:
                continue
            link = topology.link(a, b)
            link_key = (link.latency_s, link.bandwidth_bytes_per_s)
            if link_key not in classes:
                classes[link_key] = len(latency)
                latency.append(link.latency_s / tick)
                bandwidth.append(link.bandwidth_bytes_per_s * tick)
                names.append(link.name)
            link_class[a, b] = classes[link_key]
    return link_class, latency, bandwidth, names


def build_instance(
    graph: OpGraph,
    topology: Topology,
    *,
    tick_s: float | None = None,
    measured_s: Mapping[str, float] | None = None,
    capacity_bytes: int | None = None,
) -> SchedulingInstance:
    """Cost every op on every device and every edge on every link class, in integer ticks.

    `capacity_bytes` overrides every device's memory (memory what-if); otherwise each device's own is used.
    """
    duration, tick, unit = _duration_ticks(graph, topology, measured_s, tick_s)
    pairs, pair_tensors, tensor_bytes, fixed = _edge_pairs(graph, tick)
    link_class, latency, bandwidth, names = _link_classes(topology, tick)
    capacity = np.array([capacity_bytes if capacity_bytes is not None else dev.memory_bytes
                         for dev in topology.devices], dtype=np.int64)
    return SchedulingInstance(
        name=graph.name,
        task_names=tuple(op.name for op in graph.ops),
        device_names=tuple(dev.name for dev in topology.devices),
        duration_tick=np.minimum(duration, INELIGIBLE),
        edges=pairs,
        edge_tensors=tuple(tuple(pair_tensors[p]) for p in pairs),
        tensor_bytes=tensor_bytes,
        edge_fixed_tick=fixed,
        link_class=link_class,
        link_latency_tick=np.array(latency, dtype=np.float64),
        link_bytes_per_tick=np.array(bandwidth, dtype=np.float64),
        param_bytes=np.array([op.param_bytes for op in graph.ops], dtype=np.int64),
        activation_bytes=np.array([op.output_bytes for op in graph.ops], dtype=np.int64),
        peak_internal_bytes=np.zeros(graph.num_ops, dtype=np.int64),
        capacity_bytes=capacity,
        tick_s=tick,
        time_unit=unit,
        link_names=tuple(names),
    )
