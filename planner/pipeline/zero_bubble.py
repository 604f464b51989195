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
* **ZB-V**: 2p stages in a V (device d holds stages d and 2p-1-d).  Built by replaying the paper's priority rule
  on unit costs: a free device runs the earliest ready B (the stage nearer the loss first); else the next ready F
  (nearer the loss first) if fewer than 2p chunk activations — 1F1B's activation memory on the same model — are
  in flight on it; else its oldest pending W; else it waits.  Requires m >= 2p.  We do not reproduce the paper's
  near-zero bubble: on unit costs this rule leaves p-1 to 2(p-1) chunk-ticks idle per device (measured in the
  tests).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Sequence

from planner.pipeline.generators import RequirementError, require
from planner.pipeline.unroll import v_placement
from planner.schedule.actions import Action, ActionKind
from planner.schedule.program import Schedule

__all__ = ["RequirementError", "zb_h1", "zb_h2", "zb_v", "greedy_order"]

F, B, W = ActionKind.F, ActionKind.B, ActionKind.W


def greedy_order(chain: Sequence[int], stage_to_device: Sequence[int], num_devices: int, m: int,
                 cap: Callable[[int], int], lead: Callable[[int], int]) -> list[list[Action]]:
    """Per device, the order ZB-V's rule (module docstring) produces on unit costs; `cap(d)` bounds the
    micro-batches in flight (F started, W not ended) on device d, `lead(d)` the forwards started minus the
    backwards started."""
    num_stages = len(chain)
    pos = {s: i for i, s in enumerate(chain)}
    dev_stages = [sorted((s for s in chain if stage_to_device[s] == d), key=lambda s: -pos[s])
                  for d in range(num_devices)]
    done: set[tuple[int, ActionKind, int]] = set()
    next_f = dict.fromkeys(chain, 0)
    next_b = dict.fromkeys(chain, 0)
    in_flight = [0] * num_devices
    ahead = [0] * num_devices  # forwards started minus backwards started
    wq: list[deque[Action]] = [deque() for _ in range(num_devices)]
    rows: list[list[Action]] = [[] for _ in range(num_devices)]
    busy_until = [0] * num_devices
    running: list[tuple[int, int, Action]] = []  # (end, device, action)
    total = 3 * num_stages * m
    t = 0

    def f_ready(s: int) -> bool:
        k = next_f[s]
        return k < m and (pos[s] == 0 or (chain[pos[s] - 1], F, k) in done)

    def b_ready(s: int) -> bool:
        k = next_b[s]
        if k >= next_f[s] or (s, F, k) not in done:
            return False
        return pos[s] == num_stages - 1 or (chain[pos[s] + 1], B, k) in done

    while len(done) < total:
        for d in range(num_devices):
            if busy_until[d] > t:
                continue
            act: Action | None = None
            for s in dev_stages[d]:
                if b_ready(s):
                    act = Action(s, B, next_b[s])
                    next_b[s] += 1
                    ahead[d] -= 1
                    wq[d].append(Action(s, W, act.microbatch))
                    break
            if act is None and in_flight[d] < cap(d) and ahead[d] < lead(d):
                for s in dev_stages[d]:
                    if f_ready(s):
                        act = Action(s, F, next_f[s])
                        next_f[s] += 1
                        in_flight[d] += 1
                        ahead[d] += 1
                        break
            if act is None and wq[d]:
                act = wq[d].popleft()
            if act is not None:
                rows[d].append(act)
                busy_until[d] = t + 1
                heapq.heappush(running, (t + 1, d, act))
        if not running:
            raise AssertionError("greedy zero-bubble order is stuck")  # a bug, not a user error
        t = running[0][0]
        while running and running[0][0] == t:
            _, d, a = heapq.heappop(running)
            done.add((a.stage, a.kind, a.microbatch))
            if a.kind is W:
                in_flight[d] -= 1
    return rows


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
    std = v_placement(p)
    rows = greedy_order(range(2 * p), std, p, m, lambda d: 2 * p, lambda d: 2 * p)
    return Schedule.build(rows, num_stages=2 * p, num_microbatches=m, stage_to_device=std, name="zb-v")


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
