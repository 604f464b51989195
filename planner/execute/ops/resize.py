"""Resize (opsets 10-19) and Upsample with ONNX semantics: nearest, linear (n-linear) and cubic modes, every
coordinate transformation mode, every nearest rounding mode, `exclude_outside`, `extrapolation_value`, `axes` and
`keep_aspect_ratio_policy`.  Antialiasing (opset 18 `antialias=1`) is not supported.

Interpolation is separable: each resized axis is interpolated on its own (nearest picks one source index, linear
blends two, cubic four), which is exactly the tensor-product interpolation ONNX defines for all three modes.
"""

from __future__ import annotations

import math

import torch

from planner.execute.ops import int_list, register


def _source_coords(mode: str, n_out: int, n_in: int, scale: float, roi: tuple[float, float] | None
                   ) -> torch.Tensor:
    """Source coordinate of each output index along one axis."""
    o = torch.arange(n_out, dtype=torch.float32)  # float32, as onnxruntime computes them (ceil/floor agree)
    if mode == "half_pixel":
        return (o + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (o + 0.5) / scale - 0.5 if n_out > 1 else torch.zeros(n_out, dtype=torch.float32)
    if mode == "align_corners":
        return o * (n_in - 1) / (n_out - 1) if n_out > 1 else torch.zeros(n_out, dtype=torch.float32)
    if mode == "asymmetric":
        return o / scale
    if mode == "half_pixel_symmetric":
        adjustment = n_out / (scale * n_in)
        offset = n_in / 2 * (1 - adjustment)
        return offset + (o + 0.5) / scale - 0.5
    if mode == "tf_crop_and_resize":
        start, end = roi if roi is not None else (0.0, 1.0)
        if n_out > 1:
            return start * (n_in - 1) + o * (end - start) * (n_in - 1) / (n_out - 1)
        return torch.full((n_out,), 0.5 * (start + end) * (n_in - 1), dtype=torch.float32)
    raise NotImplementedError(f"Resize coordinate_transformation_mode {mode!r}")


def _nearest(x: torch.Tensor, mode: str) -> torch.Tensor:
    if mode == "floor":
        return torch.floor(x)
    if mode == "ceil":
        return torch.ceil(x)
    frac = x - torch.floor(x)
    if mode == "round_prefer_ceil":
        return torch.where(frac == 0.5, torch.ceil(x), torch.round(x))
    if mode == "round_prefer_floor":
        return torch.where(frac == 0.5, torch.floor(x), torch.round(x))
    raise NotImplementedError(f"Resize nearest_mode {mode!r}")


def _cubic_weights(t: torch.Tensor, a: float) -> torch.Tensor:
    """Keys' cubic kernel at distances 1+t, t, 1-t, 2-t (columns) for fractional offsets t."""
    d = torch.stack([1 + t, t, 1 - t, 2 - t], dim=-1).abs()
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return torch.where(d <= 1, near, torch.where(d < 2, far, torch.zeros_like(d)))


def _resize_axis(x: torch.Tensor, axis: int, n_out: int, scale: float, roi, attrs: dict, mode: str
                 ) -> torch.Tensor:
    n_in = x.shape[axis]
    coord = attrs.get("coordinate_transformation_mode", "half_pixel")
    src = _source_coords(coord, n_out, n_in, scale, roi)
    outside = (src < 0) | (src > n_in - 1)  # only tf_crop_and_resize extrapolates
    moved = x.movedim(axis, -1)
    if mode == "nearest":
        idx = _nearest(src, attrs.get("nearest_mode", "round_prefer_floor")).clamp(0, n_in - 1).long()
        out = moved[..., idx]
    else:
        base = torch.floor(src)
        t = src - base
        if mode == "linear":
            offsets, weights = [0, 1], torch.stack([1 - t, t], dim=-1)
        elif mode == "cubic":
            offsets, weights = [-1, 0, 1, 2], _cubic_weights(t, float(attrs.get("cubic_coeff_a", -0.75)))
        else:
            raise NotImplementedError(f"Resize mode {mode!r}")
        idx = torch.stack([base.long() + k for k in offsets], dim=-1)  # (n_out, taps)
        if mode == "cubic" and int(attrs.get("exclude_outside", 0)):
            weights = torch.where((idx < 0) | (idx > n_in - 1), torch.zeros_like(weights), weights)
            weights = weights / weights.sum(dim=-1, keepdim=True)
        idx = idx.clamp(0, n_in - 1)
        work = moved.to(torch.float64) if moved.is_floating_point() else moved.double()
        out = (work[..., idx] * weights).sum(dim=-1)
        if not moved.is_floating_point():
            out = torch.round(out)
        out = out.to(moved.dtype)
    if coord == "tf_crop_and_resize":
        fill = float(attrs.get("extrapolation_value", 0.0))
        out = torch.where(outside, torch.full_like(out, fill), out)
    return out.movedim(-1, axis)


def _resize(x: torch.Tensor, roi: list[float] | None, scales: list[float] | None, sizes: list[int] | None,
            attrs: dict) -> torch.Tensor:
    if int(attrs.get("antialias", 0)):
        raise NotImplementedError("Resize with antialias=1")
    rank = x.dim()
    axes = [a % rank for a in (attrs.get("axes") or range(rank))]
    n_in = [x.shape[a] for a in axes]
    if sizes:
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            scale = [s / n for s, n in zip(sizes, n_in, strict=True)]
            out = list(sizes)
        else:
            pick = min if policy == "not_larger" else max
            s = pick(sz / n for sz, n in zip(sizes, n_in, strict=True))
            scale = [s] * len(axes)
            out = [int(math.floor(s * n + 0.5)) for n in n_in]
    elif scales:
        scale = [float(s) for s in scales]
        out = [int(math.floor(n * s)) for n, s in zip(n_in, scale, strict=True)]
    else:
        raise ValueError("Resize needs scales or sizes")
    mode = attrs.get("mode", "nearest")
    for k, a in enumerate(axes):
        if out[k] == n_in[k] and scale[k] == 1.0 and attrs.get("coordinate_transformation_mode") != \
                "tf_crop_and_resize":
            continue
        r = (float(roi[k]), float(roi[k + len(axes)])) if roi else None
        x = _resize_axis(x, a, out[k], scale[k], r, attrs, mode)
    return x


def _floats(t) -> list[float]:
    return [float(v) for v in t.reshape(-1).tolist()] if t is not None and t.numel() else []


@register("Resize")
def resize(ins, attrs, ctx):
    attrs = dict(attrs)
    if ctx.opset < 11:  # Resize-10: (X, scales); asymmetric coordinates, nearest rounds down
        attrs.setdefault("coordinate_transformation_mode", "asymmetric")
        attrs.setdefault("nearest_mode", "floor")
        return [_resize(ins[0], None, _floats(ins[1]), None, attrs)]
    roi = _floats(ins[1]) if len(ins) > 1 and ins[1] is not None else None
    scales = _floats(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    sizes = int_list(ins[3]) if len(ins) > 3 and ins[3] is not None else None
    return [_resize(ins[0], roi, scales, sizes or None, attrs)]


@register("Upsample")
def upsample(ins, attrs, ctx):
    """Upsample (opsets 7-9): Resize-10 semantics with scales from the attribute (7) or the second input (9)."""
    scales = _floats(ins[1]) if len(ins) > 1 and ins[1] is not None else [float(s) for s in attrs["scales"]]
    a = {"mode": attrs.get("mode", "nearest"), "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    return [_resize(ins[0], None, scales, None, a)]
