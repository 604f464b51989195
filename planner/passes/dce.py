"""Dead-code elimination: drop every op from which no graph output can be reached."""

from __future__ import annotations

from planner.ir.graph import OpGraph


def eliminate_dead_code(graph: OpGraph) -> OpGraph:
    """Keep the ops that produce a graph output or feed (transitively) an op that does.

    A graph without declared outputs (a task graph) is returned unchanged: every task is wanted.
    """
    if not graph.graph_outputs:
        return graph
    wanted_tensors = set(graph.graph_outputs)
    live = [False] * graph.num_ops
    for i in range(graph.num_ops - 1, -1, -1):  # reverse topological order: consumers before producers
        op = graph.ops[i]
        if any(t in wanted_tensors for t in op.writes):
            live[i] = True
            wanted_tensors.update(op.reads)
    if all(live):
        return graph
    return graph.subgraph(op.name for op, alive in zip(graph.ops, live) if alive)
