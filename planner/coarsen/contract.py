"""Contraction: a new `SchedulingInstance` whose tasks are the clusters of a clustering.

Cluster k (members run one after another on one device, in a topological order of the fine graph) becomes task k:

* **duration** on device d = sum of its members' durations on d; INELIGIBLE if any member is ineligible on d;
* **param_bytes** = sum over members (each member's weights are its own, as in the fine instance);
* **activation_bytes** = sum of the `activation_bytes` of members whose output leaves the cluster: a member with a
  consumer in another cluster, or with no consumer at all (a step output).  Like any task's output it is live from
  the cluster's start until its last consumer has ended;
* **peak_internal_bytes** = the peak, over the members' turns in the member order, of the running member's own
  `peak_internal_bytes` plus the `activation_bytes` of every member whose output stays inside the cluster and is
  live at that turn (from its producer's turn through its last consumer's turn, both included);
* **edges**: one per ordered pair of clusters (a, b) joined by at least one fine edge; it carries the *union* of
  those fine edges' tensors in first-seen order (a tensor read by several members of b, or sent along several fine
  edges, moves once), and its fixed delay is the sum of the fine edges' `edge_fixed_tick` (each fine edge with a
  fixed delay is a distinct transfer).  Hence every fine edge's delay over any link is at most its cluster edge's;
* **task_ops**: cluster name -> the fine tasks' names, each replaced by its own `task_ops` entry when the fine
  instance was itself coarse (so names always reach the original ops);
* **names**: the members' longest common name prefix, cut back to a separator (`/ . _ - :`) when it ends inside a
  word, then `#` and the cluster index (`layer0/expert2#5`); a one-task cluster keeps its task's name
  (`matmul_3#17`).  The part after the last `#` is unique, so the names are.

Devices, links, capacities and time units are those of the fine instance.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from planner.coarsen.adjacency import Adjacency
from planner.coarsen.repair import cluster_ids, quotient_is_acyclic
from planner.cost.instance import INELIGIBLE, SchedulingInstance

_SEPARATORS = "/._-:"


def cluster_name(member_names: Sequence[str], index: int) -> str:
    """`<common prefix>#<index>` (see module)."""
    if len(member_names) == 1:
        return f"{member_names[0]}#{index}"
    lo, hi = min(member_names), max(member_names)
    n = 0
    while n < min(len(lo), len(hi)) and lo[n] == hi[n]:
        n += 1
    prefix = lo[:n]
    ends_inside_word = any(len(m) > n and m[n] not in _SEPARATORS for m in member_names)
    if prefix and prefix[-1] not in _SEPARATORS and ends_inside_word:
        cut = max(prefix.rfind(s) for s in _SEPARATORS)
        prefix = prefix[:cut + 1] if cut >= 0 else ""
    prefix = prefix.rstrip(_SEPARATORS)
    return f"{prefix or 'cluster'}#{index}"


def _peak_internal(adj: Adjacency, inst: SchedulingInstance, members: list[int], cid: list[int], k: int,
                   out_leaves: list[bool]) -> int:
    act = inst.activation_bytes
    turn = {v: i for i, v in enumerate(members)}
    delta = [0] * (len(members) + 1)
    for i, v in enumerate(members):
        if out_leaves[v]:
            continue
        last = max(turn[w] for w, _ in adj.succ[v] if cid[w] == k)
        delta[i] += int(act[v])
        delta[last + 1] -= int(act[v])
    peak = 0
    live = 0
    own = inst.peak_internal_bytes
    for i, v in enumerate(members):
        live += delta[i]
        peak = max(peak, live + int(own[v]))
    return peak


def contract(inst: SchedulingInstance, clusters: Sequence[Sequence[int]], *,
             name: str | None = None) -> SchedulingInstance:
    """The instance whose task k is cluster k (semantics in the module docstring).

    ValueError unless the clusters partition the tasks and their cluster graph is acyclic.
    """
    if not quotient_is_acyclic(inst, clusters):
        raise ValueError("the cluster graph has a cycle (pass the clusters through repair_cycles first)")
    return _contract(Adjacency.of(inst), inst, clusters, name)


def _contract(adj: Adjacency, inst: SchedulingInstance, clusters: Sequence[Sequence[int]],
              name: str | None) -> SchedulingInstance:
    n = inst.num_tasks
    cid = cluster_ids(n, clusters)
    pos = adj.pos
    ordered = [sorted(c, key=pos.__getitem__) for c in clusters]
    k_count = len(ordered)

    # durations and parameters: segment sums over the members laid out cluster by cluster
    perm = np.fromiter((v for c in ordered for v in c), dtype=np.int64, count=n)
    starts = np.cumsum([0] + [len(c) for c in ordered[:-1]]).astype(np.int64)
    dur = inst.duration_tick[perm] if n else inst.duration_tick
    banned = dur >= INELIGIBLE
    if k_count:
        duration = np.add.reduceat(np.where(banned, 0, dur), starts, axis=0)
        duration[np.add.reduceat(banned.astype(np.int64), starts, axis=0) > 0] = INELIGIBLE
        param = np.add.reduceat(inst.param_bytes[perm], starts)
    else:
        duration = np.zeros((0, inst.num_devices), dtype=np.int64)
        param = np.zeros(0, dtype=np.int64)

    # boundary edges: union of tensors, sum of fixed delays, per ordered pair of clusters
    out_leaves = [not adj.succ[v] for v in range(n)]
    pair_index: dict[tuple[int, int], int] = {}
    tensors: list[dict[str, None]] = []
    fixed: list[int] = []
    fine_fixed = inst.edge_fixed_tick.tolist()
    for e, (s, t) in enumerate(adj.edges):
        a, b = cid[s], cid[t]
        if a == b:
            continue
        out_leaves[s] = True
        j = pair_index.get((a, b))
        if j is None:
            j = pair_index[(a, b)] = len(fixed)
            tensors.append({})
            fixed.append(0)
        tensors[j].update(dict.fromkeys(inst.edge_tensors[e]))
        fixed[j] += fine_fixed[e]
    next_pair = {j: p for p, j in pair_index.items()}
    edge_order = sorted(range(len(fixed)), key=next_pair.__getitem__)

    act = inst.activation_bytes
    activation = np.array([sum(int(act[v]) for v in c if out_leaves[v]) for c in ordered], dtype=np.int64)
    peak = np.array([_peak_internal(adj, inst, c, cid, k, out_leaves) for k, c in enumerate(ordered)],
                    dtype=np.int64)

    fine_names = inst.task_names
    names = tuple(cluster_name([fine_names[v] for v in c], k) for k, c in enumerate(ordered))
    task_ops = {}
    for k, c in enumerate(ordered):
        ops: list[str] = []
        for v in c:
            ops.extend(inst.task_ops.get(fine_names[v], (fine_names[v],)))
        task_ops[names[k]] = tuple(ops)

    used = {t for j in edge_order for t in tensors[j]}
    return SchedulingInstance(
        name=name if name is not None else f"{inst.name}/coarse",
        task_names=names,
        device_names=inst.device_names,
        duration_tick=np.asarray(duration, dtype=np.int64),
        edges=tuple(next_pair[j] for j in edge_order),
        edge_tensors=tuple(tuple(tensors[j]) for j in edge_order),
        tensor_bytes={t: inst.tensor_bytes[t] for t in inst.tensor_bytes if t in used},
        edge_fixed_tick=np.array([fixed[j] for j in edge_order], dtype=np.int64),
        link_class=inst.link_class,
        link_latency_tick=inst.link_latency_tick,
        link_bytes_per_tick=inst.link_bytes_per_tick,
        param_bytes=np.asarray(param, dtype=np.int64),
        activation_bytes=activation,
        peak_internal_bytes=peak,
        capacity_bytes=inst.capacity_bytes,
        tick_s=inst.tick_s,
        time_unit=inst.time_unit,
        task_ops=task_ops,
        link_names=inst.link_names,
    )
