"""Import an ONNX model file into an `OpGraph` with per-op workload (FLOPs from `op_workload`, bytes from shapes).

Steps, each of which either succeeds or raises an `OpplanError` naming the file, the item and the fix (there is no
partial output):

1. Read the file (InputError if missing, a directory, or over protobuf's 2 GB limit) and hash its bytes.
2. Parse it (InputError: "not an ONNX model" / "truncated or corrupt ONNX file").
3. External data: every tensor stored outside the file must name a readable file inside the model's folder, large
   enough for its offset + length (InputError otherwise).  Only small external tensors (<= 64 KiB, the ones that
   can hold shape values) are read into memory; weights are never needed to plan, only their shapes, so a 100 GB
   model costs no more memory than its graph.  For that reason the in-memory model is always smaller than the
   file, under protobuf's 2 GB limit, and in-memory shape inference is used even for models whose weights exceed
   2 GB (no `infer_shapes_path` round trip).
4. Model-local functions are inlined (`onnx.inliner`), so their bodies become ordinary ops.
5. Op types: each node's (domain, op_type) must have an ONNX schema at the model's opset for that domain, else
   UnsupportedOpError listing the nodes.  `com.microsoft` contrib ops (onnxruntime) are accepted: a few common
   ones have rules in `op_workload.RULES`, the rest are costed by bytes only (`estimated=True`); their output shapes
   must be in the model's value_info because onnx cannot infer them.  Any other custom domain is unsupported.
6. `onnx.checker.check_model` (InputError for structurally broken graphs).
7. `input_shapes` are checked (known input name, rank, agreement with fixed dims) and written into the graph
   inputs; then every remaining dynamic input dimension is reported at once (DynamicShapeError).  A graph input
   dimension of 0 counts as dynamic (exporters write 0 for "unknown").
8. Shape inference (`strict_mode`, `data_prop=True`: Shape -> Gather -> Concat -> Reshape chains fold to constants).
   Outputs of data-dependent ops (NonZero, Unique, Compress, NonMaxSuppression, TopK with a computed k) get an
   upper-bound shape and inference is run again; those ops and everything downstream of a bounded tensor are
   `estimated=True`.  Any other tensor still without a static shape is an InputError naming it and its producer.
   We do not run the onnx reference evaluator on shape subgraphs: data propagation already covers the static
   cases, and what it cannot fold depends on data.

Naming: an op is named after its ONNX node.  A node with no name, or whose name an earlier node already took,
is named `f"{op_type}_{i}"` with i its index in the graph's node list (then `_1`, `_2`... appended if even that is
taken).  Inlined function nodes carry the names the inliner gives them.

Op fields: `inputs` are the node's distinct non-empty input names in order of first use, followed (for If, Loop,
Scan) by the outer-scope tensors its subgraphs capture; `outputs` its non-empty outputs.  `bytes_read` sums the
sizes of those inputs (weights included, a tensor read twice counted once), `bytes_written` = `output_bytes` the
sizes of the outputs, `param_bytes` the sizes of its initializer inputs.  Non-tensor values (sequences, maps,
optionals) have no size: they are left out of `tensors`, count 0 bytes, and the ops touching them are estimated.
If/Loop/Scan are one op whose FLOPs are the subgraphs' (If: the larger branch; Loop: body x trip count when the
trip count is a constant, else x 1; Scan: body x iterations); If and Loop are always estimated.

Where the steps live: 1-7 in `planner.ir.onnx_checks`, 8 in `planner.ir.onnx_shapes`, graph walking and node
naming in `planner.ir.onnx_walk`; this module runs them in order (caching the normalized model per file and
options), then builds the `OpGraph`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, MutableMapping, Sequence
from functools import lru_cache
from pathlib import Path

import onnx
import onnx.inliner
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, numpy_helper

from planner.errors import InputError
from planner.ir.graph import Edge, Op, OpGraph, SourceInfo, TensorInfo
from planner.ir.onnx_checks import (
    apply_input_shapes,
    check_dynamic_inputs,
    check_external_data,
    check_op_types,
    check_reshape_counts,
    check_structure,
    check_tensor_outputs,
    parse_model,
    read_model_file,
    read_old_ir_as_4,
)
from planner.ir.onnx_constants import bind_input_values
from planner.ir.onnx_shapes import TensorType, infer_shapes, type_map
from planner.ir.onnx_walk import (
    CANON_DOMAIN,
    captured_inputs,
    has_subgraph,
    is_external,
    iter_tensors,
    names_of_nodes,
    node_names,
    one_line,
)
from planner.ir.op_workload import NodeShapes, op_flops

__all__ = ["load_onnx", "normalized_model", "node_names"]


# --------------------------------------------------------------------------- public API
def load_onnx(path: str | Path, input_shapes: Mapping[str, Sequence[int]] | None = None,
              input_values: Mapping[str, Sequence[float]] | None = None) -> OpGraph:
    """Load an ONNX model as an OpGraph with static shapes and per-op FLOPs and bytes (see the module docstring).

    `input_shapes` maps graph input names to concrete shapes; it fixes dynamic dimensions before shape inference.
    `input_values` binds graph inputs to values (they become constants; an If on them is inlined).
    Raises InputError, UnsupportedOpError or DynamicShapeError (all OpplanError) for anything wrong with the input.
    """
    p = Path(path)
    shapes, values = _options_key(input_shapes), _options_key(input_values)
    model, types, bounded, sha = _normalized(p, str(path), shapes, values)
    source = SourceInfo(str(path), sha, "onnx", "s", input_shapes=shapes, input_values=values)
    return _build(model, types, bounded, source, p.stem)


def normalized_model(path: str | Path,
                     input_shapes: Sequence[tuple[str, Sequence]] | Mapping[str, Sequence] = (),
                     input_values: Sequence[tuple[str, Sequence]] | Mapping[str, Sequence] = ()) -> ModelProto:
    """A copy of the model exactly as `load_onnx` planned it (input values bound, opset upgraded if needed, If on
    known conditions inlined), with every weight loaded: the nodes the plan names are this model's nodes.
    `input_shapes`/`input_values` as stored in the graph's `SourceInfo` (name, values pairs) or a plan's (a
    mapping)."""
    p = Path(path)
    shapes, values = _options_key(dict(input_shapes)), _options_key(dict(input_values))
    model, _types, _bounded, _sha = _normalized(p, str(path), shapes, values)
    out = ModelProto()
    out.CopyFrom(model)
    if any(is_external(t) for t in iter_tensors(out.graph)):
        onnx.external_data_helper.load_external_data_for_model(out, str(p.parent))
    return out


def _options_key(options: Mapping[str, Sequence] | None) -> tuple[tuple[str, tuple], ...]:
    """A hashable, canonical form of --input-shape / --input-value options: sorted (name, values) pairs."""
    return tuple(sorted((k, tuple(v)) for k, v in (options or {}).items()))


def _normalized(p: Path, shown: str, shapes: tuple, values: tuple
                ) -> tuple[ModelProto, MutableMapping[str, TensorType], frozenset[str], str]:
    try:
        st = p.stat()
        stamp = (str(p.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = (str(p), 0, 0)  # read_model_file reports it
    return _normalized_cached(stamp, shown, shapes, values)


@lru_cache(maxsize=4)  # import and export (every rank's share) read the same model: rewrite it once per process
def _normalized_cached(stamp: tuple, shown: str, shapes: tuple, values: tuple
                       ) -> tuple[ModelProto, MutableMapping[str, TensorType], frozenset[str], str]:
    p = Path(shown)
    data = read_model_file(p, shown)
    sha = hashlib.sha256(data).hexdigest()
    model = parse_model(data, shown)
    del data
    external = check_external_data(model, p.parent, shown)
    if model.functions:
        try:
            model = onnx.inliner.inline_local_functions(model)
        except Exception as exc:  # onnx raises plain RuntimeError/ValueError for broken functions
            raise InputError(f"cannot inline the model's local functions: {one_line(exc)}", path=shown,
                             fix="re-export the model; onnx.checker.check_model shows the details") from None
    check_op_types(model, shown)
    check_tensor_outputs(model, shown)
    read_old_ir_as_4(model, external)
    check_structure(model, p, shown, external)
    rebatched = apply_input_shapes(model, dict(shapes), shown) if shapes else {}
    if values:
        bind_input_values(model, dict(values), shown)
    check_dynamic_inputs(model, shown)
    model, bounded, types = infer_shapes(model, shown)
    if rebatched:
        check_reshape_counts(model, {name: ty.shape for name, ty in types.items()}, shown)
    return model, types, bounded, sha


# --------------------------------------------------------------------------- building the OpGraph
_BITS_BY_NAME = {
    "FLOAT": 32, "UINT8": 8, "INT8": 8, "UINT16": 16, "INT16": 16, "INT32": 32, "INT64": 64,
    "STRING": 64,  # variable length: counted as one 8-byte reference per element
    "BOOL": 8, "FLOAT16": 16, "DOUBLE": 64, "UINT32": 32, "UINT64": 64, "COMPLEX64": 64, "COMPLEX128": 128,
    "BFLOAT16": 16, "FLOAT8E4M3FN": 8, "FLOAT8E4M3FNUZ": 8, "FLOAT8E5M2": 8, "FLOAT8E5M2FNUZ": 8,
    "UINT4": 4, "INT4": 4, "FLOAT4E2M1": 4, "FLOAT8E8M0": 8, "UINT2": 2, "INT2": 2, "FLOAT6E2M3": 6,
    "FLOAT6E3M2": 6,
}


@lru_cache(maxsize=64)
def _elem_name(elem: int) -> str:
    try:
        return TensorProto.DataType.Name(elem).lower()
    except ValueError:
        return "undefined"


@lru_cache(maxsize=64)  # a handful of element types, looked up once per tensor
def _elem_bits(elem: int) -> int:
    return _BITS_BY_NAME.get(_elem_name(elem).upper(), 32)


def _size_bytes(shape: tuple[int, ...], elem: int) -> int:
    bits = _elem_bits(elem)
    return (math.prod(shape) * bits + 7) // 8


def _attrs(node: NodeProto) -> dict[str, object]:
    out: dict[str, object] = {}
    for a in node.attribute:
        if a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
            out[a.name] = None
            continue
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        out[a.name] = v
    return out


def _node_shapes(node: NodeProto, types: Mapping[str, TensorType], ins: Sequence[str] | None = None,
                 outs: Sequence[str] | None = None) -> NodeShapes:
    """The node as the workload rules see it (`ins`/`outs`: node.input/node.output when already at hand)."""
    get = types.get
    shapes_in = tuple(ty.shape if (ty := get(t)) is not None else None
                      for t in (node.input if ins is None else ins))
    shapes_out = tuple(ty.shape if (ty := get(t)) is not None else None
                       for t in (node.output if outs is None else outs))
    return NodeShapes(node.op_type, node.domain, shapes_in, shapes_out, _attrs(node) if node.attribute else {})


def _graph_flops(graph: GraphProto, outer: Mapping[str, TensorType], consts: _Consts) -> tuple[int, bool]:
    types = type_map(graph, outer)
    total, estimated = 0, False
    for node in graph.node:
        f, e = _node_flops(node, types, consts)
        total += f
        estimated |= e
    return total, estimated


def _node_flops(node: NodeProto, types: Mapping[str, TensorType], consts: _Consts, ins: Sequence[str] | None = None,
                outs: Sequence[str] | None = None, has_sub: bool = True) -> tuple[int, bool]:
    flops, estimated = op_flops(_node_shapes(node, types, ins, outs))
    if not has_sub:
        return flops, estimated
    subs = {a.name: a.g for a in node.attribute if a.type == AttributeProto.GRAPH}
    if not subs:
        return flops, estimated
    domain = CANON_DOMAIN.get(node.domain, node.domain)
    if domain == "" and node.op_type == "If" and "then_branch" in subs and "else_branch" in subs:
        a, b = (_graph_flops(subs[k], types, consts) for k in ("then_branch", "else_branch"))
        return max(a[0], b[0]), True
    if domain == "" and node.op_type == "Loop" and "body" in subs:
        body, _ = _graph_flops(subs["body"], types, consts)
        trips = consts.int_value(node.input[0]) if node.input and node.input[0] else None
        return body * (trips if trips is not None and trips >= 0 else 1), True
    if domain == "" and node.op_type == "Scan" and "body" in subs:
        body, est = _graph_flops(subs["body"], types, consts)
        attrs = _attrs(node)
        n_scan = int(attrs.get("num_scan_inputs", 0) or 0)  # type: ignore[call-overload]  # an int attribute
        first = len(node.input) - n_scan
        axes = attrs.get("scan_input_axes") or [0]
        x = types.get(node.input[first]) if 0 <= first < len(node.input) else None
        if x is None or x.shape is None or not n_scan:
            return body, True
        ax = int(axes[0]) % len(x.shape)  # type: ignore[index]
        return body * x.shape[ax], est
    total, est = flops, True
    for sub in subs.values():
        f, _ = _graph_flops(sub, types, consts)
        total += f
    return total, est


class _Consts:
    """Scalar integer values of initializers and Constant outputs (for Loop trip counts), read on demand."""

    def __init__(self, graph: GraphProto) -> None:
        self._tensors: dict[str, TensorProto] = {t.name: t for t in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant" and node.output:
                for a in node.attribute:
                    if a.name == "value" and a.type == AttributeProto.TENSOR:
                        self._tensors[node.output[0]] = a.t

    def int_value(self, name: str) -> int | None:
        t = self._tensors.get(name)
        if t is None or math.prod(t.dims) != 1 or is_external(t):
            return None
        try:
            return int(numpy_helper.to_array(t).reshape(-1)[0])
        except (ValueError, TypeError):
            return None


def _build(model: ModelProto, types: Mapping[str, TensorType], bounded: frozenset[str], source: SourceInfo,
           stem: str) -> OpGraph:
    graph = model.graph
    initializers = {t.name for t in graph.initializer} | {st.values.name for st in graph.sparse_initializer}
    tensors: dict[str, TensorInfo] = {}
    for name, ty in types.items():
        if ty.is_tensor and ty.shape is not None:
            tensors[name] = TensorInfo(name, ty.shape, _elem_name(ty.elem), _size_bytes(ty.shape, ty.elem))
    nodes = list(graph.node)
    names = names_of_nodes(nodes)
    node_ins = [list(node.input) for node in nodes]
    node_outs = [list(node.output) for node in nodes]
    producer: dict[str, str] = {o: name for outs, name in zip(node_outs, names, strict=True) for o in outs if o}
    consts = _Consts(graph)
    tainted = set(bounded)  # tensors whose shape rests on a data-dependent bound
    sizes = {name: info.size_bytes for name, info in tensors.items()}
    ops: list[Op] = []
    edges: list[Edge] = []
    for node, name, in_list, out_list in zip(nodes, names, node_ins, node_outs, strict=True):
        has_sub = bool(node.attribute) and has_subgraph(node)
        ins: dict[str, None] = dict.fromkeys(t for t in in_list if t)
        implicit: tuple[str, ...] = ()
        if has_sub:
            implicit = tuple(t for t in dict.fromkeys(captured_inputs(node)) if t not in ins)
            ins.update(dict.fromkeys(implicit))
        inputs = tuple(ins)  # distinct tensors read, for bytes and edges
        outputs = tuple(o for o in out_list if o)
        flops, estimated = _node_flops(node, types, consts, in_list, out_list, has_sub)
        if tainted and any(t in tainted for t in inputs):
            estimated = True
            tainted.update(outputs)
        if bounded and any(o in bounded for o in outputs):
            estimated = True
        in_sizes = [sizes.get(t) for t in inputs]
        out_sizes = [sizes.get(o) for o in outputs]
        if None in in_sizes or None in out_sizes:
            estimated = True  # a non-tensor value (sequence, map, optional): no size
        bytes_read = sum(b for b in in_sizes if b is not None)
        written = sum(b for b in out_sizes if b is not None)
        params = sum(sizes.get(t, 0) for t in inputs if t in initializers)
        first = types.get(outputs[0]) if outputs else None
        dtype = _elem_name(first.elem) if first is not None and first.is_tensor else "undefined"
        # Op.inputs/outputs keep the node's own argument lists ('' for omitted optionals, repeats kept) so that
        # passes can rebuild the node; subgraph captures are listed apart as implicit inputs.
        ops.append(Op(name=name, op_type=node.op_type, inputs=tuple(in_list), outputs=tuple(out_list),
                      implicit_inputs=implicit, flops=flops,
                      bytes_read=bytes_read, bytes_written=written, param_bytes=params, output_bytes=written,
                      estimated=estimated, domain=node.domain, dtype=dtype))
        for t, b in zip(inputs, in_sizes, strict=True):
            src = producer.get(t)
            if src is not None and src != name:
                edges.append(Edge(src, name, t, b or 0))
    return OpGraph.build(
        graph.name or stem, ops, edges, tensors=tensors,
        graph_inputs=[vi.name for vi in graph.input if vi.name not in initializers],
        graph_outputs=[vi.name for vi in graph.output], initializers=initializers, source=source)
