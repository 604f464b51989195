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

from collections.abc import Sequence

import numpy as np

# the shape, indexing and reduction emitters register themselves on import
import planner.execute.codegen_ops_tensor  # noqa: F401
from planner.execute.codegen_emit import (
    EMITTERS,
    MULTI_OUTPUT,
    EmitContext,
    _axis,
    _emits,
    _is_float,
    _meta,
    _multi,
    _num,
    dtype_source,
    helper_call,
    literal,
)
from planner.execute.ops.nn import _pool_geometry, _torch_pad, _window_args
from planner.ir.onnx_values import NodeSpec

# The context, the registry and the helpers live in `planner.execute.codegen_emit`; the shape, indexing and
# reduction emitters in `planner.execute.codegen_ops_tensor`.  These names stay importable from here.
__all__ = ["EmitContext", "dtype_source", "emit", "helper_call", "literal"]


def emit(node: NodeSpec, cx: EmitContext, outs: Sequence[str]) -> tuple[list[str], bool]:
    """Source lines computing `node`'s outputs into the names `outs` ('_' for an unused output) and whether they
    call the helper file.  An expression emitter (one output) returns the right-hand side; a multi-output one
    returns whole lines with ``{0}``, ``{1}`` ... where the output names go."""
    fn = EMITTERS.get(node.op_type)
    ins = [cx.expr(t) if t else "None" for t in node.inputs]
    single = len(node.outputs) == 1 and bool(node.outputs[0])
    out = None
    if node.domain in ("", "ai.onnx") and fn is not None and (single or fn in MULTI_OUTPUT):
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
