"""One ONNX node -> plain PyTorch source: the lines `plan-codegen` writes for it.

`emit(node, cx)` returns the lines for one node, written out with the direct torch call where ONNX and torch agree
(``torch.matmul``, ``F.conv2d``, ``torch.cat``, slicing ...), with every attribute and every constant operand that
only steers the op (shapes, axes, k, pads) written as a Python literal, and static shapes (known after import)
written out.  A node whose semantics need more than that (ScatterND, pooling with ONNX's ceil-mode divisor, a
non-constant axes input, ...) becomes one call ``onnx_op("ScatterND", [...], {...}, opset=..., num_outputs=...)``
of the helper file `onnx_ops.py` that plan-codegen writes next to the code (`planner.execute.codegen_support`
builds it from this runtime's own op implementations, `planner/execute/ops/`).

The emitters never guess: each one checks what it relies on (constant operands, static shapes, attribute values)
and returns None otherwise, which selects the helper.  Results must equal the runtime's (`planner.execute.ops`):
the codegen tests run the written code and compare it with onnxruntime.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from planner.execute.ops import torch_dtype
from planner.execute.ops.nn import _pool_geometry, _torch_pad, _window_args
from planner.ir.onnx_values import NodeSpec

__all__ = ["EmitContext", "dtype_source", "emit", "helper_call", "literal"]


@dataclass(frozen=True)
class EmitContext:
    """What an emitter may know about a node's tensors.

    `expr(t)`: the Python expression for tensor t (a local name, or ``W["name"]`` for a weight); `const(t)`: its
    value when it is a constant (weights, folded values), else None; `shape(t)` and `dtype(t)`: its static shape
    and ONNX element type name; `opset`: the default domain's opset."""

    expr: Callable[[str], str]
    const: Callable[[str], np.ndarray | None]
    shape: Callable[[str], tuple[int, ...]]
    dtype: Callable[[str], str]
    opset: int


def dtype_source(onnx_type: str | int) -> str:
    """``torch.float32`` for 'float' (or its id 1)."""
    return str(torch_dtype(onnx_type))


def literal(value) -> str:
    """A Python literal for an attribute value: numbers, strings, lists; arrays as ``torch.tensor(...)``."""
    if isinstance(value, np.ndarray):
        return f"torch.tensor({value.tolist()!r}, dtype={dtype_source_np(value.dtype)})"
    if isinstance(value, np.generic):
        return repr(value.item())
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, float) and not np.isfinite(value):
        return f'float("{value}")'
    return repr(value)


def _num(value: float) -> str:
    """A float attribute as its shortest float32 spelling (ONNX stores float32: 1e-05, not 9.999999747378752e-06)."""
    return repr(float(str(np.float32(value))))


def dtype_source_np(dtype: np.dtype) -> str:
    return str(torch.from_numpy(np.zeros(0, dtype=dtype)).dtype)


def helper_call(node: NodeSpec, cx: EmitContext, outs: Sequence[str]) -> list[str]:
    """The fallback: one call of `onnx_op` from the helper file (the runtime's own implementation)."""
    ins = "[" + ", ".join(cx.expr(t) if t else "None" for t in node.inputs) + "]"
    attrs = "{" + ", ".join(f"{k!r}: {literal(v)}" for k, v in node.attrs.items()) + "}"
    shapes = [list(cx.shape(o)) if o else None for o in node.outputs]
    types = [cx.dtype(o) if o else None for o in node.outputs]
    target = ", ".join(outs) + ("," if len(outs) == 1 else "")
    return [(f"{target} = onnx_op({node.op_type!r}, {ins}, {attrs}, opset={cx.opset}, "
             f"output_shapes={shapes!r}, output_dtypes={types!r})")]


# --- helpers for the emitters ----------------------------------------------------------------------------------

def _ints(cx: EmitContext, t: str | None) -> list[int] | None:
    """A constant integer input as a list; None when absent or not constant."""
    if not t:
        return None
    value = cx.const(t)
    return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


def _axis(a: int, rank: int) -> int:
    return a + rank if a < 0 else a


def _is_float(onnx_type: str) -> bool:
    return torch_dtype(onnx_type).is_floating_point


def _meta(shape: Sequence[int], onnx_type: str = "float") -> torch.Tensor:
    """A shape-only tensor, to reuse the runtime's geometry functions (pads, pool sizes) at generation time."""
    return torch.empty(tuple(shape), dtype=torch_dtype(onnx_type), device="meta")


def _index(cx: EmitContext, t: str, size: int) -> str:
    """An index tensor for torch.scatter/gather: int64, negative indices wrapped (ONNX allows -size..size-1)."""
    value = cx.const(t)
    e = cx.expr(t)
    if cx.dtype(t) != "int64":
        e = f"{e}.long()"
    if value is not None and (np.asarray(value) >= 0).all():
        return e
    return f"{e} % {size}"


Emitter = Callable[[NodeSpec, list[str], EmitContext], "str | list[str] | None"]
_EMIT: dict[str, Emitter] = {}


def _emits(*op_types: str):
    def deco(fn: Emitter) -> Emitter:
        for op_type in op_types:
            _EMIT[op_type] = fn
        return fn

    return deco


def emit(node: NodeSpec, cx: EmitContext, outs: Sequence[str]) -> tuple[list[str], bool]:
    """Source lines computing `node`'s outputs into the names `outs` ('_' for an unused output) and whether they
    call the helper file.  An expression emitter (one output) returns the right-hand side; a multi-output one
    returns whole lines with ``{0}``, ``{1}`` ... where the output names go."""
    fn = _EMIT.get(node.op_type)
    ins = [cx.expr(t) if t else "None" for t in node.inputs]
    single = len(node.outputs) == 1 and bool(node.outputs[0])
    out = None
    if node.domain in ("", "ai.onnx") and fn is not None and (single or fn in _MULTI):
        out = fn(node, ins, cx)
    if out is None:
        return helper_call(node, cx, outs), True
    if isinstance(out, str):
        return [f"{outs[0]} = {out}"], False
    lines = []
    for line in out:
        for i, name in enumerate(outs):
            line = line.replace(f"{{{i}}}", name)
        lines.append(line)
    return lines, False


_MULTI: set[Emitter] = set()


def _multi(fn: Emitter) -> Emitter:
    """Marks an emitter that handles several outputs itself (its lines use {0}, {1} ... for the output names)."""
    _MULTI.add(fn)
    return fn


# --- element-wise ----------------------------------------------------------------------------------------------

_UNARY = {
    "Abs": "torch.abs", "Neg": "torch.neg", "Exp": "torch.exp", "Log": "torch.log", "Sqrt": "torch.sqrt",
    "Reciprocal": "torch.reciprocal", "Floor": "torch.floor", "Ceil": "torch.ceil", "Sign": "torch.sign",
    "Sigmoid": "torch.sigmoid", "Tanh": "torch.tanh", "Erf": "torch.erf", "Sin": "torch.sin", "Cos": "torch.cos",
    "Tan": "torch.tan", "Asin": "torch.asin", "Acos": "torch.acos", "Atan": "torch.atan", "Sinh": "torch.sinh",
    "Cosh": "torch.cosh", "Asinh": "torch.asinh", "Acosh": "torch.acosh", "Atanh": "torch.atanh",
    "Round": "torch.round", "Relu": "torch.relu", "Not": "torch.logical_not", "IsNaN": "torch.isnan",
    "Softsign": "F.softsign", "Mish": "F.mish",
}
for _op in _UNARY:
    _emits(_op)(lambda node, ins, cx: f"{_UNARY[node.op_type]}({ins[0]})")

_INFIX = {"Add": "+", "Sub": "-", "Mul": "*", "Less": "<", "Greater": ">", "LessOrEqual": "<=",
          "GreaterOrEqual": ">="}
_BINARY = {"Equal": "torch.eq", "And": "torch.logical_and", "Or": "torch.logical_or", "Xor": "torch.logical_xor",
           "BitwiseAnd": "torch.bitwise_and", "BitwiseOr": "torch.bitwise_or", "BitwiseXor": "torch.bitwise_xor"}


@_emits(*_INFIX)
def _infix(node, ins, cx):
    return f"{ins[0]} {_INFIX[node.op_type]} {ins[1]}"


@_emits(*_BINARY)
def _binary(node, ins, cx):
    return f"{_BINARY[node.op_type]}({ins[0]}, {ins[1]})"


@_emits("Div")
def _div(node, ins, cx):
    if _is_float(cx.dtype(node.inputs[0])):
        return f"{ins[0]} / {ins[1]}"
    return f'torch.div({ins[0]}, {ins[1]}, rounding_mode="trunc")'  # C integer division, as onnxruntime


@_emits("Pow")
def _pow(node, ins, cx):
    return f"torch.pow({ins[0]}, {ins[1]})" if _is_float(cx.dtype(node.inputs[0])) else None


@_emits("Where")
def _where(node, ins, cx):
    return f"torch.where({ins[0]}, {ins[1]}, {ins[2]})" if cx.dtype(node.inputs[0]) == "bool" else None


@_emits("Sum", "Max", "Min")
def _variadic(node, ins, cx):
    xs = [e for t, e in zip(node.inputs, ins, strict=True) if t]
    if node.op_type == "Sum":
        return " + ".join(xs)
    fn = "torch.maximum" if node.op_type == "Max" else "torch.minimum"
    out = xs[0]
    for e in xs[1:]:
        out = f"{fn}({out}, {e})"
    return out


@_emits("Mean")
def _mean(node, ins, cx):
    xs = [e for t, e in zip(node.inputs, ins, strict=True) if t]
    return f"({' + '.join(xs)}) / {len(xs)}" if _is_float(cx.dtype(node.outputs[0])) else None


@_emits("Mod")
def _mod(node, ins, cx):
    if int(node.attrs.get("fmod", 0)) or _is_float(cx.dtype(node.inputs[0])):
        return f"torch.fmod({ins[0]}, {ins[1]})"
    return f"torch.remainder({ins[0]}, {ins[1]})"  # integer Mod takes the divisor's sign, like Python's %


@_emits("Identity")
def _identity(node, ins, cx):
    return ins[0]


@_emits("Cast")
def _cast(node, ins, cx):
    return f"{ins[0]}.to({dtype_source(int(node.attrs['to']))})"


@_emits("Gelu")
def _gelu(node, ins, cx):
    approx = node.attrs.get("approximate", "none")
    return f"F.gelu({ins[0]})" if approx == "none" else f"F.gelu({ins[0]}, approximate={approx!r})"


@_emits("LeakyRelu")
def _leaky_relu(node, ins, cx):
    return f"F.leaky_relu({ins[0]}, {_num(node.attrs.get('alpha', 0.01))})"


@_emits("Elu", "Celu")
def _elu(node, ins, cx):
    fn = "F.elu" if node.op_type == "Elu" else "F.celu"
    return f"{fn}({ins[0]}, {_num(node.attrs.get('alpha', 1.0))})"


@_emits("Clip")
def _clip(node, ins, cx):
    if cx.opset < 11:
        lo, hi = node.attrs.get("min"), node.attrs.get("max")
    else:
        bounds = []
        for i in (1, 2):
            t = node.inputs[i] if len(node.inputs) > i else ""
            if t and cx.const(t) is None:
                return None
            bounds.append(np.asarray(cx.const(t)).reshape(-1)[0].item() if t else None)
        lo, hi = bounds
    args = [f"min={lo!r}"] * (lo is not None) + [f"max={hi!r}"] * (hi is not None)
    return f"torch.clamp({', '.join([ins[0], *args])})" if args else ins[0]


@_emits("Dropout")
@_multi
def _dropout(node, ins, cx):
    if len(node.inputs) > 2 and node.inputs[2]:
        training = cx.const(node.inputs[2])
        if training is None or bool(np.asarray(training).reshape(-1)[0]):
            return None
    lines = ["{0} = " + ins[0] + "  # Dropout at inference: the input unchanged"]
    if len(node.outputs) > 1 and node.outputs[1]:
        mask = dtype_source("bool" if cx.opset >= 10 else cx.dtype(node.inputs[0]))
        lines.append("{1} = torch.ones(" + repr(list(cx.shape(node.outputs[1]))) + f", dtype={mask})")
    return lines


# --- matrix products, convolution, pooling, normalization ------------------------------------------------------

@_emits("MatMul")
def _matmul(node, ins, cx):
    return f"torch.matmul({ins[0]}, {ins[1]})"


@_emits("Gemm")
def _gemm(node, ins, cx):
    a = f"{ins[0]}.t()" if int(node.attrs.get("transA", 0)) else ins[0]
    b = f"{ins[1]}.t()" if int(node.attrs.get("transB", 0)) else ins[1]
    alpha, beta = float(node.attrs.get("alpha", 1.0)), float(node.attrs.get("beta", 1.0))
    out = f"torch.matmul({a}, {b})"
    if alpha != 1.0:
        out = f"{_num(alpha)} * {out}"
    if len(node.inputs) > 2 and node.inputs[2]:
        out += f" + {ins[2]}" if beta == 1.0 else f" + {_num(beta)} * {ins[2]}"
    return out


@_emits("Conv")
def _conv(node, ins, cx):
    w_shape = cx.shape(node.inputs[1])
    nd = len(w_shape) - 2
    if nd not in (1, 2, 3):
        return None
    strides, dilations, pads = _window_args(_meta(cx.shape(node.inputs[0])), node.attrs, list(w_shape[2:]))
    x = ins[0]
    if pads[:nd] != pads[nd:]:
        x, padding = f"F.pad({x}, {_torch_pad(pads)})", [0] * nd
    else:
        padding = pads[:nd]
    bias = ins[2] if len(node.inputs) > 2 and node.inputs[2] else "None"
    args = [x, ins[1], bias, f"stride={strides}", f"padding={padding}"]
    if any(d != 1 for d in dilations):
        args.append(f"dilation={dilations}")
    group = int(node.attrs.get("group", 1))
    if group != 1:
        args.append(f"groups={group}")
    return f"F.conv{nd}d({', '.join(args)})"


@_emits("MaxPool")
def _max_pool(node, ins, cx):
    x_shape = cx.shape(node.inputs[0])
    nd = len(x_shape) - 2
    if nd not in (1, 2, 3) or not _is_float(cx.dtype(node.inputs[0])):
        return None
    kernel, strides, dilations, pads, extra = _pool_geometry(_meta(x_shape), node.attrs)
    full = pads[:nd] + [p + e for p, e in zip(pads[nd:], extra, strict=True)]
    x = f'F.pad({ins[0]}, {_torch_pad(full)}, value=float("-inf"))' if any(full) else ins[0]
    dil = f", dilation={dilations}" if any(d != 1 for d in dilations) else ""
    return f"F.max_pool{nd}d({x}, kernel_size={kernel}, stride={strides}{dil})"


@_emits("AveragePool")
def _average_pool(node, ins, cx):
    x_shape = cx.shape(node.inputs[0])
    nd = len(x_shape) - 2
    if nd not in (1, 2, 3):
        return None
    kernel, strides, dilations, pads, extra = _pool_geometry(_meta(x_shape), node.attrs)
    if any(pads) or any(extra) or any(d != 1 for d in dilations):
        return None  # ONNX's divisor with padding differs from torch's: the helper has it
    return f"F.avg_pool{nd}d({ins[0]}, kernel_size={kernel}, stride={strides})"


@_emits("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(node, ins, cx):
    dims = tuple(range(2, len(cx.shape(node.inputs[0]))))
    method = "mean" if node.op_type == "GlobalAveragePool" else "amax"
    return f"{ins[0]}.{method}(dim={dims}, keepdim=True)"


@_emits("BatchNormalization")
def _batch_norm(node, ins, cx):
    if int(node.attrs.get("training_mode", 0)):
        return None
    eps = _num(node.attrs.get("epsilon", 1e-5))
    return f"F.batch_norm({ins[0]}, {ins[3]}, {ins[4]}, {ins[1]}, {ins[2]}, training=False, eps={eps})"


@_emits("LayerNormalization")
def _layer_norm(node, ins, cx):
    x_shape = cx.shape(node.inputs[0])
    axis = _axis(int(node.attrs.get("axis", -1)), len(x_shape))
    normalized = list(x_shape[axis:])
    params = [t for t in node.inputs[1:3] if t]
    if any(list(cx.shape(t)) != normalized for t in params) or not _is_float(cx.dtype(node.inputs[0])):
        return None  # torch wants scale and bias of exactly the normalized shape
    bias = ins[2] if len(node.inputs) > 2 and node.inputs[2] else "None"
    eps = _num(node.attrs.get("epsilon", 1e-5))
    return f"F.layer_norm({ins[0]}, {normalized}, {ins[1]}, {bias}, eps={eps})"


@_emits("LRN")
def _lrn(node, ins, cx):
    size = int(node.attrs["size"])
    if size % 2 == 0:
        return None  # torch centres an even window differently from ONNX
    a = node.attrs
    return (f"F.local_response_norm({ins[0]}, {size}, alpha={_num(a.get('alpha', 1e-4))}, "
            f"beta={_num(a.get('beta', 0.75))}, k={_num(a.get('bias', 1.0))})")


@_emits("Softmax", "LogSoftmax")
def _softmax(node, ins, cx):
    shape = cx.shape(node.inputs[0])
    fn = "torch.softmax" if node.op_type == "Softmax" else "torch.log_softmax"
    if cx.opset >= 13:
        return f"{fn}({ins[0]}, dim={int(node.attrs.get('axis', -1))})"
    axis = _axis(int(node.attrs.get("axis", 1)), len(shape))
    if axis == len(shape) - 1:
        return f"{fn}({ins[0]}, dim=-1)"
    rows = int(np.prod(shape[:axis], dtype=np.int64))  # before opset 13: normalise rows of the 2-D view at `axis`
    return f"{fn}({ins[0]}.reshape({rows}, -1), dim=1).reshape({list(shape)})"


@_emits("Einsum")
def _einsum(node, ins, cx):
    return f"torch.einsum({node.attrs['equation'].replace(' ', '')!r}, {', '.join(ins)})"


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

