"""Reductions (axes as attribute or input), ArgMax/ArgMin, CumSum and TopK with ONNX semantics."""

from __future__ import annotations

import torch

from planner.execute.ops import int_list, register

# opset from which the op takes `axes` as its second input instead of an attribute
_AXES_INPUT_SINCE = {"ReduceSum": 13}
_DEFAULT_AXES_INPUT_SINCE = 18


def _reduce(kind: str, fn):
    def run(ins, attrs, ctx):
        x = ins[0]
        since = _AXES_INPUT_SINCE.get(kind, _DEFAULT_AXES_INPUT_SINCE)
        if ctx.opset >= since:
            axes = int_list(ins[1]) if len(ins) > 1 and ins[1] is not None else []
        else:
            axes = list(attrs.get("axes") or [])
        keepdims = bool(int(attrs.get("keepdims", 1)))
        if not axes:
            if int(attrs.get("noop_with_empty_axes", 0)):
                return [x]
            axes = list(range(x.dim()))
        axes = sorted({a + x.dim() if a < 0 else a for a in axes})
        if x.dim() == 0:
            return [fn(x, None, keepdims)]
        return [fn(x, tuple(axes), keepdims)]

    return run


def _sum(x, dims, keep):
    return torch.sum(x, dim=dims, keepdim=keep, dtype=x.dtype) if dims else x.clone()


def _mean(x, dims, keep):
    return torch.mean(x, dim=dims, keepdim=keep) if dims else x.clone()


def _prod(x, dims, keep):
    for d in sorted(dims or (), reverse=True):
        x = torch.prod(x, dim=d, keepdim=keep, dtype=x.dtype)
    return x


def _amax(x, dims, keep):
    return torch.amax(x, dim=dims, keepdim=keep) if dims else x.clone()


def _amin(x, dims, keep):
    return torch.amin(x, dim=dims, keepdim=keep) if dims else x.clone()


for _kind, _fn in {
    "ReduceSum": _sum, "ReduceMean": _mean, "ReduceProd": _prod, "ReduceMax": _amax, "ReduceMin": _amin,
    "ReduceSumSquare": lambda x, d, k: _sum(x * x, d, k),
    "ReduceL1": lambda x, d, k: _sum(x.abs(), d, k),
    "ReduceL2": lambda x, d, k: torch.sqrt(_sum(x * x, d, k)),
    "ReduceLogSum": lambda x, d, k: torch.log(_sum(x, d, k)),
    "ReduceLogSumExp": lambda x, d, k: torch.logsumexp(x, dim=d, keepdim=k) if d else x.clone(),
}.items():
    register(_kind)(_reduce(_kind, _fn))


def _arg(largest: bool):
    def run(ins, attrs, ctx):
        x = ins[0]
        axis = int(attrs.get("axis", 0))
        axis = axis + x.dim() if axis < 0 else axis
        keepdims = bool(int(attrs.get("keepdims", 1)))
        last = int(attrs.get("select_last_index", 0))
        y = x.flip(axis) if last else x
        idx = torch.argmax(y, dim=axis, keepdim=True) if largest else torch.argmin(y, dim=axis, keepdim=True)
        if last:
            idx = x.shape[axis] - 1 - idx
        return [idx if keepdims else idx.squeeze(axis)]

    return run


register("ArgMax")(_arg(True))
register("ArgMin")(_arg(False))


@register("CumSum")
def cumsum(ins, attrs, ctx):
    x = ins[0]
    axis = int_list(ins[1])[0]
    axis = axis + x.dim() if axis < 0 else axis
    exclusive, reverse = int(attrs.get("exclusive", 0)), int(attrs.get("reverse", 0))
    y = x.flip(axis) if reverse else x
    out = torch.cumsum(y, dim=axis, dtype=x.dtype)
    if exclusive:
        out = out - y
    return [out.flip(axis) if reverse else out]


@register("TopK")
def topk(ins, attrs, ctx):
    """The k largest (or smallest) along `axis`; equal values keep their order (lower index first), as ONNX
    specifies, through a stable sort (torch.topk breaks ties differently)."""
    x = ins[0]
    k = int(attrs["k"]) if ctx.opset < 10 else int_list(ins[1])[0]
    axis = int(attrs.get("axis", -1))
    axis = axis + x.dim() if axis < 0 else axis
    largest = bool(int(attrs.get("largest", 1)))
    values, indices = torch.sort(x, dim=axis, descending=largest, stable=True)
    return [values.narrow(axis, 0, k), indices.narrow(axis, 0, k)]
