"""Tensors between ranks of one host through shared memory, not a socket.

`ShmTransport(transfers, world, timeout_s)` is made by the launching process before it forks the ranks: one
anonymous shared mapping holds a slot per transfer (its exact bytes, 64-byte aligned), and a semaphore per transfer
says that its slot is filled.  A sender copies the tensor into its slot and releases the semaphore (one copy); the
receiver waits on it and reads the slot in place as a tensor of the transfer's shape and dtype (no copy).  Each
slot is written once per repetition and repetitions are separated by `barrier()`, so a receiver's view stays valid
until the next barrier.  Every wait has a timeout and names the transfer it waited for.

Shared mappings are inherited by forked children only: ranks started by torchrun use a process-group transport.
"""

from __future__ import annotations

import math
import mmap
import multiprocessing as mp
from collections.abc import Sequence

import torch

from planner.execute.ops import torch_dtype
from planner.execute.partition import Transfer

__all__ = ["ShmTransport"]

_ALIGN_BYTES = 64


def _nbytes(tr: Transfer) -> int:
    return math.prod(tr.shape) * torch.empty(0, dtype=torch_dtype(tr.dtype)).element_size()


class ShmTransport:
    """Shared-memory slots and their semaphores for every transfer of a run (module docstring)."""

    kind = "shared memory"

    def __init__(self, transfers: Sequence[Transfer], world: int, timeout_s: float) -> None:
        ctx = mp.get_context("fork")
        self._offset: dict[int, int] = {}
        total = 0
        for tr in transfers:
            self._offset[tr.tag] = total
            total += -(-_nbytes(tr) // _ALIGN_BYTES) * _ALIGN_BYTES
        self._arena = mmap.mmap(-1, max(total, _ALIGN_BYTES))
        self._ready = {tr.tag: ctx.Semaphore(0) for tr in transfers}
        self._barrier = ctx.Barrier(world)
        self._timeout_s = timeout_s
        self._views: dict[int, torch.Tensor] = {}
        self.total_bytes = total

    def _view(self, tr: Transfer) -> torch.Tensor:
        view = self._views.get(tr.tag)
        if view is None:
            raw = torch.frombuffer(self._arena, dtype=torch.uint8, count=_nbytes(tr), offset=self._offset[tr.tag])
            view = raw.view(torch_dtype(tr.dtype)).reshape(tr.shape)
            self._views[tr.tag] = view
        return view

    def send(self, tr: Transfer, value: torch.Tensor) -> None:
        """Copy `value` into the transfer's slot and mark it filled; a shape or dtype the plan does not expect
        raises before anything is written."""
        if tuple(value.shape) != tr.shape or value.dtype != torch_dtype(tr.dtype):
            raise RuntimeError(f"tensor {tr.tensor!r} for rank {tr.dst} is {tuple(value.shape)} {value.dtype}, "
                               f"the plan expects {tr.shape} {tr.dtype}")
        if value.numel():
            self._view(tr).copy_(value)
        self._ready[tr.tag].release()

    def receive(self, tr: Transfer) -> torch.Tensor:
        """The transfer's tensor, a view of its slot, once the sender has filled it."""
        ready = self._ready[tr.tag]
        if not ready.acquire(False) and not ready.acquire(True, self._timeout_s):
            raise RuntimeError(f"receiving {tr.tensor!r} from rank {tr.src} timed out after "
                               f"{self._timeout_s:.0f}s")
        return self._view(tr)

    def barrier(self) -> None:
        try:
            self._barrier.wait(self._timeout_s)
        except Exception as exc:  # BrokenBarrierError, or the timeout
            raise RuntimeError(f"the barrier between repetitions timed out after {self._timeout_s:.0f}s "
                               f"({type(exc).__name__})") from None
