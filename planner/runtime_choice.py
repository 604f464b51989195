"""plan-solve's last step on a calibrated CPU profile: choose the plan that the runtime's replay finds shortest.

The search (`planner.solve.plan_instance`) minimises the placement model's makespan, in which a transfer only
delays its reader.  On a profile with the runtime probe's per-transfer figures (`planner.cost.runtime_replay`), the
search's plan and two plans that transfer less — HEFT's, and every op on the single device that runs them fastest —
are replayed as the runtime runs them (each send and receive taking its rank's time, ranks sharing cores), and the
shortest replay is returned; a tie keeps the search's plan.  The returned plan is valid on the op graph like any
other, its makespan is the placement model's (what `plan-run` compares a run with), and the op graph's lower bound
stays the search's; its history (`Plan.search`) ends with "runtime replay: <candidate>" when a candidate other than
the search's plan won, so the plan file says where it came from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from planner.coarsen.refine import as_singletons
from planner.cost.instance import SchedulingInstance
from planner.cost.runtime_replay import RuntimeReplay
from planner.errors import InfeasibleError
from planner.heuristics.baselines import single_device
from planner.heuristics.list_schedule import heft
from planner.schedule.plan import Plan, PlanStatus
from planner.schedule.validate import validate_plan
from planner.solve import Outcome, PhaseLog

__all__ = ["choose_by_runtime_replay"]

SEARCH = "the search's plan"


def _candidates(fine: SchedulingInstance, searched: Plan) -> list[tuple[str, Plan]]:
    out = [(SEARCH, searched)]
    for name, make in (("HEFT", heft), ("single device", single_device)):
        try:
            plan = make(fine)
        except InfeasibleError:  # e.g. no device holds every op: not a candidate
            continue
        validate_plan(fine, plan)
        out.append((name, plan))
    return out


def choose_by_runtime_replay(outcome: Outcome, replay: RuntimeReplay, say: Callable[[str], None] | None = None
                             ) -> tuple[Outcome, dict[str, Any]]:
    """The outcome whose op plan has the shortest runtime replay (module docstring), and what the summary shows:
    `runtime_replay` = {chosen, per candidate its placement-model makespan and its replay, in seconds}."""
    fine = outcome.fine
    tick_s = fine.tick_s or 1.0
    scored = [(replay.makespan_tick(fine, plan), i, name, plan)
              for i, (name, plan) in enumerate(_candidates(fine, outcome.op_plan))]
    replayed, _, name, plan = min(scored, key=lambda x: (x[0], x[1]))
    info = {"chosen": name, "send_overhead_s": replay.send_s, "recv_overhead_s": replay.recv_s,
            "candidates": {n: {"makespan_s": p.makespan_tick * tick_s, "replay_s": r * tick_s}
                           for r, _, n, p in scored}}
    if say is not None:
        each = "; ".join(f"{n} {p.makespan_tick * tick_s * 1e3:.3g} ms -> {r * tick_s * 1e3:.3g} ms"
                         for r, _, n, p in scored)
        say(f"runtime replay (each transfer's send {replay.send_s * 1e6:.0f} us and receive "
            f"{replay.recv_s * 1e6:.0f} us on its ranks, cores shared as calibrated): {each}; chosen: {name}")
    if name == SEARCH:
        return outcome, info
    bound = min(outcome.lower_bound_tick, plan.makespan_tick)
    searched = outcome.op_plan
    chosen = dataclasses.replace(
        plan, method=searched.method, lower_bound_tick=bound, solve_time_s=searched.solve_time_s,
        status=PlanStatus.OPTIMAL if bound >= plan.makespan_tick else PlanStatus.FEASIBLE,
        search=(*searched.search, (f"runtime replay: {name}", plan.makespan_tick)),
        solver=searched.solver, solver_version=searched.solver_version)
    coarse, clusters, cluster_plan = as_singletons(fine, chosen)
    return dataclasses.replace(
        outcome, plan=cluster_plan, op_plan=chosen, coarse=coarse, clusters=tuple(map(tuple, clusters)),
        cluster_bound_tick=bound, lower_bound_tick=bound,
        phases=(*outcome.phases, PhaseLog(f"runtime replay: {name}", plan.makespan_tick, 0.0))), info
