"""The search engine measured side by side (`make bench` section `engine`): random layered DAGs from
`experiments.layered` with fixed seeds and the bundled MoE on two profiles.

Per instance, one row: the classic list schedulers (HEFT, HEFT with CPoP's priority, PEFT; the best of them is
the bar to beat), the planner's phases (the makespan after phase 1, the linear-clustering rounds, the cluster
rounds, the iterated list scheduler, LNS: `plan_instance`'s `phases`), the final makespan, the op-level lower
bound (the best of the trivial, the communication-aware and the decomposition/solver bounds), the gap, which part
found the plan, the share of HEFT's gap to the bound that the planner closed (`closed_pct`, issue 16's measure,
where that gap is over 2 %), whether it beat the best classic scheduler, and whether the planner failed (an
exception: it never should).  `summary` condenses the rows into the issue's three criteria.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path

from experiments.layered import layered_dag
from planner.cost.instance import SchedulingInstance
from planner.heuristics.list_schedule import Rank, heft
from planner.heuristics.peft import peft
from planner.ir.hardware import load_topology
from planner.prepare import prepare
from planner.solve import SolveOptions, plan_instance

REPO = Path(__file__).resolve().parents[1]
MOE = REPO / "planner" / "data" / "models" / "moe.onnx"
PROFILES = REPO / "planner" / "data" / "hardware_profiles"

# 20 graphs: (tasks, devices, comm/compute ratio), seed = position in the list
GRAPHS = [(300, 4, 0.5), (300, 4, 1.0), (300, 4, 2.0), (300, 8, 0.5), (300, 8, 1.0), (300, 8, 2.0),
          (500, 4, 1.0), (500, 8, 0.5), (500, 8, 1.0), (500, 8, 2.0), (1000, 4, 2.0), (1000, 8, 0.5),
          (1000, 8, 1.0), (1000, 8, 2.0), (2000, 4, 1.0), (2000, 8, 0.5), (2000, 8, 1.0), (2000, 8, 2.0),
          (300, 8, 1.5), (500, 4, 2.0)]
QUICK_GRAPHS = [(300, 8, 2.0), (300, 4, 2.0), (500, 8, 1.0), (1000, 8, 2.0)]


def _row(name: str, inst: SchedulingInstance, time_limit_s: float, threads: int) -> dict:
    heft_tick = heft(inst).makespan_tick
    cpop_tick = heft(inst, rank=Rank.SUM).makespan_tick
    peft_tick = peft(inst).makespan_tick
    best_list = min(heft_tick, cpop_tick, peft_tick)
    row: dict = {"instance": name, "tasks": inst.num_tasks, "devices": inst.num_devices, "heft": heft_tick,
                 "heft_cpop": cpop_tick, "peft": peft_tick, "best_classic": best_list, "time_limit_s": time_limit_s}
    t0 = time.monotonic()
    try:
        out = plan_instance(inst, SolveOptions(time_limit_s=time_limit_s, threads=threads))
    except Exception:  # noqa: BLE001 - a bench row records the failure instead of stopping the bench
        row.update(failed=True, error=traceback.format_exc(limit=1).strip().splitlines()[-1])
        return row
    after: dict[str, int] = {}
    for phase in out.phases:
        key = phase.source if phase.source in ("decomposition", "linear cluster round", "cluster round",
                                               "iterated list scheduling", "LNS") else "list"
        after[key] = phase.makespan_tick
    final = out.op_plan.makespan_tick
    bound = out.lower_bound_tick
    heft_gap = heft_tick - bound
    row.update(
        failed=False, after_list=after.get("list", best_list), after_decomposition=after.get("decomposition", ""),
        after_linear_round=after.get("linear cluster round", ""), after_cluster_round=after.get("cluster round", ""),
        after_iterated=after.get("iterated list scheduling", ""), after_lns=after.get("LNS", ""), final=final,
        bound=bound, gap_pct=round(100 * out.op_plan.gap, 2),
        heft_gap_pct=round(100 * heft_gap / heft_tick, 2),
        closed_pct=round(100 * (heft_tick - final) / heft_gap, 1) if heft_gap > 0 else "",
        beats_best_list=final < best_list, found_by=out.found_by, seconds=round(time.monotonic() - t0, 1))
    return row


def bench_engine(quick: bool, *, time_limit_s: float | None = None, threads: int = 8) -> list[dict]:
    """One row per instance (module docstring); `quick`: 4 graphs at 10 s and the MoE at 20 s."""
    limit = time_limit_s or (10.0 if quick else 60.0)
    rows = []
    for seed, (n, d, comm) in enumerate(QUICK_GRAPHS if quick else GRAPHS):
        inst = layered_dag(n, d, seed=seed, comm_ratio=comm)
        rows.append(_row(inst.name, inst, limit, threads))
        print("  ", rows[-1], flush=True)
    for profile in ("a100-4-pcie.yaml", "cpu-4.yaml"):
        inst = prepare(MOE, load_topology(PROFILES / profile)).instance
        rows.append(_row(f"moe/{profile}", inst, 20.0 if quick else 60.0, threads))
        print("  ", rows[-1], flush=True)
    return [*rows, summary(rows)]


def summary(rows: list[dict]) -> dict:
    """Issue 16's criteria over the layered rows: failures; the mean share of HEFT's gap to the bound closed,
    over the rows where that gap is over 2 %; on how many rows the planner beat the best classic scheduler."""
    layered = [r for r in rows if not r["instance"].startswith("moe/")]
    ok = [r for r in layered if not r.get("failed")]
    wide = [r for r in ok if r["heft_gap_pct"] > 2.0]
    closed = [float(r["closed_pct"]) for r in wide]
    return {"instance": "summary", "layered": len(layered), "failures": len(layered) - len(ok),
            "heft_gap_over_2pct": len(wide),
            "mean_closed_pct": round(sum(closed) / len(closed), 1) if closed else "",
            "beats_best_classic": sum(bool(r["beats_best_list"]) for r in ok)}
