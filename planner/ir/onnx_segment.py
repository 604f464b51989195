"""Runs of ops cut out of a planned graph as standalone ONNX models, for an engine such as onnxruntime to run.

`segment_models(graph, model_path, segments)` returns one serialized ONNX model per `SegmentSpec`: the segment's
nodes exactly as `onnx_export.export_onnx` rebuilds them (folded constants as initializers, the importer's names),
with the segment's boundary as the model's interface: every tensor the segment reads that no op of it makes and
that is not a constant becomes a graph input, and the tensors named in `outputs` become its graph outputs (their
static shapes and dtypes from the graph).  The graph is exported once for all segments, so a rank with many
segments pays for one export.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from onnx import TensorProto, helper

from planner.ir.graph import OpGraph
from planner.ir.onnx_export import export_onnx

__all__ = ["SegmentSpec", "segment_models", "trivial_model", "chain_model"]


@dataclass(frozen=True)
class SegmentSpec:
    """Ops in run order, the tensors they read from outside (`inputs`) and the ones wanted after them (`outputs`)."""

    ops: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def _value_info(graph: OpGraph, name: str):
    info = graph.tensors[name]
    elem = TensorProto.DataType.Value(info.dtype.upper())  # the graph names dtypes as ONNX does, lower case
    return helper.make_tensor_value_info(name, elem, list(info.shape) if info.shape is not None else None)


def segment_models(graph: OpGraph, model_path: str | Path, segments: Sequence[SegmentSpec]) -> list[bytes]:
    """One serialized ONNX model per segment (module docstring); an empty segment list exports nothing."""
    if not segments:
        return []
    union = {op for seg in segments for op in seg.ops}
    full = export_onnx(graph.subgraph(union), model_path)
    node_of = {node.name: node for node in full.graph.node}
    init_of = {init.name: init for init in full.graph.initializer}
    out = []
    for seg in segments:
        nodes = [node_of[name] for name in seg.ops]
        read = {t for node in nodes for t in node.input if t}
        inits = [init_of[t] for t in sorted(read) if t in init_of]
        inputs = [_value_info(graph, t) for t in seg.inputs if t not in init_of]
        outputs = [_value_info(graph, t) for t in seg.outputs]
        body = helper.make_graph(nodes, f"{graph.name}-segment", inputs, outputs, initializer=inits)
        model = helper.make_model(body, opset_imports=full.opset_import, ir_version=max(full.ir_version, 4))
        out.append(model.SerializeToString())
    return out


def trivial_model(size: int = 16) -> bytes:
    """A serialized one-node model (Relu on `size` floats, input `x`, output `y`): an engine call that does almost
    nothing, whose time is an engine's fixed cost per call."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [size])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "trivial", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def chain_model(ops: int, size: int = 16) -> bytes:
    """A serialized chain of `ops` Relu nodes on `size` floats (`op0` .. `op<ops-1>`, input `x`, output `y`): the
    smallest work per op, so that a run of it on ranks that alternate at every op times the crossings."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [size])
    names = ["x", *(f"t{i}" for i in range(ops - 1)), "y"]
    nodes = [helper.make_node("Relu", [names[i]], [names[i + 1]], name=f"op{i}") for i in range(ops)]
    graph = helper.make_graph(nodes, "chain", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
