"""Memory what-if: plan one instance under a sweep of per-device capacities.

Monotone by construction: a plan that fits a smaller capacity also fits every larger one, so the sweep runs from the
smallest capacity up and, at each capacity, keeps the better of its own plan and the best plan found at a smaller
capacity.  Makespan therefore never decreases as capacity shrinks.  Below the smallest capacity that can fit at all
(`capacity_lower_bound`: the largest single task's own memory, or total parameters / devices), and wherever the
planner proves or finds nothing, the answer is "infeasible" with the planner's reason: one short line per capacity
(`WhatIfRow.reason`, what progress lines and the table print), the planner's full words once (`WhatIfRow.details`,
kept on the first capacity that gave them; the CSV's ``details`` column holds them there only).

Budget.  `options.time_limit_s` is the budget of the whole sweep, as `plan-whatif --time-limit` documents: each
capacity that is planned gets an equal share of what is left (time a point does not use goes to the points after
it), so the sweep ends near the budget however many capacities it has.

Lower bound per capacity.  A bound proven at capacity c also holds at every smaller capacity (less memory never
helps), never at a larger one.  Each row's bound is therefore the best bound proven at its own capacity or any
larger one (at least the op graph's critical path / work bound, which ignores memory): it never rises with
memory, and it never exceeds the row's makespan.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from planner.cost.instance import SchedulingInstance
from planner.errors import InfeasibleError, InputError
from planner.heuristics.memory import capacity_lower_bound
from planner.ir.units import format_bytes, format_time, parse_bytes
from planner.plot import plot_whatif
from planner.schedule.validate import check_plan
from planner.solve import SolveOptions, plan_instance


def parse_memory_range(text: str, *, flag: str = "--memory", to_bytes: Callable[[str], int] | None = None,
                       example: str = "8GiB:80GiB:8GiB") -> list[int]:
    """'8GiB:80GiB:8GiB' -> [8 GiB, 16 GiB, ..., 80 GiB]; 'a,b,c' -> the list; sorted ascending, unique.  Each
    value is read by `to_bytes` (default: a size, `parse_bytes`); errors name `flag` and give `example`."""
    size = to_bytes or (lambda part: parse_bytes(part, where=flag))
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 3:
            raise InputError(f"{flag} {text!r}: expected FROM:TO:STEP, e.g. {example}")
        lo, hi, step = (size(p) for p in parts)
        if step <= 0 or hi < lo:
            raise InputError(f"{flag} {text!r}: need FROM <= TO and a positive STEP")
        values = list(range(lo, hi + 1, step))
    else:
        values = [size(p) for p in text.split(",")]
    if not values or min(values) <= 0:
        raise InputError(f"{flag} {text!r}: capacities must be positive")
    return sorted(set(values))


@dataclass(frozen=True)
class WhatIfRow:
    capacity_bytes: int
    feasible: bool
    makespan_s: float
    lower_bound_s: float
    peak_memory_bytes: int
    from_capacity_bytes: int  # capacity at which the kept plan was found (<= capacity_bytes)
    reason: str = ""  # why infeasible, one short line
    details: str = ""  # the planner's full words, on the first capacity that gave them ("" on the others)


@dataclass(frozen=True)
class WhatIfResult:
    rows: tuple[WhatIfRow, ...]
    time_unit: str
    capacity_lower_bound_bytes: int
    capacity_lower_bound_reason: str

    @property
    def smallest_feasible_bytes(self) -> int | None:
        return next((r.capacity_bytes for r in self.rows if r.feasible), None)


REASON_CHARS = 120  # the longest short reason (a table line, a progress line, a CSV cell)


def short_reason(text: str, limit: int = REASON_CHARS) -> str:
    """The first clause of a planner's reason (up to its first "; "), cut at a word within `limit` characters
    ('...' marks a cut): the planner's reasons run to several hundred characters, and a table prints one per
    capacity."""
    first = text.split("; ", 1)[0]
    if len(first) <= limit:
        return first
    cut = first[:limit - 3].rsplit(" ", 1)[0]
    return cut.rstrip(" ,:;(") + "..."


@dataclass(frozen=True)
class SweepPolicy:
    """The memory sweep's tuning (`memory_sweep`)."""

    # least seconds a capacity gets, even when the points before it spent the budget: HEFT and the bound are fast,
    # and the placement model stops early with a plan
    min_share_s: float = 0.5


DEFAULT_SWEEP_POLICY = SweepPolicy()  # for argument defaults


def _with_capacity(instance: SchedulingInstance, capacity: int) -> SchedulingInstance:
    return dataclasses.replace(instance, capacity_bytes=np.full(instance.num_devices, capacity, dtype=np.int64))


def memory_sweep(instance: SchedulingInstance, capacities: Sequence[int], options: SolveOptions,
                 progress: Callable[[str], None] | None = None,
                 policy: SweepPolicy = DEFAULT_SWEEP_POLICY) -> WhatIfResult:
    """Plan `instance` at each capacity (ascending) within `options.time_limit_s` in all (module docstring), each
    at least `policy.min_share_s`."""
    say = progress or (lambda _m: None)
    tick = instance.tick_s or 1.0
    unit = instance.time_unit
    bound = capacity_lower_bound(instance)
    ordered = sorted(capacities)
    to_plan = [c for c in ordered if c >= bound.capacity_bytes]
    deadline = time.monotonic() + options.time_limit_s
    kept = []  # per capacity: (capacity, (kept op plan, capacity it was found at) or None, peak, bound here, why)
    best = None  # (op plan, capacity it was found at)
    for capacity in ordered:
        inst = _with_capacity(instance, capacity)
        reason = ""
        found = None
        own_bound = instance.trivial_lower_bound_tick()
        if capacity < bound.capacity_bytes:
            # the bound's own reason is the result's `capacity_lower_bound_reason`, told once
            reason = f"below the smallest capacity that can fit, {format_bytes(bound.capacity_bytes)}"
        else:
            left = len(to_plan) - to_plan.index(capacity)
            share = max(deadline - time.monotonic(), 0.0) / left
            try:
                found = plan_instance(inst, dataclasses.replace(options,
                                                                time_limit_s=max(share, policy.min_share_s))).op_plan
                own_bound = max(own_bound, found.lower_bound_tick)
            except InfeasibleError as exc:
                reason = str(exc)
        if found is not None and (best is None or found.makespan_tick <= best[0].makespan_tick):
            best = (found, capacity)
        peak = 0
        if best is not None:
            violations, profile = check_plan(inst, best[0])
            assert not violations, violations  # a plan that fits less memory fits this much
            peak = int(max(profile.peak_bytes)) if profile is not None else 0
            say(f"capacity {format_bytes(capacity)}: makespan {format_time(best[0].makespan_tick * tick, unit=unit)}, "
                f"peak memory {format_bytes(peak)}")
        else:
            say(f"capacity {format_bytes(capacity)}: infeasible ({short_reason(reason)})")
        kept.append((capacity, best, peak, own_bound, reason))
    # bounds from the top down: a bound at a larger capacity holds here too
    floor = 0
    rows: list[WhatIfRow] = []
    told = {reason for _, _, _, _, reason in kept}  # full reasons not yet given to a row
    for capacity, chosen, peak, own_bound, reason in reversed(kept):
        floor = max(floor, own_bound)
        if chosen is None:
            rows.append(WhatIfRow(capacity, False, float("nan"), float("nan"), 0, 0, short_reason(reason), reason))
            continue
        plan, source = chosen
        lb = min(floor, plan.makespan_tick)
        rows.append(WhatIfRow(capacity, True, plan.makespan_tick * tick, lb * tick, peak, source))
    rows.reverse()
    rows = [_details_once(r, told) for r in rows]
    return WhatIfResult(tuple(rows), unit, bound.capacity_bytes, bound.reason)


def _details_once(row: WhatIfRow, untold: set[str]) -> WhatIfRow:
    """`row` with its details kept only if no earlier row (by capacity) has them and they say more than its
    reason; `untold` loses the details it keeps."""
    if row.details in untold and row.details != row.reason:
        untold.discard(row.details)
        return row
    return dataclasses.replace(row, details="")


def whatif_frame(result: WhatIfResult) -> pd.DataFrame:
    """One row per capacity (ascending), the columns of ``whatif.csv``: ``capacity_bytes``, ``feasible`` (1 or 0),
    ``makespan_<unit>`` and ``lower_bound_<unit>`` in the result's time unit (NaN where infeasible),
    ``peak_memory_bytes``, ``plan_found_at_capacity_bytes`` (where the kept plan was found; missing where none),
    ``reason`` (why infeasible, one short line) and ``details`` (the planner's full words, on one row only)."""
    unit = result.time_unit
    makespan, bound = f"makespan_{unit}", f"lower_bound_{unit}"
    nan = float("nan")
    frame = pd.DataFrame([{"capacity_bytes": r.capacity_bytes, "feasible": int(r.feasible),
                           makespan: r.makespan_s if r.feasible else nan, bound: r.lower_bound_s if r.feasible else nan,
                           "peak_memory_bytes": r.peak_memory_bytes,
                           "plan_found_at_capacity_bytes": r.from_capacity_bytes or None,
                           "reason": r.reason, "details": r.details} for r in result.rows],
                         columns=["capacity_bytes", "feasible", makespan, bound, "peak_memory_bytes",
                                  "plan_found_at_capacity_bytes", "reason", "details"])
    return frame.astype({"capacity_bytes": "int64", "feasible": "int64", makespan: "float64", bound: "float64",
                         "peak_memory_bytes": "int64", "plan_found_at_capacity_bytes": "Int64",
                         "reason": "object", "details": "object"})


def whatif_csv_text(frame: pd.DataFrame) -> str:
    """`whatif_frame`'s frame as ``whatif.csv`` holds it: nine significant digits, an empty cell where a figure is
    missing, CRLF line ends."""
    return str(frame.to_csv(index=False, float_format="%.9g", na_rep="", lineterminator="\r\n"))


def write_whatif(result: WhatIfResult, out_dir: Path) -> tuple[Path, Path]:
    """`whatif.csv` (`whatif_frame`: one row per capacity, a short reason on every infeasible one, the planner's
    full words in ``details`` once) and `whatif.png` (makespan against capacity) in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / "whatif.csv"
    with csv_path.open("w", newline="") as f:
        f.write(whatif_csv_text(whatif_frame(result)))
    png_path = plot_whatif(result, out_dir / "whatif.png")
    return csv_path, png_path
