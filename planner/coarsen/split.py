"""Split clusters whose parameters would not fit a device.

A linear cluster can hold most of a model (its main path), and one cluster always runs on one device, so a
cluster holding more parameter bytes than a device can keep makes the plan infeasible.  `split_by_param_bytes`
cuts every such cluster, along its members' topological order, into consecutive pieces of at most the limit (a
single task above the limit stays alone).  Cutting a cluster into a prefix and a suffix of a topological order
never creates a cycle among clusters (a path from the suffix back to the prefix would be a cycle of the original
cluster graph), and putting the pieces where the cluster was keeps a topological order of the clusters.  Pieces of
a chain are chains.  O(tasks).
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.cost.instance import SchedulingInstance


def _split(clusters: Sequence[Sequence[int]], param: list[int], limit: float) -> list[list[int]]:
    out: list[list[int]] = []
    for members in clusters:
        if sum(param[v] for v in members) <= limit:
            out.append(list(members))
            continue
        piece: list[int] = []
        held = 0
        for v in members:
            if piece and held + param[v] > limit:
                out.append(piece)
                piece, held = [], 0
            piece.append(v)
            held += param[v]
        out.append(piece)
    return out


def split_by_param_bytes(inst: SchedulingInstance, clusters: Sequence[Sequence[int]],
                         max_param_bytes: float) -> list[list[int]]:
    """Cut clusters above `max_param_bytes` into consecutive pieces; each cluster must list its members in a
    topological order (as `repair_cycles` and `merge_clusters` return them)."""
    return _split(clusters, inst.param_bytes.tolist(), max_param_bytes)
