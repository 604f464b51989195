"""Shape and layout ONNX ops: Reshape, Transpose, Flatten, (Un)Squeeze, Concat, Split, Slice, Expand, Tile, Pad,
Shape, Size, Constant, ConstantOfShape, Range, DepthToSpace, SpaceToDepth."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from planner.execute.ops import int_list, register, torch_dtype


def _axis(a: int, rank: int) -> int:
    return a + rank if a < 0 else a


def _from_numpy(value) -> torch.Tensor:
    """A tensor copy of an attribute's array value (torch.tensor copies, so read-only arrays are fine); no numpy
    import here keeps the ops torch-only for the code plan-codegen writes."""
    return torch.tensor(value)


@register("Reshape")
def reshape(ins, attrs, ctx):
    x, shape = ins[0], int_list(ins[1])
    allowzero = int(attrs.get("allowzero", 0))
    if not allowzero:
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return [x.reshape(shape)]


@register("Transpose")
def transpose(ins, attrs, ctx):
    x = ins[0]
    perm = attrs.get("perm") or list(range(x.dim()))[::-1]
    return [x.permute(*perm)]


@register("Flatten")
def flatten(ins, attrs, ctx):
    x = ins[0]
    axis = _axis(int(attrs.get("axis", 1)), x.dim())
    return [x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))]


def _axes(ins, attrs, ctx, since: int) -> list[int] | None:
    """Axes from the attribute (before opset `since`) or the second input (from it); None when absent."""
    if ctx.opset < since:
        return list(attrs["axes"]) if attrs.get("axes") is not None else None
    return int_list(ins[1]) if len(ins) > 1 and ins[1] is not None else None


@register("Squeeze")
def squeeze(ins, attrs, ctx):
    x = ins[0]
    axes = _axes(ins, attrs, ctx, 13)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    keep = [d for i, d in enumerate(x.shape) if i not in {_axis(a, x.dim()) for a in axes}]
    return [x.reshape(keep)]


@register("Unsqueeze")
def unsqueeze(ins, attrs, ctx):
    x = ins[0]
    axes = _axes(ins, attrs, ctx, 13)
    rank = x.dim() + len(axes)
    axes = sorted(_axis(a, rank) for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return [x.reshape(shape)]


@register("Concat")
def concat(ins, attrs, ctx):
    xs = [t for t in ins if t is not None]
    return [torch.cat(xs, dim=_axis(int(attrs["axis"]), xs[0].dim()))]


@register("Split")
def split(ins, attrs, ctx):
    x = ins[0]
    axis = _axis(int(attrs.get("axis", 0)), x.dim())
    if ctx.opset < 13:
        sizes = list(attrs["split"]) if attrs.get("split") else None
    else:
        sizes = int_list(ins[1]) if len(ins) > 1 and ins[1] is not None else None
    n = ctx.num_outputs
    if sizes is None:
        if "num_outputs" in attrs:
            n = int(attrs["num_outputs"])
        chunk = -(-x.shape[axis] // n)
        sizes = [min(chunk, x.shape[axis] - i * chunk) for i in range(n)]
    return list(torch.split(x, sizes, dim=axis))


@register("Slice")
def slice_(ins, attrs, ctx):
    x = ins[0]
    if ctx.opset < 10:
        starts, ends = list(attrs["starts"]), list(attrs["ends"])
        axes = list(attrs.get("axes") or range(len(starts)))
        steps = [1] * len(starts)
    else:
        starts, ends = int_list(ins[1]), int_list(ins[2])
        axes = int_list(ins[3]) if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
        steps = int_list(ins[4]) if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        axis = _axis(axis, x.dim())
        n = x.shape[axis]
        if step == 0:
            raise ValueError("Slice step 0")
        if start < 0:
            start += n
        if end < 0:
            end += n
        if step > 0:
            start, end = min(max(start, 0), n), min(max(end, 0), n)
            x = x.narrow(axis, start, max(0, end - start))[(slice(None),) * axis + (slice(None, None, step),)] \
                if step > 1 else x.narrow(axis, start, max(0, end - start))
        else:
            start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
            count = max(0, -(-(start - end) // -step))
            idx = torch.arange(count) * step + start
            x = x.index_select(axis, idx)
    return [x]


@register("Expand")
def expand(ins, attrs, ctx):
    x, shape = ins[0], int_list(ins[1])
    out = torch.broadcast_shapes(tuple(x.shape), tuple(shape))
    return [x.expand(out)]


@register("Tile")
def tile(ins, attrs, ctx):
    return [ins[0].repeat(*int_list(ins[1]))]


@register("Shape")
def shape(ins, attrs, ctx):
    dims = list(ins[0].shape)
    start, end = attrs.get("start", 0), attrs.get("end", None)
    return [torch.tensor(dims[start:end], dtype=torch.int64)]


@register("Size")
def size(ins, attrs, ctx):
    return [torch.tensor(ins[0].numel(), dtype=torch.int64)]


@register("Constant")
def constant(ins, attrs, ctx):
    if attrs.get("value") is not None:
        return [_from_numpy(attrs["value"])]
    if "value_float" in attrs:
        return [torch.tensor(float(attrs["value_float"]), dtype=torch.float32)]
    if "value_floats" in attrs:
        return [torch.tensor(list(attrs["value_floats"]), dtype=torch.float32)]
    if "value_int" in attrs:
        return [torch.tensor(int(attrs["value_int"]), dtype=torch.int64)]
    if "value_ints" in attrs:
        return [torch.tensor(list(attrs["value_ints"]), dtype=torch.int64)]
    raise NotImplementedError(f"Constant with attributes {sorted(attrs)}")


@register("ConstantOfShape")
def constant_of_shape(ins, attrs, ctx):
    shape = int_list(ins[0])
    value = attrs.get("value")
    if value is None:
        return [torch.zeros(shape, dtype=torch.float32)]
    v = _from_numpy(value).reshape(-1)
    return [torch.full(shape, v[0].item(), dtype=v.dtype)]


@register("Range")
def range_(ins, attrs, ctx):
    start, limit, delta = (t.reshape(-1)[0] for t in ins)
    n = max(int(math.ceil((limit.item() - start.item()) / delta.item())), 0)
    return [(start + delta * torch.arange(n, dtype=start.dtype)).to(start.dtype)]


@register("Pad")
def pad(ins, attrs, ctx):
    x = ins[0]
    mode = attrs.get("mode", "constant")
    if ctx.opset < 11:
        pads, value, axes = list(attrs["pads"]), float(attrs.get("value", 0.0)), None
    else:
        pads = int_list(ins[1])
        value = ins[2].reshape(-1)[0].item() if len(ins) > 2 and ins[2] is not None and ins[2].numel() else 0
        axes = int_list(ins[3]) if len(ins) > 3 and ins[3] is not None else None
    rank = x.dim()
    axes = [_axis(a, rank) for a in axes] if axes is not None else list(range(rank))
    k = len(axes)
    full = [(0, 0)] * rank
    for i, a in enumerate(axes):
        full[a] = (pads[i], pads[i + k])
    # negative pads crop
    for a, (b, e) in enumerate(full):
        if b < 0:
            x = x.narrow(a, -b, x.shape[a] + b)
            full[a] = (0, e)
        if e < 0:
            x = x.narrow(a, 0, x.shape[a] + e)
            full[a] = (full[a][0], 0)
    flat = [p for a in reversed(range(rank)) for p in full[a]]
    if mode == "constant":
        return [F.pad(x, flat, mode="constant", value=value)]
    # reflect / edge: torch pads only the trailing dims of batched inputs; pad each axis on its own.
    torch_mode = {"reflect": "reflect", "edge": "replicate", "wrap": "circular"}[mode]
    for a, (b, e) in enumerate(full):
        if b == 0 and e == 0:
            continue
        moved = x.movedim(a, -1)
        shp = moved.shape
        y = F.pad(moved.reshape(1, -1, shp[-1]).to(torch.float64 if not x.is_floating_point() else x.dtype),
                  (b, e), mode=torch_mode)
        x = y.reshape(*shp[:-1], shp[-1] + b + e).to(x.dtype).movedim(-1, a)
    return [x]


@register("DepthToSpace")
def depth_to_space(ins, attrs, ctx):
    x = ins[0]
    b = int(attrs["blocksize"])
    n, c, h, w = x.shape
    if attrs.get("mode", "DCR") == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return [y.reshape(n, c // (b * b), h * b, w * b)]


@register("SpaceToDepth")
def space_to_depth(ins, attrs, ctx):
    x = ins[0]
    b = int(attrs["blocksize"])
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).permute(0, 3, 5, 1, 2, 4)
    return [y.reshape(n, c * b * b, h // b, w // b)]


@register("EyeLike")
def eye_like(ins, attrs, ctx):
    x = ins[0]
    dtype = torch_dtype(int(attrs["dtype"])) if "dtype" in attrs else x.dtype
    k = int(attrs.get("k", 0))
    n, m = x.shape
    out = torch.zeros(n, m, dtype=dtype)
    for i in range(n):
        if 0 <= i + k < m:
            out[i, i + k] = 1
    return [out]


