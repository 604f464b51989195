"""Point-to-point helpers for the code plan-codegen writes: send one tensor, receive one tensor of a known shape.

plan-codegen copies this file, as it is, into its output folder as ``p2p.py``: it must import nothing but torch.
Tensors travel as flat contiguous buffers; bool travels as uint8 (not every backend carries bool).
"""

import torch
import torch.distributed as dist


def send(value, dst, tag):
    """Start sending `value` to rank `dst` under `tag`; returns the work handle (wait on it before exiting)."""
    buf = (value.to(torch.uint8) if value.dtype == torch.bool else value).contiguous().reshape(-1)
    return dist.isend(buf, dst=dst, tag=tag)


def recv(src, tag, shape, dtype, timeout):
    """Receive the tensor of `shape` and `dtype` that rank `src` sends under `tag` (waits at most `timeout`)."""
    wire = torch.uint8 if dtype == torch.bool else dtype
    buf = torch.empty(shape, dtype=wire).reshape(-1)
    if buf.numel():
        dist.irecv(buf, src=src, tag=tag).wait(timeout)
    out = buf.reshape(shape)
    return out.to(torch.bool) if dtype == torch.bool else out
