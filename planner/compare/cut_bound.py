"""A lower bound on the planned pipeline's makespan over *every* cut of the model, per placement family — stronger
than work / devices (`cut_search.any_cut_bound_tick`), which ignores that a device cannot start a piece before the
first micro-batch's forward has reached it (a proven bound shows that no schedule under that memory reaches a
target makespan).

**Families.**  The planned row runs on one of two placements (`planner.compare.pipelines`), and both put two pieces
of a contiguous cut of the positions 0..n-1 (a model's ops in the instance's topological order, or a preset's units,
`planner.compare.presets`: the same argument, each unit's ticks rounded down) on every device, the pieces
i and K-1-i of the cut's K pieces (boundaries 0 = x_0 < x_1 < ... < x_K = n, piece j = [x_j, x_{j+1})):

* ``dualpipe``: K = p stages; two chains over the same p pieces, each with m/2 micro-batches; device d runs piece
  d of the first chain and piece p-1-d of the second (`model_costs.ModelCosts.layout`), so devices d and p-1-d
  both hold pieces {d, p-1-d}, each for c = m/2 micro-batches.  Every boundary joins two devices.
* ``v``: K = 2p chunks, one chain, m micro-batches; device d runs chunks d and 2p-1-d (c = m); the boundary
  between chunks p-1 and p stays on device p-1 (no hop), every other joins two devices.

**The bound.**  For a cut, let F_j, G_j be the sums over piece j's positions of the forward ticks and of forward +
input-gradient + weight-gradient ticks (per position, on identical devices); let hop(x) be a lower bound on the hop
at a boundary at position x between two distinct devices (`crossing_ticks`: the edges crossing x, each at its
cheapest link) and hop_min its least value over positions.  Every task of piece j (F, B or W of any micro-batch k,
in either chain) is a successor of — or is — that micro-batch's forward F(j, k), which follows F(0, k), F(1, k),
..., F(j-1, k) of its chain, each on its device, with a hop between any two pieces on different devices (a send
task or an edge delay, an edge that skips pieces forwarded piece by piece).  So no task of piece j starts before
its head, after the schedule's first start:
    h_j = F_0 + ... + F_{j-1} + hop(x_j) + (hops(j) - 1) * hop_min   when boundary j joins two devices,
    h_j = F_0 + ... + F_{j-1} + hops(j) * hop_min                   otherwise (hops(j): device changes before j).
A device runs one task at a time, so for any set S of its tasks that all start at or after h, the makespan is at
least h + (total ticks of S).  On the device holding pieces i < K-1-i, S = all its tasks and S = the tasks of piece
K-1-i give
    T_i = max( h_i + c (G_i + G_{K-1-i}),  h_{K-1-i} + c G_{K-1-i} ),
and the makespan of every schedule on that cut is at least max_i T_i (fb_overlap 1: no overlapped pair, which
could run shorter than its halves).  Its minimum over all cuts, `family_cut_bound_tick`, is therefore a lower bound
on every schedule of that placement under any cut and any memory cap; it is never below work / devices (each
device's term is at least its work).  (G counts B and W per position; a piece's B and W tasks are at least one tick
each, so the pipeline's work is at least this: the bound only gets weaker.)

**What it does not see**: memory (the cap), and that a piece's backward waits for the round trip through the
pieces after it.  The cut that meets it (`family_best_cut`) has tiny first pieces and large last ones; as the
planned row's starting cut it runs far worse than the baselines' cut, so it serves as a bound only.

**Computing the minimum.**  A binary search over T with an exact feasibility test: pair i's boundaries are (x_i,
x_{i+1}) on the left and (x_{K-1-i}, x_{K-i}) on the right, nested around the middle, so "the pairs i..q-1 (q = K/2) can
all meet T given x_i = l and x_{K-i} = r" is a table good_i[l, r] computed from good_{i+1} (the middle pair q-1 holds
the two adjacent pieces [l, x_q) and [x_q, r) with x_q free).  Each level costs O(n^3) boolean operations (numpy); the
search ends within `ComparePolicy.cut_bound_rel_tol` of the minimum and returns the least T it could not rule out, which
is at most the minimum: the result stays a valid bound.  Deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from planner.compare.compare_policy import DEFAULT_COMPARE_POLICY, ComparePolicy
from planner.compare.model_costs import ModelCosts
from planner.compare.presets import PresetCosts

__all__ = ["FAMILIES", "crossing_ticks", "every_cut_bound_tick", "family_best_cut", "family_cut_bound_tick",
           "family_terms", "op_arrays"]

FAMILIES = ("dualpipe", "v")  # the placements the planned row solves (`planner.compare.pipelines._SPLIT`)


def op_arrays(costs: ModelCosts | PresetCosts) -> tuple[np.ndarray, np.ndarray] | None:
    """Per position (an op of the instance's topological order; a unit of a preset), (forward ticks, forward + B +
    W ticks), or None where the p devices differ (the module's argument needs a position's ticks not to depend on
    where a cut puts it).  On a preset each op is priced as the pipeline prices it (`PresetCosts.priced_seconds`)
    and each unit's ticks are rounded down (a piece rounds its sum up once, so
    the sums stay at most the piece's)."""
    if isinstance(costs, PresetCosts):
        devices = costs.topology.devices[: costs.num_devices]
        rows = [[[sum(x) for x in zip(*(costs.priced_seconds(op, dev) for op in unit), strict=True)] if unit
                 else [0.0] * 3 for dev in devices] for unit in costs.units]
        if any(any(r != unit[0] for r in unit) for unit in rows):
            return None
        tick_s = costs.tick_s
        f = np.array([math.floor(u[0][0] / tick_s) for u in rows], dtype=np.int64)
        fbw = np.array([sum(math.floor(x / tick_s) for x in u[0]) for u in rows], dtype=np.int64)
        return f, fbw
    inst = costs.instance
    dur = inst.duration_tick[:, : costs.num_devices]
    if not bool((dur == dur[:, :1]).all()):
        return None
    order = list(inst.topological_order)
    f = np.array([int(dur[t, 0]) for t in order], dtype=np.int64)
    tr = costs.training
    if tr is None:  # the stage rule B = W = F
        return f, 3 * f
    b = np.array([int(tr.input_grad_tick[t, 0]) + int(tr.weight_grad_tick[t, 0]) for t in order], dtype=np.int64)
    return f, f + b


def crossing_ticks(costs: ModelCosts | PresetCosts) -> np.ndarray:
    """Per boundary position x = 0..n, a lower bound on the hop at a boundary there between two distinct devices
    of the p: on a model the summed delay of the edges (u, v) with position(u) < x <= position(v), each at its
    cheapest link; on a preset the hidden state over the cheapest link (entries 0 and n, where no boundary of a
    cut lies, are 0)."""
    p = costs.num_devices
    pairs = [(a, b) for a in range(p) for b in range(p) if a != b]
    if isinstance(costs, PresetCosts):
        n = len(costs.units)
        out = np.zeros(n + 1, dtype=np.int64)
        if pairs and n >= 2:
            out[1:n] = min(costs.hop_tick(a, b) for a, b in pairs)
        return out
    inst = costs.instance
    n = inst.num_tasks
    out = np.zeros(n + 1, dtype=np.int64)
    if not pairs or n < 2:
        return out
    pos = {t: i for i, t in enumerate(inst.topological_order)}
    delta = np.zeros(n + 2, dtype=np.int64)
    for e, (u, v) in enumerate(inst.edges):
        cheapest = min(inst.comm(e, a, b) for a, b in pairs)
        if cheapest > 0 and pos[u] < pos[v]:
            delta[pos[u] + 1] += cheapest  # crosses every boundary x with pos(u) < x <= pos(v)
            delta[pos[v] + 1] -= cheapest
    out[1:n] = np.cumsum(delta)[1:n]
    return out


def _heads(fp: np.ndarray, crossing: np.ndarray, hops: Sequence[int], changes: Sequence[bool]) -> list[np.ndarray]:
    """Per piece j, its head h_j as a function of its first position x = x_j (module docstring): the forward
    prefix, the hop at x exactly when boundary j joins two devices, and hop_min for each earlier hop."""
    n = len(fp) - 1
    hop_min = int(crossing[1:n].min()) if n >= 2 else 0
    out = []
    for j, count in enumerate(hops):
        if j > 0 and changes[j]:
            out.append(fp + crossing + (count - 1) * hop_min)
        else:
            out.append(fp + count * hop_min)
    return out


def _family_shape(family: str, p: int, m: int) -> tuple[int, int, list[int], list[bool]]:
    """(K pieces, micro-batches per piece c, hops(j) and whether boundary j joins two devices, for j = 0..K-1) of
    a family (module docstring)."""
    if family == "dualpipe":
        return p, max(m // 2, 1), list(range(p)), [j > 0 for j in range(p)]
    if family == "v":
        return 2 * p, m, [j if j < p else j - 1 for j in range(2 * p)], [j > 0 and j != p for j in range(2 * p)]
    raise ValueError(f"unknown placement family {family!r}; use one of {FAMILIES}")


def family_terms(costs: ModelCosts | PresetCosts, family: str, p: int, m: int, cut: Sequence[int]) -> list[int]:
    """T_i of the module docstring for the pairs i < K/2 of the cut of `family` with boundaries `cut` (x_0 = 0,
    ..., x_K = n): a direct evaluation of one cut (tests, and reading one cut); [] where `op_arrays` is None."""
    arrays = op_arrays(costs)
    if arrays is None:
        return []
    k, c, hops, changes = _family_shape(family, p, m)
    fp, gp = (np.concatenate([[0], np.cumsum(a)]) for a in arrays)
    heads = _heads(fp, crossing_ticks(costs), hops, changes)
    out = []
    for i in range(k // 2):
        j = k - 1 - i
        g_i, g_j = int(gp[cut[i + 1]] - gp[cut[i]]), int(gp[cut[j + 1]] - gp[cut[j]])
        out.append(max(int(heads[i][cut[i]]) + c * (g_i + g_j), int(heads[j][cut[j]]) + c * g_j))
    return out


def _good_tables(t: int, gp: np.ndarray, heads: Sequence[np.ndarray], c: int) -> dict[int, np.ndarray]:
    """Per pair level i < K/2 (K = len(heads)), good_i[l, r]: can pairs i..K/2-1 all meet T_i <= t with x_i = l and
    x_{K-i} = r (module docstring, "Computing the minimum")?  `gp`: prefix sums of G over positions; `heads[j]`:
    h_j by its first position."""
    n = len(gp) - 1
    k = len(heads)
    q = k // 2
    idx = np.arange(n + 1)
    inf = np.iinfo(np.int64).max // 4
    lower = idx[:, None] < idx[None, :]  # [a, b]: a < b
    # middle pair q-1: pieces [l, x) and [x, r), l < x < r; term max(h_{q-1}(l) + c G(l, r), h_q(x) + c G(x, r))
    a_x = heads[q] - c * gp  # h_q(x) + c G(x, r) = a_x[x] + c gp[r]
    cand = np.where(lower, a_x[:, None], inf)  # [x, r]
    # best[l, r] = min over x in (l, r) of a_x[x]: a reversed running minimum over x, shifted by one
    run = np.minimum.accumulate(cand[::-1], axis=0)[::-1]
    best = np.full((n + 1, n + 1), inf, dtype=np.int64)
    best[:-1] = run[1:]
    good = (heads[q - 1][:, None] + c * (gp[None, :] - gp[:, None]) <= t) & (best + c * gp[None, :] <= t)
    out = {q - 1: good}
    for i in range(q - 2, -1, -1):
        j = k - 1 - i  # the right piece of pair i: [r', r), head h_j(r')
        cond2 = (heads[j] - c * gp)[:, None] + c * gp[None, :] <= t  # [r', r]
        # q_min[l', r] = gp[l'] - gp[r*], r* the largest r' < r with good[l', r'] and cond2[r', r]: the largest
        # such r' leaves pair i the least work on its right piece
        q_min = np.full((n + 1, n + 1), inf, dtype=np.int64)
        for r in range(1, n + 1):
            ok = good[:, :r] & cond2[:r, r][None, :]
            rows = ok.any(axis=1)
            if rows.any():
                last = r - 1 - np.argmax(ok[:, ::-1], axis=1)
                q_min[rows, r] = gp[rows] - gp[last[rows]]
        # good_i[l, r]: some l' > l with h_i(l) + c (gp[l'] - gp[l] + gp[r] - gp[r*]) <= t
        run = np.minimum.accumulate(q_min[::-1], axis=0)[::-1]
        after = np.full((n + 1, n + 1), inf, dtype=np.int64)
        after[:-1] = run[1:]
        good = (after < inf) & (heads[i][:, None] + c * (after - gp[:, None] + gp[None, :]) <= t) & lower
        out[i] = good
    return out


def _feasible(t: int, gp: np.ndarray, heads: Sequence[np.ndarray], c: int) -> bool:
    """Is there a cut into K = len(heads) pieces whose every T_i is at most t?"""
    return bool(_good_tables(t, gp, heads, c)[0][0, len(gp) - 1])


def _cut_meeting(t: int, gp: np.ndarray, heads: Sequence[np.ndarray], c: int) -> tuple[int, ...]:
    """Boundaries (0, x_1, ..., n) of a cut whose every T_i is at most t (t feasible): the tables walked from the
    outer pair inwards, each pair taking the first (x_{i+1}, x_{K-1-i}) that keeps the rest good."""
    tables = _good_tables(t, gp, heads, c)
    n, k = len(gp) - 1, len(heads)
    q = k // 2
    x = [0] * (k + 1)
    x[k] = n
    lo, hi = 0, n
    for i in range(q - 1):
        j = k - 1 - i
        nxt = tables[i + 1]
        pick = next((a, b) for a in range(lo + 1, hi) for b in range(hi - 1, a, -1) if nxt[a, b]
                    and heads[i][lo] + c * (gp[a] - gp[lo] + gp[hi] - gp[b]) <= t
                    and heads[j][b] + c * (gp[hi] - gp[b]) <= t)
        x[i + 1], x[j] = pick
        lo, hi = pick
    x[q] = min(range(lo + 1, hi), key=lambda at: (int(heads[q][at]) + c * int(gp[hi] - gp[at]), at))
    return tuple(x)


def _search(costs: ModelCosts | PresetCosts, family: str, p: int, m: int, policy: ComparePolicy):
    """(least T not ruled out, a feasible T within `policy.cut_bound_rel_tol` above it, gp, heads, c), or None (see
    `family_cut_bound_tick`; no bound above `policy.cut_bound_max_positions` positions)."""
    arrays = op_arrays(costs)
    if arrays is None or costs.fb_overlap < 1 or p < 1:
        return None
    k, c, hops, changes = _family_shape(family, p, m)
    n = len(arrays[0])
    if n < k or n > policy.cut_bound_max_positions or k < 2:
        return None
    fp, gp = (np.concatenate([[0], np.cumsum(a)]) for a in arrays)
    heads = _heads(fp, crossing_ticks(costs), hops, changes)
    # below work / devices, which every cut's max_i T_i is at least: infeasible.  The work is that of the micro-batches
    # the family runs, c per chain (DualPipe's two chains run 2 (m // 2) of them: one fewer than m when m is odd)
    runs = 2 * c if family == "dualpipe" else c
    lo = -(-int(gp[-1]) * runs // p) - 1
    hi = lo + 1
    while not _feasible(hi, gp, heads, c):  # an upper end: double the distance from lo
        hi = lo + 2 * (hi - lo)
    while hi - lo > max(1, int(policy.cut_bound_rel_tol * hi)):  # lo infeasible, hi feasible
        mid = (lo + hi) // 2
        if _feasible(mid, gp, heads, c):
            hi = mid
        else:
            lo = mid
    return lo + 1, hi, gp, heads, c


def family_cut_bound_tick(costs: ModelCosts | PresetCosts, family: str, p: int, m: int,
                          policy: ComparePolicy = DEFAULT_COMPARE_POLICY) -> int | None:
    """The least makespan max_i T_i can have over every cut of `costs`' positions for `family` (``dualpipe``: p stages,
    m/2 micro-batches per chain; ``v``: 2p chunks), within `policy.cut_bound_rel_tol` below (module docstring); None
    where the argument does not hold (devices that differ, overlapped pairs that gain) or the instance is too large."""
    got = _search(costs, family, p, m, policy)
    return None if got is None else got[0]


def family_best_cut(costs: ModelCosts | PresetCosts, family: str, p: int, m: int,
                    policy: ComparePolicy = DEFAULT_COMPARE_POLICY) -> tuple[int, ...] | None:
    """Boundaries (0, x_1, ..., x_K = n) of a cut whose max_i T_i is within `policy.cut_bound_rel_tol` of the least
    over every cut (`family_cut_bound_tick`), or None where that has none."""
    got = _search(costs, family, p, m, policy)
    if got is None:
        return None
    _, hi, gp, heads, c = got
    return _cut_meeting(hi, gp, heads, c)


def every_cut_bound_tick(costs: ModelCosts | PresetCosts, p: int, m: int,
                         families: Sequence[str] = FAMILIES,
                         policy: ComparePolicy = DEFAULT_COMPARE_POLICY) -> tuple[int | None, dict[str, int | None]]:
    """The least of `family_cut_bound_tick` over `families` (a bound on every schedule of those placements under
    every cut; None when one of them has none), with each family's value (DualPipe's only when p and m are even,
    as `compare` solves it)."""
    got: dict[str, int | None] = {}
    for fam in families:
        if fam == "dualpipe" and (p % 2 or m % 2):
            continue
        got[fam] = family_cut_bound_tick(costs, fam, p, m, policy)
    values = list(got.values())
    if not values or any(v is None for v in values):
        return None, got
    return min(v for v in values if v is not None), got
