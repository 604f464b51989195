"""Merge clusters down to a target granularity without making the cluster graph cyclic.

Targets (either or both; merging stops when all given ones hold or no allowed merge is left):

* `target_clusters`: at most this many clusters;
* `min_cluster_cost_fraction` f: every cluster costs at least f x (total work / num_devices), where work is
  `task_cost_estimate` summed.

Only clusters joined by an edge of the cluster graph are merged (merging A -> B zeroes that edge).  The merge is
refused when it would make the cluster graph cyclic, i.e. when some other path A -> X -> ... -> B exists.

**Choice of merges (rounds).**  Levels change after every merge, and recomputing them each time is quadratic, so
merging runs in rounds.  A round computes the cluster graph's t-levels, b-levels and critical path CP once, then
scores every edge A -> B by the length of the longest path through the merged cluster AB:

    L(A, B) = max(t(A), t'(B)) + c(A) + c(B) + max(b(B) - c(B), tail'(A))

where t'(B) is B's t-level over predecessors other than A and tail'(A) is A's longest tail over successors other
than B (kept as top-2 values per cluster, so O(1) per edge).  Every other path is unchanged by the merge, so with
fresh levels the merge grows the critical path by exactly growth = max(0, L - CP) when A and B share no
neighbour; edges from A and from B to a common neighbour add up when merged, which L ignores (an
underestimate).  Candidates are taken in order
of (growth, c(A) + c(B) - w(A, B)): first merges that do not lengthen the critical path, among them the lightest
merged cluster (load balance) and the heaviest zeroed edge (communication saved).  Each cluster proposes only its
best incident edge (as in heavy-edge matching), so a round sorts at most C candidates; only a round that merged
nothing is retried with every edge as a candidate.  A round does at most half
the live clusters' worth of merges: first a pass in which a cluster merged this round locks itself and its
neighbours (their scores are stale), then, if that pass merged fewer than a quarter of the round's budget, an
unlocked pass over the remaining candidates.  Because a round removes a roughly constant fraction of the
clusters, the rounds cost O((C + E) log E) in all for C clusters and E cluster edges.

**Eligibility.**  Two clusters merge only if some device may run every member of both.

**Balance.**  A merged cluster may cost at most cap = max(total work / num_devices, costliest input cluster);
when a count target cannot be met under the cap, the cap doubles.  `max_cluster_param_bytes` is never relaxed
(a cluster must fit in a device's memory).

**Acyclicity, incrementally.**  The clusters carry positions of a topological order.  A path A -> ... -> B other
than the edge can only pass through clusters positioned strictly between A and B, so the check is a depth-first
search from A's other successors restricted to that window.  After a merge the order is repaired as in Pearce and
Kelly's dynamic topological sort: the window clusters that reach B move before the merged cluster, those reachable
from A after it, all within the positions they already used.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.coarsen.adjacency import Adjacency
from planner.coarsen.levels import edge_comm_estimate, eligibility_masks, task_cost_estimate
from planner.coarsen.policy import DEFAULT_COARSEN_POLICY, CoarsenPolicy
from planner.coarsen.repair import _repair, cluster_ids
from planner.cost.instance import SchedulingInstance

_EPS = 1e-9  # not a knob: float noise in summed costs, so that equal sums compare equal


class ClusterGraph:
    """Mutable cluster graph of one merge round (`merge_on_adjacency`, `planner.coarsen.bounded.bounded_merge`):
    adjacency dicts (neighbour -> summed comm), costs, order."""

    def __init__(self, adj: Adjacency, clusters: Sequence[Sequence[int]], cost: list[float], comm: list[float],
                 param: list[int], masks: list[int] | None = None) -> None:
        k_count = len(clusters)
        self.cid = cluster_ids(adj.n, clusters)
        cid = self.cid
        self.cost = [sum(cost[v] for v in c) for c in clusters]
        self.param = [sum(param[v] for v in c) for c in clusters]
        self.mask = [-1] * k_count  # devices every member may run on (-1: all)
        if masks is not None:
            for k, c in enumerate(clusters):
                m = -1
                for v in c:
                    m &= masks[v]
                self.mask[k] = m
        self.succ: list[dict[int, float]] = [{} for _ in range(k_count)]
        self.pred: list[dict[int, float]] = [{} for _ in range(k_count)]
        for e, (s, t) in enumerate(adj.edges):
            a, b = cid[s], cid[t]
            if a != b:
                if a > b:
                    raise ValueError("clusters are not in a topological order of an acyclic cluster graph "
                                     "(pass them through repair_cycles first)")
                out = self.succ[a]
                out[b] = out.get(b, 0.0) + comm[e]
                inn = self.pred[b]
                inn[a] = inn.get(a, 0.0) + comm[e]
        self.pos = list(range(k_count))
        self.alive = [True] * k_count
        self.n_alive = k_count
        self.parent = list(range(k_count))
        self.moved: list[tuple[int, int]] | None = None  # when a list: (cluster, old position) of reordered ones

    def find(self, k: int) -> int:
        parent = self.parent
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    def live_order(self) -> list[int]:
        return sorted((k for k in range(len(self.alive)) if self.alive[k]), key=self.pos.__getitem__)

    # ----- acyclicity -----
    def _window_search(self, start: int, nbrs: list[dict[int, float]], skip: int, target: int, lo: int,
                       hi: int) -> list[int] | None:
        """Clusters with position in (lo, hi) reachable from `start` via `nbrs` (not through `skip`); None if
        `target` is reached that way."""
        pos = self.pos
        seen = {start}
        found: list[int] = []
        stack = [x for x in nbrs[start] if x != skip and lo < pos[x] < hi]
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            found.append(x)
            for y in nbrs[x]:
                if y == target:
                    return None
                if y not in seen and lo < pos[y] < hi:
                    stack.append(y)
        return found

    def try_merge(self, a: int, b: int) -> bool:
        """Merge the clusters of edge a -> b unless that closes a cycle; True if merged."""
        pa, pb = self.pos[a], self.pos[b]
        fwd = self._window_search(a, self.succ, b, b, pa, pb)
        if fwd is None:
            return False
        if not fwd:
            new_pos = pb
        else:
            bwd = self._window_search(b, self.pred, a, a, pa, pb)
            assert bwd is not None  # a cycle would have been found going forward
            if not bwd:
                new_pos = pa
            else:  # Pearce-Kelly: reorder the affected clusters within their own positions
                pos = self.pos
                pool = sorted([pos[x] for x in fwd] + [pos[x] for x in bwd] + [pa, pb])
                bwd.sort(key=pos.__getitem__)
                fwd.sort(key=pos.__getitem__)
                if self.moved is not None:
                    self.moved.extend((x, pos[x]) for x in bwd + fwd)
                for x, p in zip(bwd, pool):
                    pos[x] = p
                new_pos = pool[len(bwd)]
                for x, p in zip(fwd, pool[len(pool) - len(fwd):]):
                    pos[x] = p
        self._join(a, b, new_pos)
        return True

    def _join(self, a: int, b: int, new_pos: int) -> None:
        succ, pred = self.succ, self.pred
        if len(succ[a]) + len(pred[a]) >= len(succ[b]) + len(pred[b]):
            keep, gone = a, b
        else:
            keep, gone = b, a
        for x, w in succ[gone].items():
            if x == keep:
                continue
            del pred[x][gone]
            succ[keep][x] = succ[keep].get(x, 0.0) + w
            pred[x][keep] = pred[x].get(keep, 0.0) + w
        for x, w in pred[gone].items():
            if x == keep:
                continue
            del succ[x][gone]
            pred[keep][x] = pred[keep].get(x, 0.0) + w
            succ[x][keep] = succ[x].get(keep, 0.0) + w
        succ[keep].pop(gone, None)
        pred[keep].pop(gone, None)
        succ[gone] = {}
        pred[gone] = {}
        self.alive[gone] = False
        self.n_alive -= 1
        self.parent[gone] = keep
        self.cost[keep] += self.cost[gone]
        self.param[keep] += self.param[gone]
        self.mask[keep] &= self.mask[gone]
        self.pos[keep] = new_pos

    # ----- levels -----
    def score(self, every_edge: bool = False) -> tuple[float, list[tuple[float, float, int, int]]]:
        """(critical path, [(growth, balance key, a, b)]: each cluster's best incident edge a -> b), this round's
        levels."""
        order = self.live_order()
        k_count = len(self.alive)
        cost, succ = self.cost, self.succ
        t = [0.0] * k_count
        in1 = [0.0] * k_count
        in1_arg = [-1] * k_count
        in2 = [0.0] * k_count
        for k in order:
            end = t[k] + cost[k]
            for x, w in succ[k].items():
                val = end + w
                if val > t[x]:
                    t[x] = val
                if val > in1[x]:
                    in2[x] = in1[x]
                    in1[x], in1_arg[x] = val, k
                elif val > in2[x]:
                    in2[x] = val
        b = [0.0] * k_count
        out1 = [0.0] * k_count
        out1_arg = [-1] * k_count
        out2 = [0.0] * k_count
        for k in reversed(order):
            o1, o1a, o2 = 0.0, -1, 0.0
            for x, w in succ[k].items():
                val = w + b[x]
                if val > o1:
                    o2 = o1
                    o1, o1a = val, x
                elif val > o2:
                    o2 = val
            out1[k], out1_arg[k], out2[k] = o1, o1a, o2
            b[k] = cost[k] + o1
        cp = max((b[k] for k in order if not self.pred[k]), default=0.0)
        # each cluster proposes its best incident edge (like heavy-edge matching): at most 2 per cluster
        inf = float("inf")
        best_g = [inf] * k_count
        best_k = [inf] * k_count
        best_x = [-1] * k_count
        best_a = [-1] * k_count
        tol = _EPS * max(1.0, cp)
        cands = []
        for a in order:
            ta, ca = t[a], cost[a]
            o1, o1a, o2 = out1[a], out1_arg[a], out2[a]
            for x, w in succ[a].items():
                t_in = in2[x] if in1_arg[x] == a else in1[x]
                tail_a = o2 if o1a == x else o1
                cx = cost[x]
                start = ta if ta > t_in else t_in
                bx = b[x] - cx
                growth = start + ca + cx + (bx if bx > tail_a else tail_a) - cp
                if growth <= tol:
                    growth = 0.0
                key = ca + cx - w
                if growth < best_g[a] or (growth == best_g[a] and key < best_k[a]):
                    best_g[a], best_k[a], best_a[a], best_x[a] = growth, key, a, x
                if growth < best_g[x] or (growth == best_g[x] and key < best_k[x]):
                    best_g[x], best_k[x], best_a[x], best_x[x] = growth, key, a, x
                if every_edge:
                    cands.append((growth, key, a, x))
        if every_edge:
            return cp, cands
        seen = set()
        for k in order:
            if best_a[k] >= 0 and (best_a[k], best_x[k]) not in seen:
                seen.add((best_a[k], best_x[k]))
                cands.append((best_g[k], best_k[k], best_a[k], best_x[k]))
        return cp, cands


def merge_on_adjacency(adj: Adjacency, clusters: Sequence[Sequence[int]], cost: list[float], comm: list[float],
                       param: list[int], masks: list[int] | None, *, num_devices: int, target_clusters: int | None,
                       min_cluster_cost_fraction: float | None, max_cluster_param_bytes: float | None,
                       policy: CoarsenPolicy = DEFAULT_COARSEN_POLICY) -> list[list[int]]:
    """Merge clusters given in a topological order of an acyclic cluster graph (see module); `policy`: the share
    of the live clusters a round merges."""
    if num_devices < 1:
        raise ValueError(f"num_devices must be >= 1, got {num_devices}")
    if target_clusters is not None and target_clusters < 1:
        raise ValueError(f"target_clusters must be >= 1, got {target_clusters}")
    g = ClusterGraph(adj, clusters, cost, comm, param, masks)
    total = sum(g.cost)
    min_cost = None if min_cluster_cost_fraction is None else min_cluster_cost_fraction * total / num_devices
    max_bytes = float("inf") if max_cluster_param_bytes is None else max_cluster_param_bytes
    cap = max([total / num_devices] + g.cost)

    def is_small(k: int) -> bool:
        return min_cost is not None and g.cost[k] < min_cost - _EPS

    n_small = sum(1 for k in range(len(g.cost)) if is_small(k))

    def count_met() -> bool:
        return target_clusters is None or g.n_alive <= target_clusters

    if target_clusters is None and min_cost is None:
        return final_clusters(adj, g)
    every_edge = False
    while not (count_met() and n_small == 0):
        _, cands = g.score(every_edge)
        cands.sort()
        budget = max(1, int(g.n_alive * policy.merge_round_fraction))
        done = 0
        capped_min = float("inf")
        touched = bytearray(len(g.alive))
        for locked in (True, False):
            if not locked and done >= max(1, budget // 2):
                break
            for _growth, _, a0, b0 in cands:
                if done >= budget or (count_met() and n_small == 0):
                    break
                a, b = g.find(a0), g.find(b0)
                if a == b or b not in g.succ[a] or (locked and (touched[a] or touched[b])):
                    continue
                if count_met() and not (is_small(a) or is_small(b)):
                    continue
                if g.param[a] + g.param[b] > max_bytes or not g.mask[a] & g.mask[b]:
                    continue
                merged = g.cost[a] + g.cost[b]
                if merged > cap + _EPS * max(1.0, cap):
                    capped_min = min(capped_min, merged)
                    continue
                small_before = is_small(a) + is_small(b)
                if g.try_merge(a, b):
                    keep = g.find(a)
                    n_small += is_small(keep) - small_before
                    done += 1
                    touched[keep] = 1
                    for x in g.succ[keep]:
                        touched[x] = 1
                    for x in g.pred[keep]:
                        touched[x] = 1
        if done == 0 and not every_edge:
            every_edge = True  # the clusters' best edges were all refused: try every edge once
            continue
        every_edge = False
        if done == 0:
            if capped_min < float("inf"):
                cap = max(2 * cap, capped_min)
                continue
            break
    return final_clusters(adj, g)


def final_clusters(adj: Adjacency, g: ClusterGraph) -> list[list[int]]:
    """Final clusters in the maintained topological order, members in the fine topological order."""
    members: dict[int, list[int]] = {}
    for v in adj.topo:
        members.setdefault(g.find(g.cid[v]), []).append(v)
    return [members[k] for k in sorted(members, key=g.pos.__getitem__)]


def merge_clusters(inst: SchedulingInstance, clusters: Sequence[Sequence[int]], *,
                   target_clusters: int | None = None, min_cluster_cost_fraction: float | None = None,
                   num_devices: int, max_cluster_param_bytes: float | None = None,
                   policy: CoarsenPolicy = DEFAULT_COARSEN_POLICY) -> list[list[int]]:
    """Merge adjacent clusters down to the given granularity, never making the cluster graph cyclic.

    The input must partition the tasks; a cyclic cluster graph is first split by `repair_cycles`.  Returns the
    clusters in a topological order of the (acyclic) cluster graph, each listing its tasks in a topological order.
    With neither target given the clusters come back unmerged.  See the module for the choice of merges.
    """
    adj = Adjacency.of(inst)
    ordered = _repair(adj, clusters)
    return merge_on_adjacency(adj, ordered, task_cost_estimate(inst).tolist(), edge_comm_estimate(inst).tolist(),
                  inst.param_bytes.tolist(), eligibility_masks(inst), num_devices=num_devices,
                  target_clusters=target_clusters,
                  min_cluster_cost_fraction=min_cluster_cost_fraction,
                  max_cluster_param_bytes=max_cluster_param_bytes, policy=policy)
