"""plan-solve's last step: choose among complete candidate plans by the figure that predicts a run best.

Two cases, both after the search (`planner.solve.plan_instance`), which minimises the placement model's makespan:

* **A calibrated CPU profile** (the runtime probe's per-transfer figures: `planner.schedule.runtime_replay`).  In the
  placement model a transfer only delays its reader; in our gloo runtime it takes its ranks' time.  The search's
  plan and two plans that transfer less — HEFT's, and every op on the single device that runs them fastest — are
  replayed as the runtime runs them (each send and receive on its ranks, ranks sharing cores) and the shortest
  replay wins.
* **A re-plan from a run** (`plan-solve --measured run.json`): the plan that run ran is a candidate too, retimed on
  the measured op times, so that a re-plan keeps the plan it measured unless it predicts a shorter one from the
  same measurements (without the probe's figures: by the placement model's makespan) — shorter by more than the
  run's own noise: the run plan's score is taken that much lower, where the noise is the spread of the run's
  repetitions, (max - min) / median of its measured makespans (`RunPlan.noise`).  A prediction closer than the
  run's repeats agree with each other does not say that the new plan is faster (a split over more ranks
  predicted slightly shorter can run slower than the single-rank plan the run measured).

A tie keeps the measured run's plan, then the search's (on one device every order of the ops takes the same
time, and the order a run measured is the known one).  The returned plan is valid on the op graph like any other,
its makespan is the placement model's (what `plan-run` compares a run with), and the op graph's lower bound stays
the search's; its history (`Plan.search`) ends with "chosen by <figure>: <candidate>" when another candidate won,
so the plan file says where it came from.  A re-plan from a run also prices transfers as the run measured them
(`planner.cost.measured_transfers`), in the search and in the replay.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.coarsen.refine import as_singletons
from planner.cost.instance import SchedulingInstance
from planner.errors import InfeasibleError, OpplanError
from planner.heuristics.baselines import single_device
from planner.heuristics.list_schedule import heft
from planner.schedule.plan import Plan, PlanStatus
from planner.schedule.plan_io import load_plan
from planner.schedule.runtime_replay import RuntimeReplay
from planner.schedule.simulate import retime_plan
from planner.schedule.validate import check_plan, validate_plan
from planner.solve import Outcome, PhaseLog

__all__ = ["DEFAULT_RUN_CHOICE_POLICY", "choose_plan", "retimed_run_plan", "RunChoicePolicy", "RunPlan", "SEARCH",
           "RUN_PLAN"]

SEARCH = "the search's plan"
RUN_PLAN = "the measured run's plan"


def _baselines(fine: SchedulingInstance) -> list[tuple[str, Plan]]:
    out = []
    for name, make in (("HEFT", heft), ("single device", single_device)):
        try:
            plan = make(fine)
        except InfeasibleError:  # e.g. no device holds every op: not a candidate
            continue
        validate_plan(fine, plan)
        out.append((name, plan))
    return out


@dataclass(frozen=True)
class RunPlan:
    """The plan a measured run ran, retimed on the re-plan's instance, and the run's noise (module docstring)."""

    plan: Plan
    noise: float = 0.0


@dataclass(frozen=True)
class RunChoicePolicy:
    """How far a re-plan trusts a measured run's noise (`retimed_run_plan`)."""

    # the largest noise a run's spread may claim: a run whose repeats differ by more than half their median says
    # little about its plan, and a larger margin would keep its plan against any prediction
    max_noise: float = 0.5


DEFAULT_RUN_CHOICE_POLICY = RunChoicePolicy()  # for argument defaults


def choose_plan(outcome: Outcome, *, replay: RuntimeReplay | None = None, run_plan: RunPlan | None = None,
                say: Callable[[str], None] | None = None) -> tuple[Outcome, dict[str, Any]]:
    """The outcome whose op plan the chosen figure predicts shortest (module docstring), and what the summary shows
    (`choice`: by, chosen, per candidate its placement-model makespan and its score, in seconds); the outcome
    itself and an empty dict when there is nothing to choose from.  `run_plan`: the measured run's plan, already
    valid on `outcome.fine` (`retimed_run_plan`)."""
    fine = outcome.fine
    tick_s = fine.tick_s or 1.0
    # ties go to the first: the plan a run measured, then the search's
    candidates = ([(RUN_PLAN, run_plan.plan)] if run_plan is not None else []) + [(SEARCH, outcome.op_plan)]
    if replay is not None:
        candidates += _baselines(fine)
    if len(candidates) == 1:
        return outcome, {}
    by = "runtime replay" if replay is not None else "placement model"

    def score(plan: Plan) -> float:
        return replay.makespan_tick(fine, plan) if replay is not None else float(plan.makespan_tick)

    scored = [(score(plan), i, name, plan) for i, (name, plan) in enumerate(candidates)]
    margin = run_plan.noise if run_plan is not None else 0.0  # the measured plan wins within the run's noise
    _, _, name, plan = min(scored, key=lambda x: (x[0] * (1.0 - margin if x[2] == RUN_PLAN else 1.0), x[1]))
    info: dict[str, Any] = {
        "by": by, "chosen": name, **({"run_noise": margin} if run_plan is not None else {}),
        "candidates": {n: {"makespan_s": p.makespan_tick * tick_s, "score_s": r * tick_s} for r, _, n, p in scored}}
    if replay is not None:
        info.update(send_overhead_s=replay.send_s, recv_overhead_s=replay.recv_s)
    if say is not None:
        each = "; ".join(f"{n} {p.makespan_tick * tick_s * 1e3:.3g} ms" + (
            f" -> {r * tick_s * 1e3:.3g} ms" if replay is not None else "") for r, _, n, p in scored)
        what = (f"runtime replay (each transfer's send {replay.send_s * 1e6:.0f} us and receive "
                f"{replay.recv_s * 1e6:.0f} us on its ranks, cores shared as calibrated)" if replay is not None
                else "placement model on the measured op times")
        noise = f" (the run's plan within its noise {100 * margin:.1f}%)" if run_plan is not None else ""
        say(f"{what}: {each}; chosen: {name}{noise}")
    if name == SEARCH:
        return outcome, info
    bound = min(outcome.lower_bound_tick, plan.makespan_tick)
    searched = outcome.op_plan
    step = f"chosen by {by}: {name}"
    chosen = dataclasses.replace(
        plan, method=searched.method, lower_bound_tick=bound, solve_time_s=searched.solve_time_s,
        status=PlanStatus.OPTIMAL if bound >= plan.makespan_tick else PlanStatus.FEASIBLE,
        search=(*searched.search, (step, plan.makespan_tick)),
        solver=searched.solver, solver_version=searched.solver_version)
    coarse, clusters, cluster_plan = as_singletons(fine, chosen)
    return dataclasses.replace(
        outcome, plan=cluster_plan, op_plan=chosen, coarse=coarse, clusters=tuple(map(tuple, clusters)),
        cluster_bound_tick=bound, lower_bound_tick=bound,
        phases=(*outcome.phases, PhaseLog(step, plan.makespan_tick, 0.0))), info


def retimed_run_plan(measured: Path, fine: SchedulingInstance,
                     policy: RunChoicePolicy = DEFAULT_RUN_CHOICE_POLICY) -> tuple[RunPlan | None, str]:
    """The plan a `plan-run --report` run.json ran, retimed on `fine` (same devices and per-device order, times
    from `fine`'s durations) and valid there, with the run's noise: (max - min) / median of its measured makespans,
    capped at `policy.max_noise`; (None, why) when `measured` is no run report, its plan file is gone, or the plan does
    not fit `fine` (another model or other devices)."""
    try:
        doc = json.loads(measured.read_text())
    except (OSError, ValueError):
        return None, "not a plan-run report"
    path = doc.get("plan") if isinstance(doc, dict) else None
    if not isinstance(path, str):
        return None, "not a plan-run report"
    try:
        plan = load_plan(path)
    except OpplanError as exc:
        return None, f"its plan {path} cannot be read ({exc})"
    if set(p.task for p in plan.placements) != set(fine.task_names) or plan.device_names != tuple(fine.device_names):
        return None, f"its plan {path} is for other ops or devices"
    retimed = retime_plan(plan, fine)
    problems, _ = check_plan(fine, retimed)
    if problems:
        return None, f"its plan {path} is not valid on this instance ({problems[0]})"
    return RunPlan(retimed, _noise(doc.get("measured_makespans_s"), policy.max_noise)), ""


def _noise(makespans: object, most: float) -> float:
    values = [float(x) for x in makespans if isinstance(x, (int, float))] if isinstance(makespans, list) else []
    if len(values) < 2 or statistics.median(values) <= 0:
        return 0.0
    return min(most, (max(values) - min(values)) / statistics.median(values))
