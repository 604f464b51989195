"""Merge clusters while the coarse critical path stays within a tolerance of the op graph's.

A cluster is one atomic task of the coarse instance: it starts when all its inputs have arrived and its outputs
leave when it ends.  Merging two clusters that were independent therefore ties their branches together, and
merging to a fixed count made the coarse critical path 3x-12x the op graph's.  This merge refuses every merge that
would make the coarse critical path longer than `limit_tick` (the caller sets it, `coarsen` uses
(1 + tolerance) x the op graph's critical path), and stops at the size the solver can handle (`target_clusters`)
or when no allowed merge is left.

**Where it starts.**  Linear clusters are chains on the critical path, but as atomic tasks a chain waits for the
inputs of all its members and holds back the outputs of all of them: on random layered DAGs the repaired linear
clusters alone had 3x the op graph's critical path.  `path_pieces` cuts them into plain paths (each member the only
successor of the one before and that one its only predecessor), which as atomic tasks are never later than their
members, so the merge starts at or below the op graph's critical path and the chains come back only where they fit.

**Levels as upper bounds, kept incrementally.**  Every live cluster k carries t[k] (earliest start) and b[k]
(its cost plus the longest tail) that are *consistent*: t[x] >= t[k] + c[k] + w(k, x) and b[k] >= c[k] + w(k, x)
+ b[x] on every cluster edge k -> x.  Consistent values bound the true levels from above, so the critical path is
at most max_k t[k] + b[k], and that maximum stays <= the limit:

* a merge of A and B into AB is allowed only if L = t_in + c(A) + c(B) + tail <= limit, where t_in is the latest
  arrival over AB's predecessors and tail the longest tail over AB's successors, both from the current bounds and
  with AB's edge weights (the edges of A and B to a common neighbour add up) — O(deg A + deg B);
* then t[AB] = t_in and b[AB] = c(AB) + tail, and the increases are pushed forward (t, in topological order) and
  backward (b, in reverse) only while some value grows.  A raised t[x] comes from a path through AB, so
  t[x] + b[x] <= t[AB] + b[AB] = L by the consistency of b (and the same for a raised b); hence the maximum stays
  <= limit after every merge.  Values that would fall are left high (still bounds), and each round starts from
  exact levels again.
* On a deep model a raise would travel to the end of the graph after every merge (quadratic).  So a push stops after
  `CoarsenPolicy.push_limit` clusters: the raises of the clusters still waiting (the frontier) are undone, and their
  largest, d, is added to the bound of *every* cluster positioned from the frontier's first on (a shift kept per
  position, `_Shift`).  Every edge into the frontier comes from a cluster before it and is covered by d; an edge
  between two shifted positions keeps its slack; shifts grow along the order, so no edge loses any.  The bounds stay
  consistent, only cruder, until the next round's exact levels.  A cluster that the acyclicity repair moves to another
  position keeps its bound (its stored part absorbs the difference of shifts).

The comm of a cluster edge is the sum over the fine edges it joins, never below the contracted instance's (which
moves a tensor once), so the contracted instance's critical path is at most the bound kept here.

**Candidates** (one round: exact levels, then every candidate whose merged path may fit, each checked when taken):

* heavy edges: every cluster edge A -> B (merging zeroes its comm);
* siblings that share an input: the successors of each cluster, sorted by t-level, paired neighbour by neighbour.

They are taken in the order of (growth, kind, merged cost - saved comm): first the merges that do not lengthen the
critical path at the round's levels (a lower bound of their merged path, O(1) each from the top two arrivals and
tails per cluster; a candidate whose lower bound is over the limit is left out), edges before siblings, then the
lightest merged cluster net of the comm it saves (heavy edges first among equals; the lightest cluster keeps the
load balanced — on the bundled MoE ordering by the heaviest edge alone gave a round 6-11 % longer).  The saved comm
of siblings is their lighter edge from the shared input.  After a merge the merged cluster's heaviest in- and
out-edge are offered again, at the front.

A merge must also keep the cluster graph acyclic (the incremental check of `planner.coarsen.merge.ClusterGraph`,
which also handles two clusters joined by no edge), keep the merged cost <= max(total work / devices, costliest
input cluster) (load balance), and respect the parameter-byte limit.  Only clusters that may run on exactly the
same devices merge: then the contracted cluster's cost estimate (its mean duration over those devices) is the sum
of its members' estimates, the cost this merge reasons with, so the bound above holds for the contracted instance.
A round merges at most half the live clusters; rounds repeat while one merges at least 2 % of them (later rounds
merged 1-2 % each on layered DAGs, at the cost of a whole round).  Each round is O((C + E) log E) for C clusters
and E cluster edges, plus O(degree) per checked candidate and at most `push_limit` clusters (and one vectorised
shift) per merge.

**The solver-size target.**  The placement model has one assignment variable per cluster and device (and one optional
interval for each), so its size is clusters x devices; `solver_size_target` is the number of clusters that makes
`CoarsenPolicy.placement_cells` of them, a size CP-SAT solves or improves well within the search's round budget on
this project's benchmarks (96 clusters x 8 devices, the cluster count the search used for CP-SAT).  A caller that knows
its solver passes its own count.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from planner.coarsen.adjacency import Adjacency
from planner.coarsen.contract import contract
from planner.coarsen.levels import critical_path_length, edge_comm_estimate, task_cost_estimate
from planner.coarsen.merge import ClusterGraph, final_clusters
from planner.coarsen.policy import DEFAULT_COARSEN_POLICY, CoarsenPolicy
from planner.cost.instance import SchedulingInstance

_EPS = 1e-9  # not a knob: float noise in summed costs, so that a length equal to the limit stays within it


def solver_size_target(num_devices: int, cells: int = DEFAULT_COARSEN_POLICY.placement_cells) -> int:
    """Clusters that make `cells` cluster x device pairs (at least 2)."""
    return max(2, cells // max(1, num_devices))


class _Shift:
    """Additions to every position from one on (`upto=False`) or up to one (`upto=True`): `add(p, d)` is one
    vectorised pass over the positions (a few microseconds per thousand clusters), `at(p)` one array read.  Adds
    happen at most once per merge, reads many times, which is what this trades for."""

    def __init__(self, size: int, upto: bool = False) -> None:
        self.size = size
        self.upto = upto
        self.total = np.zeros(size)
        self.any = False

    def clear(self) -> None:
        if self.any:
            self.total[:] = 0.0
            self.any = False

    def add(self, p: int, d: float) -> None:
        if self.upto:
            self.total[:p + 1] += d
        else:
            self.total[p:] += d
        self.any = True

    def at(self, p: int) -> float:
        return float(self.total[p]) if self.any else 0.0


class _Bounded:
    """The cluster graph with consistent upper bounds on its t- and b-levels (module docstring).

    The bound on cluster k's t-level is `t[k] + shift_t.at(pos[k])`, on its b-level `b[k] + shift_b.at(pos[k])`:
    a raise that would travel further than `push_limit` clusters is applied as a shift of every later (earlier)
    position instead (module docstring)."""

    def __init__(self, g: ClusterGraph, push_limit: int) -> None:
        self.g, self.push_limit = g, push_limit
        n = len(g.alive)
        self.t = [0.0] * n
        self.b = [0.0] * n
        self.shift_t = _Shift(n)
        self.shift_b = _Shift(n, upto=True)
        g.moved = []
        self.exact()

    def exact(self) -> float:
        """Recompute exact levels over the live clusters (no shifts); return the critical path."""
        g, t, b = self.g, self.t, self.b
        self.shift_t.clear()
        self.shift_b.clear()
        order = g.live_order()
        cost, succ = g.cost, g.succ
        for k in order:
            t[k] = 0.0
        for k in order:
            end = t[k] + cost[k]
            for x, w in succ[k].items():
                if end + w > t[x]:
                    t[x] = end + w
        best = 0.0
        for k in reversed(order):
            tail = 0.0
            for x, w in succ[k].items():
                if w + b[x] > tail:
                    tail = w + b[x]
            b[k] = cost[k] + tail
            best = max(best, t[k] + b[k])
        return best

    def merged_length(self, a: int, c: int) -> tuple[float, float, float]:
        """(L, t_in, tail) of the cluster a + c would be (module docstring); a before c in the order.  Every
        predecessor sits before c and every successor after a, and shifts only grow away from the start (end), so
        c's t-shift and a's b-shift bound theirs: two look-ups per check."""
        g, t, b = self.g, self.t, self.b
        cost, pa, pc, sa, sc = g.cost, g.pred[a], g.pred[c], g.succ[a], g.succ[c]
        t_in = 0.0
        for p, w in pa.items():
            if p != c:
                val = t[p] + cost[p] + w + pc.get(p, 0.0)
                if val > t_in:
                    t_in = val
        for p, w in pc.items():
            if p != a and p not in pa:
                val = t[p] + cost[p] + w
                if val > t_in:
                    t_in = val
        tail = 0.0
        for x, w in sa.items():
            if x != c:
                val = w + sc.get(x, 0.0) + b[x]
                if val > tail:
                    tail = val
        for x, w in sc.items():
            if x != a and x not in sa:
                val = w + b[x]
                if val > tail:
                    tail = val
        if pa or pc:
            t_in += self.shift_t.at(g.pos[c])
        if sa or sc:
            tail += self.shift_b.at(g.pos[a])
        return t_in + cost[a] + cost[c] + tail, t_in, tail

    def moved(self) -> None:
        """Keep the bounds of clusters the last merge reordered (their shift depends on the position)."""
        g = self.g
        assert g.moved is not None
        for x, old in g.moved:
            new = g.pos[x]
            self.t[x] += self.shift_t.at(old) - self.shift_t.at(new)
            self.b[x] += self.shift_b.at(old) - self.shift_b.at(new)
        g.moved.clear()

    def settle(self, k: int, t_in: float, tail: float) -> None:
        """Bounds of the merged cluster k, and the raises they cause pushed along the graph (module docstring)."""
        g = self.g
        cost, pos = g.cost, g.pos
        self.t[k] = t_in - self.shift_t.at(pos[k])
        self.b[k] = cost[k] + tail - self.shift_b.at(pos[k])
        _push(k, self.t, self.shift_t, g.succ, pos, cost, forward=True, limit=self.push_limit)
        _push(k, self.b, self.shift_b, g.pred, pos, cost, forward=False, limit=self.push_limit)


def _zero(_p: int) -> float:
    return 0.0


def _push(k: int, level: list[float], shift: _Shift, nbrs: list[dict[int, float]], pos: list[int],
          cost: list[float], *, forward: bool, limit: int) -> None:
    """Raise the bounds after k along `nbrs` (successors for t, predecessors for b), nearest position first.
    After `limit` clusters the raises left (the frontier) are undone and their largest is added as a shift of
    every position from the frontier's nearest on: every edge into the frontier is then covered, and the edges
    between two shifted positions stay as they were."""
    sign = 1 if forward else -1
    heap = [(sign * pos[k], k)]
    old: dict[int, float] = {}  # raised cluster -> its bound before
    done: set[int] = set()
    at = shift.at if shift.any else _zero
    while heap:
        if len(done) >= limit:
            frontier = {y for _, y in heap if y not in done}
            if frontier:
                delta = 0.0
                for y in frontier:
                    here = shift.at(pos[y])
                    delta = max(delta, level[y] + here - old[y])
                    level[y] = old[y] - here
                edge = (min if forward else max)(pos[y] for y in frontier)
                shift.add(edge, delta)
            return
        _, y = heapq.heappop(heap)
        if y in done:
            continue
        done.add(y)
        py = pos[y]
        # cost on the edge side: t adds the source's cost (y), b the source's cost (x)
        out = level[y] + at(py) + (cost[y] if forward else 0.0)
        for x, w in nbrs[y].items():
            val = out + w + (0.0 if forward else cost[x])
            here = at(pos[x])
            if val > level[x] + here + _EPS:
                if x not in old:
                    old[x] = level[x] + here
                level[x] = val - here
                heapq.heappush(heap, (sign * pos[x], x))


def path_pieces(adj: Adjacency, clusters: Sequence[Sequence[int]], masks: list[int] | None) -> list[list[int]]:
    """Cut each cluster (members in a topological order, e.g. a linear chain) into pieces that are plain paths: two
    consecutive members u, v stay together only when v is u's only successor, u is v's only predecessor, and both
    may run on the same devices.  Such a piece takes its inputs at its first member and gives its output from its
    last, so as one atomic task it is never later than its members were on the op graph (its internal comm is
    zero, its cost estimate the sum of theirs): the pieces' critical path is at most the op graph's.  Pieces are
    consecutive runs of a cluster's member order, so an acyclic cluster graph stays acyclic."""
    out: list[list[int]] = []
    for members in clusters:
        piece = [members[0]]
        for u, v in zip(members, members[1:]):
            joined = ({x for x, _ in adj.succ[u]} == {v} and {p for p, _ in adj.pred[v]} == {u}
                      and (masks is None or masks[u] == masks[v]))
            if not joined:
                out.append(piece)
                piece = []
            piece.append(v)
        out.append(piece)
    return out


def _key(length: float, cp: float, kind: int, saved: float, merged: float) -> tuple[int, int, float, float]:
    """Sort key of a candidate (module docstring): no growth first, edges before siblings, then the lightest merged
    cluster net of the comm the merge saves."""
    return (0 if length <= cp * (1 + _EPS) else 1, kind, merged - saved, merged)


def _candidates(g: ClusterGraph, t: list[float], b: list[float], slack: float,
                cp: float) -> list[tuple[int, int, float, float, int, int]]:
    """(kind, -shared comm, merged cost, a, c) for heavy edges (kind 0) and siblings sharing an input (kind 1),
    levels exact.  A candidate is left out when even a lower bound on its merged path (from the levels, ignoring
    that edges to a common neighbour add up) is over `slack`: O(1) each, with the top two arrivals and tails per
    cluster, so the exact O(degree) check runs only on candidates that may pass."""
    cost, succ, pred = g.cost, g.succ, g.pred
    order = g.live_order()
    k_count = len(g.alive)
    in1, in1_arg, in2 = [0.0] * k_count, [-1] * k_count, [0.0] * k_count
    out1, out1_arg, out2 = [0.0] * k_count, [-1] * k_count, [0.0] * k_count
    for k in order:
        for p, w in pred[k].items():
            val = t[p] + cost[p] + w
            if val > in1[k]:
                in2[k] = in1[k]
                in1[k], in1_arg[k] = val, p
            elif val > in2[k]:
                in2[k] = val
        for x, w in succ[k].items():
            val = w + b[x]
            if val > out1[k]:
                out2[k] = out1[k]
                out1[k], out1_arg[k] = val, x
            elif val > out2[k]:
                out2[k] = val
    out: list[tuple[int, int, float, float, int, int]] = []
    for a in order:
        sa = succ[a]
        ta, ca = in1[a], cost[a]
        tail_a1, tail_a2, tail_a_arg = out1[a], out2[a], out1_arg[a]
        for x, w in sa.items():
            t_in = in2[x] if in1_arg[x] == a else in1[x]
            tail = tail_a2 if tail_a_arg == x else tail_a1
            length = max(ta, t_in) + ca + cost[x] + max(tail, out1[x])
            if length <= slack:
                out.append((*_key(length, cp, 0, w, ca + cost[x]), a, x))
        if len(sa) > 1:
            kids = sorted(sa, key=lambda x: (t[x], g.pos[x]))
            for x, y in zip(kids, kids[1:]):
                length = max(in1[x], in1[y]) + cost[x] + cost[y] + max(out1[x], out1[y])
                if length <= slack:
                    out.append((*_key(length, cp, 1, min(sa[x], sa[y]), cost[x] + cost[y]), x, y))
    heapq.heapify(out)
    return out


def bounded_merge(adj: Adjacency, clusters: Sequence[Sequence[int]], cost: list[float], comm: list[float],
                  param: list[int], masks: list[int] | None, *, num_devices: int, target_clusters: int,
                  limit_tick: float, max_cluster_param_bytes: float | None,
                  policy: CoarsenPolicy = DEFAULT_COARSEN_POLICY) -> list[list[int]]:
    """Merge clusters given in a topological order of an acyclic cluster graph (see module).  The limit is raised
    to the starting clusters' own critical path if that is longer (merging never makes it worse); `policy`: the
    rounds' shares and count, and how far a raise is pushed."""
    if num_devices < 1:
        raise ValueError(f"num_devices must be >= 1, got {num_devices}")
    if target_clusters < 1:
        raise ValueError(f"target_clusters must be >= 1, got {target_clusters}")
    g = ClusterGraph(adj, clusters, cost, comm, param, masks)
    lv = _Bounded(g, policy.push_limit)
    limit = max(limit_tick, lv.exact())
    slack = limit + _EPS * max(1.0, limit)
    cap = max([sum(g.cost) / num_devices] + g.cost)
    cap += _EPS * max(1.0, cap)
    max_bytes = float("inf") if max_cluster_param_bytes is None else max_cluster_param_bytes
    for _ in range(policy.max_rounds):
        if g.n_alive <= target_clusters:
            break
        cp = lv.exact()
        heap = _candidates(g, lv.t, lv.b, slack, cp)
        alive = g.n_alive
        budget = max(1, int(alive * policy.bounded_round_fraction))
        done = 0
        while heap and done < budget and g.n_alive > target_clusters:
            _, _, _, _, a0, c0 = heapq.heappop(heap)
            a, c = g.find(a0), g.find(c0)
            if a == c:
                continue
            if g.pos[a] > g.pos[c]:
                a, c = c, a
            if (g.cost[a] + g.cost[c] > cap or g.param[a] + g.param[c] > max_bytes
                    or g.mask[a] != g.mask[c] or not g.mask[a]):
                continue
            length, t_in, tail = lv.merged_length(a, c)
            if length > slack or not g.try_merge(a, c):
                continue
            lv.moved()
            done += 1
            k = g.find(a)
            lv.settle(k, t_in, tail)
            # offer the merged cluster's heaviest in- and out-edge again (their weights grew)
            for nbrs, forward in ((g.succ[k], True), (g.pred[k], False)):
                if nbrs:
                    x = max(nbrs, key=nbrs.__getitem__)
                    pair = (k, x) if forward else (x, k)
                    heapq.heappush(heap, (*_key(0.0, cp, 0, nbrs[x], g.cost[k] + g.cost[x]), *pair))
        if done < policy.min_round_fraction * alive:
            break
    return final_clusters(adj, g)


def critical_paths(fine: SchedulingInstance, clusters: Sequence[Sequence[int]]) -> tuple[float, float]:
    """(op critical path, coarse critical path) in ticks: the op graph's, and that of the contracted instance of
    `clusters` (each cluster one atomic task, comm only on edges between clusters), both with the estimates of
    `planner.coarsen.levels` (`task_cost_estimate`, `edge_comm_estimate`).  The search prints the two side by
    side.  O(tasks + edges) plus the contraction."""
    coarse = contract(fine, clusters)
    op_cp = critical_path_length(fine, task_cost_estimate(fine), edge_comm_estimate(fine))
    return op_cp, critical_path_length(coarse, task_cost_estimate(coarse), edge_comm_estimate(coarse))
