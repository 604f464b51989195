"""`Adjacency`: the plain-list view of a `SchedulingInstance`'s DAG that every coarsening loop walks.

Coarsening runs pure-Python loops over 10^5 tasks, so it reads the graph once into lists (faster to index than
numpy scalars or the instance's nested tuples) and passes that view along; the public functions build it from the
instance and the pipeline (`coarsen`) builds it only once.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.cost.instance import SchedulingInstance


@dataclass(frozen=True, eq=False)
class Adjacency:
    """Successor and predecessor lists, a topological order and each task's position in it.

    `succ[v]` / `pred[v]` are lists of (neighbour, edge index); `topo` lists every task once, sources first
    (Kahn's algorithm, first-in first-out, smallest index first among the initial sources); `pos[v]` is v's index
    in `topo`.
    """

    n: int
    edges: list[tuple[int, int]]
    succ: list[list[tuple[int, int]]]
    pred: list[list[tuple[int, int]]]
    topo: list[int]
    pos: list[int]

    @classmethod
    def of(cls, inst: SchedulingInstance) -> Adjacency:
        n = inst.num_tasks
        edges = list(inst.edges)
        succ: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        pred: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        for k, (s, t) in enumerate(edges):
            succ[s].append((t, k))
            pred[t].append((s, k))
        indeg = [len(p) for p in pred]
        topo = [v for v in range(n) if indeg[v] == 0]
        head = 0
        while head < len(topo):
            v = topo[head]
            head += 1
            for w, _ in succ[v]:
                indeg[w] -= 1
                if indeg[w] == 0:
                    topo.append(w)
        if len(topo) != n:
            raise ValueError(f"instance {inst.name!r} is not acyclic")
        pos = [0] * n
        for i, v in enumerate(topo):
            pos[v] = i
        return cls(n=n, edges=edges, succ=succ, pred=pred, topo=topo, pos=pos)
