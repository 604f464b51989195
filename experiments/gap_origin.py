"""Whose gap is it, the bound's or the plan's?  Where the planner's gap to its bound is large, an exact solve of
small graphs tells whether the bound or the plan is far from the optimum.

For small random layered DAGs from the engine bench's generator (`experiments.layered.layered_dag`), one JSON line
per case: HEFT's makespan, the planner's at its large-graph settings (`plan_instance` with no CP-SAT phase 1,
`decomposition_share=0`), CP-SAT on the whole graph warm-started from the planner's plan (its makespan, bound and
status: "optimal" when it proves the optimum), our bound (`comm_lower_bound_tick`) and total work / devices.

    python -m experiments.gap_origin --cpsat-s 120 --planner-s 15 40:8:1:1 40:8:2:2 48:8:1:7:16 ...

A case is ``tasks:devices:comm_ratio:seed[:width]``.  Times are wall-clock budgets: results depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import time

from experiments.layered import layered_dag
from formulations.solve_instance import solve_placement
from planner.heuristics.comm_bound import comm_lower_bound_tick
from planner.heuristics.list_schedule import heft
from planner.solve import SolveOptions, plan_instance


def measure(case: str, *, cpsat_s: float, planner_s: float, threads: int = 8) -> dict:
    """The JSON row of one ``tasks:devices:comm_ratio:seed[:width]`` case (module docstring)."""
    parts = case.split(":")
    n, devices, comm, seed = int(parts[0]), int(parts[1]), float(parts[2]), int(parts[3])
    width = int(parts[4]) if len(parts) > 4 else None
    inst = layered_dag(n, devices, seed=seed, comm_ratio=comm, width=width)
    out = plan_instance(inst, SolveOptions(time_limit_s=planner_s, threads=threads, decomposition_share=0.0))
    row: dict = {"case": case, "heft": heft(inst).makespan_tick, "planner": out.op_plan.makespan_tick,
                 "found_by": out.found_by}
    if cpsat_s > 0:
        t0 = time.monotonic()
        plan = solve_placement(inst, time_limit_s=cpsat_s, threads=threads, warm_start=out.op_plan)
        row.update(cpsat=plan.makespan_tick, cpsat_bound=plan.lower_bound_tick, status=str(plan.status.value),
                   cpsat_s=round(time.monotonic() - t0, 1))
    work = int(inst.duration_tick.min(axis=1).sum())
    row.update(comm_bound=comm_lower_bound_tick(inst), work_over_devices=-(-work // devices))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gap_origin", description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="+", help="tasks:devices:comm_ratio:seed[:width]")
    parser.add_argument("--cpsat-s", type=float, default=120.0, help="CP-SAT seconds per case (0: skip)")
    parser.add_argument("--planner-s", type=float, default=15.0, help="planner seconds per case")
    args = parser.parse_args(argv)
    for case in args.cases:
        print(json.dumps(measure(case, cpsat_s=args.cpsat_s, planner_s=args.planner_s)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
