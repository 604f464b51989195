"""The hub energy bound: the energy bound of `comm_bound` with per-device windows, for graphs that fan out of one
op (a hub) and back into another.

The energy bound of `planner.heuristics.comm_bound` gives every device the same window [a, makespan - b] for the
ops U(a, b) with head >= a and tail >= b.  On a graph that fans out of a source x (an MoE router) and back into a
sink y (the combine), that window is far too generous on every device but x's: any op there must first receive,
over at least one transfer, something that descends from x.  The bound here sharpens the window per device.

**Off-hub heads.**  Fix a hub x and a schedule; call an op *on* when it runs on x's device and *off* otherwise.
For x's descendants w (and w = x) two numbers, computed in topological order from x:

    on(x) = head(x),  off(x) = inf  (x is on by definition)
    on(w)  = max(head(w), max over predecessors z in {x} + desc(x) of min(on(z) + p(z) + same(z, w),
                                                                        off(z) + p(z) + c(z, w)))
    off(w) = max(head(w), max over predecessors z in {x} + desc(x) of min(on(z) + p(z) + c(z, w),
                                                                        off(z) + p(z) + far(z, w)))

with p, c, head as in `comm_bound` (fastest duration, least delay between distinct devices, comm-aware head),
same(z, w) = 0 when z and w may share a device (inf otherwise: both on x's device is impossible), and
far(z, w) = 0 when they may share a device (two off ops may be on one device) and c(z, w) otherwise.  By induction
on(w) <= start(w) in every schedule that puts w on x's device, off(w) <= start(w) in every schedule that does not:
w starts after each predecessor z ends plus the transfer, z is on or off, and a transfer between an on and an off
op crosses devices (delay >= c).  Ops that do not descend from x get on = off = head.

**Off-hub tails** are the same on the reversed graph from a sink hub y (tails, successors, the successor's
duration): on_y(u) <= makespan - end(u) when u shares y's device, off_y(u) when it does not.

**Bound.**  For thresholds (a, b) let U = {u : head(u) >= a, tail(u) >= b}, W = sum of p over U, and let x run on
device dx and y on dy.  Every op of U on device d runs inside [A_d, makespan - B_d] with A_d = max(a, min over U of
on_x) when d = dx, max(a, min over U of off_x) otherwise, and B_d likewise from on_y/off_y and dy.  With the
relative speeds s_d of `SchedulingInstance.work_bound_tick` (dur[u, d] >= p(u) / s_d), device d does at most
s_d * max(0, makespan - A_d - B_d) of U's work, so W <= sum_d s_d * max(0, makespan - w_d), w_d = A_d + B_d.  The
right side is the largest over device sets K of sum_{d in K} s_d (makespan - w_d), hence

    makespan >= min over K of (W + sum_{K} s_d w_d) / sum_{K} s_d,

and the minimum is at a prefix of the devices in increasing w_d (adding a device lowers the ratio only when its
w_d is below it); devices with equal w_d go together.  The bound is the minimum of that over every eligible (dx,
dy) (only the speeds of dx and dy and whether they coincide matter) and the maximum over the thresholds and the
hub pairs tried.  With x and y not constraining anything (on = off = head) it is `comm_bound`'s energy bound.
Memory is ignored (a relaxation), so it holds for every valid plan; `tests/test_hub_bound.py` compares it with the
brute-force optimum.

Hubs tried: the `CommBoundPolicy.hub_candidates` sources with the longest path after them and as many sinks with the
longest path before them (`planner.heuristics.policy`).  Cost: O(edges) per hub for on/off, O(thresholds x n) per
hub for the minima over U; `comm_lower_bound_tick` skips the whole bound above `CommBoundPolicy.hub_max_tasks` tasks
(say so where it matters: it is meant for the decomposition's segments and mid-size graphs, not 100k-op graphs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["hub_energy_bound", "hub_minima", "off_hub_bounds"]

_INF = math.inf


def off_hub_bounds(hub: int, order: Sequence[int], links: Sequence[Sequence[tuple[int, int]]],
                   p: Sequence[float], delays: Sequence[float], share: Sequence[bool],
                   base: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """(on, off) of the module docstring for `hub`: heads when links are predecessors and order is topological,
    tails when links are successors and order is reversed (base = heads or tails, p the fastest durations,
    delays and share per edge as in `comm_bound`)."""
    n = len(base)
    on = list(map(float, base))
    off = list(map(float, base))
    inside = [False] * n  # hub or reached from it
    inside[hub] = True
    off[hub] = _INF
    for w in order:
        if w == hub:
            continue
        lo_on = lo_off = -_INF
        reached = False
        for z, e in links[w]:
            if not inside[z]:
                continue
            reached = True
            c = delays[e]
            far = 0.0 if share[e] else c
            same = 0.0 if share[e] else _INF
            # z's duration counts for heads; for tails the neighbour is the successor and its duration counts
            lo_on = max(lo_on, min(on[z] + p[z] + same, off[z] + p[z] + c))
            lo_off = max(lo_off, min(on[z] + p[z] + c, off[z] + p[z] + far))
        if reached:
            inside[w] = True
            on[w] = max(on[w], lo_on)
            off[w] = max(off[w], lo_off)
    return np.asarray(on), np.asarray(off)


def _min_over_u(values: np.ndarray, heads: np.ndarray, tails: np.ndarray, a_values: np.ndarray,
                b_values: np.ndarray) -> np.ndarray:
    """[A, B]: the least of `values` over U(a, b) = {head >= a, tail >= b} (inf where U is empty)."""
    by_tail = np.argsort(-tails, kind="stable")
    tails_desc = tails[by_tail]
    # how many ops have tail >= b: a prefix of the descending order
    count = np.searchsorted(-tails_desc, -b_values, side="right")
    masked = np.where(heads[by_tail][None, :] >= a_values[:, None], values[by_tail][None, :], _INF)  # [A, n]
    running = np.minimum.accumulate(masked, axis=1)
    running = np.concatenate([np.full((len(a_values), 1), _INF), running], axis=1)  # column k: first k ops
    return running[:, count]


def _device_choices(speeds: np.ndarray, x_devices: np.ndarray,
                    y_devices: np.ndarray) -> list[tuple[float, float, bool]]:
    """The distinct (s_dx, s_dy, dx == dy) over eligible device pairs: all the bound depends on."""
    out = {(float(speeds[dx]), float(speeds[dy]), bool(dx == dy)) for dx in x_devices for dy in y_devices}
    return sorted(out)


def _least_makespan(work: np.ndarray, groups: list[tuple[np.ndarray, float]]) -> np.ndarray:
    """Elementwise min over nonempty sets K of device groups of (W + sum_K s w) / sum_K s, for groups given as
    (offset w [A, B], total speed s) — the module docstring's bound for one device choice (the minimum is at a
    prefix in increasing w, so taking it over every set of the few groups gives the same value without sorting)."""
    best = np.full(work.shape, _INF)
    live = [(w, sp) for w, sp in groups if sp > 1e-12]  # a group without speed (rounding in total - s_x - s_y)
    for mask in range(1, 1 << len(live)):
        chosen = [live[i] for i in range(len(live)) if mask >> i & 1]
        speed = sum(sp for _, sp in chosen)
        best = np.minimum(best, (work + sum(sp * w for w, sp in chosen)) / speed)
    return best


def hub_minima(on: np.ndarray, off: np.ndarray, heads: np.ndarray, tails: np.ndarray, a_values: np.ndarray,
               b_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[A, B] each: the least on and off value over U(a, b) for every threshold pair (inf where U is empty)."""
    return (_min_over_u(on, heads, tails, a_values, b_values), _min_over_u(off, heads, tails, a_values, b_values))


def hub_energy_bound(work: np.ndarray, count: np.ndarray, a_values: np.ndarray, b_values: np.ndarray,
                     speeds: np.ndarray, source: tuple[np.ndarray, np.ndarray, np.ndarray],
                     sink: tuple[np.ndarray, np.ndarray, np.ndarray]) -> float:
    """The module docstring's bound for one hub pair over the thresholds a_values x b_values.

    work, count [A, B]: the work of U(a, b) and how many ops it has; source = (least on_x over U, least off_x
    over U (both [A, B], from `hub_minima`), devices x may run on), sink likewise for y; speeds = s_d."""
    min_on_x, min_off_x, x_devices = source
    min_on_y, min_off_y, y_devices = sink
    a = a_values[:, None]
    b = b_values[None, :]
    a_on, a_off = np.maximum(a, min_on_x), np.maximum(a, min_off_x)
    b_on, b_off = np.maximum(b, min_on_y), np.maximum(b, min_off_y)
    total = float(speeds.sum())
    best = np.full(work.shape, _INF)
    for s_x, s_y, together in _device_choices(speeds, x_devices, y_devices):
        if together:
            groups = [(a_on + b_on, s_x), (a_off + b_off, max(0.0, total - s_x))]
        else:
            groups = [(a_on + b_off, s_x), (a_off + b_on, s_y), (a_off + b_off, max(0.0, total - s_x - s_y))]
        best = np.minimum(best, _least_makespan(work, groups))
    value = np.where((count > 0) & np.isfinite(best), best, 0.0)
    return float(value.max(initial=0.0))
