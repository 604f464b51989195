"""Element-wise ONNX ops: arithmetic with numpy broadcasting, comparisons, logic, activations, Cast, Clip, Where."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from planner.execute.ops import OpFn, int_list, register, torch_dtype

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _is_float(t: torch.Tensor) -> bool:
    return t.dtype in _FLOATS


def _unary(fn):
    return lambda ins, attrs, ctx: [fn(ins[0])]


def _binary(fn: Callable[..., torch.Tensor]) -> OpFn:
    """The op of a two-input elementwise torch function (ONNX broadcasting is torch's)."""

    def run(ins, attrs, ctx):
        return [fn(ins[0], ins[1])]

    return run


for _name, _fn in {
    "Abs": torch.abs, "Neg": torch.neg, "Exp": torch.exp, "Log": torch.log, "Sqrt": torch.sqrt,
    "Reciprocal": torch.reciprocal, "Floor": torch.floor, "Ceil": torch.ceil, "Sign": torch.sign,
    "Sigmoid": torch.sigmoid, "Tanh": torch.tanh, "Erf": torch.erf, "Sin": torch.sin, "Cos": torch.cos,
    "Tan": torch.tan, "Asin": torch.asin, "Acos": torch.acos, "Atan": torch.atan, "Sinh": torch.sinh,
    "Cosh": torch.cosh, "Asinh": torch.asinh, "Acosh": torch.acosh, "Atanh": torch.atanh,
    "Round": torch.round,  # half to even, like ONNX
    "Relu": torch.relu, "Not": torch.logical_not, "IsNaN": torch.isnan,
    "Softsign": F.softsign, "Mish": F.mish,
}.items():
    register(_name)(_unary(_fn))


@register("Identity")
def identity(ins, attrs, ctx):
    return [ins[0]]


@register("Dropout")
def dropout(ins, attrs, ctx):
    """Inference: the input unchanged, mask all True (training_mode is not supported: it needs randomness)."""
    training = ins[2] if len(ins) > 2 and ins[2] is not None else None
    if training is not None and bool(training.reshape(-1)[0]):
        raise NotImplementedError("Dropout with training_mode=True")
    x = ins[0]
    out = [x]
    if ctx.num_outputs > 1:  # bool from opset 10, the input's type before
        dtype = torch.bool if ctx.opset >= 10 else x.dtype
        out.append(torch.ones(x.shape, dtype=dtype))
    return out


def _div(a, b):
    if _is_float(a) or _is_float(b):
        return torch.div(a, b)
    return torch.div(a, b, rounding_mode="trunc")  # C integer division, as onnxruntime does


_BINARY: dict[str, Callable[..., torch.Tensor]] = {
    "Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": _div,
    "Equal": torch.eq, "Less": torch.lt, "Greater": torch.gt, "LessOrEqual": torch.le, "GreaterOrEqual": torch.ge,
    "And": torch.logical_and, "Or": torch.logical_or, "Xor": torch.logical_xor,
    "BitwiseAnd": torch.bitwise_and, "BitwiseOr": torch.bitwise_or, "BitwiseXor": torch.bitwise_xor,
}
for _name, _fn in _BINARY.items():
    register(_name)(_binary(_fn))


@register("BitwiseNot")
def bitwise_not(ins, attrs, ctx):
    return [torch.bitwise_not(ins[0])]


@register("Mod")
def mod(ins, attrs, ctx):
    a, b = ins[0], ins[1]
    if int(attrs.get("fmod", 0)) or _is_float(a):
        return [torch.fmod(a, b)]
    return [torch.remainder(a, b)]  # integer Mod with fmod=0 takes the divisor's sign, like Python


@register("Pow")
def pow_(ins, attrs, ctx):
    """The result has the base's type (an integer base with a float exponent stays integer)."""
    x, y = ins
    out = torch.pow(x.to(torch.float64) if not _is_float(x) else x, y)
    return [out.to(x.dtype)]


@register("Where")
def where(ins, attrs, ctx):
    return [torch.where(ins[0].to(torch.bool), ins[1], ins[2])]


def _variadic(fn):
    def run(ins, attrs, ctx):
        xs = [t for t in ins if t is not None]
        out = xs[0]
        for t in xs[1:]:
            out = fn(out, t)
        return [out]

    return run


register("Sum")(_variadic(torch.add))
register("Max")(_variadic(torch.maximum))
register("Min")(_variadic(torch.minimum))


@register("Mean")
def mean(ins, attrs, ctx):
    xs = [t for t in ins if t is not None]
    return [_variadic(torch.add)(xs, attrs, ctx)[0] / len(xs)]


@register("Cast")
def cast(ins, attrs, ctx):
    return [ins[0].to(torch_dtype(int(attrs["to"])))]


@register("CastLike")
def cast_like(ins, attrs, ctx):
    return [ins[0].to(ins[1].dtype)]


@register("Clip")
def clip(ins, attrs, ctx):
    x = ins[0]
    if ctx.opset < 11:
        lo, hi = attrs.get("min"), attrs.get("max")
    else:
        lo = ins[1].reshape(-1)[0].item() if len(ins) > 1 and ins[1] is not None else None
        hi = ins[2].reshape(-1)[0].item() if len(ins) > 2 and ins[2] is not None else None
    if lo is not None:
        x = torch.clamp(x, min=lo)
    if hi is not None:
        x = torch.clamp(x, max=hi)
    return [x]


@register("Gelu")
def gelu(ins, attrs, ctx):
    return [F.gelu(ins[0], approximate=attrs.get("approximate", "none"))]


@register("LeakyRelu")
def leaky_relu(ins, attrs, ctx):
    return [F.leaky_relu(ins[0], float(attrs.get("alpha", 0.01)))]


@register("Elu")
def elu(ins, attrs, ctx):
    return [F.elu(ins[0], float(attrs.get("alpha", 1.0)))]


@register("Selu")
def selu(ins, attrs, ctx):
    alpha = float(attrs.get("alpha", 1.67326319217681884765625))
    gamma = float(attrs.get("gamma", 1.05070102214813232421875))
    x = ins[0]
    return [gamma * torch.where(x > 0, x, alpha * (torch.exp(x) - 1))]


@register("Celu")
def celu(ins, attrs, ctx):
    return [F.celu(ins[0], float(attrs.get("alpha", 1.0)))]


@register("PRelu")
def prelu(ins, attrs, ctx):
    x, slope = ins
    return [torch.where(x < 0, x * slope, x)]


@register("HardSigmoid")
def hard_sigmoid(ins, attrs, ctx):
    alpha, beta = float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5))
    return [torch.clamp(alpha * ins[0] + beta, 0.0, 1.0)]


@register("HardSwish")
def hard_swish(ins, attrs, ctx):
    x = ins[0]
    return [x * torch.clamp(x / 6 + 0.5, 0.0, 1.0)]


@register("Softplus")
def softplus(ins, attrs, ctx):
    return [torch.log1p(torch.exp(ins[0]))]


@register("ThresholdedRelu")
def thresholded_relu(ins, attrs, ctx):
    x = ins[0]
    return [torch.where(x > float(attrs.get("alpha", 1.0)), x, torch.zeros_like(x))]


@register("Shrink")
def shrink(ins, attrs, ctx):
    x = ins[0]
    bias, lambd = float(attrs.get("bias", 0.0)), float(attrs.get("lambd", 0.5))
    # the output keeps x's dtype (an integer x with float attributes stays integer, as onnxruntime's does)
    return [torch.where(x < -lambd, x + bias, torch.where(x > lambd, x - bias, torch.zeros_like(x))).to(x.dtype)]


@register("IsInf")
def is_inf(ins, attrs, ctx):
    x = ins[0]
    pos, neg = int(attrs.get("detect_positive", 1)), int(attrs.get("detect_negative", 1))
    return [(torch.isposinf(x) & bool(pos)) | (torch.isneginf(x) & bool(neg))]


@register("BitShift")
def bit_shift(ins, attrs, ctx):
    x, y = ins
    if attrs["direction"] == "LEFT":
        return [torch.bitwise_left_shift(x, y)]
    return [torch.bitwise_right_shift(x, y)]


@register("Trilu")
def trilu(ins, attrs, ctx):
    k = int_list(ins[1])[0] if len(ins) > 1 and ins[1] is not None else 0
    fn = torch.triu if int(attrs.get("upper", 1)) else torch.tril
    return [fn(ins[0], k)]


@register("Einsum")
def einsum(ins, attrs, ctx):
    return [torch.einsum(attrs["equation"].replace(" ", ""), *ins)]


