"""Cloning: give each consuming cluster its own copy of a cheap op instead of sending the op's output to it.

For an op v in cluster A whose outputs are read by ops of another cluster C, a clone of v placed in C removes the
edge v -> C (a transfer, when A and C land on different devices) and adds v's compute to C.  We clone when

* v is cheap: cost(v) <= `max_cost`, and its outputs feed several clusters (an op read by one other cluster only
  would simply migrate, undoing the clustering), and
* the clone adds no new cross-cluster edge: every op that v reads from is already in C, or v reads only constants
  and graph inputs (a Shape, Constant, Range, or a broadcast of an input), and
* it shortens C's path: the estimated transfer time of the edge saved exceeds cost(v), the time the clone adds.

An original left with no consumers (and producing no graph output) is then dead; `eliminate_dead_code` drops it.
Clones are named `<op>~c<cluster>`, their outputs `<tensor>~c<cluster>`, and `Op.origin` names the op they copy so
the ONNX writer can rebuild the node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from planner.ir.graph import Edge, Op, OpGraph, TensorInfo
from planner.passes.dce import eliminate_dead_code


def clone_cheap_ops(
    graph: OpGraph,
    cluster_of: Mapping[str, int],
    op_cost: Mapping[str, float],
    edge_transfer: Callable[[int], float],
    *,
    max_cost: float,
) -> tuple[OpGraph, dict[str, int]]:
    """Clone cheap ops into the clusters that consume them; returns the new graph and the new op -> cluster map.

    `op_cost` and `edge_transfer(bytes)` are estimates in one time unit (e.g. seconds on a typical device and
    link).  The returned map covers every op of the returned graph.
    """
    producer = {t: op.name for op in graph.ops for t in op.writes}
    consumers: dict[str, list[str]] = {}
    for e in graph.edges:
        lst = consumers.setdefault(e.src, [])
        if e.dst not in lst:
            lst.append(e.dst)
    new_ops: list[Op] = []
    new_edges: list[Edge] = []
    renamed_inputs: dict[str, dict[str, str]] = {}  # consumer op -> {old tensor: clone tensor}
    removed_edges: set[tuple[str, str]] = set()
    tensors = dict(graph.tensors)
    cluster_map = dict(cluster_of)
    for op in graph.ops:
        if op.duration is not None or op_cost.get(op.name, float("inf")) > max_cost:
            continue
        home = cluster_of[op.name]
        sources = {producer[t] for t in op.reads if t in producer}
        by_cluster: dict[int, list[str]] = {}
        for dst in consumers.get(op.name, []):
            if cluster_of[dst] != home:
                by_cluster.setdefault(cluster_of[dst], []).append(dst)
        consumer_clusters = {cluster_of[dst] for dst in consumers.get(op.name, [])}
        if len(consumer_clusters) < 2:
            continue
        for cluster, dsts in sorted(by_cluster.items()):
            if any(cluster_of[s] != cluster for s in sources):
                continue  # the clone would need a transfer of its own inputs
            saved = edge_transfer(op.output_bytes)
            if saved <= op_cost[op.name]:
                continue
            suffix = f"~c{cluster}"
            clone_outputs = tuple(t + suffix if t else t for t in op.outputs)
            clone = replace(op, name=op.name + suffix, outputs=clone_outputs, origin=op.origin or op.name)
            new_ops.append(clone)
            cluster_map[clone.name] = cluster
            for t, t2 in zip(op.outputs, clone_outputs):
                if t in tensors:
                    info = tensors[t]
                    tensors[t2] = TensorInfo(t2, info.shape, info.dtype, info.size_bytes)
            new_edges.extend(replace(e, dst=clone.name) for e in graph.edges if e.dst == op.name)
            for dst in dsts:
                removed_edges.add((op.name, dst))
                renamed_inputs.setdefault(dst, {}).update(zip(op.outputs, clone_outputs))
                new_edges.extend(replace(e, src=clone.name, tensor=e.tensor + suffix) for e in graph.edges
                                 if e.src == op.name and e.dst == dst)
    if not new_ops:
        return graph, dict(cluster_of)
    def rewire(op: Op) -> Op:
        names = renamed_inputs[op.name]
        return replace(op, inputs=tuple(names.get(t, t) for t in op.inputs),
                       implicit_inputs=tuple(names.get(t, t) for t in op.implicit_inputs))

    ops = [rewire(op) if op.name in renamed_inputs else op for op in graph.ops]
    edges = [e for e in graph.edges if (e.src, e.dst) not in removed_edges] + new_edges
    rebuilt = OpGraph.build(graph.name, ops + new_ops, edges, tensors=tensors, graph_inputs=graph.graph_inputs,
                            graph_outputs=graph.graph_outputs, initializers=graph.initializers, source=graph.source)
    pruned = eliminate_dead_code(rebuilt)
    return pruned, {op.name: cluster_map[op.name] for op in pruned.ops}
