"""Make a clustering's quotient graph acyclic by splitting clusters, and put the clusters in a topological order.

Key fact: if every cluster is a *contiguous run* of one topological order of the tasks, the quotient is acyclic
(every edge goes forward in the order, so between runs it goes from an earlier run to a later one).  So repair
builds a topological order that keeps clusters together wherever it can, and cuts each cluster into its runs:

* Kahn's algorithm over tasks, emitting a whole run of one cluster at a time;
* a cluster is *free* when no task outside it that feeds its remaining tasks is still unemitted; a free cluster's
  remaining tasks are emitted in one run (its internal edges respect the order);
* only when no cluster is free (the remaining quotient has a cycle) is the ready task earliest in the fine
  topological order taken, and the ready tasks of its cluster are emitted as one run: that run is a split.

If the quotient is already acyclic some cluster is always free, so nothing is split: repair is then the
identity up to the order of clusters and of members.  Each task and edge is handled once, with heap operations:
O((tasks + edges) log tasks).

A chain cut into runs gives consecutive pieces of the chain, so linear clusters stay chains.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence

from planner.coarsen.adjacency import Adjacency
from planner.cost.instance import SchedulingInstance


def cluster_ids(n: int, clusters: Sequence[Sequence[int]]) -> list[int]:
    """Task -> cluster index; ValueError unless the clusters partition range(n) (every task exactly once)."""
    cid = [-1] * n
    for k, members in enumerate(clusters):
        if not members:
            raise ValueError(f"cluster {k} is empty")
        for v in members:
            if not 0 <= v < n:
                raise ValueError(f"cluster {k} names task {v}, outside 0..{n - 1}")
            if cid[v] != -1:
                raise ValueError(f"task {v} is in clusters {cid[v]} and {k}")
            cid[v] = k
    missing = [v for v in range(n) if cid[v] == -1]
    if missing:
        raise ValueError(f"{len(missing)} tasks are in no cluster, e.g. {missing[:5]}")
    return cid


def _repair(adj: Adjacency, clusters: Sequence[Sequence[int]]) -> list[list[int]]:
    n = adj.n
    cid = cluster_ids(n, clusters)
    k_count = len(clusters)
    pos, succ = adj.pos, adj.succ
    indeg = [len(p) for p in adj.pred]
    ext = [0] * k_count  # per cluster: edges from other clusters into it whose source is not emitted yet
    for s, t in adj.edges:
        if cid[s] != cid[t]:
            ext[cid[t]] += 1
    remaining = [len(c) for c in clusters]
    ready_in: list[list[tuple[int, int]]] = [[] for _ in range(k_count)]
    ready_all: list[tuple[int, int]] = []
    for v in range(n):
        if indeg[v] == 0:
            ready_in[cid[v]].append((pos[v], v))
            ready_all.append((pos[v], v))
    for h in ready_in:
        heapq.heapify(h)
    heapq.heapify(ready_all)
    free = deque(k for k in range(k_count) if ext[k] == 0)
    emitted = bytearray(n)
    runs: list[list[int]] = []
    left = n
    while left:
        k = -1
        while free:
            k0 = free.popleft()
            if remaining[k0]:
                k = k0
                break
        if k < 0:  # the remaining quotient has a cycle: split the cluster of the earliest ready task
            while True:
                _, v = heapq.heappop(ready_all)
                if not emitted[v]:
                    break
            k = cid[v]
        run: list[int] = []
        heap = ready_in[k]
        while heap:
            _, v = heapq.heappop(heap)
            emitted[v] = 1
            run.append(v)
            for w, _ in succ[v]:
                kw = cid[w]
                if kw != k:
                    ext[kw] -= 1
                    if ext[kw] == 0:
                        free.append(kw)
                indeg[w] -= 1
                if indeg[w] == 0:
                    heapq.heappush(ready_in[kw], (pos[w], w))
                    heapq.heappush(ready_all, (pos[w], w))
        remaining[k] -= len(run)
        left -= len(run)
        runs.append(run)
    return runs


def repair_cycles(inst: SchedulingInstance, clusters: Sequence[Sequence[int]]) -> list[list[int]]:
    """Split clusters so that the quotient graph is a DAG (see module); ValueError unless a partition.

    Returns the clusters in a topological order of the quotient, each listing its tasks in a topological order.
    An already acyclic clustering comes back unsplit.
    """
    return _repair(Adjacency.of(inst), clusters)


def quotient_is_acyclic(inst: SchedulingInstance, clusters: Sequence[Sequence[int]]) -> bool:
    """True iff the graph of clusters (an edge where some task edge crosses between two clusters) is a DAG."""
    cid = cluster_ids(inst.num_tasks, clusters)
    k_count = len(clusters)
    succ: list[set[int]] = [set() for _ in range(k_count)]
    for s, t in inst.edges:
        if cid[s] != cid[t]:
            succ[cid[s]].add(cid[t])
    indeg = [0] * k_count
    for out in succ:
        for b in out:
            indeg[b] += 1
    stack = [k for k in range(k_count) if indeg[k] == 0]
    seen = 0
    while stack:
        a = stack.pop()
        seen += 1
        for b in succ[a]:
            indeg[b] -= 1
            if indeg[b] == 0:
                stack.append(b)
    return seen == k_count
