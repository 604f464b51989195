"""A run's prediction under processor sharing: the plan's schedule replayed with its host's ranks sharing cores.

No torch here (`runner` calls it).  When the plan's profile has a `hosts[].sharing` block (`plan-calibrate
--nproc N` measures it; `planner.cost.sharing`), the report's `sharing` block re-prices the plan's own schedule
(same devices, same order per device; not a new plan) with the simulator's processor sharing (`simulate_plan(...,
sharing=)`): a rank computing alone runs at its solo speed, k ranks computing at once each at min(1, E / k) of it.
The plan's makespan itself (`simulated_makespan_s`) stays the planner's, which prices every op at the
calibration's concurrency (the planner does not model sharing: see `planner.cost.sharing`).

* A plan priced by the profile (its durations are the profile's): the replay on the profile with sharing, each
  op's solo work = its priced time x speed(measured_ranks).
* A plan priced by a run's measured op times (`plan-solve --measured run.json`): its own durations are taken as
  solo work (in the runs here the two ranks computed at once for 0-9 % of their compute time, so an op's measured
  time is nearly always its time alone) and replayed with sharing from there.

With the runtime probe's per-transfer figures in the profile (`send_overhead`, `recv_overhead`, which the planner
folds into the link's latency), a second replay charges them to the ranks' own streams instead (the simulator's
`rank_transfer_tick`: the sender busy sending right after the producing op, the receiver at the consuming op's
start, both shared like compute): `charged_makespan_s` and `measured_vs_charged`.  The planner does neither.

`measured_vs_resimulated` applies the machine probe's `stretch` (`planner.execute.machine_scale`: the profile
scaled by the run-time slowdowns / as calibrated) to the shared replay, when the probe ran.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from planner.cost.model import build_instance
from planner.cost.sharing import load_shared_hosts, read_profile
from planner.ir.graph import OpGraph
from planner.ir.topology import Topology
from planner.schedule.plan import Plan
from planner.schedule.runtime_replay import rank_transfer_s
from planner.schedule.simulate import simulate_plan

__all__ = ["sharing_report", "summary_line"]


def sharing_report(plan: Plan, graph: OpGraph, topology: Topology | None, measured_makespan_s: float,
                   machine_state: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """run.json's `sharing` block (module docstring): `profile` "shared" or "none" (and `note` why not);
    shared: effective_parallelism and measured_ranks per sharing host, priced_by ("profile" or "measured op
    times"), simulated_makespan_s (the shared replay), unshared_makespan_s (the same replay without sharing),
    measured_vs_simulated; with the profile's send and receive overheads send_overhead_s, recv_overhead_s,
    charged_makespan_s and measured_vs_charged; with the probe resimulated_makespan_s and measured_vs_resimulated."""
    hosts = load_shared_hosts(plan.hardware_path, topology) if topology is not None and plan.hardware_path else None
    if hosts is None:
        return {"profile": "none", "note": "the plan's profile has no hosts[].sharing block (plan-calibrate --nproc N "
                                          "measures it): not replayed under sharing"}
    if plan.time_unit != "s" or plan.tick_s is None or plan.task_ops \
            or any(p.task not in graph.index for p in plan.placements) \
            or topology is None or topology.num_devices != len(plan.device_names):
        return {"profile": "none", "note": "the plan's tasks are not the graph's ops (or its devices not the "
                                          "profile's): not replayed under sharing"}
    instance = build_instance(graph, topology, tick_s=plan.tick_s)
    own = {p.task: p.end_tick - p.start_tick for p in plan.placements}
    index = instance.task_index
    by_profile = all(int(instance.duration_tick[index[p.task], p.device]) == own[p.task] for p in plan.placements)
    if not by_profile:  # priced by measured op times: those are solo work (module docstring)
        durations = np.array(instance.duration_tick, copy=True)
        for name, ticks in own.items():
            durations[index[name], :] = ticks
        instance = dataclasses.replace(instance, duration_tick=durations)
        hosts = hosts.solo()
    shared_s = simulate_plan(instance, plan, sharing=hosts).makespan_tick * plan.tick_s
    unshared_s = simulate_plan(instance, plan).makespan_tick * plan.tick_s
    out: dict[str, Any] = {
        "profile": "shared", "effective_parallelism": list(hosts.parallelism),
        "measured_ranks": list(hosts.measured_ranks) if by_profile else "1 (measured op times: solo work)",
        "priced_by": "profile" if by_profile else "measured op times",
        "simulated_makespan_s": shared_s, "unshared_makespan_s": unshared_s,
        "measured_vs_simulated": measured_makespan_s / shared_s if shared_s else None,
        "note": "the plan's schedule replayed with the host's ranks sharing its cores (planner.cost.sharing); the "
                "plan's own makespan is the planner's, which does not model sharing"}
    rank_s = _rank_transfer_s(plan.hardware_path)
    if rank_s is not None:
        work = (rank_s[0] / plan.tick_s, rank_s[1] / plan.tick_s)
        charged_s = simulate_plan(instance, plan, sharing=hosts, rank_transfer_tick=work).makespan_tick * plan.tick_s
        out.update(send_overhead_s=rank_s[0], recv_overhead_s=rank_s[1], charged_makespan_s=charged_s,
                   measured_vs_charged=measured_makespan_s / charged_s if charged_s else None)
    stretch = (machine_state or {}).get("stretch")
    if stretch:
        out["resimulated_makespan_s"] = shared_s * stretch
        out["measured_vs_resimulated"] = measured_makespan_s / (shared_s * stretch) if shared_s else None
    return out


def _rank_transfer_s(path: str) -> tuple[float, float] | None:
    """(send_overhead, recv_overhead) seconds of the profile's intra-host link, None when it has neither."""
    profile = read_profile(path)
    return rank_transfer_s(profile) if profile is not None else None


def summary_line(block: Mapping[str, Any]) -> str | None:
    """What plan-run prints about the sharing replay (None when there is none)."""
    if block.get("profile") != "shared":
        return None
    e = "/".join(f"{x:.2f}" for x in block["effective_parallelism"])
    line = (f"under processor sharing (effective parallelism {e}): simulated {block['simulated_makespan_s'] * 1e3:.3g}"
            f" ms, measured / simulated {block['measured_vs_simulated']:.2f}")
    if block.get("measured_vs_charged") is not None:
        line += f"; with transfers' send / receive work on the ranks {block['measured_vs_charged']:.2f}"
    if block.get("measured_vs_resimulated") is not None:
        line += f"; with the probe's slowdowns {block['measured_vs_resimulated']:.2f}"
    return line
