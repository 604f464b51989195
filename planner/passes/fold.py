"""Constant folding: ops whose result is known before the model runs are removed, their outputs become constants.

An op folds when
* every input it reads is a constant (an initializer, or the output of an op already folded), or
* it is `Shape` or `Size`: shapes are static after import, so their result never depends on data,
and it is deterministic (no Random* op), produces no graph output, and its result is not much larger than what it
reads (at most max(input bytes, `FoldPolicy.max_growth_bytes`); `Constant` and `ConstantOfShape` are exempt, they are
weights by another name): folding an Expand of a scalar into a large tensor would trade
a cheap op for a large weight.  Chains of shape arithmetic (Shape -> Gather -> Concat -> Reshape's shape input) fold
entirely.  Consumers of a folded tensor now read a constant: it is added to their `param_bytes`.

This pass only decides; the values are computed when the graph is written back to ONNX
(`planner/ir/onnx_export.py`, with the onnx reference evaluator), so planning never pays for the arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.ir.graph import OpGraph

NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
)
SHAPE_ONLY = frozenset({"Shape", "Size"})
# Ops whose whole purpose is to produce a constant tensor (the onnx light models build every weight with
# ConstantOfShape): they fold whatever their size, and their outputs become the consumers' weights.
CONSTANT_MAKERS = frozenset({"Constant", "ConstantOfShape"})


@dataclass(frozen=True)
class FoldPolicy:
    """What constant folding may fold."""

    # a folded op may write up to max(its inputs' bytes, this) bytes: folding must not turn a cheap op that expands
    # a small constant (an Expand, a Tile) into a large weight the plan then has to hold and move
    max_growth_bytes: int = 64 * 1024


DEFAULT_FOLD_POLICY = FoldPolicy()


def foldable_ops(graph: OpGraph, policy: FoldPolicy = DEFAULT_FOLD_POLICY) -> list[str]:
    """Names of the ops that constant folding removes, in topological order."""
    constant = set(graph.initializers)
    outputs = set(graph.graph_outputs)
    folded: list[str] = []
    for op in graph.ops:
        if op.op_type in NONDETERMINISTIC or op.duration is not None or not op.writes:
            continue
        if any(t in outputs for t in op.writes):
            continue
        reads = list(op.reads)
        if op.op_type not in SHAPE_ONLY and not all(t in constant for t in reads):
            continue
        read_bytes = sum(graph.tensors[t].size_bytes for t in reads if t in graph.tensors)
        exempt = op.op_type in SHAPE_ONLY or op.op_type in CONSTANT_MAKERS
        if not exempt and op.output_bytes > max(read_bytes, policy.max_growth_bytes):
            continue
        folded.append(op.name)
        constant.update(op.writes)
    return folded


def fold_constants(graph: OpGraph, policy: FoldPolicy = DEFAULT_FOLD_POLICY) -> OpGraph:
    """The graph without its foldable ops; their outputs become initializers of the consumers."""
    folded = set(foldable_ops(graph, policy))
    if not folded:
        return graph
    new_constants = {t for op in graph.ops if op.name in folded for t in op.writes}
    keep: list = []
    for op in graph.ops:
        if op.name in folded:
            continue
        gained = {t for t in op.reads if t in new_constants}
        if gained:
            extra = sum(graph.tensors[t].size_bytes for t in gained if t in graph.tensors)
            op = replace(op, param_bytes=op.param_bytes + extra)
        keep.append(op)
    rebuilt = OpGraph.build(
        graph.name, keep, (e for e in graph.edges if e.src not in folded and e.dst not in folded),
        tensors=graph.tensors, graph_inputs=graph.graph_inputs, graph_outputs=graph.graph_outputs,
        initializers=set(graph.initializers) | new_constants, source=graph.source,
    )
    return rebuilt.subgraph(op.name for op in rebuilt.ops)
