"""Phase 0 of the placement search: the classic list schedules on the op graph, the shortest the first incumbent.

HEFT (or, when memory binds, the memory-aware fallbacks) always runs; HEFT with CPoP's priority and PEFT run while
time is left.  The fastest run's seconds become the unit the search estimates its unstoppable steps in.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from planner.cost.instance import SchedulingInstance
from planner.errors import InfeasibleError
from planner.heuristics.list_schedule import Rank, heft, upward_rank
from planner.heuristics.memory_list import memory_list
from planner.heuristics.memory_pack import packed_plan
from planner.heuristics.peft import peft
from planner.schedule.plan import Plan
from planner.search.budget import Budget
from planner.search.options import Method
from planner.search.phases import ProgressFn


def phase_zero(fine: SchedulingInstance, computed: dict[str, int], budget: Budget, say: ProgressFn,
               unit: Callable[[int], str]) -> tuple[Plan, float]:
    """Phase 0's list schedules (`best_list_schedule`: HEFT always, the others while `budget` has time left):
    (the incumbent, the fastest run's seconds: the unit the planner estimates its unstoppable steps in; the
    fastest, since the first run also pays one-off costs such as imports and the instance's cached adjacency,
    seconds on a loaded machine even for a tiny graph)."""
    seconds: list[float] = []
    incumbent = best_list_schedule(fine, computed, deadline=budget.deadline_s, progress=say, seconds=seconds)
    say(f"list scheduling: {incumbent.method} {unit(incumbent.makespan_tick)} (the incumbent); trivial bound "
        f"{unit(fine.trivial_lower_bound_tick())} (critical path {unit(fine.critical_path_tick())}, work / speed "
        f"{unit(fine.work_bound_tick())})")
    return incumbent, min(seconds)


def best_list_schedule(fine: SchedulingInstance, computed: dict[str, int] | None = None, *,
                        deadline: float | None = None, progress: ProgressFn | None = None,
                        seconds: list[float] | None = None) -> Plan:
    """The shortest of the classic list schedules on the op graph (HEFT; HEFT with CPoP's priority; PEFT), and the
    memory-aware list schedule (`memory_list`) when HEFT does not fit memory: HEFT fills the fastest device first and
    can run into a dead end under a tight capacity where a plan that keeps room for the parameters to come exists;
    when that fails too, the parameters-first packed plan (`memory_pack.packed_plan`, which finds a plan nearest
    the least feasible capacity).
    `computed`, when given, receives HEFT's makespan under `Method.HEFT.value` (the baselines reuse it).  When no
    scheduler finds a plan, HEFT's `InfeasibleError` is raised.

    With a `deadline` (time.monotonic()), HEFT (or, when it finds no plan, the memory-aware fallback) always runs;
    each other scheduler only when the time left is at least what the previous one took (they cost about the same:
    one pass over the tasks and edges, after the shared ranks and adjacency are computed once, before the first
    run); `progress` hears which were skipped.  `seconds`, when given, receives each
    run's seconds in order (HEFT's first)."""
    plans: list[Plan] = []
    heft_error: InfeasibleError | None = None
    spent = seconds if seconds is not None else []
    if deadline is not None:
        # one-off work every list scheduler shares, kept out of the first run's seconds so that they estimate the
        # next runs: the instance's adjacency and topological order (cached) and HEFT's upward rank (cached per
        # instance; HEFT/CPoP adds to it), which on very large graphs is most of HEFT's first run.
        upward_rank(fine)
    skipped: list[str] = []

    def timed(name: str, run: Callable[[], Plan], *, always: bool = False) -> None:
        if not always and deadline is not None and spent and time.monotonic() + spent[-1] > deadline:
            skipped.append(name)
            return
        s0 = time.monotonic()
        try:
            plans.append(run())
        finally:
            spent.append(time.monotonic() - s0)

    try:
        timed("heft", lambda: heft(fine), always=True)
        if computed is not None:
            computed[Method.HEFT.value] = plans[0].makespan_tick
    except InfeasibleError as exc:
        heft_error = exc
    for name, other in (("heft-sum", lambda: heft(fine, rank=Rank.SUM)), ("peft", lambda: peft(fine))):
        try:
            timed(name, other)
        except InfeasibleError:
            pass
    if heft_error is not None:
        # memory binds (HEFT ran into a dead end), so the memory-aware list schedule runs even when HEFT/CPoP or
        # PEFT found a plan: it keeps room for the parameters to come, so under a tight capacity it can be the
        # shorter one; it must run when nothing else found a plan
        try:
            timed("memory-aware list scheduling", lambda: memory_list(fine), always=not plans)
        except InfeasibleError:
            pass
    if not plans:  # nearest the least feasible capacity: parameters packed first, then scheduled (slow plans)
        try:
            timed("packed plan", lambda: packed_plan(fine), always=True)
        except InfeasibleError:
            assert heft_error is not None
            raise heft_error from None
    if skipped and progress is not None:
        progress(f"list scheduling: {', '.join(skipped)} skipped for time (each takes about {spent[-1]:.1f}s)")
    return min(plans, key=lambda p: p.makespan_tick)
