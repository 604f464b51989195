"""Import-time model rewriting that shape inference needs: input values, opset upgrade, constant evaluation, If
inlining.  Used by `onnx_import` (to plan) and `onnx_export` (to run), which therefore see the same nodes.

* `bind_input_values(model, values)`: graph inputs given with ``--input-value NAME=VALUE`` become initializers.
* `upgrade_opset(model)`: onnx's version converter to opset 14, where onnx's shape inference propagates
  ``Shape -> Slice -> Concat -> Reshape`` chains (it does not at 11-13); node names are kept (restored by position
  if the converter dropped them), so plans still name the user's ops.  A model the converter cannot convert is
  left as it is.
* `ConstantValues`: the values of small tensors (<= `SMALL_BYTES`) that depend on no graph input: initializers,
  `Constant`s, `Shape`/`Size` of a tensor with a static shape, and every deterministic node whose inputs are all
  such values, each evaluated on its own (`onnx_eval.evaluate_node`: onnx's reference evaluator, then
  onnxruntime).  A node neither can evaluate is left unevaluated and its reason kept (`failures`), so an error can
  name it.  We evaluate ourselves rather than run onnxruntime's basic graph optimisation because that rewrites
  and renames nodes (fusions, eliminated Identities), and plans must name the user's ops; our evaluation only
  adds knowledge and keeps every node.
* `with_constants(model, values)`: a scratch copy in which those tensors are initializers (their producers
  removed), for shape inference to see the values.
* `inline_constant_ifs(model, values)`: an `If` whose condition is known is replaced by its branch's nodes, named
  ``<If name>/<node name>``; their local tensors are prefixed the same way and the branch outputs take the If's
  output names.  An If on a value we cannot know stays one op.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, helper, numpy_helper, version_converter

from planner.errors import InputError
from planner.ir.onnx_eval import EvaluationError, evaluate_node

__all__ = ["SMALL_BYTES", "ConstantValues", "bind_input_values", "upgrade_opset", "with_constants",
           "inline_constant_ifs", "UPGRADE_OPSET"]

SMALL_BYTES = 64 * 1024  # tensors that can hold shapes, pads, conditions; larger ones are weights
UPGRADE_OPSET = 14
NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"})
_CANON = {"ai.onnx": ""}


def _has_subgraph(node: NodeProto) -> bool:
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute)


def _opsets(model: ModelProto) -> dict[str, int]:
    return {_CANON.get(o.domain, o.domain): int(o.version) for o in model.opset_import}


# --------------------------------------------------------------------------- input values
def bind_input_values(model: ModelProto, values: Mapping[str, Sequence[float]], shown: str) -> None:
    """Make each named graph input an initializer holding the given values (dtype and shape from the input's
    declaration: a scalar input takes one value, a static shape takes that many, a 1-D dynamic one any number)."""
    inits = {t.name for t in model.graph.initializer}
    by_name = {vi.name: vi for vi in model.graph.input if vi.name not in inits}
    for name, raw in values.items():
        vi = by_name.get(name)
        if vi is None:
            raise InputError(f"--input-value given for {name!r}, which is not a graph input", path=shown,
                             fix=f"graph inputs: {', '.join(list(by_name)[:5]) or 'none'}")
        tt = vi.type.tensor_type
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type) if tt.elem_type else np.dtype(np.float32)
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim] \
            if tt.HasField("shape") else None
        flat = list(raw)
        if dims is None:
            shape: tuple[int, ...] = () if len(flat) == 1 else (len(flat),)
        elif None not in dims:
            shape = tuple(dims)  # type: ignore[arg-type]
        elif len(dims) == 1:
            shape = (len(flat),)
        elif len(flat) == 1:
            shape = (1,) * len(dims)
        else:
            raise InputError(f"--input-value {name}: {len(flat)} values for an input of dynamic shape "
                             f"{[d or '?' for d in dims]}", path=shown, fix="give one value, or fix its shape")
        if math.prod(shape) != len(flat):
            raise InputError(f"--input-value {name}: {len(flat)} value(s) for an input of shape "
                             f"{'x'.join(map(str, shape)) or 'scalar'}", path=shown,
                             fix=f"give {math.prod(shape)} comma-separated value(s)")
        arr = np.asarray(flat, dtype=np.float64).astype(dtype).reshape(shape)
        model.graph.initializer.append(numpy_helper.from_array(arr, name))
        if model.ir_version >= 4:  # before IR 4 an initializer must also be listed as an input
            keep = [v for v in model.graph.input if v.name != name]
            del model.graph.input[:]
            model.graph.input.extend(keep)


# --------------------------------------------------------------------------- opset upgrade
def upgrade_opset(model: ModelProto) -> ModelProto | None:
    """The model converted to opset `UPGRADE_OPSET` with its node names kept, or None when the model is at or
    above it already or onnx's converter cannot convert it."""
    if _opsets(model).get("", UPGRADE_OPSET) >= UPGRADE_OPSET:
        return None
    try:
        converted = version_converter.convert_version(model, UPGRADE_OPSET)
    except Exception:  # noqa: BLE001 - the converter raises plain RuntimeErrors for what it cannot convert
        return None
    old, new = list(model.graph.node), list(converted.graph.node)
    if len(old) == len(new) and all(a.op_type == b.op_type for a, b in zip(old, new, strict=True)):
        for a, b in zip(old, new, strict=True):
            b.name = a.name  # the converter may drop or rename; same op at the same position: same node
    return converted


# --------------------------------------------------------------------------- constant values
def _size_bytes(t: TensorProto) -> int:
    itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize if t.data_type else 4
    return math.prod(t.dims) * itemsize


class ConstantValues:
    """Values of small tensors that depend on no graph input (see the module docstring)."""

    def __init__(self) -> None:
        self.values: dict[str, np.ndarray] = {}
        self.failures: dict[str, str] = {}  # node name -> why it was not evaluated
        self._skipped: set[str] = set()  # outputs known to be too large or not evaluable

    def evaluate(self, model: ModelProto, static_shapes: Mapping[str, tuple[int, ...] | None],
                 names: Sequence[str]) -> int:
        """Evaluate every main-graph node whose value is now computable; returns how many tensors were added."""
        graph = model.graph
        small = {t.name: t for t in graph.initializer
                 if t.data_location != TensorProto.EXTERNAL and _size_bytes(t) <= SMALL_BYTES}
        opsets = _opsets(model)
        added = 0
        for node, name in zip(graph.node, names, strict=True):
            outs = [o for o in node.output if o]
            if not outs or all(o in self.values or o in self._skipped for o in outs):
                continue
            domain = _CANON.get(node.domain, node.domain)
            if domain != "" or node.op_type in NONDETERMINISTIC or _has_subgraph(node):
                continue
            if node.op_type in ("Shape", "Size"):
                shape = static_shapes.get(node.input[0]) if node.input else None
                if shape is None:
                    continue
                self.values[outs[0]] = _shape_value(node, shape)
                added += 1
                continue
            inputs: list[np.ndarray | None] = []
            ready = True
            for t in node.input:
                if not t:
                    inputs.append(None)
                elif t in self.values:
                    inputs.append(self.values[t])
                elif t in small:
                    self.values[t] = numpy_helper.to_array(small[t])
                    inputs.append(self.values[t])
                else:
                    ready = False
                    break
            if not ready:
                continue
            try:
                named = NodeProto()
                named.CopyFrom(node)
                named.name = name
                results = evaluate_node(named, inputs, opsets, model.ir_version)
            except EvaluationError as exc:
                self.failures[name] = str(exc)
                self._skipped.update(outs)
                continue
            for o, v in zip(outs, results, strict=False):
                if v.nbytes <= SMALL_BYTES and v.dtype != object:
                    self.values[o] = v
                    added += 1
                else:
                    self._skipped.add(o)
        return added


def _shape_value(node: NodeProto, shape: tuple[int, ...]) -> np.ndarray:
    if node.op_type == "Size":
        return np.array(math.prod(shape), dtype=np.int64)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end", None)
    return np.array(shape[start:end], dtype=np.int64)


def with_constants(model: ModelProto, values: Mapping[str, np.ndarray]) -> ModelProto:
    """A copy of `model` where the given tensors are initializers and nodes producing only such tensors are gone
    (for shape inference: it reads initializer values but not computed ones)."""
    scratch = ModelProto()
    scratch.CopyFrom(model)
    graph = scratch.graph
    have = {t.name for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    keep = [n for n in graph.node
            if not all((not o) or (o in values and o not in outputs) for o in n.output)]
    removed = {o for n in graph.node for o in n.output if o} - {o for n in keep for o in n.output}
    del graph.node[:]
    graph.node.extend(keep)
    graph.initializer.extend(numpy_helper.from_array(values[t], t) for t in sorted(removed) if t not in have)
    if scratch.ir_version < 4:
        graph.input.extend(helper.make_tensor_value_info(t, helper.np_dtype_to_tensor_dtype(values[t].dtype),
                                                         values[t].shape) for t in sorted(removed) if t not in have)
    vis = [vi for vi in graph.value_info if vi.name not in removed]
    del graph.value_info[:]
    graph.value_info.extend(vis)
    return scratch


# --------------------------------------------------------------------------- If inlining
def _rename_in_graph(graph: GraphProto, mapping: Mapping[str, str]) -> None:
    """Rename free uses of `mapping`'s names in a nested subgraph (names it defines itself shadow them)."""
    local = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    local |= {o for n in graph.node for o in n.output}
    inner = {k: v for k, v in mapping.items() if k not in local}
    if not inner:
        return
    for node in graph.node:
        for i, t in enumerate(node.input):
            if t in inner:
                node.input[i] = inner[t]
        for a in node.attribute:
            for sub in ([a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)
                        if a.type == AttributeProto.GRAPHS else []):
                _rename_in_graph(sub, inner)
    for o in graph.output:
        if o.name in inner:
            o.name = inner[o.name]


def _branch_nodes(if_node: NodeProto, if_name: str, branch: GraphProto, branch_names: Sequence[str]
                  ) -> tuple[list[NodeProto], list[TensorProto]]:
    """The branch's nodes and initializers, renamed for the enclosing graph (see `inline_constant_ifs`)."""
    prefix = f"{if_name}/"
    defined = [o for n in branch.node for o in n.output if o] + [t.name for t in branch.initializer]
    mapping = {t: prefix + t for t in defined}
    extra: list[NodeProto] = []
    for k, (out, target) in enumerate(zip(branch.output, if_node.output, strict=True)):
        if not target:
            continue
        produced_here = any(out.name in n.output for n in branch.node)
        if produced_here and mapping.get(out.name, "").startswith(prefix) and out.name not in \
                {o.name for o in branch.output[:k]}:
            mapping[out.name] = target
        else:  # an outer tensor, an initializer or an output listed twice: copy it
            extra.append(helper.make_node("Identity", [mapping.get(out.name, out.name)], [target],
                                          name=f"{prefix}output_{k}"))
    nodes = []
    for node, name in zip(branch.node, branch_names, strict=True):
        new = NodeProto()
        new.CopyFrom(node)
        new.name = prefix + name
        for i, t in enumerate(new.input):
            if t in mapping:
                new.input[i] = mapping[t]
        for i, t in enumerate(new.output):
            if t in mapping:
                new.output[i] = mapping[t]
        for a in new.attribute:
            for sub in ([a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)
                        if a.type == AttributeProto.GRAPHS else []):
                _rename_in_graph(sub, mapping)
        nodes.append(new)
    inits = []
    for t in branch.initializer:
        new_t = TensorProto()
        new_t.CopyFrom(t)
        new_t.name = mapping[t.name]
        inits.append(new_t)
    return nodes + extra, inits


def inline_constant_ifs(model: ModelProto, values: Mapping[str, np.ndarray], names: Sequence[str],
                        node_names) -> int:
    """Replace each main-graph If whose condition is in `values` by the chosen branch; returns how many.
    `node_names(nodes)` is the importer's naming rule (for the branch's unnamed nodes)."""
    graph = model.graph
    out: list[NodeProto] = []
    inits: list[TensorProto] = []
    done = 0
    for node, name in zip(list(graph.node), names, strict=True):
        cond = values.get(node.input[0]) if node.op_type == "If" and node.input else None
        if cond is None or _CANON.get(node.domain, node.domain) != "" or cond.size != 1:
            out.append(node)
            continue
        which = "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"
        branch = next(a.g for a in node.attribute if a.name == which)
        nodes, branch_inits = _branch_nodes(node, name, branch, node_names(branch.node))
        out.extend(nodes)
        inits.extend(branch_inits)
        done += 1
    if done:
        del graph.node[:]
        graph.node.extend(out)
        graph.initializer.extend(inits)
        onnx_outputs = {o for n in out for o in n.output}
        vis = [vi for vi in graph.value_info if vi.name in onnx_outputs]
        del graph.value_info[:]
        graph.value_info.extend(vis)
    return done
