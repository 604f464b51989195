"""DualPipe and DualPipeV (DeepSeek-V3 technical report, 2024; the deepseek-ai/DualPipe README).

Both give every device two stages and cut a device's program into eight steps, written here from the published
step names.  On device r the two stages are *phase 0* (the stage whose micro-batches have the shorter way to
come) and *phase 1*; ``B1(zb)`` is an input-gradient backward whose weight gradient is queued (first in, first
out) for a later ``W``; a plain backward is a full backward BW; ``F0&B1`` is an overlapped pair, one forward and
one full backward run together (PyTorch's OVERLAP_F_B).  With k the device's distance from its nearer end and
n_* the step counts:

====  ===========  =====================================================================================
step  name         what each repetition runs
====  ===========  =====================================================================================
1     nF0          F0
2     nF0F1        F0, F1
3     nB1W1F1      B1(zb), W, F1
4     nF0B1F1B0    F0&B1 (the first one split into F0, B1 on the device(s) where the two directions meet), F1&B0
5     nB1F1B0      B1, F1&B0
6     nB1B0        B1, B0 — from the middle repetition on with zero bubble (B1 first when k is odd, B0 when even)
7     nWB0         W, B0(zb)
8     nW           W
====  ===========  =====================================================================================

* **DualPipe** (bidirectional): p devices, p even; the model has p chunks; device r holds chunk r for the
  micro-batches entering at device 0 and chunk p-1-r for those entering at device p-1 — two copies of every
  chunk's parameters.  m micro-batches, m/2 from each end; requires p even, m even and m >= 2p.  In our IR the
  two directions are two chains of stages (`unroll.TrainingPipeline.chains`): stages 0..p-1 down (stage s on
  device s) and p..2p-1 up (stage p+j = chunk j on device p-1-j), each with m/2 micro-batches numbered 0..m/2-1.
  k = min(r, p-1-r); step counts n1 = 2(p/2-k-1), n2 = k+1, n3 = p/2-k-1, n4 = m/2-p+k+1, n5 = p/2-k-1, n6 = k+1,
  n7 = p/2-k-1, n8 = k+1.  Phase 0 of a device in the first half is its down stage, in the second half its up
  stage.  Published bubble (B the full backward): (p/2-1)(F&B + B - 3W); memory 2x parameters, p+1 activations.
* **DualPipeV** (the "cut-in-half" V variant): p devices, 2p stages, device r holds stages r (phase 0) and
  2p-1-r (phase 1); all m micro-batches enter at device 0.  Requires m >= 2p.  k = r; n1 = 2(p-r-1), n2 = r+1,
  n3 = p-r-1, n4 = m-2p+r+1, n5 = p-r-1, n6 = r+1, n7 = p-r-1, n8 = r+1; the first repetition of step 4 is split
  on the last device (r = p-1).  Its per-device action lists equal those of torch.distributed.pipelining's
  ScheduleDualPipeV (tests/test_pipeline_torch.py checks this where torch is installed).
"""

from __future__ import annotations

from collections import deque

from planner.pipeline.generators import RequirementError, require
from planner.pipeline.unroll import v_placement
from planner.schedule.actions import Action, ActionKind, OverlapAction, ScheduleAction
from planner.schedule.program import Schedule

__all__ = ["RequirementError", "dualpipe", "dualpipe_v"]

F, B, W, BW = ActionKind.F, ActionKind.B, ActionKind.W, ActionKind.BW


class _Device:
    """Emits one device's actions for its two phases, counting micro-batches per phase and queueing W."""

    def __init__(self, stage0: int, stage1: int) -> None:
        self.stage = (stage0, stage1)
        self.fwd = [0, 0]
        self.bwd = [0, 0]
        self.wq: deque[Action] = deque()
        self.out: list[ScheduleAction] = []

    def f(self, phase: int) -> Action:
        a = Action(self.stage[phase], F, self.fwd[phase])
        self.fwd[phase] += 1
        return a

    def b(self, phase: int, zb: bool) -> Action:
        mb = self.bwd[phase]
        self.bwd[phase] += 1
        if zb:
            self.wq.append(Action(self.stage[phase], W, mb))
            return Action(self.stage[phase], B, mb)
        return Action(self.stage[phase], BW, mb)

    def F(self, phase: int) -> None:
        self.out.append(self.f(phase))

    def B(self, phase: int, zb: bool = False) -> None:
        self.out.append(self.b(phase, zb))

    def W(self) -> None:
        self.out.append(self.wq.popleft())

    def FB(self, fphase: int, bphase: int) -> None:
        self.out.append(OverlapAction(self.f(fphase), self.b(bphase, False)))


def _eight_steps(dev: _Device, k: int, n: tuple[int, ...], split_first: bool) -> list[ScheduleAction]:
    n1, n2, n3, n4, n5, n6, n7, n8 = n
    for _ in range(n1):
        dev.F(0)
    for _ in range(n2):
        dev.F(0)
        dev.F(1)
    for _ in range(n3):
        dev.B(1, zb=True)
        dev.W()
        dev.F(1)
    for i in range(n4):
        if i == 0 and split_first:
            dev.F(0)
            dev.B(1)
        else:
            dev.FB(0, 1)
        dev.FB(1, 0)
    for _ in range(n5):
        dev.B(1)
        dev.FB(1, 0)
    zb = False
    for i in range(n6):
        if i == n6 // 2 and k % 2 == 1:
            zb = True
        dev.B(1, zb)
        if i == n6 // 2 and k % 2 == 0:
            zb = True
        dev.B(0, zb)
    for _ in range(n7):
        dev.W()
        dev.B(0, zb=True)
    for _ in range(n8):
        dev.W()
    assert not dev.wq, "every queued weight gradient is run"
    return dev.out


def dualpipe_v(p: int, m: int) -> Schedule:
    require("DualPipeV", p >= 1, "p >= 1", p, m)
    require("DualPipeV", m >= 2 * p, "m >= 2p (at least as many micro-batches as its 2p stages)", p, m)
    rows = []
    for r in range(p):
        dev = _Device(r, 2 * p - 1 - r)
        a = p - r - 1
        n = (2 * a, r + 1, a, m - 2 * p + r + 1, a, r + 1, a, r + 1)
        rows.append(_eight_steps(dev, r, n, split_first=(r == p - 1)))
    return Schedule.build(rows, num_stages=2 * p, num_microbatches=m, stage_to_device=v_placement(p),
                          name="dualpipev")


def dualpipe(p: int, m: int) -> Schedule:
    """DualPipe with m micro-batches in total; the schedule's `num_microbatches` is m/2 (per direction)."""
    require("DualPipe", p >= 2 and p % 2 == 0, "an even number of devices p >= 2", p, m)
    require("DualPipe", m % 2 == 0, "an even number of micro-batches m (m/2 enter at each end)", p, m)
    require("DualPipe", m >= 2 * p, "m >= 2p (m/2 >= p micro-batches from each end)", p, m)
    half, mh = p // 2, m // 2
    rows = []
    for r in range(p):
        down, up = r, 2 * p - 1 - r
        dev = _Device(down, up) if r < half else _Device(up, down)
        k = min(r, p - 1 - r)
        a = half - k - 1
        n = (2 * a, k + 1, a, mh - p + k + 1, a, k + 1, a, k + 1)
        rows.append(_eight_steps(dev, k, n, split_first=(k == half - 1)))
    return Schedule.build(rows, num_stages=2 * p, num_microbatches=mh, stage_to_device=v_placement(p),
                          name="dualpipe")

