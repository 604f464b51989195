"""Reading, parsing and checking an ONNX file, and the user's input shapes: steps 1-7 of `planner.ir.onnx_import`.

Each check either passes or raises an `OpplanError` naming the file, the item and the fix.  External tensors are
checked against their files, and only the small ones (which may hold shape values) are read: weights are never
needed to plan, only their shapes.  Op types must have an ONNX schema at the model's opset (``com.microsoft``
contrib ops accepted).  Input shapes given by the user are checked against the graph inputs and written into them;
any dynamic input dimension left is reported at once.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import ModelProto, TensorProto, numpy_helper

from planner.errors import DynamicShapeError, InputError, UnsupportedOpError
from planner.ir.onnx_walk import (
    CANON_DOMAIN,
    CONTRIB_DOMAINS,
    SHOW_ITEMS,
    all_node_lists,
    is_external,
    iter_tensors,
    names_of_nodes,
    one_line,
)

__all__ = ["apply_input_shapes", "check_reshape_counts", "check_dynamic_inputs", "check_external_data",
           "check_op_types", "check_structure", "check_tensor_outputs", "graph_inputs", "parse_model",
           "read_model_file", "read_old_ir_as_4"]


_PROTOBUF_LIMIT_BYTES = 2**31 - 1

_SMALL_EXTERNAL_BYTES = 64 * 1024  # external tensors up to this size are read (they may hold shape values)

_SMALL_EXTERNAL_TOTAL_BYTES = 256 * 2**20

_IR_INITIALIZERS_APART = 4  # from this IR version on an initializer need not be listed among the graph inputs


def read_model_file(p: Path, shown: str) -> bytes:
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


def parse_model(data: bytes, shown: str) -> ModelProto:
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        if data[:1] == b"\x08":  # starts like an ONNX model (field 1, ir_version)
            raise InputError(f"truncated or corrupt ONNX file ({one_line(exc)})", path=shown,
                             fix="re-export the model or download it again") from None
        raise InputError("not an ONNX model (the file is not an ONNX protobuf)", path=shown,
                         fix="pass an .onnx model file") from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise InputError("not an ONNX model (no IR version or no graph)", path=shown,
                         fix="pass an .onnx model file; re-export it if it is truncated or corrupt")
    return model


def read_old_ir_as_4(model: ModelProto, external: bool) -> None:
    """IR 3 asked that every initializer also be a graph input; files of that time often list only the real
    inputs (onnxruntime's own `datasets/mul_1.onnx`), and onnxruntime runs them.  Such a graph means the same
    read as IR 4 (an initializer that is also an input stays an input with a default), so the in-memory copy is
    read as IR 4 rather than refused by the checker.  External data is checked from the file, so left alone."""
    if not external and model.ir_version < _IR_INITIALIZERS_APART:
        model.ir_version = _IR_INITIALIZERS_APART


def check_tensor_outputs(model: ModelProto, shown: str) -> None:
    """Graph outputs must be tensors: a sequence or map output (ai.onnx.ml ZipMap, SequenceConstruct) has no
    shape to plan with nor a tensor to send between ranks."""
    bad = [f"{vi.name!r} ({vi.type.WhichOneof('value')})" for vi in model.graph.output
           if vi.type.WhichOneof("value") not in (None, "tensor_type")]
    if bad:
        raise InputError(f"graph output(s) {', '.join(bad[:SHOW_ITEMS])} are not tensors; opplan plans and runs tensor "
                         "graphs", path=shown, fix="export the model with tensor outputs (e.g. skl2onnx's "
                                                   "options={'zipmap': False} for classifiers)")


def check_structure(model: ModelProto, p: Path, shown: str, external: bool) -> None:
    # The checker resolves external data files against the folder of the model it is given: with external data,
    # check the file itself (its folder is the base), otherwise the parsed model (no second read).
    try:
        onnx.checker.check_model(str(p) if external else model)
    except onnx.checker.ValidationError as exc:
        raise InputError(f"invalid ONNX model (a broken graph, or a truncated or corrupt file): {one_line(exc)}",
                         path=shown, fix="re-export the model; onnx.checker.check_model shows the details") from None


def check_external_data(model: ModelProto, base_dir: Path, shown: str) -> bool:
    """Check every external tensor's file; read the small ones.  True when the model has external data."""
    base = base_dir.resolve()
    loaded = 0
    found = False
    for t in iter_tensors(model.graph):
        if not is_external(t):
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


@lru_cache(maxsize=1)
def _schema_domains() -> frozenset[str]:
    return frozenset(s.domain for s in onnx.defs.get_all_schemas_with_history())


def check_op_types(model: ModelProto, shown: str) -> None:
    opsets = {CANON_DOMAIN.get(o.domain, o.domain): o.version for o in model.opset_import}
    known = _schema_domains()
    bad: dict[tuple[str, str], list[str]] = {}
    why: dict[tuple[str, str], str] = {}
    checked: dict[tuple[str, str], bool] = {}
    for prefix, nodes in all_node_lists(model.graph):
        names = names_of_nodes(nodes)
        for node, name in zip(nodes, names, strict=True):
            domain = CANON_DOMAIN.get(node.domain, node.domain)
            key = (domain, node.op_type)
            ok = checked.get(key)
            if ok is None:
                ok = True
                if domain in CONTRIB_DOMAINS:
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
            more = f" and {len(node_names) - SHOW_ITEMS} more" if len(node_names) > SHOW_ITEMS else ""
            listed.append(f"{op_type} (domain {domain or 'ai.onnx'!r}: {why[(domain, op_type)]}) "
                          f"at node(s) {', '.join(map(repr, node_names[:SHOW_ITEMS]))}{more}")
        raise UnsupportedOpError("unsupported op type(s): " + "; ".join(listed), path=shown,
                                 fix="replace them by standard ONNX ops (or export with a higher opset) and re-export")


def graph_inputs(model: ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer} | {t.values.name for t in model.graph.sparse_initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def _fmt_dims(dims: Sequence[object]) -> str:
    return "x".join(str(d) for d in dims)


def _dim_label(d: onnx.TensorShapeProto.Dimension) -> object:
    if d.HasField("dim_value") and d.dim_value > 0:
        return d.dim_value
    return d.dim_param or "?"


def apply_input_shapes(model: ModelProto, input_shapes: Mapping[str, Sequence[int]], shown: str
                       ) -> dict[str, tuple[int, int]]:
    """Give the named graph inputs these shapes: dynamic dimensions take their values, and a leading dimension the
    model fixes may change too (a static batch, `rebatch_reshapes`); any other fixed dimension must stay.  Returns
    the inputs whose fixed batch changed, input -> (old, new), for `check_reshape_counts` after inference."""
    batches: dict[str, tuple[int, int]] = {}
    by_name = {vi.name: vi for vi in graph_inputs(model)}
    inits = {t.name for t in model.graph.initializer}
    for name, dims in input_shapes.items():
        if name not in by_name:
            if name in inits:
                raise InputError(f"input shape given for {name!r}, an initializer (weight), not a graph input",
                                 path=shown, fix=f"graph inputs: {', '.join(list(by_name)[:SHOW_ITEMS]) or 'none'}")
            close = difflib.get_close_matches(name, list(by_name), n=1, cutoff=0.4)
            fix = (f"did you mean {close[0]!r}?" if close
                   else f"graph inputs: {', '.join(list(by_name)[:SHOW_ITEMS]) or 'none'}")
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
                    if i == 0:
                        batches[name] = (d.dim_value, v)
                        continue
                    raise InputError(
                        f"input {name!r} dimension {i} is fixed to {d.dim_value} in the model but the given shape "
                        f"{_fmt_dims(values)} says {v}", path=shown,
                        fix="change only the dynamic dimensions and the leading (batch) one")
        tt.shape.Clear()
        for v in values:
            tt.shape.dim.add().dim_value = v
    if batches:
        rebatch_reshapes(model, batches, shown)
    # Stale shapes from export (e.g. batch 1 written into value_info) would contradict the new input shapes:
    # let inference recompute everything a standard op produces.
    standard = {o for node in model.graph.node if CANON_DOMAIN.get(node.domain, node.domain) not in
                CONTRIB_DOMAINS for o in node.output}
    keep = [vi for vi in model.graph.value_info if vi.name not in standard]
    del model.graph.value_info[:]
    model.graph.value_info.extend(keep)
    for vi in model.graph.output:
        if vi.name in standard and vi.type.HasField("tensor_type"):
            vi.type.tensor_type.ClearField("shape")
    return batches


def rebatch_reshapes(model: ModelProto, batches: Mapping[str, tuple[int, int]], shown: str) -> None:
    """A static batch changed (input -> (old, new) leading dimension): every Reshape of an activation to a constant
    shape that starts with the old batch starts with the new one (exporters write the batch into flattening
    Reshapes, e.g. [1, 1024] before a classifier).  Inputs whose batches disagree are refused; a model that fixes
    the batch elsewhere fails shape inference next, which names the node."""
    pairs = set(batches.values())
    if len(pairs) > 1:
        raise InputError(f"the given shapes change the fixed leading dimension of {', '.join(map(repr, batches))} "
                         f"differently ({', '.join(f'{a} -> {b}' for a, b in sorted(pairs))})", path=shown,
                         fix="give every fixed-batch input the same new batch")
    ((old, new),) = pairs
    inits = {t.name: t for t in model.graph.initializer}
    constants = {node.output[0]: attr.t for node in model.graph.node if node.op_type == "Constant"
                 for attr in node.attribute if attr.name == "value"}
    reshapes = [n for n in model.graph.node if n.op_type == "Reshape" and len(n.input) > 1]
    of_weights = {n.input[1] for n in reshapes if n.input[0] in inits}  # a shape shared with a weight stays
    for node in reshapes:
        if node.input[0] in inits or node.input[1] in of_weights:
            continue
        shape = inits.get(node.input[1]) or constants.get(node.input[1])
        if shape is None:
            continue
        value = numpy_helper.to_array(shape).copy()
        if value.ndim == 1 and value.size and value[0] == old:
            value[0] = new
            shape.CopyFrom(numpy_helper.from_array(value, shape.name))


def check_reshape_counts(model: ModelProto, shapes: Mapping[str, tuple[int, ...] | None], shown: str) -> None:
    """After a fixed batch changed: every Reshape whose input and output shapes are known keeps its element count
    (onnx's shape inference does not check it), so a model that fixes its batch in a shape the batch change could
    not follow is refused at import, naming the node, not at run time."""
    for node in model.graph.node:
        if node.op_type != "Reshape" or len(node.input) < 2 or not node.output:
            continue
        src, dst = shapes.get(node.input[0]), shapes.get(node.output[0])
        if src is None or dst is None:
            continue
        n_src, n_dst = math.prod(src), math.prod(dst)
        if n_src != n_dst:
            raise InputError(f"Reshape {node.name or node.output[0]!r} turns {_fmt_dims(src)} ({n_src} elements) "
                             f"into {_fmt_dims(dst)} ({n_dst}): the model fixes its batch there", path=shown,
                             fix="plan the batch the model was exported with, or re-export it with a dynamic batch")


# Sizes tried, round by round, for a dynamic dimension other than the batch (dim 0) when suggesting --input-shape:
# the spatial dims of an image-like input (rank 4 or 5, dims 2 and up: a 1x1 image fails any convolution wider
# than 1) take typical image sizes, any other dim (a sequence length) the smallest size first.
_SPATIAL_SIZES = (224, 256, 299, 512, 128, 64, 32, 16)
_OTHER_SIZES = (1, 16, 128, 224, 512, 64, 32, 8)


def _is_dynamic(d: onnx.TensorShapeProto.Dimension) -> bool:
    return not (d.HasField("dim_value") and d.dim_value > 0)


def _example_dims(dims: Sequence[onnx.TensorShapeProto.Dimension], attempt: int) -> list[int]:
    """Known dims as they are, a dynamic batch (dim 0) 1, any other dynamic dim the `attempt`-th size to try."""
    image_like = len(dims) in (4, 5)
    return [d.dim_value if not _is_dynamic(d) else
            1 if i == 0 else (_SPATIAL_SIZES if image_like and i >= 2 else _OTHER_SIZES)[attempt]
            for i, d in enumerate(dims)]


def _passes_shape_inference(model: ModelProto, shapes: Mapping[str, list[int]]) -> bool:
    """Whether onnx's shape inference, with these input shapes, gives no tensor a dimension below 1."""
    trial = ModelProto()
    trial.CopyFrom(model)
    del trial.graph.value_info[:]
    for vi in trial.graph.input:
        if vi.name in shapes:
            for d, v in zip(vi.type.tensor_type.shape.dim, shapes[vi.name], strict=True):
                d.Clear()
                d.dim_value = v
    try:
        inferred = onnx.shape_inference.infer_shapes(trial, strict_mode=True)
    except Exception:  # noqa: BLE001 - onnx raises several types; any failure means these shapes do not pass
        return False
    infos = (*inferred.graph.value_info, *inferred.graph.output)
    return not any(d.HasField("dim_value") and d.dim_value < 1
                   for vi in infos if vi.type.HasField("tensor_type") for d in vi.type.tensor_type.shape.dim)


def _example_shapes(model: ModelProto, dynamic: Sequence[onnx.ValueInfoProto]) -> dict[str, list[int]] | None:
    """Input shapes for the advice: the first round of sizes (`_SPATIAL_SIZES`, `_OTHER_SIZES`) that passes shape
    inference; None when none does (only a real value can say)."""
    needs_size = any(_is_dynamic(d) for vi in dynamic for d in list(vi.type.tensor_type.shape.dim)[1:])
    for attempt in range(len(_SPATIAL_SIZES) if needs_size else 1):
        shapes = {vi.name: _example_dims(vi.type.tensor_type.shape.dim, attempt) for vi in dynamic}
        if _passes_shape_inference(model, shapes):
            return shapes
    return None


def check_dynamic_inputs(model: ModelProto, shown: str) -> None:
    """DynamicShapeError naming every dynamic input dimension, with an --input-shape example that passes shape
    inference (a batch of 1, a typical image or sequence size elsewhere), or the dims that need a real value."""
    problems: list[str] = []
    unranked: list[str] = []
    dynamic: list[onnx.ValueInfoProto] = []
    for vi in graph_inputs(model):
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            problems.append(f"{vi.name!r} (rank unknown)")
            unranked.append(f"--input-shape {vi.name}=<dims>")
            continue
        dyn = [(i, d) for i, d in enumerate(tt.shape.dim) if _is_dynamic(d)]
        if dyn:
            what = ", ".join(f"dim {i} ({d.dim_param!r})" if d.dim_param else f"dim {i} (unknown)"
                             for i, d in dyn)
            problems.append(f"{vi.name!r} {what}")
            dynamic.append(vi)
    if not problems:
        return
    shapes = _example_shapes(model, dynamic) if dynamic and not unranked else None
    if shapes is not None:
        examples = [f"--input-shape {name}={_fmt_dims(dims)}" for name, dims in shapes.items()]
        fix = f"give each a value, e.g. {' '.join(examples)}"
    else:
        examples = unranked + [f"--input-shape {vi.name}=" + "x".join(
            str(d.dim_value) if not _is_dynamic(d) else f"<{d.dim_param or f'dim {i}'}>"
            for i, d in enumerate(vi.type.tensor_type.shape.dim)) for vi in dynamic]
        fix = f"give each the size the model is used with: {' '.join(examples)}"
    raise DynamicShapeError(f"dynamic input dimensions without a value: {'; '.join(problems)}", path=shown, fix=fix)
