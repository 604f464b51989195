"""Tiny random instances shaped for the lower-bound tests: a fan-out from one source into branches that join
back (through a tree of joins) into one sink, on 2-3 devices that may differ in speed and eligibility, over one or
two link classes.  Small enough (at most 7 tasks) for `brute_force.brute_force_makespan`.  No tests here."""

from __future__ import annotations

import random

import numpy as np
from instances import make_instance

from planner.cost.instance import SchedulingInstance


def hub_instance(seed: int) -> SchedulingInstance:
    """Source -> 2-3 branches (chains of 1-2 tasks, sometimes a side edge) -> joins of joins -> sink."""
    rng = random.Random(seed)
    nd = rng.choice([2, 3])
    edges: list[tuple[int, int]] = []
    heads: list[int] = []
    t = 1  # task 0 is the source
    for _ in range(rng.choice([2, 3])):
        length = rng.choice([1, 1, 2]) if t < 5 else 1
        prev = 0
        for _ in range(length):
            edges.append((prev, t))
            prev, t = t, t + 1
        heads.append(prev)
    while len(heads) > 2 and t < 6:  # a join of two branches, itself joined later
        a, b = heads.pop(0), heads.pop(0)
        edges += [(a, t), (b, t)]
        heads.append(t)
        t += 1
    for h in heads:
        edges.append((h, t))
    n = t + 1
    if rng.random() < 0.3 and n > 3:  # a side edge that skips a level
        u = rng.randrange(1, n - 2)
        v = rng.randrange(u + 1, n)
        if (u, v) not in edges:
            edges.append((u, v))
    hetero = rng.random() < 0.5
    durations = []
    for _ in range(n):
        base = rng.randint(1, 6)
        row: list[int | None] = [max(1, base + (rng.randint(-1, 3) if hetero else 0)) for _ in range(nd)]
        if hetero and rng.random() < 0.15:
            row[rng.randrange(nd)] = None
        durations.append(row)
    weighted = [(u, v, rng.randint(0, 6), rng.choice([0, 20, 60])) for u, v in sorted(edges)]
    if nd == 3 and rng.random() < 0.6:
        link_class = np.array([[0, 1, 2], [1, 0, 2], [2, 2, 0]])
        latency, bandwidth = [0.0, 0.0, 2.0], [np.inf, 20.0, 10.0]
    else:
        link_class = 1 - np.eye(nd, dtype=np.int64)
        latency, bandwidth = [0.0, 1.0], [np.inf, 20.0]
    return make_instance(f"hub{seed}", durations, weighted, link_class=link_class, latency=latency,
                         bandwidth=bandwidth)
