"""The few helpers generated rank files call: load constants from the ONNX file, run one ONNX op with its torch
implementation, and send / receive one tensor (flat contiguous buffers; bool travels as uint8)."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from planner.execute.ops import OPS, OpContext, torch_dtype
from planner.execute.program import load_program, prepared_graph

__all__ = ["load_constants", "op", "send", "recv"]


def load_constants(model_path: str, ops: list[str]) -> dict[str, torch.Tensor]:
    """Weights and folded constants the named ops read, from the ONNX file (after the planner's passes)."""
    if not ops:
        return {}
    return load_program(prepared_graph(model_path), model_path, ops).constants


def op(op_type: str, inputs: list, attrs: dict, opset: int, num_outputs: int) -> list[torch.Tensor]:
    while inputs and inputs[-1] is None:
        inputs = inputs[:-1]
    out = OPS[op_type](inputs, attrs, OpContext(opset=opset, num_outputs=num_outputs))
    return list(out) + [None] * (num_outputs - len(out))


def send(value: torch.Tensor, dst: int, tag: int):
    buf = (value.to(torch.uint8) if value.dtype == torch.bool else value).contiguous().reshape(-1)
    return dist.isend(buf, dst=dst, tag=tag)


def recv(src: int, tag: int, shape: list[int], dtype: str, timeout) -> torch.Tensor:
    wire = torch.uint8 if dtype == "bool" else torch_dtype(dtype)
    buf = torch.empty(math.prod(shape), dtype=wire)
    if buf.numel():
        dist.irecv(buf, src=src, tag=tag).wait(timeout)
    out = buf.reshape(shape)
    return out.to(torch.bool) if dtype == "bool" else out
