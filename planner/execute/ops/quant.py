"""Quantized ONNX ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, ConvInteger,
QLinearMatMul, QLinearConv.

Integer products accumulate in int32, as the ONNX spec states.  Where torch has no integer kernel (integer
matmul on an accelerator, integer convolution anywhere) the products are taken in float64, which is exact for
8-bit operands up to 2^53 / 255^2 (about 1.4e11) terms per output, and converted back to int32.  Requantization
rounds half to even and saturates to the output type's range, as onnxruntime does.
"""

from __future__ import annotations

import torch

from planner.execute.ops import OpContext, register
from planner.execute.ops.nn import conv

_RANGE = {torch.uint8: (0, 255), torch.int8: (-128, 127), torch.uint16: (0, 65535), torch.int16: (-32768, 32767),
          torch.int32: (-2**31, 2**31 - 1)}


def _along(t: torch.Tensor, axis: int, rank: int) -> torch.Tensor:
    """A scale or zero point shaped to broadcast against a rank-`rank` tensor: a scalar as is, a 1-D per-axis
    vector along `axis`."""
    if t.dim() == 0 or t.numel() == 1:
        return t.reshape(())
    axis = axis + rank if axis < 0 else axis
    shape = [1] * rank
    shape[axis] = t.numel()
    return t.reshape(shape)


def _saturate(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    lo, hi = _RANGE[dtype]
    return values.clamp(lo, hi).to(dtype)


def _quantize(x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None,
              dtype: torch.dtype) -> torch.Tensor:
    """saturate(round_half_even(x / scale) + zero_point), in float32 as onnxruntime computes it."""
    q = torch.round(x.to(torch.float32) / scale.to(torch.float32))
    if zero_point is not None:
        q = q + zero_point.to(torch.float32)
    return _saturate(q, dtype)


def _block_size(attrs: dict) -> None:
    if int(attrs.get("block_size", 0) or 0):
        raise NotImplementedError("blocked quantization (block_size)")


@register("QuantizeLinear")
def quantize_linear(ins, attrs, ctx):
    _block_size(attrs)
    x, scale = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 else None
    axis = int(attrs.get("axis", 1))
    dtype = zp.dtype if zp is not None else torch.uint8
    zp_along = _along(zp, axis, x.dim()) if zp is not None else None
    return [_quantize(x, _along(scale, axis, x.dim()), zp_along, dtype)]


@register("DequantizeLinear")
def dequantize_linear(ins, attrs, ctx):
    _block_size(attrs)
    x, scale = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 else None
    axis = int(attrs.get("axis", 1))
    shifted = x.to(torch.int32)
    if zp is not None:
        shifted = shifted - _along(zp, axis, x.dim()).to(torch.int32)
    return [shifted.to(scale.dtype) * _along(scale, axis, x.dim())]


@register("DynamicQuantizeLinear")
def dynamic_quantize_linear(ins, attrs, ctx):
    """uint8 y, its scale and zero point from the input's range widened to include 0 (ONNX's formula)."""
    x = ins[0].to(torch.float32)
    lo = torch.clamp(x.min(), max=0.0) if x.numel() else torch.tensor(0.0)
    hi = torch.clamp(x.max(), min=0.0) if x.numel() else torch.tensor(0.0)
    scale = (hi - lo) / 255.0
    # an all-zero input has no range: onnxruntime then reports scale 1 and zero point 0
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    zp = _saturate(torch.round(-lo / scale), torch.uint8)
    y = _quantize(x, scale, zp, torch.uint8)
    return [y, scale.reshape(()), zp.reshape(())]


def _int_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.device.type == "cpu":
        return torch.matmul(a.to(torch.int32), b.to(torch.int32))
    return torch.round(torch.matmul(a.to(torch.float64), b.to(torch.float64))).to(torch.int32)


def _shift(x: torch.Tensor, zp: torch.Tensor | None, axis: int) -> torch.Tensor:
    """x - zero_point in int32 (zp a scalar, or 1-D along `axis` of x)."""
    out = x.to(torch.int32)
    if zp is None:
        return out
    return out - _along(zp, axis, x.dim()).to(torch.int32)


def _matmul_integer(a, b, a_zp, b_zp) -> torch.Tensor:
    # A's zero point is per row (along A's second-to-last axis), B's per column (B's last axis).
    return _int_matmul(_shift(a, a_zp, -2 if a.dim() > 1 else 0), _shift(b, b_zp, -1))


@register("MatMulInteger")
def matmul_integer(ins, attrs, ctx):
    a, b = ins[0], ins[1]
    a_zp = ins[2] if len(ins) > 2 else None
    b_zp = ins[3] if len(ins) > 3 else None
    return [_matmul_integer(a, b, a_zp, b_zp)]


def _conv_integer(x, w, x_zp, w_zp, attrs) -> torch.Tensor:
    # The zero point shift first, so that padding adds zeros to the shifted values (as padding with x_zp would).
    xs = _shift(x, x_zp, 1).to(torch.float64)
    ws = _shift(w, w_zp, 0).to(torch.float64)
    y = conv([xs, ws], attrs, OpContext())[0]
    return torch.round(y).to(torch.int32)


@register("ConvInteger")
def conv_integer(ins, attrs, ctx):
    x, w = ins[0], ins[1]
    x_zp = ins[2] if len(ins) > 2 else None
    w_zp = ins[3] if len(ins) > 3 else None
    return [_conv_integer(x, w, x_zp, w_zp, attrs)]


def _requantize(acc: torch.Tensor, multiplier: torch.Tensor, y_zp: torch.Tensor | None,
                dtype: torch.dtype) -> torch.Tensor:
    q = torch.round(acc.to(torch.float32) * multiplier.to(torch.float32))
    if y_zp is not None:
        q = q + y_zp.to(torch.float32)
    return _saturate(q, dtype)


@register("QLinearMatMul")
def qlinear_matmul(ins, attrs, ctx):
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = ins[:8]
    acc = _matmul_integer(a, b, a_zp, b_zp)
    a_s = _along(a_scale, -2 if a.dim() > 1 else 0, acc.dim())
    b_s = _along(b_scale, -1, acc.dim())
    return [_requantize(acc, a_s * b_s / y_scale, y_zp, y_zp.dtype if y_zp is not None else torch.uint8)]


@register("QLinearConv")
def qlinear_conv(ins, attrs, ctx):
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = ins[:8]
    bias = ins[8] if len(ins) > 8 else None
    acc = _conv_integer(x, w, x_zp, w_zp, attrs)
    if bias is not None:
        acc = acc + bias.to(torch.int32).reshape(1, -1, *([1] * (acc.dim() - 2)))
    multiplier = x_scale * _along(w_scale, 1, acc.dim()) / y_scale
    return [_requantize(acc, multiplier, y_zp, y_zp.dtype if y_zp is not None else torch.uint8)]
