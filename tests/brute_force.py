"""Brute force over every device assignment and per-device order, and the random instances small enough for it.

For each assignment of tasks to eligible devices and each order of the tasks on each device that respects the
DAG, start every task as early as possible (after the previous task on its device and after each input has
arrived over the link actually used); the best such semi-active schedule is optimal for makespan when memory does
not depend on time, so the random instances use parameter memory only (time-independent).  No tests here.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
from instances import make_instance

from planner.cost.instance import UNBOUNDED_BYTES, SchedulingInstance


def brute_force_makespan(instance: SchedulingInstance) -> int | None:
    """Best makespan over all assignments and DAG-respecting per-device orders (parameter memory respected)."""
    n, nd = instance.num_tasks, instance.num_devices
    elig = [[d for d in range(nd) if instance.eligible(t, d)] for t in range(n)]
    reach = [set() for _ in range(n)]
    for t in reversed(instance.topological_order):
        for v, _ in instance.successors[t]:
            reach[t] |= {v} | reach[v]
    best = None
    for assign in itertools.product(*elig):
        if any(sum(int(instance.param_bytes[t]) for t in range(n) if assign[t] == d) > instance.capacity_bytes[d]
               for d in range(nd)):
            continue
        groups = [[t for t in range(n) if assign[t] == d] for d in range(nd)]
        per_dev_orders = []
        for g in groups:
            orders = [p for p in itertools.permutations(g)
                      if all(p[j] not in reach[p[i]] for i in range(len(p)) for j in range(i))]
            per_dev_orders.append(orders)
        for combo in itertools.product(*per_dev_orders):
            prev = {}
            for order in combo:
                for a, b in zip(order, order[1:]):
                    prev[b] = a
            start, end = [None] * n, [None] * n
            done, progress = 0, True
            while progress and done < n:
                progress = False
                for t in range(n):
                    if end[t] is not None:
                        continue
                    p = prev.get(t)
                    if (p is not None and end[p] is None) or any(end[u] is None for u, _ in instance.predecessors[t]):
                        continue
                    st = end[p] if p is not None else 0
                    for u, k in instance.predecessors[t]:
                        st = max(st, end[u] + instance.comm(k, assign[u], assign[t]))
                    start[t], end[t] = st, st + int(instance.duration_tick[t, assign[t]])
                    done += 1
                    progress = True
            if done < n:
                continue  # the device orders contradict the DAG across devices
            mk = max(end)
            if best is None or mk < best:
                best = mk
    return best


def random_instance(seed: int) -> SchedulingInstance:
    """4-7 tasks, 2-3 devices, random DAG, heterogeneous durations (some ineligible), comm delays over one or two
    link classes, sometimes a parameter-memory limit."""
    rng = random.Random(seed)
    n = rng.randint(4, 7)
    nd = rng.choice([2, 3])
    hetero = rng.random() < 0.6
    base = [rng.randint(1, 6) for _ in range(n)]
    durations = []
    for t in range(n):
        row = [base[t] if not hetero else max(1, base[t] + rng.randint(-2, 3)) for _ in range(nd)]
        if hetero and rng.random() < 0.2:
            row[rng.randrange(nd)] = None
        durations.append(row)
    edges = []
    for v in range(1, n):
        for u in range(v):
            if rng.random() < 0.35:
                edges.append((u, v, rng.randint(0, 4), rng.choice([0, 10, 40])))
    if nd == 3 and rng.random() < 0.7:
        link_class = np.array([[0, 1, 2], [1, 0, 2], [2, 2, 0]])
        latency = [0.0, 0.0, 2.0]
        bandwidth = [np.inf, 20.0, 10.0]
    else:
        link_class = 1 - np.eye(nd, dtype=np.int64)
        latency = [0.0, 1.0]
        bandwidth = [np.inf, 20.0]
    params, capacity = None, UNBOUNDED_BYTES
    if rng.random() < 0.4:
        params = [rng.randint(1, 5) for _ in range(n)]
        capacity = max(max(params), -(-sum(params) // nd) + rng.randint(0, 3))
    return make_instance(f"rand{seed}", durations, edges, link_class=link_class, latency=latency,
                         bandwidth=bandwidth, params=params, capacity=capacity)
