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
"""

from __future__ import annotations

import difflib
import hashlib
import math
import os
from collections import ChainMap
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import onnx
import onnx.inliner
from google.protobuf.message import DecodeError
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, numpy_helper

from planner.errors import DynamicShapeError, InputError, UnsupportedOpError
from planner.ir.graph import Edge, Op, OpGraph, SourceInfo, TensorInfo
from planner.ir.onnx_constants import (
    ConstantValues,
    bind_input_values,
    inline_constant_ifs,
    upgrade_opset,
    with_constants,
)
from planner.ir.onnx_legacy import upgrade_legacy
from planner.ir.op_workload import DATA_DEPENDENT, NodeShapes, op_flops

__all__ = ["load_onnx", "normalized_model", "node_names"]

_PROTOBUF_LIMIT_BYTES = 2**31 - 1
_SMALL_EXTERNAL_BYTES = 64 * 1024  # external tensors up to this size are read (they may hold shape values)
_SMALL_EXTERNAL_TOTAL_BYTES = 256 * 2**20
_MAX_ROUNDS = 32  # inference rounds: constant evaluation, If inlining, upgrade and bounds each need one
_CONTRIB_DOMAINS = frozenset({"com.microsoft"})
_CANON_DOMAIN = {"ai.onnx": ""}
_SHOW = 5  # items listed in one error message
_IR_INITIALIZERS_APART = 4  # from this IR version on an initializer need not be listed among the graph inputs


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
    if any(_is_external(t) for t in _iter_tensors(out.graph)):
        onnx.external_data_helper.load_external_data_for_model(out, str(p.parent))
    return out


def _options_key(options: Mapping[str, Sequence] | None) -> tuple[tuple[str, tuple], ...]:
    """A hashable, canonical form of --input-shape / --input-value options: sorted (name, values) pairs."""
    return tuple(sorted((k, tuple(v)) for k, v in (options or {}).items()))


def _normalized(p: Path, shown: str, shapes: tuple, values: tuple
                ) -> tuple[ModelProto, MutableMapping[str, _Type], frozenset[str], str]:
    try:
        st = p.stat()
        stamp = (str(p.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = (str(p), 0, 0)  # _read_file reports it
    return _normalized_cached(stamp, shown, shapes, values)


@lru_cache(maxsize=4)  # import and export (every rank's share) read the same model: rewrite it once per process
def _normalized_cached(stamp: tuple, shown: str, shapes: tuple, values: tuple
                       ) -> tuple[ModelProto, MutableMapping[str, _Type], frozenset[str], str]:
    p = Path(shown)
    data = _read_file(p, shown)
    sha = hashlib.sha256(data).hexdigest()
    model = _parse(data, shown)
    del data
    external = _check_external_data(model, p.parent, shown)
    if model.functions:
        try:
            model = onnx.inliner.inline_local_functions(model)
        except Exception as exc:  # onnx raises plain RuntimeError/ValueError for broken functions
            raise InputError(f"cannot inline the model's local functions: {_one_line(exc)}", path=shown,
                             fix="re-export the model; onnx.checker.check_model shows the details") from None
    _check_op_types(model, shown)
    _check_tensor_outputs(model, shown)
    _read_old_ir_as_4(model, external)
    _check_structure(model, p, shown, external)
    if shapes:
        _apply_input_shapes(model, dict(shapes), shown)
    if values:
        bind_input_values(model, dict(values), shown)
    _check_dynamic_inputs(model, shown)
    model, bounded, types = _infer_shapes(model, shown)
    return model, types, bounded, sha


# --------------------------------------------------------------------------- reading and parsing
def _read_file(p: Path, shown: str) -> bytes:
    if not p.exists():
        raise InputError("model file not found", path=shown, fix="check the path")
    if not p.is_file():
        raise InputError("is not a file", path=shown, fix="pass the path of an .onnx file")
    size = p.stat().st_size
    if size > _PROTOBUF_LIMIT_BYTES:
        raise InputError(f"ONNX file is {size} bytes, over protobuf's 2 GB limit", path=shown,
                         fix="save the model with external data (onnx.save_model(..., save_as_external_data=True))")
    try:
        return p.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the model file: {exc.strerror}", path=shown, fix="check permissions") from None


def _parse(data: bytes, shown: str) -> ModelProto:
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        if data[:1] == b"\x08":  # starts like an ONNX model (field 1, ir_version)
            raise InputError(f"truncated or corrupt ONNX file ({_one_line(exc)})", path=shown,
                             fix="re-export the model or download it again") from None
        raise InputError("not an ONNX model (the file is not an ONNX protobuf)", path=shown,
                         fix="pass an .onnx model file") from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise InputError("not an ONNX model (no IR version or no graph)", path=shown,
                         fix="pass an .onnx model file; re-export it if it is truncated or corrupt")
    return model


def _read_old_ir_as_4(model: ModelProto, external: bool) -> None:
    """IR 3 asked that every initializer also be a graph input; files of that time often list only the real
    inputs (onnxruntime's own `datasets/mul_1.onnx`), and onnxruntime runs them.  Such a graph means the same
    read as IR 4 (an initializer that is also an input stays an input with a default), so the in-memory copy is
    read as IR 4 rather than refused by the checker.  External data is checked from the file, so left alone."""
    if not external and model.ir_version < _IR_INITIALIZERS_APART:
        model.ir_version = _IR_INITIALIZERS_APART


def _check_tensor_outputs(model: ModelProto, shown: str) -> None:
    """Graph outputs must be tensors: a sequence or map output (ai.onnx.ml ZipMap, SequenceConstruct) has no
    shape to plan with nor a tensor to send between ranks."""
    bad = [f"{vi.name!r} ({vi.type.WhichOneof('value')})" for vi in model.graph.output
           if vi.type.WhichOneof("value") not in (None, "tensor_type")]
    if bad:
        raise InputError(f"graph output(s) {', '.join(bad[:_SHOW])} are not tensors; opplan plans and runs tensor "
                         "graphs", path=shown, fix="export the model with tensor outputs (e.g. skl2onnx's "
                                                   "options={'zipmap': False} for classifiers)")


def _check_structure(model: ModelProto, p: Path, shown: str, external: bool) -> None:
    # The checker resolves external data files against the folder of the model it is given: with external data,
    # check the file itself (its folder is the base), otherwise the parsed model (no second read).
    try:
        onnx.checker.check_model(str(p) if external else model)
    except onnx.checker.ValidationError as exc:
        raise InputError(f"invalid ONNX model (a broken graph, or a truncated or corrupt file): {_one_line(exc)}",
                         path=shown, fix="re-export the model; onnx.checker.check_model shows the details") from None


# --------------------------------------------------------------------------- external data
def _is_external(t: TensorProto) -> bool:
    return t.data_location == TensorProto.EXTERNAL


def _iter_graphs(graph: GraphProto) -> Iterator[GraphProto]:
    """graph and all its subgraphs, depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            for sub in _attr_graphs(attr):
                yield from _iter_graphs(sub)


def _attr_graphs(attr: AttributeProto) -> list[GraphProto]:
    if attr.type == AttributeProto.GRAPH:
        return [attr.g]
    if attr.type == AttributeProto.GRAPHS:
        return list(attr.graphs)
    return []


def _iter_tensors(graph: GraphProto) -> Iterator[TensorProto]:
    for g in _iter_graphs(graph):
        yield from g.initializer
        for node in g.node:
            for attr in node.attribute:
                if attr.type == AttributeProto.TENSOR:
                    yield attr.t
                elif attr.type == AttributeProto.TENSORS:
                    yield from attr.tensors


def _check_external_data(model: ModelProto, base_dir: Path, shown: str) -> bool:
    """Check every external tensor's file; read the small ones.  True when the model has external data."""
    base = base_dir.resolve()
    loaded = 0
    found = False
    for t in _iter_tensors(model.graph):
        if not _is_external(t):
            continue
        found = True
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location", "")
        target = (base / location).resolve()
        if not location or os.path.isabs(location) or base not in target.parents:
            raise InputError(f"tensor {t.name!r} stores its data at {location!r}, outside the model's folder",
                             path=shown, fix="keep external data files next to the model (relative paths)")
        if not target.is_file():
            raise InputError(f"external data file {location!r} of tensor {t.name!r} not found in {base_dir}",
                             path=shown, fix="copy the external data files next to the model")
        offset = int(info.get("offset", 0) or 0)
        length = info.get("length")
        size = target.stat().st_size
        n = int(length) if length else size - offset
        if offset + n > size or n < 0:
            raise InputError(f"external data file {location!r} is too short for tensor {t.name!r} "
                             f"(needs bytes {offset}..{offset + n}, has {size})", path=shown,
                             fix="the data file is truncated: copy it again or re-export the model")
        if n <= _SMALL_EXTERNAL_BYTES and loaded + n <= _SMALL_EXTERNAL_TOTAL_BYTES:
            with open(target, "rb") as fh:
                fh.seek(offset)
                t.raw_data = fh.read(n)
            del t.external_data[:]
            t.data_location = TensorProto.DEFAULT
            loaded += n
    return found


# --------------------------------------------------------------------------- op types
@lru_cache(maxsize=1)
def _schema_domains() -> frozenset[str]:
    return frozenset(s.domain for s in onnx.defs.get_all_schemas_with_history())


def _check_op_types(model: ModelProto, shown: str) -> None:
    opsets = {_CANON_DOMAIN.get(o.domain, o.domain): o.version for o in model.opset_import}
    known = _schema_domains()
    bad: dict[tuple[str, str], list[str]] = {}
    why: dict[tuple[str, str], str] = {}
    checked: dict[tuple[str, str], bool] = {}
    for prefix, nodes in _all_node_lists(model.graph):
        names = _node_names(nodes)
        for node, name in zip(nodes, names, strict=True):
            domain = _CANON_DOMAIN.get(node.domain, node.domain)
            key = (domain, node.op_type)
            ok = checked.get(key)
            if ok is None:
                ok = True
                if domain in _CONTRIB_DOMAINS:
                    pass
                elif domain not in known:
                    ok, why[key] = False, f"domain {domain!r} is not an ONNX domain this importer knows"
                else:
                    version = opsets.get(domain)
                    if version is not None and not onnx.defs.has(node.op_type, version, domain):
                        ok = False
                        if onnx.defs.has(node.op_type, domain):
                            first = onnx.defs.get_schema(node.op_type, domain).since_version
                            why[key] = f"not in opset {version} (it exists from opset {first})"
                        else:
                            why[key] = "no ONNX opset defines it"
                    elif version is None and not onnx.defs.has(node.op_type, domain):
                        ok, why[key] = False, "no ONNX opset defines it"
                checked[key] = ok
            if not ok:
                bad.setdefault(key, []).append(prefix + name)
    if bad:
        listed: list[str] = []
        for (domain, op_type), node_names in bad.items():
            more = f" and {len(node_names) - _SHOW} more" if len(node_names) > _SHOW else ""
            listed.append(f"{op_type} (domain {domain or 'ai.onnx'!r}: {why[(domain, op_type)]}) "
                          f"at node(s) {', '.join(map(repr, node_names[:_SHOW]))}{more}")
        raise UnsupportedOpError("unsupported op type(s): " + "; ".join(listed), path=shown,
                                 fix="replace them by standard ONNX ops (or export with a higher opset) and re-export")


def _all_node_lists(graph: GraphProto, prefix: str = "") -> Iterator[tuple[str, list[NodeProto]]]:
    """(name prefix, nodes) for the graph and every subgraph; subgraph nodes are shown as 'outer/inner'."""
    nodes = list(graph.node)
    yield prefix, nodes
    names = None
    for i, node in enumerate(nodes):
        for attr in node.attribute:
            for sub in _attr_graphs(attr):
                if names is None:
                    names = _node_names(nodes)
                yield from _all_node_lists(sub, f"{prefix}{names[i]}/{attr.name}/")


def node_names(model: ModelProto) -> list[str]:
    """The op names the importer gives the main graph's nodes, in node order (used to rebuild nodes)."""
    return _node_names(model.graph.node)


def _node_names(nodes: Sequence[NodeProto]) -> list[str]:
    """The ONNX node name; unnamed or duplicate-named nodes get f'{op_type}_{index}' (made unique)."""
    used: set[str] = set()
    keep = [False] * len(nodes)
    for i, node in enumerate(nodes):
        if node.name and node.name not in used:
            used.add(node.name)
            keep[i] = True
    out: list[str] = []
    for i, node in enumerate(nodes):
        if keep[i]:
            out.append(node.name)
            continue
        base = cand = f"{node.op_type}_{i}"
        k = 0
        while cand in used:
            k += 1
            cand = f"{base}_{k}"
        used.add(cand)
        out.append(cand)
    return out


# --------------------------------------------------------------------------- input shapes
def _graph_inputs(model: ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer} | {t.values.name for t in model.graph.sparse_initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def _fmt_dims(dims: Sequence[object]) -> str:
    return "x".join(str(d) for d in dims)


def _dim_label(d: onnx.TensorShapeProto.Dimension) -> object:
    if d.HasField("dim_value") and d.dim_value > 0:
        return d.dim_value
    return d.dim_param or "?"


def _apply_input_shapes(model: ModelProto, input_shapes: Mapping[str, Sequence[int]], shown: str) -> None:
    by_name = {vi.name: vi for vi in _graph_inputs(model)}
    inits = {t.name for t in model.graph.initializer}
    for name, dims in input_shapes.items():
        if name not in by_name:
            if name in inits:
                raise InputError(f"input shape given for {name!r}, an initializer (weight), not a graph input",
                                 path=shown, fix=f"graph inputs: {', '.join(list(by_name)[:_SHOW]) or 'none'}")
            close = difflib.get_close_matches(name, list(by_name), n=1, cutoff=0.4)
            fix = (f"did you mean {close[0]!r}?" if close
                   else f"graph inputs: {', '.join(list(by_name)[:_SHOW]) or 'none'}")
            raise InputError(f"input shape given for {name!r}, which is not a graph input", path=shown, fix=fix)
        try:
            values = tuple(int(d) for d in dims)
        except (TypeError, ValueError):
            values = ()
        if not values and len(tuple(dims)) or any(v <= 0 for v in values):
            raise InputError(f"input shape {_fmt_dims(tuple(dims))} for {name!r} must be positive integers",
                             path=shown, fix=f"e.g. --input-shape {name}=1x3x224x224")
        vi = by_name[name]
        if not vi.type.HasField("tensor_type"):
            raise InputError(f"graph input {name!r} is not a tensor; it cannot take an input shape", path=shown,
                             fix="remove it from --input-shape")
        tt = vi.type.tensor_type
        if tt.HasField("shape"):
            declared = list(tt.shape.dim)
            if len(declared) != len(values):
                raise InputError(
                    f"input {name!r} has rank {len(declared)} ({_fmt_dims([_dim_label(d) for d in declared])}) "
                    f"but the given shape {_fmt_dims(values)} has rank {len(values)}", path=shown,
                    fix=f"give {len(declared)} dimensions")
            for i, (d, v) in enumerate(zip(declared, values, strict=True)):
                if d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != v:
                    raise InputError(
                        f"input {name!r} dimension {i} is fixed to {d.dim_value} in the model but the given shape "
                        f"{_fmt_dims(values)} says {v}", path=shown, fix="change only the dynamic dimensions")
        tt.shape.Clear()
        for v in values:
            tt.shape.dim.add().dim_value = v
    # Stale shapes from export (e.g. batch 1 written into value_info) would contradict the new input shapes:
    # let inference recompute everything a standard op produces.
    standard = {o for node in model.graph.node if _CANON_DOMAIN.get(node.domain, node.domain) not in
                _CONTRIB_DOMAINS for o in node.output}
    keep = [vi for vi in model.graph.value_info if vi.name not in standard]
    del model.graph.value_info[:]
    model.graph.value_info.extend(keep)
    for vi in model.graph.output:
        if vi.name in standard and vi.type.HasField("tensor_type"):
            vi.type.tensor_type.ClearField("shape")


def _check_dynamic_inputs(model: ModelProto, shown: str) -> None:
    problems: list[str] = []
    examples: list[str] = []
    for vi in _graph_inputs(model):
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            problems.append(f"{vi.name!r} (rank unknown)")
            examples.append(f"--input-shape {vi.name}=<dims>")
            continue
        dyn = [(i, d) for i, d in enumerate(tt.shape.dim) if not (d.HasField("dim_value") and d.dim_value > 0)]
        if dyn:
            what = ", ".join(f"dim {i} ({d.dim_param!r})" if d.dim_param else f"dim {i} (unknown)"
                             for i, d in dyn)
            problems.append(f"{vi.name!r} {what}")
            example = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tt.shape.dim]
            examples.append(f"--input-shape {vi.name}={_fmt_dims(example)}")
    if problems:
        raise DynamicShapeError(f"dynamic input dimensions without a value: {'; '.join(problems)}", path=shown,
                                fix=f"give each a value, e.g. {' '.join(examples)}")


# --------------------------------------------------------------------------- shape inference
@dataclass(frozen=True, slots=True)
class _Type:
    shape: tuple[int, ...] | None  # None: unknown or not fully static
    elem: int  # TensorProto.DataType; 0 for non-tensors
    is_tensor: bool


_UNKNOWN = _Type(None, 0, True)


def _type_of(tp: onnx.TypeProto) -> _Type:
    if not tp.HasField("tensor_type"):
        return _Type(None, 0, False)
    tt = tp.tensor_type
    shape: tuple[int, ...] | None = None
    if tt.HasField("shape"):
        values = tuple(d.dim_value for d in tt.shape.dim)
        # dim_value 0 is a real (empty) dimension only when set; an unset one reads as 0 too
        if all(values) or all(d.HasField("dim_value") for d in tt.shape.dim):
            shape = values
    return _Type(shape, tt.elem_type, True)


def _type_map(graph: GraphProto, outer: Mapping[str, _Type] | None = None) -> MutableMapping[str, _Type]:
    """Tensor name -> type for a graph (a subgraph sees its enclosing scopes' names through `outer`)."""
    types: MutableMapping[str, _Type] = ChainMap({}, outer) if outer else {}  # type: ignore[arg-type]
    for t in graph.initializer:
        types[t.name] = _Type(tuple(t.dims), t.data_type, True)
    for st in graph.sparse_initializer:
        types[st.values.name] = _Type(tuple(st.dims), st.values.data_type, True)
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
        raise InputError(f"shape inference failed: {_one_line(exc)}", path=shown,
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


def _infer_shapes(model: ModelProto, shown: str) -> tuple[ModelProto, frozenset[str], MutableMapping[str, _Type]]:
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
        types = _type_map(graph)
        needed = {t for node in graph.node for t in node.input} | {vi.name for vi in graph.output}
        needed.update(t for node in graph.node if node.attribute and _has_subgraph(node) for t in _captured(node))
        unknown = []  # needed tensors (read by an op or a graph output) without a static shape
        progress = False
        for i, node in enumerate(graph.node):
            for o in node.output:
                ty = types.get(o, _UNKNOWN)
                if not (o and ty.is_tensor and ty.shape is None):
                    continue
                exact = _output_exact(node, o, types)
                if exact is not None:
                    _set_shape(graph, o, exact, ty.elem)
                    progress = True
                elif o in needed:
                    unknown.append((i, o))
        has_if = any(n.op_type == "If" and _CANON_DOMAIN.get(n.domain, n.domain) == "" for n in graph.node)
        if not unknown and not progress and not has_if:
            return model, frozenset(bounded), types
        if progress:
            continue
        if has_if or unknown:
            names = _node_names(graph.node)
            static = {k: ty.shape for k, ty in types.items() if ty.is_tensor}
            added = consts.evaluate(model, static, names)
            if has_if and inline_constant_ifs(model, consts.values, names, _node_names):
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
                _set_shape(graph, out, bound, types.get(out, _UNKNOWN).elem)
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
    names = _node_names(graph.node)
    types = _type_map(graph)
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
        listed = ", ".join(sorted(set(sources))[:_SHOW])
        return InputError(f"{what}: {why}; it depends on the value of graph input(s) {listed}", path=shown,
                          fix=f"the input shapes are static, so --input-shape cannot help: give the values with "
                              f"--input-value NAME=VALUE, e.g. --input-value {sorted(set(sources))[0]}=...")
    return InputError(f"{what}: {why}", path=shown, fix="re-export the model with static shapes")


def _output_exact(node: NodeProto, out: str, types: Mapping[str, _Type]) -> tuple[int, ...] | None:
    """Exact shapes onnx's inference leaves out: the mask of Dropout (opset < 12) has the input's shape."""
    if _CANON_DOMAIN.get(node.domain, node.domain) == "" and node.op_type == "Dropout" and len(node.output) > 1 \
            and out == node.output[1] and node.input:
        ty = types.get(node.input[0])
        return ty.shape if ty is not None else None
    return None


def _output_bound(node: NodeProto, out: str, types: Mapping[str, _Type]) -> tuple[int, ...] | None:
    """An upper bound on the shape of a data-dependent output, or None when there is none (yet)."""
    domain = _CANON_DOMAIN.get(node.domain, node.domain)
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


def _node_shapes(node: NodeProto, types: Mapping[str, _Type], ins: Sequence[str] | None = None,
                 outs: Sequence[str] | None = None) -> NodeShapes:
    """The node as the workload rules see it (`ins`/`outs`: node.input/node.output when already at hand)."""
    get = types.get
    shapes_in = tuple(ty.shape if (ty := get(t)) is not None else None
                      for t in (node.input if ins is None else ins))
    shapes_out = tuple(ty.shape if (ty := get(t)) is not None else None
                       for t in (node.output if outs is None else outs))
    return NodeShapes(node.op_type, node.domain, shapes_in, shapes_out, _attrs(node) if node.attribute else {})


def _free_names(graph: GraphProto) -> list[str]:
    """Names a (sub)graph reads from enclosing scopes, in order of first use."""
    local = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    local |= {st.values.name for st in graph.sparse_initializer}
    local |= {o for n in graph.node for o in n.output}
    free: dict[str, None] = {}
    for node in graph.node:
        for t in node.input:
            if t and t not in local:
                free[t] = None
        for attr in node.attribute:
            for sub in _attr_graphs(attr):
                for t in _free_names(sub):
                    if t not in local:
                        free[t] = None
    return list(free)


def _has_subgraph(node: NodeProto) -> bool:
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute)


def _captured(node: NodeProto) -> list[str]:
    """Outer-scope tensors the node's subgraphs read."""
    free: dict[str, None] = {}
    for a in node.attribute:
        for sub in _attr_graphs(a):
            free.update(dict.fromkeys(_free_names(sub)))
    return list(free)


def _graph_flops(graph: GraphProto, outer: Mapping[str, _Type], consts: _Consts) -> tuple[int, bool]:
    types = _type_map(graph, outer)
    total, estimated = 0, False
    for node in graph.node:
        f, e = _node_flops(node, types, consts)
        total += f
        estimated |= e
    return total, estimated


def _node_flops(node: NodeProto, types: Mapping[str, _Type], consts: _Consts, ins: Sequence[str] | None = None,
                outs: Sequence[str] | None = None, has_sub: bool = True) -> tuple[int, bool]:
    flops, estimated = op_flops(_node_shapes(node, types, ins, outs))
    if not has_sub:
        return flops, estimated
    subs = {a.name: a.g for a in node.attribute if a.type == AttributeProto.GRAPH}
    if not subs:
        return flops, estimated
    domain = _CANON_DOMAIN.get(node.domain, node.domain)
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
        if t is None or math.prod(t.dims) != 1 or _is_external(t):
            return None
        try:
            return int(numpy_helper.to_array(t).reshape(-1)[0])
        except (ValueError, TypeError):
            return None


def _build(model: ModelProto, types: Mapping[str, _Type], bounded: frozenset[str], source: SourceInfo,
           stem: str) -> OpGraph:
    graph = model.graph
    initializers = {t.name for t in graph.initializer} | {st.values.name for st in graph.sparse_initializer}
    tensors: dict[str, TensorInfo] = {}
    for name, ty in types.items():
        if ty.is_tensor and ty.shape is not None:
            tensors[name] = TensorInfo(name, ty.shape, _elem_name(ty.elem), _size_bytes(ty.shape, ty.elem))
    nodes = list(graph.node)
    names = _node_names(nodes)
    node_ins = [list(node.input) for node in nodes]
    node_outs = [list(node.output) for node in nodes]
    producer: dict[str, str] = {o: name for outs, name in zip(node_outs, names, strict=True) for o in outs if o}
    consts = _Consts(graph)
    tainted = set(bounded)  # tensors whose shape rests on a data-dependent bound
    sizes = {name: info.size_bytes for name, info in tensors.items()}
    ops: list[Op] = []
    edges: list[Edge] = []
    for node, name, in_list, out_list in zip(nodes, names, node_ins, node_outs, strict=True):
        has_sub = bool(node.attribute) and _has_subgraph(node)
        ins: dict[str, None] = dict.fromkeys(t for t in in_list if t)
        implicit: tuple[str, ...] = ()
        if has_sub:
            implicit = tuple(t for t in dict.fromkeys(_captured(node)) if t not in ins)
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


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 400 else text[:397] + "..."
