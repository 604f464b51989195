"""Torch implementations of ONNX operators, with ONNX semantics, and the registry that finds them.

An op function has the signature ``fn(inputs, attrs, ctx) -> list[Tensor]``:

* ``inputs``: the node's inputs in ONNX argument order, ``None`` for an omitted optional input;
* ``attrs``: the node's attributes as plain values (`planner.ir.onnx_values.plain_attributes`);
* ``ctx``: an `OpContext` (opset version of the node's domain, how many outputs the node asks for, their static
  shapes and dtypes from the import, for ops whose semantics changed between opsets or whose output is static).

It returns one tensor per requested output (trailing optional outputs may be left out).  Functions never modify
their inputs.  Modules by family: `elementwise`, `shape`, `nn`, `quant`, `reduce`, `index`, `resize`, `rnn`, `control`
(If, Loop, Scan: one op on one rank, bodies through this same table).

`unsupported_ops(graph)` lists what the runtime lacks, before any process starts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

Tensor = torch.Tensor
OpFn = Callable[[list, dict, "OpContext"], list]


@dataclass(frozen=True)
class OpContext:
    """What an op function may need besides inputs and attributes."""

    opset: int = 20
    num_outputs: int = 1
    output_shapes: tuple[tuple[int, ...] | None, ...] = ()
    output_dtypes: tuple[str | None, ...] = ()
    name: str = ""
    # tensors visible to the node (the rank's environment): If/Loop/Scan bodies read outer-scope names from it
    scope: Mapping[str, Tensor] | None = None


OPS: dict[str, OpFn] = {}


def register(*names: str) -> Callable[[OpFn], OpFn]:
    """Decorator: register `fn` for the ONNX op types `names` (default domain)."""

    def deco(fn: OpFn) -> OpFn:
        for n in names:
            if n in OPS:
                raise ValueError(f"op {n} registered twice")
            OPS[n] = fn
        return fn

    return deco


# ONNX element type ids and names -> torch dtypes (strings and complex types are not supported).
_DTYPES = {
    "float": torch.float32, "double": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64,
    "bool": torch.bool, "uint16": torch.uint16, "uint32": torch.uint32, "uint64": torch.uint64,
}
_ONNX_IDS = {1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
             10: "float16", 11: "double", 12: "uint32", 13: "uint64", 16: "bfloat16"}


def torch_dtype(onnx_type: str | int) -> torch.dtype:
    """torch dtype of an ONNX element type given by name ('float') or id (1); KeyError if unsupported."""
    name = _ONNX_IDS[onnx_type] if isinstance(onnx_type, int) else onnx_type
    return _DTYPES[name]


def supported_dtype(name: str) -> bool:
    return name in _DTYPES


def int_list(t: Tensor | Sequence[int] | None) -> list[int]:
    """A 1-D integer tensor (or list) as a Python list."""
    if t is None:
        return []
    if isinstance(t, Tensor):
        return [int(v) for v in t.reshape(-1).tolist()]
    return [int(v) for v in t]


def scalar(t: Tensor) -> float | int | bool:
    return t.reshape(-1)[0].item()


# Import the families so that they register themselves.
from planner.execute.ops import control, elementwise, index, nn, quant, reduce, resize, rnn, shape  # noqa: E402,F401

# Ops with data-dependent output shapes: the plan's static shapes are only bounds for them, so a distributed run
# could not size its receive buffers (and the runtime has no implementation for them).
UNSUPPORTED_ALWAYS = frozenset({"NonZero", "Unique", "Compress", "NonMaxSuppression"})


def supported_op_types() -> list[str]:
    """The ONNX op types (default domain) the runtime runs, sorted."""
    return sorted(t for t in OPS if t not in UNSUPPORTED_ALWAYS)


def unsupported_ops(graph) -> list[str]:
    """'name (op_type)' of every op of `graph` (an OpGraph) the runtime cannot run, in graph order.

    An op is unsupported when it has a non-default domain, no torch implementation, reads or writes a tensor of
    an element type torch cannot hold (strings, complex), or has a data-dependent output shape.
    """
    bad = []
    for op in graph.ops:
        why = None
        if op.domain not in ("", "ai.onnx"):
            why = f"domain {op.domain}"
        elif op.op_type in UNSUPPORTED_ALWAYS or op.op_type not in OPS:
            why = op.op_type
        else:
            for t in (*op.reads, *op.writes):
                info = graph.tensors.get(t)
                if info is None or not supported_dtype(info.dtype):
                    why = f"{op.op_type}, tensor {t!r} of type {info.dtype if info else 'unknown'}"
                    break
        if why is not None:
            bad.append(f"{op.name} ({why})")
    return bad
