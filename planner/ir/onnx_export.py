"""Write an `OpGraph` (after passes) back to ONNX, so that passes can be checked by running both models.

Each op is rebuilt from the model's node of the same name (or of `Op.origin` for clones), with the op's own input
and output tensor names; the model is the one the importer planned (`onnx_import.normalized_model`: input values
bound, opset upgraded, known Ifs inlined, with the options kept in the graph's `SourceInfo`).  Tensors that became
constants through folding get their values here: the ops that produced them are evaluated node by node
(`onnx_eval`: onnx's reference evaluator, else onnxruntime), `Shape` and `Size` from the static shapes recorded at
import.  Node names follow the importer's naming (`onnx_import.node_names`).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from planner.errors import InputError
from planner.ir.graph import OpGraph
from planner.ir.onnx_eval import EvaluationError, evaluate_node
from planner.ir.onnx_import import node_names, normalized_model


def _shape_value(node: onnx.NodeProto, shape: tuple[int, ...]) -> np.ndarray:
    if node.op_type == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end", None)
    return np.array(shape[start:end], dtype=np.int64)


def _evaluate_constants(model: onnx.ModelProto, names: list[str], wanted: set[str], graph: OpGraph
                        ) -> dict[str, np.ndarray]:
    """Values of `wanted` tensors, which depend on initializers and static shapes only: their producers are
    evaluated node by node (`onnx_eval.evaluate_node`: onnx's reference evaluator, else onnxruntime); a `Shape` or
    `Size` of a tensor the graph holds takes its static shape, of one it no longer holds its evaluated input."""
    if not wanted:
        return {}
    producer = {t: i for i, node in enumerate(model.graph.node) for t in node.output}
    inits = {init.name: init for init in model.graph.initializer}
    values: dict[str, np.ndarray] = {}
    needed_nodes: set[int] = set()
    stack = list(wanted)
    seen: set[str] = set()
    while stack:
        t = stack.pop()
        if t in seen or not t:
            continue
        seen.add(t)
        if t in inits:
            values[t] = numpy_helper.to_array(inits[t])
            continue
        i = producer[t]
        node = model.graph.node[i]
        known = graph.tensors.get(node.input[0]) if node.op_type in ("Shape", "Size") else None
        if known is not None and known.shape is not None:
            values[node.output[0]] = _shape_value(node, known.shape)
            continue
        # any other node, and a Shape of a tensor the graph no longer holds (itself a constant that folding
        # removed, e.g. a Concat of constants in Swin's export): evaluated from its inputs
        needed_nodes.add(i)
        stack.extend(node.input)
    opsets = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in model.opset_import}
    for i in sorted(needed_nodes):  # the model's node order is topological
        node = onnx.NodeProto()
        node.CopyFrom(model.graph.node[i])
        node.name = names[i]
        try:
            results = evaluate_node(node, [values[t] if t else None for t in node.input], opsets,
                                    model.ir_version)
        except EvaluationError as exc:
            raise InputError(f"constant folding: {exc}", path=graph.source.path if graph.source else None,
                             fix="report the model; this node cannot be folded") from None
        values.update(zip([o for o in node.output if o], results, strict=False))
    return {t: values[t] for t in wanted}


def export_onnx(graph: OpGraph, model_path: str | Path) -> onnx.ModelProto:
    """An ONNX model computing what `graph` computes, built from the original model at `model_path`."""
    src = graph.source
    model = normalized_model(model_path, src.input_shapes if src else (), src.input_values if src else ())
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
