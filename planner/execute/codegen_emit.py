"""What the emitters of `planner.execute.codegen_ops` share: the context they read a node's tensors from
(`EmitContext`), the registry of emitters by op type, Python literals for attribute values, the helper call
that every node without a direct translation becomes, and small readers of constant operands and shapes.

An emitter is registered with ``@_emits("OpType", ...)``; one that writes several outputs itself is also marked
``@_multi``.  `planner.execute.codegen_ops.emit` picks the emitter, and the helper call when it returns None.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from planner.execute.ops import torch_dtype
from planner.ir.onnx_values import NodeSpec

__all__ = ["EMITTERS", "MULTI_OUTPUT", "EmitContext", "Emitter", "dtype_source", "helper_call", "literal"]


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


_MULTI: set[Emitter] = set()


def _multi(fn: Emitter) -> Emitter:
    """Marks an emitter that handles several outputs itself (its lines use {0}, {1} ... for the output names)."""
    _MULTI.add(fn)
    return fn


# The registry under names for `planner.execute.codegen_ops.emit`: op type -> emitter, and the emitters that write
# several outputs.
EMITTERS = _EMIT
MULTI_OUTPUT = _MULTI
