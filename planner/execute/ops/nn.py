"""Neural-network ONNX ops: MatMul, Gemm, Conv, ConvTranspose, pooling, LRN, normalizations, Softmax family."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from planner.execute.ops import register

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
_MAXPOOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVGPOOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


@register("MatMul")
def matmul(ins, attrs, ctx):
    return [torch.matmul(ins[0], ins[1])]


@register("Gemm")
def gemm(ins, attrs, ctx):
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    if int(attrs.get("transA", 0)):
        a = a.t()
    if int(attrs.get("transB", 0)):
        b = b.t()
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    y = torch.matmul(a, b)
    if alpha != 1.0:
        y = y * alpha
    if c is not None:
        y = y + (c * beta if beta != 1.0 else c)
    return [y]


def _same_pads(in_sizes, kernel, strides, dilations, auto_pad: str) -> list[int]:
    """ONNX pads [b1, b2, ..., e1, e2, ...] for auto_pad SAME_UPPER / SAME_LOWER (output = ceil(in / stride))."""
    begins, ends = [], []
    for n, k, s, d in zip(in_sizes, kernel, strides, dilations, strict=True):
        out = -(-n // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - n)
        small, big = total // 2, total - total // 2
        begins.append(small if auto_pad == "SAME_UPPER" else big)
        ends.append(big if auto_pad == "SAME_UPPER" else small)
    return begins + ends


def _window_args(x, attrs, kernel):
    """strides, dilations and explicit pads [b..., e...] after auto_pad, for a window of `kernel` over x."""
    nd = len(kernel)
    strides = list(attrs.get("strides") or [1] * nd)
    dilations = list(attrs.get("dilations") or [1] * nd)
    auto_pad = attrs.get("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = _same_pads(list(x.shape[2:]), kernel, strides, dilations, auto_pad)
    elif auto_pad == "VALID":
        pads = [0] * (2 * nd)
    else:
        pads = list(attrs.get("pads") or [0] * (2 * nd))
    return strides, dilations, pads


def _torch_pad(pads: list[int]) -> list[int]:
    """ONNX [b1, b2, ..., e1, e2, ...] -> F.pad's (b_last, e_last, ..., b1, e1)."""
    nd = len(pads) // 2
    return [p for i in reversed(range(nd)) for p in (pads[i], pads[i + nd])]


@register("Conv")
def conv(ins, attrs, ctx):
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    nd = w.dim() - 2
    strides, dilations, pads = _window_args(x, attrs, list(w.shape[2:]))
    group = int(attrs.get("group", 1))
    if pads[:nd] == pads[nd:]:
        return [_CONV[nd](x, w, b, stride=strides, padding=pads[:nd], dilation=dilations, groups=group)]
    x = F.pad(x, _torch_pad(pads))
    return [_CONV[nd](x, w, b, stride=strides, padding=0, dilation=dilations, groups=group)]


@register("ConvTranspose")
def conv_transpose(ins, attrs, ctx):
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    nd = w.dim() - 2
    kernel = list(w.shape[2:])
    strides = list(attrs.get("strides") or [1] * nd)
    dilations = list(attrs.get("dilations") or [1] * nd)
    out_pad = list(attrs.get("output_padding") or [0] * nd)
    group = int(attrs.get("group", 1))
    auto_pad = attrs.get("auto_pad", "NOTSET") or "NOTSET"
    in_sizes = list(x.shape[2:])
    full = [s * (n - 1) + op + (k - 1) * d + 1
            for n, k, s, d, op in zip(in_sizes, kernel, strides, dilations, out_pad, strict=True)]
    out_shape = list(attrs.get("output_shape") or [])
    if out_shape or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if not out_shape:
            out_shape = [n * s for n, s in zip(in_sizes, strides, strict=True)]
        out_shape = out_shape[-nd:]
        total = [f - o for f, o in zip(full, out_shape, strict=True)]
        if auto_pad == "SAME_UPPER":
            pads = [t // 2 for t in total] + [t - t // 2 for t in total]
        else:
            pads = [t - t // 2 for t in total] + [t // 2 for t in total]
    elif auto_pad == "VALID":
        pads = [0] * (2 * nd)
    else:
        pads = list(attrs.get("pads") or [0] * (2 * nd))
    # The full transposed convolution (no padding, output_padding in the last row/column), then crop by the pads.
    y = _CONV_T[nd](x, w, None, stride=strides, padding=0, output_padding=0, groups=group, dilation=dilations)
    extra = [f - yn for f, yn in zip(full, y.shape[2:], strict=True)]
    if any(extra):
        y = F.pad(y, [p for i in reversed(range(nd)) for p in (0, extra[i])])
    for i in range(nd):
        start, end = pads[i], full[i] - pads[i + nd]
        y = y.narrow(2 + i, start, end - start)
    if b is not None:
        y = y + b.reshape(1, -1, *([1] * nd))
    return [y]


def _pool_geometry(x, attrs):
    """kernel, strides, dilations, pads and the extra end padding ceil_mode needs, for a pool over x.

    A window larger than the padded input (exporters write global pooling as a ceil_mode pool with a kernel
    bigger than the feature map) yields one output whose window, as onnxruntime reads it, is the padded input
    itself: the kernel is clipped to it, so that no cells beyond the input are padded in and visited."""
    kernel = list(attrs["kernel_shape"])
    nd = len(kernel)
    strides, dilations, pads = _window_args(x, attrs, kernel)
    ceil_mode = int(attrs.get("ceil_mode", 0))
    # Output size per ONNX; extra end padding makes a floor-mode torch pool produce exactly it.
    extra = []
    for i in range(nd):
        padded = x.shape[2 + i] + pads[i] + pads[i + nd]
        span = padded - ((kernel[i] - 1) * dilations[i] + 1)
        out = (math.ceil(span / strides[i]) if ceil_mode else span // strides[i]) + 1
        if ceil_mode and (out - 1) * strides[i] >= x.shape[2 + i] + pads[i]:
            out -= 1  # the last window would start in the end padding
        if out == 1 and span < 0 and dilations[i] == 1:
            kernel[i] = padded  # the one window covers the whole padded input and nothing beyond counts
        extra.append(max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1
                         - (x.shape[2 + i] + pads[i] + pads[i + nd])))
    return kernel, strides, dilations, pads, extra


def _separable_max(xp, kernel, strides, dilations):
    """Max over each window of the (already padded) x: the box max taken one spatial dimension at a time, each as
    the elementwise maximum of k strided views.  Exactly torch's max_pool (max is associative), and 15-30x faster
    than torch's CPU max_pool2d on one thread (measured on Inception-v1's pools: 18.7 ms -> 1.1 ms for
    64x112x112, k3 s2), which made MaxPool a third of Inception's step."""
    y = xp
    for i, (k, s, d) in enumerate(zip(kernel, strides, dilations, strict=True)):
        dim = 2 + i
        out = (y.shape[dim] - ((k - 1) * d + 1)) // s + 1
        span = (out - 1) * s + 1
        step = (slice(None),) * dim + (slice(None, None, s),)
        acc = y.narrow(dim, 0, span)[step]
        for j in range(1, k):
            acc = torch.maximum(acc, y.narrow(dim, j * d, span)[step])
        y = acc
    return y.contiguous()


@register("MaxPool")
def max_pool(ins, attrs, ctx):
    x = ins[0]
    if int(attrs.get("storage_order", 0)) and ctx.num_outputs > 1:
        raise NotImplementedError("MaxPool indices with storage_order=1")
    kernel, strides, dilations, pads, extra = _pool_geometry(x, attrs)
    nd = len(kernel)
    full = pads[:nd] + [p + e for p, e in zip(pads[nd:], extra, strict=True)]
    fill = float("-inf") if x.is_floating_point() else int(torch.iinfo(x.dtype).min)
    xp = F.pad(x, _torch_pad(full), value=fill) if any(full) else x
    if ctx.num_outputs < 2:
        return [_separable_max(xp, kernel, strides, dilations)]
    y, idx = _MAXPOOL[nd](xp, kernel, strides, 0, dilations, return_indices=True)
    # torch indices are flat over the padded spatial dims; ONNX's over the unpadded tensor (N, C, ... included).
    padded = list(xp.shape[2:])
    coords = []
    rem = idx
    for size in reversed(padded):
        coords.append(rem % size)
        rem = rem // size
    coords = coords[::-1]
    flat = torch.zeros_like(idx)
    for i, c in enumerate(coords):
        flat = flat * x.shape[2 + i] + (c - pads[i])
    n, ch = x.shape[:2]
    spatial = math.prod(x.shape[2:])
    base = (torch.arange(n).reshape(-1, 1) * ch + torch.arange(ch).reshape(1, -1)) * spatial
    return [y, flat + base.reshape(n, ch, *([1] * nd))]


@register("AveragePool")
def average_pool(ins, attrs, ctx):
    x = ins[0]
    kernel, strides, dilations, pads, extra = _pool_geometry(x, attrs)
    if any(d != 1 for d in dilations):
        raise NotImplementedError("AveragePool with dilations")
    nd = len(kernel)
    full = pads[:nd] + [p + e for p, e in zip(pads[nd:], extra, strict=True)]
    if not any(full):
        return [_AVGPOOL[nd](x, kernel, strides)]
    pool = _AVGPOOL[nd]
    total = pool(F.pad(x, _torch_pad(full)), kernel, strides, divisor_override=1) if nd > 1 else \
        pool(F.pad(x, _torch_pad(full)), kernel, strides) * kernel[0]
    # Divisor: the window's cells inside the input (count_include_pad=0) or inside input + explicit pads (=1);
    # the cells ceil_mode adds beyond the explicit pads never count.
    ones_shape = [1, 1, *x.shape[2:]]
    ones = torch.ones(ones_shape, dtype=x.dtype)
    if int(attrs.get("count_include_pad", 0)):
        ones = F.pad(ones, _torch_pad(pads), value=1.0)
        rest = [0] * nd + extra
    else:
        rest = full
    counts = pool(F.pad(ones, _torch_pad(rest)), kernel, strides, divisor_override=1) if nd > 1 else \
        pool(F.pad(ones, _torch_pad(rest)), kernel, strides) * kernel[0]
    return [total / counts]


@register("GlobalAveragePool")
def global_average_pool(ins, attrs, ctx):
    x = ins[0]
    return [x.mean(dim=tuple(range(2, x.dim())), keepdim=True)]


@register("GlobalMaxPool")
def global_max_pool(ins, attrs, ctx):
    x = ins[0]
    return [x.amax(dim=tuple(range(2, x.dim())), keepdim=True)]


@register("LRN")
def lrn(ins, attrs, ctx):
    """y = x / (bias + alpha / size * sum of x^2 over channels [c - floor((size-1)/2), c + ceil((size-1)/2)])^beta."""
    x = ins[0]
    size = int(attrs["size"])
    alpha, beta, bias = float(attrs.get("alpha", 1e-4)), float(attrs.get("beta", 0.75)), float(attrs.get("bias", 1.0))
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    # The channel window as a sum of `size` shifted channel slices of the zero-padded squares (contiguous blocks
    # in NCHW: ~4x faster on one thread than unfolding a channels-last copy).
    sq = F.pad(x * x, (0, 0) * (x.dim() - 2) + (lo, hi))
    channels = x.shape[1]
    window = sq.narrow(1, 0, channels)
    for j in range(1, size):
        window = window + sq.narrow(1, j, channels)
    base = bias + alpha / size * window
    if beta == 0.75:  # the usual value (AlexNet, Inception): d^-0.75 = rsqrt(d) * rsqrt(sqrt(d)), ~4x cheaper than pow
        return [x * torch.rsqrt(base) * torch.rsqrt(torch.sqrt(base))]
    return [x / base**beta]


@register("BatchNormalization")
def batch_normalization(ins, attrs, ctx):
    x, scale, b, mean, var = ins[:5]
    if int(attrs.get("training_mode", 0)):
        raise NotImplementedError("BatchNormalization with training_mode=1")
    eps = float(attrs.get("epsilon", 1e-5))
    shape = [1, -1] + [1] * (x.dim() - 2)
    inv = torch.rsqrt(var.reshape(shape) + eps)
    y = (x - mean.reshape(shape)) * inv * scale.reshape(shape) + b.reshape(shape)
    return [y]


@register("InstanceNormalization")
def instance_normalization(ins, attrs, ctx):
    x, scale, b = ins
    eps = float(attrs.get("epsilon", 1e-5))
    dims = tuple(range(2, x.dim()))
    mean = x.mean(dim=dims, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=dims, keepdim=True)
    shape = [1, -1] + [1] * (x.dim() - 2)
    return [(x - mean) / torch.sqrt(var + eps) * scale.reshape(shape) + b.reshape(shape)]


@register("LayerNormalization")
def layer_normalization(ins, attrs, ctx):
    x, scale = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    axis = int(attrs.get("axis", -1))
    axis = axis + x.dim() if axis < 0 else axis
    eps = float(attrs.get("epsilon", 1e-5))
    dims = tuple(range(axis, x.dim()))
    xf = x.to(torch.float32) if x.dtype in (torch.float16, torch.bfloat16) else x
    mean = xf.mean(dim=dims, keepdim=True)
    var = ((xf - mean) ** 2).mean(dim=dims, keepdim=True)
    inv = torch.rsqrt(var + eps)
    y = ((xf - mean) * inv).to(x.dtype) * scale
    if b is not None:
        y = y + b
    out = [y]
    if ctx.num_outputs > 1:
        out.append(mean)
    if ctx.num_outputs > 2:
        out.append(inv)
    return out


def _softmax_family(fn):
    def run(ins, attrs, ctx):
        x = ins[0]
        if ctx.opset < 13:  # coerce to 2-D at `axis` (default 1), normalise each row
            axis = int(attrs.get("axis", 1))
            axis = axis + x.dim() if axis < 0 else axis
            flat = x.reshape(math.prod(x.shape[:axis]), -1)
            return [fn(flat, 1).reshape(x.shape)]
        axis = int(attrs.get("axis", -1))
        return [fn(x, axis)]

    return run


def _hardmax(x, dim):
    idx = torch.argmax(x, dim=dim, keepdim=True)  # first maximum, as ONNX
    return torch.zeros_like(x).scatter(dim, idx, 1)


register("Softmax")(_softmax_family(lambda x, d: torch.softmax(x, d)))
register("LogSoftmax")(_softmax_family(lambda x, d: torch.log_softmax(x, d)))
register("Hardmax")(_softmax_family(_hardmax))
