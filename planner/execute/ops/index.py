"""Indexing ONNX ops: Gather, GatherElements, GatherND, ScatterND, ScatterElements (with reductions), OneHot.

Negative indices count from the end of their axis, as ONNX allows."""

from __future__ import annotations

import math
import warnings

import torch

from planner.execute.ops import register


def _wrap(idx: torch.Tensor, size: int) -> torch.Tensor:
    idx = idx.to(torch.int64)
    return torch.where(idx < 0, idx + size, idx)


@register("Gather")
def gather(ins, attrs, ctx):
    x, idx = ins
    axis = int(attrs.get("axis", 0))
    axis = axis + x.dim() if axis < 0 else axis
    flat = _wrap(idx, x.shape[axis]).reshape(-1)
    out = x.index_select(axis, flat)
    return [out.reshape(*x.shape[:axis], *idx.shape, *x.shape[axis + 1:])]


@register("GatherElements")
def gather_elements(ins, attrs, ctx):
    x, idx = ins
    axis = int(attrs.get("axis", 0))
    axis = axis + x.dim() if axis < 0 else axis
    return [torch.gather(x, axis, _wrap(idx, x.shape[axis]))]


def _nd_rows(data_shape, idx: torch.Tensor, batch_dims: int = 0):
    """Linear row numbers into data viewed as (prod(shape[:b+k]), *shape[b+k:]) for ND indices."""
    k = idx.shape[-1]
    b = batch_dims
    lead = idx.shape[:-1]
    rows = torch.zeros(lead, dtype=torch.int64)
    for j in range(k):
        size = data_shape[b + j]
        rows = rows * size + _wrap(idx[..., j], size)
    if b:
        batch = math.prod(data_shape[:b])
        inner = math.prod(data_shape[b:b + k])
        offs = torch.arange(batch).reshape(*data_shape[:b], *([1] * (len(lead) - b))) * inner
        rows = rows + offs
    return rows, k


@register("GatherND")
def gather_nd(ins, attrs, ctx):
    x, idx = ins
    b = int(attrs.get("batch_dims", 0))
    rows, k = _nd_rows(x.shape, idx, b)
    flat = x.reshape(-1, *x.shape[b + k:])
    return [flat[rows.reshape(-1)].reshape(*idx.shape[:-1], *x.shape[b + k:])]


_INDEX_REDUCE = {"mul": "prod", "max": "amax", "min": "amin"}


@register("ScatterND")
def scatter_nd(ins, attrs, ctx):
    data, idx, updates = ins
    reduction = attrs.get("reduction", "none") or "none"
    rows, k = _nd_rows(data.shape, idx)
    out = data.clone().reshape(-1, *data.shape[k:])
    rows = rows.reshape(-1)
    upd = updates.reshape(-1, *data.shape[k:]).to(data.dtype)
    if reduction == "none":
        out[rows] = upd
    elif reduction == "add":
        out.index_put_((rows,), upd, accumulate=True)
    else:
        with warnings.catch_warnings():  # index_reduce_ is marked beta
            warnings.simplefilter("ignore", UserWarning)
            out.index_reduce_(0, rows, upd, _INDEX_REDUCE[reduction], include_self=True)
    return [out.reshape(data.shape)]


_SCATTER_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


@register("ScatterElements", "Scatter")
def scatter_elements(ins, attrs, ctx):
    data, idx, updates = ins
    axis = int(attrs.get("axis", 0))
    axis = axis + data.dim() if axis < 0 else axis
    idx = _wrap(idx, data.shape[axis])
    reduction = attrs.get("reduction", "none") or "none"
    if reduction == "none":
        return [torch.scatter(data, axis, idx, updates.to(data.dtype))]
    return [torch.scatter_reduce(data, axis, idx, updates.to(data.dtype), _SCATTER_REDUCE[reduction],
                                 include_self=True)]


@register("OneHot")
def one_hot(ins, attrs, ctx):
    indices, depth, values = ins
    d = int(depth.reshape(-1)[0].item())
    axis = int(attrs.get("axis", -1))
    rank = indices.dim() + 1
    axis = axis + rank if axis < 0 else axis
    idx = indices.to(torch.int64)
    idx = torch.where(idx < 0, idx + d, idx)
    valid = (idx >= 0) & (idx < d)
    hot = torch.nn.functional.one_hot(torch.where(valid, idx, 0), d).to(torch.bool) & valid.unsqueeze(-1)
    off, on = values.reshape(-1)[0], values.reshape(-1)[1]
    out = torch.where(hot, on, off)
    return [out.movedim(-1, axis)]


