"""The least time any run of a graph on a host's cores can take, given each op's time on 1 and on k threads.

A CPU user splits a model two ways at once: over ranks (ops side by side, each on its own cores) and inside ops
(intra-op threads).  With each op's measured time on 1 thread (t_1) and on k threads (t_k, k the host's cores), no
schedule of any placement, threads per op and transfers beats this bound, when

* an op runs either on one core for at least t_1 or on all k for at least t_k (no faster kernel exists than the ones
  measured, and a run with k threads holds every core), and
* a transfer costs nothing and ops running side by side do not slow each other (both only make a real run longer).

**The bound.**  An op that is an ancestor or a descendant of every other op (an *articulation* op: the layer norms
and projections a transformer's residual stream runs through one after the other) overlaps nothing, so it adds its
fastest time min(t_1, t_k).  The other ops fall into *regions*, between two articulation ops one after the other
(an op's region is its number of articulation ancestors); regions never overlap each other, and a region lasts at
least the longer of its critical path (each op at its fastest time, edges inside the region only: a path between
two of its ops cannot leave it) and its core-time spread over every core (each op needs min(t_1, k t_k) core-
seconds).  So

    bound = sum over articulation ops of min(t_1, t_k)  +  sum over regions of max(critical path, core-time / k).

On a chain every op is an articulation op and the bound is the ops' fastest times one after the other; on
independent branches it is the longer of the longest branch and the work spread over the cores.  An op without a
time counts 0.  Deterministic; O(n^2 / 64) word operations for the ancestor sets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from planner.ir.graph import OpGraph

__all__ = ["CoreBound", "core_bound"]


@dataclass(frozen=True)
class CoreBound:
    """`bound_s`: no run on `cores` cores is shorter (module docstring); `serial_s` the articulation ops' part of
    it, `regions` how many regions of side-by-side ops the rest forms."""

    bound_s: float
    cores: int
    serial_s: float
    regions: int


def core_bound(graph: OpGraph, thread_times: Mapping[int, Mapping[str, float]]) -> CoreBound:
    """The bound of the module docstring for `graph`'s ops; `thread_times` maps intra-op threads -> op -> seconds
    and must hold 1 thread (its largest thread count is the host's cores k)."""
    if 1 not in thread_times:
        raise ValueError("thread_times needs the one-thread times (key 1)")
    cores = max(thread_times)
    names = [op.name for op in graph.ops]
    fastest = [min(times.get(name, 0.0) for times in thread_times.values()) for name in names]
    core_s = [min(k * times.get(name, 0.0) for k, times in thread_times.items()) for name in names]
    n = len(names)
    order = list(range(n))  # an OpGraph's positions are topological
    ancestors = _closure(order, graph.predecessors)
    descendants = _closure(order[::-1], graph.successors)
    articulation = [(ancestors[i] | descendants[i]).bit_count() == n - 1 for i in range(n)]
    art_mask = sum(1 << i for i in range(n) if articulation[i])
    serial_s = sum(fastest[i] for i in range(n) if articulation[i])
    region_of = {i: (ancestors[i] & art_mask).bit_count() for i in range(n) if not articulation[i]}
    finish: dict[int, float] = {}  # critical path ending at each region op, inside its region
    for i in order:
        if i in region_of:
            finish[i] = fastest[i] + max((finish[j] for j in graph.predecessors[i]
                                          if region_of.get(j) == region_of[i]), default=0.0)
    path_s: dict[int, float] = {}
    work_s: dict[int, float] = {}
    for i, region in region_of.items():
        path_s[region] = max(path_s.get(region, 0.0), finish[i])
        work_s[region] = work_s.get(region, 0.0) + core_s[i]
    regions_s = sum(max(path_s[r], work_s[r] / cores) for r in path_s)
    return CoreBound(serial_s + regions_s, cores, serial_s, len(path_s))


def _closure(order: list[int], parents: tuple[tuple[int, ...], ...]) -> list[int]:
    """Per op, the bit set of every op reachable backwards through `parents`, visiting ops in `order` (parents
    first)."""
    reach = [0] * len(parents)
    for i in order:
        bits = 0
        for j in parents[i]:
            bits |= reach[j] | (1 << j)
        reach[i] = bits
    return reach
