"""A communication-aware lower bound on the makespan: heads and tails that count the transfers a join (or fork)
cannot avoid, and an energy bound over the windows they leave.

The trivial bound (max(critical path, work / speed)) drops every transfer; on graphs where transfers are about as
long as the ops (the engine bench's layered DAGs, comm/compute 0.5-2) it sits far below any plan, and the gap
reported against it says little.  This bound is never below the critical path and usually well above.

Notation: p(t) = the fastest duration of t over its eligible devices; c(e) = the smallest delay of edge e = (u, v)
over ordered pairs of *distinct* devices (a, b) with u eligible on a and v on b (infinite when there is none: u and
v must then share a device); "u and v may share a device" when some device is eligible for both.

**Heads.**  head(v) <= start(v) in every schedule, computed in topological order.  Group v's predecessors u (an
edge set per pair: the largest c of them counts).  In a schedule, call S the predecessors on v's device.  Each u
outside S delivers no earlier than head(u) + p(u) + c(u, v) (it ends no earlier than head(u) + p(u), and the
transfer to another device takes at least c).  The ops of S run one at a time on v's device before v starts, each
starting no earlier than its head, so v starts no earlier than the single-machine bound

    B(S) = the makespan of S on one machine with release head(u) and length p(u)
         = max over u in S, taken in order of head, of the recursion f = max(f, head(u)) + p(u)

(which is the optimum of 1|r_j|C_max: earliest-release-first is optimal there).  So start(v) >=
max(max_{u not in S} (head(u) + p(u) + c(u, v)), B(S)) for the schedule's S, and head(v) is the minimum of that
over every S the schedule could have: predecessors that cannot share a device with v are never in S, those with
c infinite are always in S.  B grows with S, so for the free predecessors only the prefixes of their order by
head(u) + p(u) + c(u, v) (largest first) need to be tried: leaving out one with a larger value than one put in
cannot lower the maximum.  Sources get head 0.

**Tails.**  tail(u) <= makespan - end(u), by the same argument on the reversed graph: successors v outside u's
device start no earlier than end(u) + c(u, v) and need p(v) + tail(v) after their start; those on u's device
run one at a time after end(u), so in reversed time they form a single-machine problem with release tail(v).

**Bounds.**  (1) every op t: makespan >= head(t) + p(t) + tail(t).  (2) energy: for thresholds a and b, every
op with head >= a and tail >= b runs inside [a, makespan - b] (when there is such an op); with relative speeds s_d as in
`SchedulingInstance.work_bound_tick` (dur[t, d] >= p(t) / s_d), the work of those ops satisfies
sum p(t) <= (makespan - a - b) * sum_d s_d.  Thresholds a, b range over (a sample of) the heads and tails.
(3) up to `CommBoundPolicy.hub_max_tasks` tasks (`planner.heuristics.policy`), `planner.heuristics.hub_bound`: the
energy bound with a window per device, from the heads and tails an op has when it does not share the device of a source
hub (or a sink hub); on graphs that fan out of one op and back into one (the MoE's expert segments) it is much the
strongest.
Memory is ignored (a relaxation), so all hold for every valid plan.  The tests compare the bound with the brute
force optimum on small random instances (`tests/test_comm_bound.py`, `tests/test_hub_bound.py`).

Cost, near-linear so that it runs on 1M-op graphs: O(edges x log) for heads and tails (closed form for one
neighbour, the prefix loop stops once the single-machine term reaches the remote one), the per-edge delays
vectorised over the distinct eligibility patterns, the energy bound a 2-D histogram over at most
`CommBoundPolicy.energy_samples` thresholds each way summed from the corner (O(n + thresholds^2)); the hub bound
adds O(edges + hub_samples x n) per hub and is skipped above `hub_max_tasks` tasks.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.heuristics.hub_bound import hub_energy_bound, hub_minima, off_hub_bounds
from planner.heuristics.policy import DEFAULT_COMM_BOUND_POLICY, CommBoundPolicy

__all__ = ["comm_heads_tails", "comm_lower_bound_tick"]

_INF = math.inf


def _edge_min_delay(instance: SchedulingInstance) -> tuple[list[float], list[bool]]:
    """Per edge (u, v): c(e) (module docstring; inf when u and v cannot be on different devices) and whether u
    and v may share a device.  Vectorised over the distinct eligibility patterns (usually a handful), so it stays
    linear in the edges on 1M-op graphs."""
    if not instance.edges:
        return [], []
    ok = instance.duration_tick < INELIGIBLE
    nd = instance.num_devices
    if nd < 63:  # one integer per eligible-device set: a 1-D unique, much faster than unique rows
        codes = ok.astype(np.int64) @ (np.int64(1) << np.arange(nd, dtype=np.int64))
        _, first, pattern_of = np.unique(codes, return_index=True, return_inverse=True)
        patterns = ok[first]
    else:
        patterns, pattern_of = np.unique(ok, axis=0, return_inverse=True)  # distinct eligible-device sets
    pattern_of = np.asarray(pattern_of).reshape(-1)
    ends = np.asarray(instance.edges, dtype=np.int64)
    pu, pv = pattern_of[ends[:, 0]], pattern_of[ends[:, 1]]
    pairs, pair_of = np.unique(np.stack([pu, pv], axis=1), axis=0, return_inverse=True)
    pair_of = np.asarray(pair_of).reshape(-1)
    off_diagonal = ~np.eye(nd, dtype=bool)
    usable = np.zeros((len(pairs), instance.num_link_classes), dtype=bool)  # link classes a transfer may use
    may_share = np.zeros(len(pairs), dtype=bool)
    for i, (a, b) in enumerate(pairs.tolist()):
        cross = patterns[a][:, None] & patterns[b][None, :] & off_diagonal  # (device of u, device of v), distinct
        usable[i, np.unique(instance.link_class[cross])] = True
        may_share[i] = bool(np.any(patterns[a] & patterns[b]))
    comm = instance.comm_tick.astype(np.float64)
    delays = np.where(usable[pair_of], comm, np.inf).min(axis=1)
    return delays.tolist(), may_share[pair_of].tolist()


def _single_machine(jobs: list[tuple[float, float]]) -> float:
    """Least makespan of jobs (release, length) on one machine: earliest release first."""
    f = 0.0
    for r, p in sorted(jobs):
        f = max(f, r) + p
    return f


def _side(n: int, order: list[int], links: list[list[tuple[int, int]]], p: list[float], delays: list[float],
          share: list[bool]) -> list[float]:
    """Heads (links = predecessors, order topological) or tails (links = successors, order reversed): the
    module docstring's recursion."""
    out = [0.0] * n
    for v in order:
        if not links[v]:
            continue
        if len(links[v]) == 1:  # the common case, in closed form: S is empty or {u}
            u, e = links[v][0]
            ready = out[u] + p[u]
            out[v] = ready + delays[e] if not share[e] else min(ready, ready + delays[e])
            continue
        per: dict[int, tuple[float, bool]] = {}  # neighbour -> (largest delay of its edges, may share a device)
        for u, e in links[v]:
            c, s = per.get(u, (0.0, True))
            per[u] = (max(c, delays[e]), s and share[e])
        fixed_out = 0.0  # neighbours that cannot share v's device
        forced_in: list[tuple[float, float]] = []  # neighbours that must share it
        free: list[tuple[float, int]] = []
        for u, (c, s) in per.items():
            if not s:
                fixed_out = max(fixed_out, out[u] + p[u] + c)
            elif c == _INF:
                forced_in.append((out[u], p[u]))
            else:
                free.append((out[u] + p[u] + c, u))
        free.sort(reverse=True)
        best = _INF
        inside = sorted(forced_in)
        for k in range(len(free) + 1):
            remote = max(fixed_out, free[k][0] if k < len(free) else 0.0)
            together = _single_machine(inside)
            best = min(best, max(remote, together))
            if together >= remote or k == len(free):  # later prefixes only add to S: B(S) cannot fall
                break
            u = free[k][1]
            bisect.insort(inside, (out[u], p[u]))
        out[v] = best
    return out


@dataclass(frozen=True)
class _Graph:
    """What the bounds share: fastest durations, per-edge least delay and may-share, topological order, links."""

    p: list[float]
    delays: list[float]
    share: list[bool]
    topo: list[int]
    pred: list[list[tuple[int, int]]]
    succ: list[list[tuple[int, int]]]


def _graph(instance: SchedulingInstance) -> _Graph:
    fastest = instance.min_duration_tick()
    p = [float(x) if x < INELIGIBLE else 0.0 for x in fastest.tolist()]
    delays, share = _edge_min_delay(instance)
    return _Graph(p, delays, share, list(instance.topological_order), [list(x) for x in instance.predecessors],
                  [list(x) for x in instance.successors])


def _heads_tails(g: _Graph) -> tuple[np.ndarray, np.ndarray]:
    n = len(g.p)
    heads = _side(n, g.topo, g.pred, g.p, g.delays, g.share)
    tails = _side(n, g.topo[::-1], g.succ, g.p, g.delays, g.share)
    return np.asarray(heads), np.asarray(tails)


def comm_heads_tails(instance: SchedulingInstance) -> tuple[np.ndarray, np.ndarray]:
    """(heads, tails), float64 [n_tasks] each (module docstring): head(t) <= start(t) and
    tail(t) <= makespan - end(t) in every schedule."""
    return _heads_tails(_graph(instance))


def _speeds(instance: SchedulingInstance) -> np.ndarray:
    """s_d = max_t p(t) / dur[t, d] (`SchedulingInstance.work_bound_tick`): dur[t, d] >= p(t) / s_d."""
    fastest = instance.min_duration_tick().astype(np.float64)
    dur = instance.duration_tick.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where((dur > 0) & (instance.duration_tick < INELIGIBLE), fastest[:, None] / dur, 0.0)
    return np.asarray(ratio.max(axis=0))


def _thresholds(values: np.ndarray, samples: int) -> np.ndarray:
    out = np.unique(values)
    if len(out) > samples:
        out = np.unique(np.quantile(values, np.linspace(0, 1, samples), method="lower"))
    return np.asarray(out)


def _energy_terms(heads: np.ndarray, tails: np.ndarray, work: np.ndarray, samples: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(a_values, b_values, work of U(a, b), size of U(a, b)) for U(a, b) = {head >= a, tail >= b}, over at most
    `samples` thresholds each way."""
    a_values, b_values = _thresholds(heads, samples), _thresholds(tails, samples)
    # Each op falls in the cell (largest a <= head, largest b <= tail) (the smallest head and tail are thresholds),
    # and U(a, b) is the union of the cells at or above (a, b): a 2-D histogram summed from the top corner, linear
    # in n (a [thresholds, n] matrix product would need gigabytes on 1M-op graphs).
    na, nb = len(a_values), len(b_values)
    row = np.searchsorted(a_values, heads, side="right") - 1
    cell = row * nb + np.searchsorted(b_values, tails, side="right") - 1
    per_cell_work = np.bincount(cell, weights=work, minlength=na * nb).reshape(na, nb)
    per_cell_count = np.bincount(cell, minlength=na * nb).reshape(na, nb).astype(np.float64)

    def from_corner(x: np.ndarray) -> np.ndarray:
        return np.asarray(x[::-1, ::-1].cumsum(axis=0).cumsum(axis=1)[::-1, ::-1])

    w = from_corner(per_cell_work)  # work of the ops with head >= a and tail >= b
    count = from_corner(per_cell_count)  # how many there are: with none, (a, b) says nothing
    return a_values, b_values, w, count


def _energy_bound(a_values: np.ndarray, b_values: np.ndarray, w: np.ndarray, count: np.ndarray,
                  total_speed: float) -> float:
    """Bound (2) of the module docstring over the sampled thresholds."""
    if total_speed <= 0:
        return 0.0
    value = np.where(count > 0, a_values[:, None] + b_values[None, :] + w / total_speed, 0.0)
    return float(value.max(initial=0.0))


def _hubs(g: _Graph, heads: np.ndarray, tails: np.ndarray, work: np.ndarray,
          candidates: int) -> tuple[list[int], list[int]]:
    """The hubs tried (`hub_bound`): the `candidates` sources with the longest path after them, as many sinks with
    the longest path before them."""
    sources = [t for t in g.topo if not g.pred[t]]
    sinks = [t for t in g.topo if not g.succ[t]]
    sources.sort(key=lambda t: -(work[t] + tails[t]))
    sinks.sort(key=lambda t: -(heads[t] + work[t]))
    return sources[:candidates], sinks[:candidates]


def _hub_bound(instance: SchedulingInstance, g: _Graph, heads: np.ndarray, tails: np.ndarray, work: np.ndarray,
               speeds: np.ndarray, policy: CommBoundPolicy) -> float:
    """The best `hub_bound` over the hub pairs tried, over at most `policy.hub_samples` thresholds each way."""
    a_values, b_values, w, count = _energy_terms(heads, tails, work, policy.hub_samples)
    ok = instance.duration_tick < INELIGIBLE
    sources, sinks = _hubs(g, heads, tails, work, policy.hub_candidates)
    heads_l, tails_l = heads.tolist(), tails.tolist()
    side_x = []
    for x in sources:
        on, off = off_hub_bounds(x, g.topo, g.pred, g.p, g.delays, g.share, heads_l)
        side_x.append((*hub_minima(on, off, heads, tails, a_values, b_values), np.flatnonzero(ok[x])))
    side_y = []
    for y in sinks:
        on, off = off_hub_bounds(y, g.topo[::-1], g.succ, g.p, g.delays, g.share, tails_l)
        side_y.append((*hub_minima(on, off, heads, tails, a_values, b_values), np.flatnonzero(ok[y])))
    return max((hub_energy_bound(w, count, a_values, b_values, speeds, sx, sy) for sx in side_x for sy in side_y),
               default=0.0)


def comm_lower_bound_tick(instance: SchedulingInstance, *,
                          policy: CommBoundPolicy = DEFAULT_COMM_BOUND_POLICY) -> int:
    """A lower bound on the makespan of every valid plan: the best of the module docstring's path and energy
    bounds and, up to `policy.hub_max_tasks` tasks, `planner.heuristics.hub_bound`; never below
    `instance.trivial_lower_bound_tick()`.  `policy`: how many thresholds and hubs are tried."""
    trivial = instance.trivial_lower_bound_tick()
    if instance.num_tasks == 0:
        return trivial
    g = _graph(instance)
    heads, tails = _heads_tails(g)
    work = np.asarray(g.p, dtype=np.float64)
    path = float((heads + work + tails).max(initial=0.0))
    speeds = _speeds(instance)
    terms = _energy_terms(heads, tails, work, policy.energy_samples)
    best = max(path, _energy_bound(*terms, float(speeds.sum())))
    if instance.num_tasks <= policy.hub_max_tasks:
        best = max(best, _hub_bound(instance, g, heads, tails, work, speeds, policy))
    # Heads, tails and work are integers (sums and maxima of integer ticks), so only the energy terms need ceil;
    # the small slack absorbs float rounding in the division.
    return max(trivial, int(math.ceil(best - 1e-6)))
