"""Zero Bubble schedules (Qi et al., "Zero Bubble Pipeline Parallelism", 2023): ZB-H1, ZB-H2, ZB-V.

The backward is split into B (input gradient, on the critical path) and W (weight gradient, free to move), and
W fills the bubbles.  The orders below are written from the paper's description of its handcrafted schedules
(section 2) and its ZB-V; unit costs F = B = W are the setting of its figures, the simulator times the orders on
any costs.

* **ZB-H1** (memory of 1F1B): stage d on device d; device d warms up with p-1-d forwards (as 1F1B), then repeats
  F (while any is left), B, and a W *delayed by d* — the W of the micro-batch d backwards earlier — so that every
  device holds p micro-batches in flight (1F1B's peak, reached on every device instead of only the first); the d
  delayed W's fill the tail.  Requires m >= p.  Published bubble per device, with B the input-gradient part:
  (p-1)(F+B-W), which the DualPipe README writes (p-1)(F+B-2W) with B the full backward.
* **ZB-H2** (zero bubble, memory 2p-1): as ZB-H1 with 2(p-1-d) warm-up forwards and the W delayed by 2d: every
  device holds 2p-1 micro-batches in flight.  Requires m >= 2p-1.  Published bubble per device (B input-gradient
  part): (p-1)(F+B-2W) when B >= 2W; the global definition of bubble (idle / (devices x makespan)) adds the
  parallelogram's start-up, so on equal costs (F = B = W) it is (p-1)F instead of the paper's 0 (the paper lets
  each device's step start and end at its own time).  In general it is (p-1) max(F, F+B-2W).
* **ZB-V** (zero bubble at 1F1B's memory, section 6 of the paper): the model is cut in 2p chunks placed in a V —
  device r holds chunk r (*chunk 0* of the device, met on the way down) and chunk 2p-1-r (*chunk 1*, met on the
  way up), so a micro-batch's forward goes down the devices and back up, and its backward down and back up
  again.  Every device runs a warm-up, a steady state repeating one fixed pattern, and a cool-down; W fills what
  would be bubbles.  With a = p-1-r and n_* the repetitions of each step on device r:

  ====  ============================  =========================================================================
  step  count                         what each repetition runs
  ====  ============================  =========================================================================
  1     n1 = 2a+1                     F0
  2     n2 = r                        F1, F0
  3     n3 = a+1                      F1, B1, W1
  4     n4 = m-2p+r+1                 F0, B0, W0, F1, B1, W1   (steady state: 1F1B on both chunks, W at once)
  5     n5 = a                        B0, W0, F1, B1, W1       (no chunk-0 forward is left)
  6     n6 = r                        B0, B1                   (their W's wait)
  7     n7 = a+1                      B0, W                    (the oldest waiting chunk-0 W)
  8     -                             every waiting W: chunk 1's, then chunk 0's
  ====  ============================  =========================================================================

  After step 2 device r holds 2p-1 chunk activations (2p-1-r of chunk 0, r of chunk 1); every F afterwards is
  followed by a B and W of the same chunk before the next F, so each device peaks at 2p chunk activations:
  1F1B's activation memory (p stages), since a chunk is half a stage.  Requires m >= 2p (the counts need
  m >= 2p-1; we ask for at least as many micro-batches as stages).

  Published: zero bubble when F = B = W, each device's step measured from its own first start to its own last
  end.  With the step measured from the first start to the last end over all devices (metrics.py), device r
  starts r chunk forwards late, so on equal chunk costs F = B = W the per-device idle is (p-1)F and the makespan
  6mF + (p-1)F: the lower bound (device r cannot start before r chunk forwards, then has 2m(F+B+W) of work).
  The order is fixed (independent of costs); on unequal costs the simulator times it and the W's soak up part
  of the difference.  Measured in tests/test_pipeline_zbv.py for whole-stage F, B, W in {1, 2, 3} and p <= 8:
  within 12% of that lower bound (13.4% at p = 16, m = 32 with B = 3F = 3W), and shorter than 1F1B and
  DualPipeV.  The per-device action lists equal those of torch.distributed.pipelining's ScheduleZBVZeroBubble
  (checked there where torch is installed).  The paper's own code also has a cost-aware ZB-V search for unequal
  costs; that is not this generator.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from planner.pipeline.generators import RequirementError, require
from planner.pipeline.unroll import v_placement
from planner.schedule.actions import Action, ActionKind
from planner.schedule.program import Schedule

__all__ = ["RequirementError", "zb_h1", "zb_h2", "zb_v"]

F, B, W = ActionKind.F, ActionKind.B, ActionKind.W


def zb_h1(p: int, m: int) -> Schedule:
    require("ZB-H1", p >= 1 and m >= p, "m >= p", p, m)
    rows = _delayed_w_rows(p, m, warm=lambda d: p - 1 - d, delay=lambda d: d)
    return Schedule.build(rows, num_stages=p, num_microbatches=m, stage_to_device=range(p), name="zb-h1")


def zb_h2(p: int, m: int) -> Schedule:
    require("ZB-H2", p >= 1 and m >= 2 * p - 1, "m >= 2p-1", p, m)
    rows = _delayed_w_rows(p, m, warm=lambda d: 2 * (p - 1 - d), delay=lambda d: 2 * d)
    return Schedule.build(rows, num_stages=p, num_microbatches=m, stage_to_device=range(p), name="zb-h2")


def zb_v(p: int, m: int) -> Schedule:
    require("ZB-V", p >= 1 and m >= 2 * p, "m >= 2p (at least as many micro-batches as its 2p stages)", p, m)
    rows = [_zb_v_row(p, m, r) for r in range(p)]
    return Schedule.build(rows, num_stages=2 * p, num_microbatches=m, stage_to_device=v_placement(p), name="zb-v")


class _VDevice:
    """One device of a V: its two chunks' stages, forward/backward counters and waiting W's per chunk."""

    def __init__(self, p: int, r: int) -> None:
        self.stage = (r, 2 * p - 1 - r)
        self.fwd = [0, 0]
        self.bwd = [0, 0]
        self.waiting: tuple[deque[Action], deque[Action]] = (deque(), deque())
        self.out: list[Action] = []

    def f(self, c: int) -> None:
        self.out.append(Action(self.stage[c], F, self.fwd[c]))
        self.fwd[c] += 1

    def b(self, c: int) -> None:
        """B of chunk c; its W waits until `w` runs it."""
        self.out.append(Action(self.stage[c], B, self.bwd[c]))
        self.waiting[c].append(Action(self.stage[c], W, self.bwd[c]))
        self.bwd[c] += 1

    def w(self, c: int) -> None:
        self.out.append(self.waiting[c].popleft())

    def fbw(self, c: int) -> None:
        self.f(c)
        self.b(c)
        self.w(c)


def _zb_v_row(p: int, m: int, r: int) -> list[Action]:
    """Device r's program: the eight steps of the module docstring."""
    dev, a = _VDevice(p, r), p - 1 - r
    for _ in range(2 * a + 1):  # 1
        dev.f(0)
    for _ in range(r):  # 2
        dev.f(1)
        dev.f(0)
    for _ in range(a + 1):  # 3
        dev.fbw(1)
    for _ in range(m - 2 * p + r + 1):  # 4
        dev.fbw(0)
        dev.fbw(1)
    for _ in range(a):  # 5
        dev.b(0)
        dev.w(0)
        dev.fbw(1)
    for _ in range(r):  # 6
        dev.b(0)
        dev.b(1)
    for _ in range(a + 1):  # 7
        dev.b(0)
        dev.w(0)
    for c in (1, 0):  # 8
        while dev.waiting[c]:
            dev.w(c)
    assert dev.fwd == dev.bwd == [m, m], "every forward has its backward"
    return dev.out


def _delayed_w_rows(p: int, m: int, *, warm: Callable[[int], int], delay: Callable[[int], int]) -> list[list[Action]]:
    """Device d: warm(d) forwards, then F (while left), B, and the W of `delay(d)` backwards earlier; then the
    remaining W's."""
    rows = []
    for d in range(p):
        w = min(warm(d), m)
        row = [Action(d, F, k) for k in range(w)]
        pending: deque[Action] = deque()
        for k in range(m):
            if w + k < m:
                row.append(Action(d, F, w + k))
            row.append(Action(d, B, k))
            pending.append(Action(d, W, k))
            if len(pending) > delay(d):
                row.append(pending.popleft())
        row.extend(pending)
        rows.append(row)
    return rows
