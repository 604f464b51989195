"""Measured tensor memory of one rank: the bytes of the distinct tensor storages it holds, and their peak.

What counts: every storage reachable from the tensors a rank holds at a moment — its constants (weights and folded
values) and the graph inputs its ops read (held for the whole step, as the plan's memory model holds parameters),
the activations in its environment (made here or received), its send buffers still in flight and its receive
buffers already posted.  Views share their base's storage and are counted once (by storage address).  Working
memory inside a kernel (an im2col buffer, a temporary) is not seen: the sample is taken between ops, right after
an op has written its outputs and before its inputs are released, when its inputs and outputs are both held.

Sampling walks every held tensor, so `run_rank` samples only in its first repetition (a warm-up one by default),
never in a timed one.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["TensorMeter", "storage_bytes"]


def _key(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (views of one storage counted once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        ptr, n = _key(t)
        if n:
            seen[ptr] = n
    return sum(seen.values())


class TensorMeter:
    """Peak bytes over samples; `fixed` tensors (constants, inputs) are in every sample."""

    def __init__(self, fixed: Iterable[torch.Tensor]) -> None:
        self._fixed: dict[int, int] = {}
        for t in fixed:
            ptr, n = _key(t)
            if n:
                self._fixed[ptr] = n
        self.fixed_bytes = sum(self._fixed.values())
        self.peak_bytes = self.fixed_bytes

    def sample(self, *groups: Iterable[torch.Tensor]) -> int:
        """Bytes held now (fixed + the distinct storages of `groups` not among them); updates the peak."""
        seen = set(self._fixed)
        total = self.fixed_bytes
        for group in groups:
            for t in group:
                ptr, n = _key(t)
                if n and ptr not in seen:
                    seen.add(ptr)
                    total += n
        self.peak_bytes = max(self.peak_bytes, total)
        return total
