"""The search engine measured side by side (`make bench` section `engine`): random layered DAGs from
`experiments.layered` with fixed seeds and the bundled MoE on two profiles.

Per instance, one row: the classic list schedulers (HEFT, HEFT with CPoP's priority, PEFT; the best of them is
the bar to beat), the planner's phases (the makespan after phase 1, the linear-clustering rounds, the cluster
rounds, the segment neighbourhoods, the iterated list scheduler, the assignment search, LNS: `plan_instance`'s
`phases`), the final makespan, the op-level lower
bound (the best of the trivial, the communication-aware and the decomposition/solver bounds), the gap, which part
found the plan, the share of HEFT's gap to the bound that the planner closed (`closed_pct`, the engine's measure,
where that gap is over 2 %), whether it beat the best classic scheduler, and whether the planner failed (an
exception: it never should).  `summary` condenses the rows into the issue's three criteria.

A subset, side by side (for a change to the search; the machine is shared and noisy, so before and after are
measured in one run, alternating per graph):

    python -m experiments.bench_engine --graphs 300x8-c2-s5,500x8-c2-s9 --time-limit 60 --compare

`--graphs` names layered graphs as `<tasks>x<devices>-c<comm>-s<seed>` (seed = index in GRAPHS; `all`, the
default, is every graph of GRAPHS; `moe` adds the two MoE rows; `MODEL.onnx@PROFILE.yaml` any ONNX file on a
bundled profile, e.g. the onnx wheel's packaged CNNs); `--compare` runs each instance first as main's
phase 3 ran it before a change (`--before pre-segment`, the default: without the segment neighbourhoods,
`SearchPolicy.segment_lns_share` = 0; `--before pre-tails`: the LNS's neighbourhood tails and releases before their
fix, `SearchPolicy.lns_tails_after_window` = False; `--before main`: the iterated list scheduler on the
graph alone, without the race against the mirrored graph, `SearchPolicy.mirror_race_share` = 0; `--before
pre-assignment`: also without the assignment search and with the phase-3 time split of before it, `iterated_share`
= 0.7, the rest to LNS), then as configured, and prints each pair and the summary of each setting.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
import traceback
from pathlib import Path

from experiments.layered import layered_dag
from planner.cost.instance import SchedulingInstance
from planner.heuristics.list_schedule import Rank, heft
from planner.heuristics.peft import peft
from planner.ir.hardware import load_topology
from planner.prepare import prepare
from planner.search.policy import SearchPolicy
from planner.solve import SolveOptions, plan_instance

REPO = Path(__file__).resolve().parents[1]
MOE = REPO / "planner" / "data" / "models" / "moe.onnx"
PROFILES = REPO / "hardware_profiles"

# 20 graphs: (tasks, devices, comm/compute ratio), seed = position in the list
GRAPHS = [(300, 4, 0.5), (300, 4, 1.0), (300, 4, 2.0), (300, 8, 0.5), (300, 8, 1.0), (300, 8, 2.0),
          (500, 4, 1.0), (500, 8, 0.5), (500, 8, 1.0), (500, 8, 2.0), (1000, 4, 2.0), (1000, 8, 0.5),
          (1000, 8, 1.0), (1000, 8, 2.0), (2000, 4, 1.0), (2000, 8, 0.5), (2000, 8, 1.0), (2000, 8, 2.0),
          (300, 8, 1.5), (500, 4, 2.0)]
QUICK_GRAPHS = [(300, 8, 2.0), (300, 4, 2.0), (500, 8, 1.0), (1000, 8, 2.0)]


def _row(name: str, inst: SchedulingInstance, time_limit_s: float, threads: int,
         policy: SearchPolicy | None = None) -> dict:
    heft_tick = heft(inst).makespan_tick
    cpop_tick = heft(inst, rank=Rank.SUM).makespan_tick
    peft_tick = peft(inst).makespan_tick
    best_list = min(heft_tick, cpop_tick, peft_tick)
    row: dict = {"instance": name, "tasks": inst.num_tasks, "devices": inst.num_devices, "heft": heft_tick,
                 "heft_cpop": cpop_tick, "peft": peft_tick, "best_classic": best_list, "time_limit_s": time_limit_s}
    t0 = time.monotonic()
    try:
        out = plan_instance(inst, SolveOptions(time_limit_s=time_limit_s, threads=threads),
                            policy=policy or SearchPolicy())
    except Exception:  # noqa: BLE001 - a bench row records the failure instead of stopping the bench
        row.update(failed=True, error=traceback.format_exc(limit=1).strip().splitlines()[-1])
        return row
    after: dict[str, int] = {}
    for phase in out.phases:
        source = phase.source.removesuffix(" (mirrored)")  # the iterated list scheduler found it on the mirror
        key = source if source in ("decomposition", "linear cluster round", "cluster round", "segment LNS",
                                   "iterated list scheduling", "assignment search", "LNS") else "list"
        after[key] = phase.makespan_tick
    final = out.op_plan.makespan_tick
    bound = out.lower_bound_tick
    heft_gap = heft_tick - bound
    row.update(
        failed=False, after_list=after.get("list", best_list), after_decomposition=after.get("decomposition", ""),
        after_linear_round=after.get("linear cluster round", ""), after_cluster_round=after.get("cluster round", ""),
        after_segment_lns=after.get("segment LNS", ""),
        after_iterated=after.get("iterated list scheduling", ""),
        after_assignment=after.get("assignment search", ""), after_lns=after.get("LNS", ""), final=final,
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
    """The engine's criteria over the layered rows: failures; the mean share of HEFT's gap to the bound closed,
    over the rows where that gap is over 2 %; on how many rows the planner beat the best classic scheduler."""
    layered = [r for r in rows if not r["instance"].startswith("moe/")]
    ok = [r for r in layered if not r.get("failed")]
    wide = [r for r in ok if r["heft_gap_pct"] > 2.0]
    closed = [float(r["closed_pct"]) for r in wide]
    return {"instance": "summary", "layered": len(layered), "failures": len(layered) - len(ok),
            "heft_gap_over_2pct": len(wide),
            "mean_closed_pct": round(sum(closed) / len(closed), 1) if closed else "",
            "beats_best_classic": sum(bool(r["beats_best_list"]) for r in ok)}


# the phase-3 setting before the assignment search: the iterated list scheduler's share of the time left after the
# cluster rounds, and no assignment search (`--before pre-assignment`)
BEFORE_SETTING: dict[str, float | bool] = {"iterated_share": 0.7, "assignment_share": 0.0, "mirror_race_share": 0.0}
# phase 3 without the mirrored race: the iterated list scheduler on the graph alone
# (`--before main`)
MAIN_SETTING: dict[str, float | bool] = {"mirror_race_share": 0.0}
# the LNS's neighbourhood tails through the whole incumbent (`SearchPolicy.lns_tails_after_window`;
# `--before pre-tails`)
PRE_TAILS_SETTING: dict[str, float | bool] = {"lns_tails_after_window": False}
# the planner before the segment neighbourhoods (`planner.segment_lns`; `--before pre-segment`)
PRE_SEGMENT_SETTING: dict[str, float | bool] = {"segment_lns_share": 0.0}
BEFORE_SETTINGS = {"main": MAIN_SETTING, "pre-assignment": BEFORE_SETTING, "pre-tails": PRE_TAILS_SETTING,
                   "pre-segment": PRE_SEGMENT_SETTING}


def phase_setting(setting: dict[str, float | bool]) -> SearchPolicy:
    """The planner's default `SearchPolicy` with the knobs of `setting` (field name -> value) replaced."""
    return dataclasses.replace(SearchPolicy(), **setting)  # type: ignore[arg-type]  # mypy reads **dict as every field


def graph_name(seed: int) -> str:
    n, d, comm = GRAPHS[seed]
    return f"{n}x{d}-c{comm:g}-s{seed}"


def _instances(names: list[str]) -> list[tuple[str, SchedulingInstance]]:
    known = {graph_name(seed): seed for seed in range(len(GRAPHS))}
    out = []
    for name in names:
        if name == "all":
            out += _instances(list(known))
        elif name == "moe":
            out += [(f"moe/{p}", prepare(MOE, load_topology(PROFILES / p)).instance)
                    for p in ("a100-4-pcie.yaml", "cpu-4.yaml")]
        elif name in known:
            n, d, comm = GRAPHS[known[name]]
            inst = layered_dag(n, d, seed=known[name], comm_ratio=comm)
            out.append((inst.name, inst))
        elif name.endswith(".yaml") and ".onnx@" in name:  # any ONNX file on a bundled profile (or a profile path)
            model, _, profile = name.partition("@")
            hw = Path(profile) if Path(profile).exists() else PROFILES / profile
            if not Path(model).exists() or not hw.exists():
                raise SystemExit(f"{name!r}: no such model or profile ({model}, {hw})")
            out.append((f"{Path(model).stem}/{hw.name}", prepare(model, load_topology(hw)).instance))
        else:
            raise SystemExit(f"unknown graph {name!r}; choose from all, moe, MODEL.onnx@PROFILE.yaml, "
                             f"{', '.join(known)}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_engine", description="the engine bench on a subset (docstring)")
    parser.add_argument("--graphs", default="all", help="comma-separated graph names, 'all', 'moe' or "
                        "MODEL.onnx@PROFILE.yaml (a bundled profile's file name or a path)")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per instance")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--compare", action="store_true", help="each instance before (main's phase 3), then after")
    parser.add_argument("--before", choices=sorted(BEFORE_SETTINGS), default="pre-segment",
                        help="what --compare runs first: the planner without the segment neighbourhoods "
                             "(pre-segment), the LNS before its tail fix (pre-tails), phase 3 without the mirrored "
                             "race (main), or the one before the assignment search")
    args = parser.parse_args(argv)
    after: dict[str, float | bool] = {}
    settings = [("before", BEFORE_SETTINGS[args.before]), ("after", after)] if args.compare else [("after", after)]
    rows: dict[str, list[dict]] = {label: [] for label, _ in settings}
    for name, inst in _instances(args.graphs.split(",")):
        for label, setting in settings:
            row = _row(name, inst, args.time_limit, args.threads, phase_setting(setting))
            rows[label].append(row)
            print(f"  {label:6s} {name}: final {row.get('final')} (HEFT {row['heft']}, bound {row.get('bound')}, "
                  f"closed {row.get('closed_pct')} %, found by {row.get('found_by')}) {row}", flush=True)
    for label, _ in settings:
        print(f"  {label:6s} summary: {summary(rows[label])}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
