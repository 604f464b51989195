"""Emitters of the ops that move, select or reduce elements rather than compute them: shapes and layout
(Reshape, Transpose, Concat, Split, Slice, Pad ...), indexing (Gather, ScatterElements, GatherElements) and
reductions and their kin (ReduceSum ..., ArgMax, CumSum, TopK).

Registered on import (`planner.execute.codegen_emit`); `planner.execute.codegen_ops` imports this module, so
`emit` sees them.  Each returns None where it cannot write the op exactly, which selects the helper call.
"""

from __future__ import annotations

import numpy as np

from planner.execute.codegen_emit import _axis, _emits, _index, _ints, _is_float, _multi, dtype_source

# --- shapes and layout ------------------------------------------------------------------------------------------

@_emits("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape(node, ins, cx):
    return f"{ins[0]}.reshape({list(cx.shape(node.outputs[0]))})"  # the static output shape, written out


@_emits("Transpose")
def _transpose(node, ins, cx):
    perm = node.attrs.get("perm") or list(range(len(cx.shape(node.inputs[0]))))[::-1]
    return f"{ins[0]}.permute({list(perm)})"


@_emits("Expand")
def _expand(node, ins, cx):
    return f"{ins[0]}.expand({list(cx.shape(node.outputs[0]))})"


@_emits("Tile")
def _tile(node, ins, cx):
    reps = _ints(cx, node.inputs[1])
    return None if reps is None else f"{ins[0]}.repeat({reps})"


@_emits("Concat")
def _concat(node, ins, cx):
    xs = [e for t, e in zip(node.inputs, ins, strict=True) if t]
    rank = len(cx.shape(node.outputs[0]))
    return f"torch.cat([{', '.join(xs)}], dim={_axis(int(node.attrs['axis']), rank)})"


@_emits("Split")
@_multi
def _split(node, ins, cx):
    shape = cx.shape(node.inputs[0])
    axis = _axis(int(node.attrs.get("axis", 0)), len(shape))
    sizes = [cx.shape(o)[axis] for o in node.outputs]  # static: the outputs' own sizes
    return ["{" + "}, {".join(str(i) for i in range(len(node.outputs))) + "} = "
            f"torch.split({ins[0]}, {sizes}, dim={axis})"]


@_emits("Slice")
def _slice(node, ins, cx):
    shape = cx.shape(node.inputs[0])
    if cx.opset < 10:
        starts, ends = list(node.attrs["starts"]), list(node.attrs["ends"])
        axes = list(node.attrs.get("axes") or range(len(starts)))
        steps = [1] * len(starts)
    else:
        starts, ends = _ints(cx, node.inputs[1]), _ints(cx, node.inputs[2])
        axes = _ints(cx, node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] else None
        steps = _ints(cx, node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] else None
        if starts is None or ends is None or (len(node.inputs) > 3 and node.inputs[3] and axes is None) or \
                (len(node.inputs) > 4 and node.inputs[4] and steps is None):
            return None
        axes = axes if axes is not None else list(range(len(starts)))
        steps = steps if steps is not None else [1] * len(starts)
    index = [":"] * len(shape)
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        if step <= 0:
            return None  # reversed slices: the helper
        axis, n = _axis(axis, len(shape)), shape[_axis(axis, len(shape))]
        start = min(max(start + n if start < 0 else start, 0), n)
        end = min(max(end + n if end < 0 else end, 0), n)
        index[axis] = f"{start}:{end}" + (f":{step}" if step != 1 else "")
    while index and index[-1] == ":":
        index.pop()
    return f"{ins[0]}[{', '.join(index)}]" if index else ins[0]


@_emits("Shape")
def _shape(node, ins, cx):
    dims = list(cx.shape(node.inputs[0]))
    start, end = node.attrs.get("start", 0), node.attrs.get("end", None)
    return f"torch.tensor({dims[start:end]}, dtype=torch.int64)"


@_emits("ConstantOfShape")
def _constant_of_shape(node, ins, cx):
    value = node.attrs.get("value")
    fill = 0.0 if value is None else np.asarray(value).reshape(-1)[0].item()
    return f"torch.full({list(cx.shape(node.outputs[0]))}, {fill!r}, dtype={dtype_source(cx.dtype(node.outputs[0]))})"


@_emits("Pad")
def _pad(node, ins, cx):
    if node.attrs.get("mode", "constant") != "constant" or cx.opset < 11:
        return None
    pads = _ints(cx, node.inputs[1])
    value_t = node.inputs[2] if len(node.inputs) > 2 else ""
    value = cx.const(value_t) if value_t else np.zeros(1)
    if pads is None or value is None or (len(node.inputs) > 3 and node.inputs[3]) or min(pads) < 0:
        return None
    rank = len(cx.shape(node.inputs[0]))
    flat = [p for a in reversed(range(rank)) for p in (pads[a], pads[a + rank])]
    fill = np.asarray(value).reshape(-1)[0].item() if np.asarray(value).size else 0
    return f"F.pad({ins[0]}, {flat}, value={fill!r})"


# --- indexing ---------------------------------------------------------------------------------------------------

@_emits("Gather")
def _gather(node, ins, cx):
    rank = len(cx.shape(node.inputs[0]))
    axis = _axis(int(node.attrs.get("axis", 0)), rank)
    idx = _ints(cx, node.inputs[1])
    if idx is not None and len(idx) == 1 and cx.shape(node.inputs[1]) == ():
        index = str(idx[0])  # a scalar index drops the axis, as Python indexing does
    else:
        index = ins[1]  # advanced indexing: the index's shape replaces the axis; negative indices count from the end
    return f"{ins[0]}[{', '.join([':'] * axis + [index])}]"


@_emits("ScatterElements", "Scatter")
def _scatter_elements(node, ins, cx):
    shape = cx.shape(node.inputs[0])
    axis = _axis(int(node.attrs.get("axis", 0)), len(shape))
    idx = _index(cx, node.inputs[1], shape[axis])
    reduction = node.attrs.get("reduction", "none") or "none"
    if reduction == "none":
        return f"torch.scatter({ins[0]}, {axis}, {idx}, {ins[2]})"
    fn = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}[reduction]
    return f"torch.scatter_reduce({ins[0]}, {axis}, {idx}, {ins[2]}, {fn!r}, include_self=True)"


@_emits("GatherElements")
def _gather_elements(node, ins, cx):
    shape = cx.shape(node.inputs[0])
    axis = _axis(int(node.attrs.get("axis", 0)), len(shape))
    return f"torch.gather({ins[0]}, {axis}, {_index(cx, node.inputs[1], shape[axis])})"


# --- reductions and friends -------------------------------------------------------------------------------------

_REDUCE = {"ReduceSum": "torch.sum", "ReduceMean": "torch.mean", "ReduceMax": "torch.amax", "ReduceMin": "torch.amin"}


@_emits(*_REDUCE)
def _reduce(node, ins, cx):
    shape = cx.shape(node.inputs[0])
    since = 13 if node.op_type == "ReduceSum" else 18  # opset from which axes is an input
    if cx.opset >= since:
        axes = _ints(cx, node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else []
        if axes is None:
            return None
    else:
        axes = list(node.attrs.get("axes") or [])
    if not axes and int(node.attrs.get("noop_with_empty_axes", 0)):
        return ins[0]
    if not shape:
        return None
    dims = tuple(sorted({_axis(a, len(shape)) for a in axes or range(len(shape))}))
    keep = bool(int(node.attrs.get("keepdims", 1)))
    extra = ""
    if node.op_type == "ReduceSum" and not _is_float(cx.dtype(node.inputs[0])):
        extra = f", dtype={dtype_source(cx.dtype(node.inputs[0]))}"  # torch.sum would widen to int64
    return f"{_REDUCE[node.op_type]}({ins[0]}, dim={dims}, keepdim={keep}{extra})"


@_emits("ArgMax", "ArgMin")
def _arg(node, ins, cx):
    if int(node.attrs.get("select_last_index", 0)):
        return None
    fn = "torch.argmax" if node.op_type == "ArgMax" else "torch.argmin"
    keep = bool(int(node.attrs.get("keepdims", 1)))
    return f"{fn}({ins[0]}, dim={int(node.attrs.get('axis', 0))}, keepdim={keep})"


@_emits("CumSum")
def _cumsum(node, ins, cx):
    axis = _ints(cx, node.inputs[1])
    if axis is None or int(node.attrs.get("exclusive", 0)) or int(node.attrs.get("reverse", 0)):
        return None
    dtype = cx.dtype(node.inputs[0])
    keep = "" if dtype == "int64" or _is_float(dtype) else f", dtype={dtype_source(dtype)}"  # no widening
    return f"torch.cumsum({ins[0]}, dim={axis[0]}{keep})"


@_emits("TopK")
@_multi
def _topk(node, ins, cx):
    k = int(node.attrs["k"]) if cx.opset < 10 else (_ints(cx, node.inputs[1]) or [None])[0]
    if k is None:
        return None
    axis = int(node.attrs.get("axis", -1))
    largest = bool(int(node.attrs.get("largest", 1)))
    # A stable sort keeps equal values in index order, as ONNX TopK requires (torch.topk does not promise it).
    return [(f"{{0}}, {{1}} = (t.narrow({axis}, 0, {k}) for t in torch.sort({ins[0]}, dim={axis}, "
             f"descending={largest}, stable=True))")]

