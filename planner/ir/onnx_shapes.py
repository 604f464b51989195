"""Shape inference to static shapes: step 8 of `planner.ir.onnx_import`.

onnx's inference (strict, with data propagation) runs in rounds until every tensor an op reads has a static shape;
each round tries exact shapes onnx leaves out, inlining Ifs on known conditions, the opset upgrade, constant
evaluation and upper bounds for data-dependent outputs (whose tensors the importer marks estimated).  When nothing
helps any more, the error names the node that stops propagation and the value it needs.
"""

from __future__ import annotations

import math
from collections import ChainMap
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

import onnx
from onnx import GraphProto, ModelProto, NodeProto

from planner.errors import InputError
from planner.ir.onnx_constants import ConstantValues, inline_constant_ifs, upgrade_opset, with_constants
from planner.ir.onnx_legacy import upgrade_legacy
from planner.ir.onnx_walk import CANON_DOMAIN, SHOW_ITEMS, captured_inputs, has_subgraph, names_of_nodes, one_line
from planner.ir.op_workload import DATA_DEPENDENT

__all__ = ["TensorType", "UNKNOWN_TYPE", "infer_shapes", "type_map"]


_MAX_ROUNDS = 32  # inference rounds: constant evaluation, If inlining, upgrade and bounds each need one


@dataclass(frozen=True, slots=True)
class TensorType:
    shape: tuple[int, ...] | None  # None: unknown or not fully static
    elem: int  # TensorProto.DataType; 0 for non-tensors
    is_tensor: bool


UNKNOWN_TYPE = TensorType(None, 0, True)


def _type_of(tp: onnx.TypeProto) -> TensorType:
    if not tp.HasField("tensor_type"):
        return TensorType(None, 0, False)
    tt = tp.tensor_type
    shape: tuple[int, ...] | None = None
    if tt.HasField("shape"):
        values = tuple(d.dim_value for d in tt.shape.dim)
        # dim_value 0 is a real (empty) dimension only when set; an unset one reads as 0 too
        if all(values) or all(d.HasField("dim_value") for d in tt.shape.dim):
            shape = values
    return TensorType(shape, tt.elem_type, True)


def type_map(graph: GraphProto, outer: Mapping[str, TensorType] | None = None) -> MutableMapping[str, TensorType]:
    """Tensor name -> type for a graph (a subgraph sees its enclosing scopes' names through `outer`)."""
    types: MutableMapping[str, TensorType] = ChainMap({}, outer) if outer else {}  # type: ignore[arg-type]
    for t in graph.initializer:
        types[t.name] = TensorType(tuple(t.dims), t.data_type, True)
    for st in graph.sparse_initializer:
        types[st.values.name] = TensorType(tuple(st.dims), st.values.data_type, True)
    for vi in (*graph.input, *graph.value_info, *graph.output):
        if vi.type.ByteSize() == 0:
            continue
        ty = _type_of(vi.type)
        old = types.get(vi.name)
        if old is None or old.shape is None:
            types[vi.name] = ty
    return types


def _run_inference(model: ModelProto, consts: ConstantValues, shown: str) -> ModelProto:
    """onnx shape inference (strict, with data propagation); with known constant values, on a scratch copy that
    holds them as initializers, its shapes copied back into the model."""
    try:
        if not consts.values:
            return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
        scratch = onnx.shape_inference.infer_shapes(with_constants(model, consts.values), check_type=True,
                                                    strict_mode=True, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError) as exc:
        raise InputError(f"shape inference failed: {one_line(exc)}", path=shown,
                         fix="check --input-shape and --input-value values against the model, or re-export "
                             "it") from None
    inits = {t.name for t in model.graph.initializer}
    known = {vi.name: vi for vi in scratch.graph.value_info}
    for name, value in consts.values.items():
        if name not in inits and name not in known:
            known[name] = onnx.helper.make_tensor_value_info(
                name, onnx.helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
    del model.graph.value_info[:]
    model.graph.value_info.extend(known.values())
    by_name = {o.name: o for o in scratch.graph.output}
    for o in model.graph.output:
        if o.name in by_name:
            o.type.CopyFrom(by_name[o.name].type)
        elif o.name in known:
            o.type.CopyFrom(known[o.name].type)
    return model


def infer_shapes(model: ModelProto, shown: str) -> tuple[ModelProto, frozenset[str], MutableMapping[str, TensorType]]:
    """Shape inference until every needed tensor is static, each round trying, in order: exact shapes onnx leaves
    out, inlining Ifs with a known condition, the opset upgrade (once, below opset 14; below opset 7 always, first:
    `onnx_legacy`), constant evaluation, and
    upper bounds for data-dependent outputs.  When nothing helps any more, the error names the node that stops
    propagation and why (`_culprit`)."""
    bounded: set[str] = set()
    consts = ConstantValues()
    legacy = upgrade_legacy(model, shown)  # below opset 7 ops meant something else: converted first, always
    upgraded = legacy is not model
    model = legacy
    unknown: list[tuple[int, str]] = []
    for _ in range(_MAX_ROUNDS):
        model = _run_inference(model, consts, shown)
        graph = model.graph
        types = type_map(graph)
        needed = {t for node in graph.node for t in node.input} | {vi.name for vi in graph.output}
        needed.update(t for node in graph.node if node.attribute and has_subgraph(node) for t in captured_inputs(node))
        unknown = []  # needed tensors (read by an op or a graph output) without a static shape
        progress = False
        for i, node in enumerate(graph.node):
            for o in node.output:
                ty = types.get(o, UNKNOWN_TYPE)
                if not (o and ty.is_tensor and ty.shape is None):
                    continue
                exact = _output_exact(node, o, types)
                if exact is not None:
                    # a contrib op's output has no type from onnx either: it has its first input's
                    elem = ty.elem or (types.get(node.input[0], UNKNOWN_TYPE).elem if node.input else 0)
                    _set_shape(graph, o, exact, elem)
                    progress = True
                elif o in needed:
                    unknown.append((i, o))
        has_if = any(n.op_type == "If" and CANON_DOMAIN.get(n.domain, n.domain) == "" for n in graph.node)
        if not unknown and not progress and not has_if:
            return model, frozenset(bounded), types
        if progress:
            continue
        if has_if or unknown:
            names = names_of_nodes(graph.node)
            static = {k: ty.shape for k, ty in types.items() if ty.is_tensor}
            added = consts.evaluate(model, static, names)
            if has_if and inline_constant_ifs(model, consts.values, names, names_of_nodes):
                continue
            if added and unknown:
                continue
        if not unknown:
            return model, frozenset(bounded), types
        if not upgraded:
            upgraded = True
            converted = upgrade_opset(model)
            if converted is not None:
                model = converted
                continue
        for i, out in unknown:
            bound = _output_bound(graph.node[i], out, types)
            if bound is not None:
                _set_shape(graph, out, bound, types.get(out, UNKNOWN_TYPE).elem)
                bounded.add(out)
                progress = True
        if not progress:
            break
    raise _culprit(model, unknown, consts, shown)


# Inputs whose value (not only shape) decides an op's output shape, by op type: index in the node's inputs.
_SHAPE_VALUE_INPUTS = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Pad": (1, 2, 3), "ConstantOfShape": (0,), "Range": (0, 1, 2),
    "Slice": (1, 2, 3, 4), "Resize": (1, 2, 3), "Upsample": (1,), "TopK": (1,), "OneHot": (1,),
    "Squeeze": (1,), "Unsqueeze": (1,), "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,),
    "ReduceMin": (1,), "ReduceProd": (1,), "Split": (1,), "CenterCropPad": (1,), "If": (0,),
}


def _culprit(model: ModelProto, unknown: list[tuple[int, str]], consts: ConstantValues, shown: str
             ) -> InputError:
    """The error for tensors still without a shape: the first node whose inputs all have static shapes but whose
    output has none (it stops propagation), the input whose value it needs and what that value depends on."""
    graph = model.graph
    names = names_of_nodes(graph.node)
    types = type_map(graph)
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    inits = {t.name for t in graph.initializer}
    graph_inputs = [vi.name for vi in graph.input if vi.name not in inits]
    i, out = unknown[0]
    for j, o in unknown:  # the first one whose inputs are all known
        if all(not t or (types.get(t) is not None and types[t].shape is not None) for t in graph.node[j].input):
            i, out = j, o
            break
    node = graph.node[i]
    more = f" (and {len(unknown) - 1} more tensor{'s' if len(unknown) > 2 else ''})" if len(unknown) > 1 else ""
    what = (f"tensor {out!r} (output of node {names[i]!r}, {node.op_type}) has no static shape after shape "
            f"inference and constant evaluation{more}")
    value_inputs = [node.input[k] for k in _SHAPE_VALUE_INPUTS.get(node.op_type, ())
                    if k < len(node.input) and node.input[k]]
    pending = [t for t in value_inputs if t not in consts.values and t not in inits]
    domain = CANON_DOMAIN.get(node.domain, node.domain)
    if domain != "":
        return InputError(f"{what}: onnx has no shape inference for {domain} ops, and opplan has no shape rule for "
                          f"{node.op_type}", path=shown,
                          fix="write the shapes of its outputs into the model's value_info, e.g. with python -m "
                              "onnxruntime.tools.symbolic_shape_infer --input MODEL --output MODEL_WITH_SHAPES")
    if not pending:
        return InputError(f"{what}: node {names[i]!r} stops shape propagation", path=shown,
                          fix="re-export the model with static shapes (or a newer opset)")
    # what the value depends on: graph inputs upstream, or a node that could not be evaluated
    seen, stack, sources, failed = set(), list(pending), [], []
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in graph_inputs:
            sources.append(t)
            continue
        k = producer.get(t)
        if k is None:
            continue
        if names[k] in consts.failures:
            failed.append(consts.failures[names[k]])
        if graph.node[k].op_type in ("Shape", "Size"):
            continue  # a shape is known: it is not what blocks
        stack.extend(x for x in graph.node[k].input if x)
    why = f"its input {pending[0]!r}, whose value decides the shape, is not a constant"
    if failed:
        return InputError(f"{what}: {why}: {failed[0]}", path=shown,
                          fix="report the model; the node that could not be evaluated is named above")
    if sources:
        listed = ", ".join(sorted(set(sources))[:SHOW_ITEMS])
        return InputError(f"{what}: {why}; it depends on the value of graph input(s) {listed}", path=shown,
                          fix=f"the input shapes are static, so --input-shape cannot help: give the values with "
                              f"--input-value NAME=VALUE, e.g. --input-value {sorted(set(sources))[0]}=...")
    return InputError(f"{what}: {why}", path=shown, fix="re-export the model with static shapes")


# com.microsoft ops whose output 0 has the shape of input 0 (activations, fused bias + activation, skip + norm);
# onnx has no shape inference for the contrib domain.
_CONTRIB_LIKE_INPUT = frozenset({"Gelu", "FastGelu", "BiasGelu", "QuickGelu", "BiasAdd", "SkipLayerNormalization",
                                 "SkipSimplifiedLayerNormalization", "SimplifiedLayerNormalization"})


def _contrib_exact(node: NodeProto, out: str, types: Mapping[str, TensorType]) -> tuple[int, ...] | None:
    """Shapes of the simple com.microsoft ops: output 0 of `_CONTRIB_LIKE_INPUT` as input 0 (and SkipLayerNorm's
    input + skip sum, output 3); DynamicQuantizeLSTM's Y (seq, directions, batch, hidden), Y_h and Y_c
    (directions, batch, hidden) from X (seq, batch, input), W (directions, input, 4 hidden) and hidden_size."""
    k = list(node.output).index(out)
    ins = [types[t].shape if t and t in types else None for t in node.input]
    if node.op_type in _CONTRIB_LIKE_INPUT and (k == 0 or (k == 3 and "Skip" in node.op_type)):
        return ins[0] if ins else None
    if node.op_type == "DynamicQuantizeLSTM" and len(ins) > 1 and ins[0] is not None and ins[1] is not None:
        hidden = next((int(onnx.helper.get_attribute_value(a)) for a in node.attribute if a.name == "hidden_size"),
                      ins[1][2] // 4)
        seq, batch, dirs = ins[0][0], ins[0][1], ins[1][0]
        return (seq, dirs, batch, hidden) if k == 0 else (dirs, batch, hidden)
    return None


def _output_exact(node: NodeProto, out: str, types: Mapping[str, TensorType]) -> tuple[int, ...] | None:
    """Exact shapes onnx's inference leaves out: the mask of Dropout (opset < 12) has the input's shape; the
    simple com.microsoft ops (`_contrib_exact`)."""
    domain = CANON_DOMAIN.get(node.domain, node.domain)
    if domain == "com.microsoft":
        return _contrib_exact(node, out, types)
    if domain == "" and node.op_type == "Dropout" and len(node.output) > 1 and out == node.output[1] and node.input:
        ty = types.get(node.input[0])
        return ty.shape if ty is not None else None
    return None


def _output_bound(node: NodeProto, out: str, types: Mapping[str, TensorType]) -> tuple[int, ...] | None:
    """An upper bound on the shape of a data-dependent output, or None when there is none (yet)."""
    domain = CANON_DOMAIN.get(node.domain, node.domain)
    if domain != "" or (node.op_type not in DATA_DEPENDENT and node.op_type != "TopK"):
        return None
    ins = [types.get(t).shape if t and types.get(t) else None for t in node.input]  # type: ignore[union-attr]
    x = ins[0] if ins else None
    if x is None:
        return None
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    k = list(node.output).index(out)
    if node.op_type == "NonZero":
        return (len(x), math.prod(x))
    if node.op_type == "TopK":
        return x
    if node.op_type == "Unique":
        if "axis" not in attrs:
            return (math.prod(x),)
        ax = int(attrs["axis"]) % len(x)
        return x if k == 0 else (x[ax],)
    if node.op_type == "Compress":
        cond = ins[1] if len(ins) > 1 else None
        if "axis" not in attrs:
            return (min(math.prod(x), cond[0]) if cond else math.prod(x),)
        ax = int(attrs["axis"]) % len(x)
        return x[:ax] + (min(x[ax], cond[0]) if cond else x[ax],) + x[ax + 1:]
    if node.op_type == "NonMaxSuppression":
        scores = ins[1] if len(ins) > 1 else None
        if scores is None:
            return None
        return (math.prod(scores), 3)
    return None


def _set_shape(graph: GraphProto, name: str, shape: tuple[int, ...], elem: int) -> None:
    for vi in (*graph.value_info, *graph.output):
        if vi.name == name:
            break
    else:
        vi = graph.value_info.add()
        vi.name = name
    tt = vi.type.tensor_type
    if elem:
        tt.elem_type = elem
    tt.shape.Clear()
    for d in shape:
        tt.shape.dim.add().dim_value = d
