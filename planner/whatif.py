"""Memory what-if: plan one instance under a sweep of per-device capacities.

Monotone by construction: a plan that fits a smaller capacity also fits every larger one, so the sweep runs from the
smallest capacity up and, at each capacity, keeps the better of its own plan and the best plan found at a smaller
capacity.  Makespan therefore never decreases as capacity shrinks.  Below the smallest capacity that can fit at all
(`capacity_lower_bound`: the largest single task's own memory, or total parameters / devices), and wherever the
planner proves or finds nothing, the answer is "infeasible" with the planner's reason.
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.cost.instance import SchedulingInstance
from planner.errors import InfeasibleError, InputError
from planner.heuristics.memory import capacity_lower_bound
from planner.ir.units import parse_bytes
from planner.plot import plot_whatif
from planner.schedule.validate import check_plan
from planner.solve import SolveOptions, plan_instance


def parse_memory_range(text: str) -> list[int]:
    """'8GiB:80GiB:8GiB' -> [8 GiB, 16 GiB, ..., 80 GiB]; 'a,b,c' -> the list; sorted ascending, unique."""
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 3:
            raise InputError(f"--memory {text!r}: expected FROM:TO:STEP, e.g. 8GiB:80GiB:8GiB")
        lo, hi, step = (parse_bytes(p, where="--memory") for p in parts)
        if step <= 0 or hi < lo:
            raise InputError(f"--memory {text!r}: need FROM <= TO and a positive STEP")
        values = list(range(lo, hi + 1, step))
    else:
        values = [parse_bytes(p, where="--memory") for p in text.split(",")]
    if not values or min(values) <= 0:
        raise InputError(f"--memory {text!r}: capacities must be positive")
    return sorted(set(values))


@dataclass(frozen=True)
class WhatIfRow:
    capacity_bytes: int
    feasible: bool
    makespan_s: float
    lower_bound_s: float
    peak_memory_bytes: int
    from_capacity_bytes: int  # capacity at which the kept plan was found (<= capacity_bytes)
    reason: str = ""


@dataclass(frozen=True)
class WhatIfResult:
    rows: tuple[WhatIfRow, ...]
    time_unit: str
    capacity_lower_bound_bytes: int
    capacity_lower_bound_reason: str

    @property
    def smallest_feasible_bytes(self) -> int | None:
        return next((r.capacity_bytes for r in self.rows if r.feasible), None)


def _with_capacity(instance: SchedulingInstance, capacity: int) -> SchedulingInstance:
    return dataclasses.replace(instance, capacity_bytes=np.full(instance.num_devices, capacity, dtype=np.int64))


def memory_sweep(instance: SchedulingInstance, capacities: Sequence[int], options: SolveOptions,
                 progress: Callable[[str], None] | None = None) -> WhatIfResult:
    """Plan `instance` at each capacity (ascending); see the module docstring for monotonicity."""
    say = progress or (lambda _m: None)
    tick = instance.tick_s or 1.0
    bound = capacity_lower_bound(instance)
    rows: list[WhatIfRow] = []
    best = None  # (op plan, capacity it was found at)
    for capacity in sorted(capacities):
        inst = _with_capacity(instance, capacity)
        reason = ""
        found = None
        if capacity < bound.capacity_bytes:
            reason = f"below the smallest capacity that can fit ({bound.reason})"
        else:
            try:
                found = plan_instance(inst, options).op_plan
            except InfeasibleError as exc:
                reason = str(exc)
        if found is not None and (best is None or found.makespan_tick <= best[0].makespan_tick):
            best = (found, capacity)
        if best is not None:
            plan, source = best
            violations, profile = check_plan(inst, plan)
            assert not violations, violations  # a plan that fits less memory fits this much
            peak = int(max(profile.peak_bytes)) if profile is not None else 0
            rows.append(WhatIfRow(capacity, True, plan.makespan_tick * tick, plan.lower_bound_tick * tick, peak,
                                  source))
            say(f"capacity {capacity} bytes: makespan {plan.makespan_tick} ticks")
        else:
            rows.append(WhatIfRow(capacity, False, float("nan"), float("nan"), 0, 0, reason))
            say(f"capacity {capacity} bytes: infeasible ({reason})")
    return WhatIfResult(tuple(rows), instance.time_unit, bound.capacity_bytes, bound.reason)


def write_whatif(result: WhatIfResult, out_dir: Path) -> tuple[Path, Path]:
    """`whatif.csv` (one row per capacity) and `whatif.png` (makespan against capacity) in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / "whatif.csv"
    with csv_path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["capacity_bytes", "feasible", f"makespan_{result.time_unit}",
                         f"lower_bound_{result.time_unit}",
                         "peak_memory_bytes", "plan_found_at_capacity_bytes", "reason"])
        for r in result.rows:
            writer.writerow([r.capacity_bytes, int(r.feasible), "" if not r.feasible else f"{r.makespan_s:.9g}",
                             "" if not r.feasible else f"{r.lower_bound_s:.9g}", r.peak_memory_bytes,
                             r.from_capacity_bytes or "", r.reason])
    png_path = plot_whatif(result, out_dir / "whatif.png")
    return csv_path, png_path
