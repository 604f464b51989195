"""Scheduling instances for tests, built by hand or at random (numpy only, seeded); no tests here.

* `make_instance` — an instance from per-task per-device durations and an edge list (hand-derived test cases)
* `random_instance` — a seeded random DAG instance of any size, heterogeneous or uniform
* `random_topological_order`, `round_robin_orders` — the simplest valid plan maker: tasks in a (random)
  topological order, each given to the next device (round robin) that may run it; each device runs its tasks in
  that order, so the orders are always consistent with precedence and the simulator turns them into a valid plan.
  Not a heuristic worth comparing against (see HEFT for that).
* `pipeline_instance` — a toy training pipeline whose tasks are named by action strings

(The instances small enough for brute force are in `brute_force.py`.)
"""

from __future__ import annotations

import dataclasses

import numpy as np

from experiments.layered import layered_dag
from planner.cost.instance import INELIGIBLE, UNBOUNDED_BYTES, SchedulingInstance
from planner.errors import InfeasibleError
from planner.heuristics.list_schedule import heft


def random_instance(
    seed: int,
    num_tasks: int,
    num_devices: int,
    *,
    heterogeneous: bool = True,
    edge_prob: float = 0.3,
    max_duration: int = 9,
    with_memory: bool = True,
    capacity_bytes: int = UNBOUNDED_BYTES,
    name: str | None = None,
) -> SchedulingInstance:
    """A random DAG instance (edges only from lower to higher task index).

    Heterogeneous: per-device durations (some 0), some tasks ineligible on some devices (never on all), 1-2 link
    classes with latency and finite bandwidth, tensors with bytes, fixed edge delays.  Homogeneous: built with
    `SchedulingInstance.uniform`.
    """
    rng = np.random.default_rng(seed)
    n, d = num_tasks, num_devices
    edges = [(i, j) for j in range(n) for i in range(j) if rng.random() < edge_prob]
    name = name or f"random-{seed}-{n}x{d}"
    act = rng.integers(0, 100, n) if with_memory else np.zeros(n, dtype=np.int64)
    par = rng.integers(0, 50, n) if with_memory else np.zeros(n, dtype=np.int64)
    if not heterogeneous:
        return SchedulingInstance.uniform(
            name, [int(x) for x in rng.integers(0, max_duration + 1, n)],
            [(i, j, int(rng.integers(0, 4))) for i, j in edges], d,
            param_bytes=[int(x) for x in par], activation_bytes=[int(x) for x in act], capacity_bytes=capacity_bytes,
        )
    dur = rng.integers(0, max_duration + 1, (n, d)).astype(np.int64)
    if d > 1:
        for t in range(n):
            mask = rng.random(d) < 0.25
            if mask.all():
                mask[rng.integers(d)] = False
            dur[t, mask] = INELIGIBLE
    num_classes = 1 + int(rng.integers(1, 3))  # class 0 (local) + 1 or 2 real classes
    link_class = rng.integers(1, num_classes, (d, d)).astype(np.int64)
    np.fill_diagonal(link_class, 0)
    tensors = {f"x{i}": int(rng.integers(0, 200)) for i in range(n)}
    return SchedulingInstance(
        name=name,
        task_names=tuple(f"t{i}" for i in range(n)),
        device_names=tuple(f"dev{k}" for k in range(d)),
        duration_tick=dur,
        edges=tuple(edges),
        edge_tensors=tuple((f"x{i}",) for i, _ in edges),
        tensor_bytes=tensors,
        edge_fixed_tick=rng.integers(0, 3, len(edges)).astype(np.int64),
        link_class=link_class,
        link_latency_tick=np.concatenate([[0.0], rng.uniform(0, 3, num_classes - 1)]),
        link_bytes_per_tick=np.concatenate([[np.inf], rng.uniform(20, 200, num_classes - 1)]),
        param_bytes=par.astype(np.int64),
        activation_bytes=act.astype(np.int64),
        peak_internal_bytes=(rng.integers(0, 30, n) if with_memory else np.zeros(n)).astype(np.int64),
        capacity_bytes=np.full(d, capacity_bytes, dtype=np.int64),
    )


def random_topological_order(instance: SchedulingInstance, seed: int | None = None) -> list[int]:
    """A topological order; random among ready tasks when `seed` is given, else the instance's own."""
    if seed is None:
        return list(instance.topological_order)
    rng = np.random.default_rng(seed)
    indeg = [len(p) for p in instance.predecessors]
    ready = [t for t, k in enumerate(indeg) if k == 0]
    order: list[int] = []
    while ready:
        t = ready.pop(int(rng.integers(len(ready))))
        order.append(t)
        for v, _ in instance.successors[t]:
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    return order


def round_robin_orders(instance: SchedulingInstance, seed: int | None = None,
                       *, random_devices: bool = False) -> list[list[int]]:
    """Per device, task indices: a topological order dealt round robin (or at random when `random_devices`) to
    devices that may run each task."""
    rng = np.random.default_rng(seed)
    orders: list[list[int]] = [[] for _ in range(instance.num_devices)]
    nxt = 0
    for t in random_topological_order(instance, seed):
        eligible = [k for k in range(instance.num_devices) if instance.eligible(t, k)]
        if random_devices:
            d = eligible[int(rng.integers(len(eligible)))]
        else:
            d = next(k % instance.num_devices for k in range(nxt, nxt + instance.num_devices)
                     if instance.eligible(t, k % instance.num_devices))
            nxt = d + 1
        orders[d].append(t)
    return orders


def pipeline_instance(
    num_stages: int,
    num_microbatches: int,
    *,
    split_backward: bool = True,
    forward_tick: int = 2,
    backward_tick: int = 2,
    weight_tick: int = 1,
    full_backward_tick: int = 3,
    comm_tick: int = 1,
    activation_bytes: int = 0,
) -> SchedulingInstance:
    """A toy training pipeline whose tasks are named by action strings: stage s runs on device s.

    Tasks ``sFm``, and ``sBm`` + ``sWm`` (split backward) or ``sBWm`` (full backward).  Edges: sFm -> (s+1)Fm and
    (s+1)Bm -> sBm cost `comm_tick` across devices; sFm -> sBm (the last stage turns forward into backward) and
    sBm -> sWm are local.  F outputs hold `activation_bytes` (until their backward ends).
    """
    names: list[str] = []
    dur: list[int] = []
    back = "B" if split_backward else "BW"
    for s in range(num_stages):
        for m in range(num_microbatches):
            names.append(f"{s}F{m}")
            dur.append(forward_tick)
            if split_backward:
                names += [f"{s}B{m}", f"{s}W{m}"]
                dur += [backward_tick, weight_tick]
            else:
                names.append(f"{s}BW{m}")
                dur.append(full_backward_tick)
    idx = {n: i for i, n in enumerate(names)}
    edges = []
    for s in range(num_stages):
        for m in range(num_microbatches):
            edges.append((idx[f"{s}F{m}"], idx[f"{s}{back}{m}"], 0))
            if s + 1 < num_stages:
                edges.append((idx[f"{s}F{m}"], idx[f"{s + 1}F{m}"], comm_tick))
                edges.append((idx[f"{s + 1}{back}{m}"], idx[f"{s}{back}{m}"], comm_tick))
            if split_backward:
                edges.append((idx[f"{s}B{m}"], idx[f"{s}W{m}"], 0))
    act = [activation_bytes if "F" in n else 0 for n in names]
    inst = SchedulingInstance.uniform(f"pipeline-{num_stages}x{num_microbatches}", dur, edges, num_stages,
                                      task_names=names, activation_bytes=act)
    # pin stage s to device s
    pinned = np.full_like(inst.duration_tick, INELIGIBLE)
    for t, n in enumerate(names):
        s = int(n[: len(n) - len(n.lstrip("0123456789"))])
        pinned[t, s] = inst.duration_tick[t, s]
    return dataclasses.replace(inst, duration_tick=pinned)


def make_instance(name, durations, edges, *, link_class=None, latency=None, bandwidth=None, params=None,
                  acts=None, internal=None, capacity=UNBOUNDED_BYTES):
    """durations: per task a list of per-device ticks (None = ineligible); edges: (src, dst, fixed ticks[, bytes])."""
    n, d = len(durations), len(durations[0])
    dur = np.array([[INELIGIBLE if v is None else v for v in row] for row in durations], dtype=np.int64)
    if link_class is None:
        link_class = 1 - np.eye(d, dtype=np.int64)
    link_class = np.asarray(link_class, dtype=np.int64)
    n_cls = int(link_class.max()) + 1
    latency = np.zeros(n_cls) if latency is None else np.asarray(latency, dtype=np.float64)
    bandwidth = np.full(n_cls, np.inf) if bandwidth is None else np.asarray(bandwidth, dtype=np.float64)
    tensors, tensor_bytes = [], {}
    for e in edges:
        key = f"{e[0]}->{e[1]}"
        tensors.append((key,))
        tensor_bytes[key] = int(e[3]) if len(e) > 3 else 0
    caps = capacity if isinstance(capacity, (list, tuple)) else [capacity] * d
    return SchedulingInstance(
        name=name, task_names=tuple(f"t{i}" for i in range(n)), device_names=tuple(f"d{i}" for i in range(d)),
        duration_tick=dur, edges=tuple((int(e[0]), int(e[1])) for e in edges), edge_tensors=tuple(tensors),
        tensor_bytes=tensor_bytes, edge_fixed_tick=np.array([int(e[2]) for e in edges], dtype=np.int64),
        link_class=link_class, link_latency_tick=latency, link_bytes_per_tick=bandwidth,
        param_bytes=np.array(params or [0] * n, dtype=np.int64), activation_bytes=np.array(acts or [0] * n,
                                                                                         dtype=np.int64),
        peak_internal_bytes=np.array(internal or [0] * n, dtype=np.int64),
        capacity_bytes=np.array(caps, dtype=np.int64))


def layered_with_heft(n: int, devices: int, *, seed: int, comm: float, capacity: int | None):
    """A layered DAG (`experiments.layered`, with `capacity` bytes per device when given) and HEFT's plan of it, or
    (instance, None) when the cap is below what HEFT fits: the start the local-search property tests share."""
    kw = {} if capacity is None else {"capacity_bytes": capacity}
    inst = layered_dag(n, devices, seed=seed, comm_ratio=comm, **kw)
    try:
        return inst, heft(inst)
    except InfeasibleError:
        return inst, None


def moe_model_costs(stages: int):
    """`plan-compare --model`'s costs of the bundled MoE on h100-8-nvlink.yaml cut for `stages` stages (10 s for
    the stage formulation): the model case of the pipeline-comparison tests."""
    from pathlib import Path

    from planner.compare.model_costs import model_costs
    from planner.ir.hardware import load_topology
    from planner.prepare import prepare

    repo = Path(__file__).resolve().parents[1]
    hw = repo / "hardware_profiles" / "h100-8-nvlink.yaml"
    return model_costs(prepare(repo / "planner" / "data" / "models" / "moe.onnx", load_topology(hw)).instance, stages,
                       time_limit_s=10)


def uneven_cut(costs, shift: int) -> tuple[tuple[int, ...], ...]:
    """The p-stage cut of `costs` (`moe_model_costs`) with `shift` ops of stage 1 given to stage 0 (stage 0 gets too
    much work): the start the cut searches must repair."""
    cut = [list(piece) for piece in costs.stage_positions]
    cut[0] += cut[1][:shift]
    cut[1] = cut[1][shift:]
    return tuple(tuple(piece) for piece in cut)
