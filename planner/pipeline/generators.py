"""Classic one-direction baselines: GPipe, 1F1B (PipeDream-flush), interleaved 1F1B (Megatron-LM).

Each generator takes the number of devices p and micro-batches m and returns a `Schedule` (per device, the order
of its compute actions; times come from the simulator).  They run full backwards (``BW``, PyTorch's ``B``).

* **GPipe** (Huang et al. 2019): every device runs all forwards, then all backwards, micro-batches in order.
  Stage s on device s.  Any p, m >= 1.  Idle per device (F, BW per stage, no communication): (p-1)(F+BW).
* **1F1B** (PipeDream-flush, Narayanan et al. 2021): device d runs p-1-d warm-up forwards, then alternates one
  forward and one backward, then drains the backwards.  At most p-d micro-batches in flight on device d.
  Requires m >= p.  Idle per device: (p-1)(F+BW), the same bubble as GPipe with p activations instead of m.
* **interleaved 1F1B** (Megatron-LM, Narayanan et al. 2021): v chunks per device in a loop, stage c*p + d on
  device d.  Forwards run in groups of p micro-batches, chunk by chunk; backwards the same with the chunks
  reversed; device d warms up with 2(p-1-d) + (v-1)p forwards.  Requires m to be a multiple of p (Megatron's
  condition).  Idle per device: (p-1)(F_c+BW_c) with F_c, BW_c the costs of one chunk — 1/v of 1F1B's bubble
  when the model is cut into v*p chunks.
"""

from __future__ import annotations

from planner.errors import OpplanError
from planner.schedule.actions import Action, ActionKind
from planner.schedule.program import Schedule

F, B, W, BW = ActionKind.F, ActionKind.B, ActionKind.W, ActionKind.BW


class RequirementError(OpplanError):
    """A schedule's published conditions on the number of devices p and micro-batches m are not met."""


def require(name: str, ok: bool, what: str, p: int, m: int) -> None:
    if not ok:
        raise RequirementError(f"{name} requires {what} (got p = {p} devices, m = {m} micro-batches)")


def _basic(name: str, p: int, m: int) -> None:
    require(name, p >= 1 and m >= 1, "p >= 1 and m >= 1", p, m)


def gpipe(p: int, m: int) -> Schedule:
    _basic("GPipe", p, m)
    rows = [[Action(d, F, k) for k in range(m)] + [Action(d, BW, k) for k in range(m)] for d in range(p)]
    return Schedule.build(rows, num_stages=p, num_microbatches=m, stage_to_device=range(p), name="gpipe")


def one_f_one_b(p: int, m: int) -> Schedule:
    _basic("1F1B", p, m)
    require("1F1B", m >= p, "m >= p (a steady state of one forward and one backward)", p, m)
    rows = []
    for d in range(p):
        warm = min(p - 1 - d, m)
        row = [Action(d, F, k) for k in range(warm)]
        for k in range(m):
            if warm + k < m:
                row.append(Action(d, F, warm + k))
            row.append(Action(d, BW, k))
        rows.append(row)
    return Schedule.build(rows, num_stages=p, num_microbatches=m, stage_to_device=range(p), name="1f1b")


def interleaved_1f1b(p: int, m: int, v: int = 2) -> Schedule:
    _basic("interleaved 1F1B", p, m)
    require("interleaved 1F1B", v >= 2, "v >= 2 chunks per device", p, m)
    require("interleaved 1F1B", m % p == 0, "m to be a multiple of p (Megatron-LM's condition)", p, m)
    total = m * v

    def nth(k: int, backward: bool) -> tuple[int, int]:
        group, rem = divmod(k, p * v)
        chunk = rem // p
        if backward:
            chunk = v - 1 - chunk
        return chunk, group * p + rem % p

    rows = []
    for d in range(p):
        warm = min((p - 1 - d) * 2 + (v - 1) * p, total)
        row: list[Action] = []
        for k in range(warm):
            c, mb = nth(k, False)
            row.append(Action(c * p + d, F, mb))
        for k in range(total):
            if warm + k < total:
                c, mb = nth(warm + k, False)
                row.append(Action(c * p + d, F, mb))
            c, mb = nth(k, True)
            row.append(Action(c * p + d, BW, mb))
        rows.append(row)
    return Schedule.build(rows, num_stages=v * p, num_microbatches=m,
                          stage_to_device=[s % p for s in range(v * p)], name="interleaved-1f1b")
