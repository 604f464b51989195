"""Single-process reference of one training step, and the gradient comparison the pipeline runs must pass.

`reference_step` builds the same model (same seed) and the same micro-batches as the pipeline ranks, and for
micro-batch 0, 1, ..., n-1 runs the whole model forward, the loss (divided by n) and a plain ``loss.backward()``,
so ``param.grad`` accumulates the gradient of the mean loss in micro-batch order.  It runs with one intra-op thread
(like every rank), so both sides use the same kernels.

**Tolerance** (`RTOL`, `ATOL`; fp32).  Per micro-batch, a pipeline stage runs the same kernels on the same
inputs as the reference (one thread on both sides), and gloo moves boundary tensors bit-exactly, so each
micro-batch's gradient agrees bit for bit; only the order in which a parameter's micro-batch gradients are *added*
may differ (a schedule's W order, or DualPipe's two copies added at the end).  Measured on the test model
(tests/test_execute_train.py prints each case with ``-s``; gradient entries range from ~1e-5 to 0.2):

* 1F1B (p=2 m=4, p=4 m=8), DualPipeV, interleaved 1F1B, ZB-V: max abs error 0 (their W order per stage is
  micro-batch order, so the sums are the reference's, bit for bit);
* the CP-SAT-planned V schedule (W out of micro-batch order) and DualPipe (two copies summed): max abs error
  7.5e-9, max rel error 2.3e-7, the worst entry at 0.018 of the tolerance;
* operator-level sub-chunks (tests/test_execute_train_units.py; units cut inside layers, local and cross-rank
  hops of up to five boundary tensors): a serial order and the CP-SAT-planned fixed p=2 K=2 schedule: 0; the
  planned V p=2 K=2 (micro-batches out of order) and a planned one with F&B pairs: max abs 1.5e-8, max rel
  2.8e-7, the worst entry at 0.027 of the tolerance;
* the reference itself, accumulated in reverse micro-batch order (m=8): max abs 3.0e-8, max rel 3.0e-7, worst
  at 0.022 of the tolerance.

We state

    |got - want| <= ATOL + RTOL * |want|   elementwise, RTOL = 1e-5, ATOL = 1e-7,

about 45x the reordering error measured, while a missing micro-batch or a 1e-4 relative change of one entry
fails it (tests check both; a schedule missing a W is refused before any process starts).  The loss (a sum of
per-micro-batch Python floats in micro-batch
order on both sides) must agree to `LOSS_RTOL` = 1e-6 relative; it agrees exactly in every case above.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from planner.execute.train.model import build_model, make_batches, microbatch_loss
from planner.ir.moe_config import MoEConfig

__all__ = ["RTOL", "ATOL", "LOSS_RTOL", "ReferenceResult", "GradientComparison", "reference_step",
           "compare_gradients"]

RTOL = 1e-5
ATOL = 1e-7
LOSS_RTOL = 1e-6


@dataclass
class ReferenceResult:
    loss: float
    microbatch_losses: tuple[float, ...]
    grads: dict[str, np.ndarray]


@dataclass
class GradientComparison:
    ok: bool
    max_abs_error: float
    max_rel_error: float  # max |got - want| / |want| over entries with |want| > ATOL / RTOL (see docstring)
    worst: str  # parameter with the largest violation ratio |got-want| / (ATOL + RTOL |want|)
    worst_ratio: float
    problems: tuple[str, ...]  # missing / extra names, shape mismatches, out-of-tolerance parameters

    def __str__(self) -> str:
        head = "match" if self.ok else "MISMATCH"
        text = (f"{head}: max abs error {self.max_abs_error:.3g}, max rel error {self.max_rel_error:.3g}, worst "
                f"{self.worst} at {self.worst_ratio:.3g} of the tolerance (rtol {RTOL:g}, atol {ATOL:g})")
        return text + ("; " + "; ".join(self.problems[:6]) if self.problems else "")


def reference_step(cfg: MoEConfig, num_microbatches: int, *,
                   order: Sequence[int] | None = None) -> ReferenceResult:
    """One step on one process: forward + backward of each micro-batch, gradients accumulated in micro-batch
    order (or in `order`, a permutation — used to measure what reordering the accumulation does)."""
    order = list(range(num_microbatches)) if order is None else [int(k) for k in order]
    if sorted(order) != list(range(num_microbatches)):
        raise ValueError(f"order {order} is not a permutation of 0..{num_microbatches - 1}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = build_model(cfg)
        tokens, targets = make_batches(cfg, num_microbatches)
        losses = [0.0] * num_microbatches
        for k in order:
            loss = microbatch_loss(model(tokens[k]), targets[k], num_microbatches)
            loss.backward()
            losses[k] = float(loss.detach())
        grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().numpy().copy()
                 for n, p in model.named_parameters()}
    finally:
        torch.set_num_threads(threads)
    return ReferenceResult(float(sum(losses)), tuple(losses), grads)


def compare_gradients(got: dict[str, np.ndarray], want: dict[str, np.ndarray], *, rtol: float = RTOL,
                      atol: float = ATOL) -> GradientComparison:
    """Elementwise ``|got - want| <= atol + rtol * |want|`` for every parameter; every name on both sides."""
    problems: list[str] = []
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    if missing:
        problems.append(f"no gradient for {missing[:4]}" + (f" and {len(missing) - 4} more" if len(missing) > 4
                                                             else ""))
    if extra:
        problems.append(f"unexpected gradients {extra[:4]}")
    max_abs = max_rel = worst_ratio = 0.0
    worst = ""
    for name in sorted(set(got) & set(want)):
        a, b = np.asarray(got[name], np.float64), np.asarray(want[name], np.float64)
        if a.shape != b.shape:
            problems.append(f"{name}: shape {a.shape} != {b.shape}")
            continue
        err = np.abs(a - b)
        if err.size == 0:
            continue
        max_abs = max(max_abs, float(err.max()))
        big = np.abs(b) > atol / rtol
        if big.any():
            max_rel = max(max_rel, float((err[big] / np.abs(b[big])).max()))
        ratio = float((err / (atol + rtol * np.abs(b))).max())
        if ratio > worst_ratio:
            worst_ratio, worst = ratio, name
        if ratio > 1.0:
            problems.append(f"{name}: max abs error {float(err.max()):.3g} exceeds the tolerance")
    return GradientComparison(not problems, max_abs, max_rel, worst, worst_ratio, tuple(problems))
