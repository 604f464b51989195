"""Write an `OpGraph` (after passes) back to ONNX, so that passes can be checked by running both models.

Each op is rebuilt from the original model's node of the same name (or of `Op.origin` for clones), with the op's
own input and output tensor names.  Tensors that became constants through folding get their values here: the
ops that produced them are evaluated with the onnx reference evaluator, `Shape` and `Size` from the static shapes
recorded at import.  Node names follow the importer's naming (`onnx_import.node_names`).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from planner.ir.graph import OpGraph
from planner.ir.onnx_import import node_names


def _shape_value(node: onnx.NodeProto, shape: tuple[int, ...]) -> np.ndarray:
    if node.op_type == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end", None)
    return np.array(shape[start:end], dtype=np.int64)


def _evaluate_constants(model: onnx.ModelProto, names: list[str], wanted: set[str], graph: OpGraph
                        ) -> dict[str, np.ndarray]:
    """Values of `wanted` tensors, which depend on initializers and static shapes only."""
    if not wanted:
        return {}
    producer = {t: i for i, node in enumerate(model.graph.node) for t in node.output}
    initializers = {init.name for init in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    needed_nodes: set[int] = set()
    stack = list(wanted)
    seen: set[str] = set()
    while stack:
        t = stack.pop()
        if t in seen or t in initializers or not t:
            continue
        seen.add(t)
        i = producer[t]
        node = model.graph.node[i]
        if node.op_type in ("Shape", "Size"):
            feeds[node.output[0]] = _shape_value(node, graph.tensors[node.input[0]].shape)
            continue
        needed_nodes.add(i)
        stack.extend(node.input)
    nodes = [model.graph.node[i] for i in sorted(needed_nodes)]
    used_inits = [init for init in model.graph.initializer if any(init.name in n.input for n in nodes)]
    sub = helper.make_graph(
        nodes, "constants",
        inputs=[helper.make_tensor_value_info(k, onnx.TensorProto.INT64, None) for k in feeds],
        outputs=[helper.make_tensor_value_info(t, onnx.TensorProto.UNDEFINED, None) for t in sorted(wanted)],
        initializer=used_inits,
    )
    sub_model = helper.make_model(sub, opset_imports=model.opset_import, ir_version=model.ir_version)
    values = ReferenceEvaluator(sub_model).run(None, feeds)
    return dict(zip(sorted(wanted), (np.asarray(v) for v in values)))


def export_onnx(graph: OpGraph, model_path: str | Path) -> onnx.ModelProto:
    """An ONNX model computing what `graph` computes, built from the original model at `model_path`."""
    model = onnx.load(str(model_path))
    names = node_names(model)
    original = dict(zip(names, model.graph.node))
    init_by_name = {init.name: init for init in model.graph.initializer}
    nodes = []
    reads: set[str] = set()
    for op in graph.ops:
        node = copy.deepcopy(original[op.origin or op.name])
        node.name = op.name
        del node.input[:]
        node.input.extend(op.inputs)
        del node.output[:]
        node.output.extend(op.outputs)
        nodes.append(node)
        reads.update(op.reads)
    wanted = {t for t in reads if t in graph.initializers and t not in init_by_name}
    values = _evaluate_constants(model, names, wanted, graph)
    inits = [init_by_name[t] for t in sorted(reads) if t in init_by_name]
    inits += [numpy_helper.from_array(values[t], t) for t in sorted(values)]
    kept_inits = {init.name for init in inits}
    # Old IR versions list initializers among the inputs too: keep only real inputs and kept initializers.
    inputs = [i for i in model.graph.input if i.name not in init_by_name or i.name in kept_inits]
    if model.ir_version < 4:  # before IR 4 every initializer must also be a graph input
        inputs += [helper.make_tensor_value_info(t, helper.np_dtype_to_tensor_dtype(values[t].dtype),
                                                 values[t].shape) for t in sorted(values)]
    out_graph = helper.make_graph(nodes, model.graph.name, inputs, list(model.graph.output), initializer=inits)
    out = helper.make_model(out_graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    return out
