"""Timing and quality of `coarsen` (the `coarsen` section of `make bench`; never a pass/fail test).

`bench_coarsen`: timing on random layered DAGs of 10k-100k tasks, the count-target merge and the merge that keeps
the critical path (`cp_tolerance`) side by side.

`bench_parallelism`: does coarsening keep the parallelism?  On layered DAGs of 500 and 2,000 tasks on 8 devices
(`experiments.layered.layered_dag`) and the bundled MoE on a100-4-pcie and cpu-4, for each way of merging
('count' = merge to the search's cluster count whatever the critical path becomes, the merge without a tolerance;
'tolerance' = `cp_tolerance=CoarsenPolicy().cp_tolerance`, what the search's linear rounds use):

* the op graph's and the coarse graph's critical path (`critical_paths`), after the merge and after the search's
  `split_to_target` (what its linear cluster round solves);
* round 0 of the linear cluster rounds, reproduced here: the placement model on those clusters, warm-started from
  the better of HEFT on them and HEFT's op plan projected onto them, `round_s` seconds; its plan's makespan;
* the whole search (`plan_instance`, `plan_s` seconds): its linear cluster rounds' makespans (read from
  `Outcome.rounds`, the rounds the progress output names 'linear cluster round'), the final makespan and the
  phase that found it.  The 'count' runs swap the `coarsen` the search calls for one without `cp_tolerance` (the
  only difference between the two modes there).  The search runs linear cluster rounds only on graphs with more than one
  segment (bottlenecks): on the layered DAGs it has none, and its rounds are the incumbent-respecting cluster
  rounds, the same for both.

`random_layered_instance(n, seed=...)` builds a reproducible instance shaped like a dataflow graph: tasks in layers
of random width, each task reading 1..3 tensors from the previous layer or (skip connections, 20%) from up to four
layers back; heterogeneous devices (per-device speed factors); each task's output is one tensor carried by all its
out-edges; one cross-device link class with latency and bandwidth.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from unittest import mock

import numpy as np

import planner.search.linear_rounds
from experiments.layered import layered_dag
from formulations.solve_instance import solve_placement
from planner.coarsen import DEFAULT_COARSEN_POLICY, contract, critical_paths, expand_plan
from planner.coarsen.pipeline import CoarseningResult, coarsen
from planner.coarsen.refine import project_plan, split_to_target
from planner.cost.instance import UNBOUNDED_BYTES, SchedulingInstance
from planner.decompose import segments
from planner.errors import InfeasibleError, OpplanError
from planner.heuristics.list_schedule import heft
from planner.ir.hardware import load_topology
from planner.prepare import prepare
from planner.solve import DEFAULT_CLUSTERS, SolveOptions, plan_instance

DATA = Path(__file__).resolve().parents[1] / "planner" / "data"
PROFILES = Path(__file__).resolve().parents[1] / "hardware_profiles"
MODES = ("count", "tolerance")


def random_layered_instance(n: int, *, seed: int = 0, mean_width: int = 32, num_devices: int = 4,
                            name: str | None = None) -> SchedulingInstance:
    """A random layered DAG of `n` tasks (see module); same seed, same instance."""
    rng = np.random.default_rng(seed)
    widths: list[int] = []
    while sum(widths) < n:
        widths.append(int(rng.integers(1, 2 * mean_width)))
    widths[-1] -= sum(widths) - n
    widths = [w for w in widths if w > 0]
    layer = np.repeat(np.arange(len(widths)), widths)
    first = np.concatenate([[0], np.cumsum(widths)[:-1]])
    width_arr = np.asarray(widths)
    dst_tasks = np.flatnonzero(layer > 0)
    fanin = rng.integers(1, 4, size=len(dst_tasks))
    dst = np.repeat(dst_tasks, fanin)
    back = np.where(rng.random(len(dst)) < 0.2, rng.integers(1, 5, size=len(dst)), 1)
    src_layer = np.maximum(layer[dst] - back, 0)
    src = first[src_layer] + (rng.random(len(dst)) * width_arr[src_layer]).astype(np.int64)
    pairs = np.unique(src * n + dst)
    src, dst = pairs // n, pairs % n
    base = rng.integers(1, 100, size=n)
    speed = rng.uniform(0.5, 2.0, size=num_devices)
    duration = np.maximum(1, np.round(base[:, None] / speed[None, :])).astype(np.int64)
    out_bytes = rng.integers(1_000, 1_000_000, size=n)
    tensor_names = [f"x{i}" for i in range(n)]
    src_list = src.tolist()
    return SchedulingInstance(
        name=name or f"layered{n}_s{seed}",
        task_names=tuple(f"layer{layer[i]}/op{i}" for i in range(n)),
        device_names=tuple(f"d{i}" for i in range(num_devices)),
        duration_tick=duration,
        edges=tuple(zip(src_list, dst.tolist())),
        edge_tensors=tuple((tensor_names[s],) for s in src_list),
        tensor_bytes=dict(zip(tensor_names, out_bytes.tolist())),
        edge_fixed_tick=np.zeros(len(src_list), dtype=np.int64),
        link_class=1 - np.eye(num_devices, dtype=np.int64),
        link_latency_tick=np.array([0.0, 5.0]),
        link_bytes_per_tick=np.array([np.inf, 1e4]),
        param_bytes=rng.integers(0, 1_000_000, size=n),
        activation_bytes=out_bytes.astype(np.int64),
        peak_internal_bytes=np.zeros(n, dtype=np.int64),
        capacity_bytes=np.full(num_devices, UNBOUNDED_BYTES, dtype=np.int64),
    )


def bench_coarsen(sizes: tuple[int, ...] | list[int] = (10_000, 100_000), *, seed: int = 0,
                  target_clusters: int = DEFAULT_COARSEN_POLICY.target_clusters,
                  tolerances: tuple[float | None, ...] = (None,)) -> list[dict]:
    """One row per size and tolerance (None: merge to the count): graph size, build and coarsen seconds,
    microseconds per task, stage seconds, results."""
    rows = []
    for n in sizes:
        t0 = time.perf_counter()
        inst = random_layered_instance(n, seed=seed)
        build_s = time.perf_counter() - t0
        for tolerance in tolerances:
            t1 = time.perf_counter()
            res = coarsen(inst, target_clusters=target_clusters, cp_tolerance=tolerance)
            rows.append(_timing_row(inst, res, build_s, time.perf_counter() - t1, tolerance))
    return rows


def _timing_row(inst: SchedulingInstance, res: CoarseningResult, build_s: float, coarsen_s: float,
                tolerance: float | None) -> dict:
    n = inst.num_tasks
    return {"n_tasks": n, "cp_tolerance": "" if tolerance is None else tolerance, "n_edges": len(inst.edges),
            "build_s": round(build_s, 4), "coarsen_s": round(coarsen_s, 4),
            "us_per_task": round(1e6 * coarsen_s / max(n, 1), 2),
            **{f"{k}_s": round(v, 4) for k, v in res.seconds.items()},
            "linear_clusters": res.num_linear_clusters, "repaired_clusters": res.num_repaired_clusters,
            "clusters": res.num_clusters, "critical_path_before_tick": round(res.critical_path_before_tick, 1),
            "critical_path_after_tick": round(res.critical_path_after_tick, 1), "cut_bytes": res.cut_bytes}


def parallelism_graphs(quick: bool = False) -> list[tuple[str, SchedulingInstance]]:
    """(label, instance): layered DAGs of 500 and 2,000 tasks on 8 devices (300 and 500 when quick) and the bundled
    MoE on a100-4-pcie and cpu-4."""
    sizes = (300, 500) if quick else (500, 2000)
    graphs = [(f"layered-{n}x8", layered_dag(n, 8, seed=0)) for n in sizes]
    for profile in ("a100-4-pcie", "cpu-4"):
        topology = load_topology(PROFILES / f"{profile}.yaml")
        graphs.append((f"moe-{profile}", prepare(DATA / "models" / "moe.onnx", topology).instance))
    return graphs


def _coarsen_for(mode: str) -> Callable[..., CoarseningResult]:
    """The `coarsen` a mode calls: 'count' ignores `cp_tolerance` (merging to the count alone)."""
    if mode == "count":
        return lambda inst, **kw: coarsen(inst, **{**kw, "cp_tolerance": None})
    return coarsen


def linear_round(fine: SchedulingInstance, clusters: list[list[int]], time_limit_s: float,
                 threads: int = 8) -> int | None:
    """Round 0 of the search's linear cluster rounds on `clusters`: the placement model warm-started from the
    better of HEFT on the clusters and HEFT's op plan projected onto them; the expanded plan's makespan, or None
    when the clusters have no plan in time."""
    coarse = contract(fine, clusters)
    warm = None
    try:
        warm = heft(coarse)
    except InfeasibleError:
        pass
    try:
        projected = project_plan(heft(fine), coarse, clusters, fine)
        if warm is None or projected.makespan_tick < warm.makespan_tick:
            warm = projected
    except OpplanError:
        pass
    try:
        plan = solve_placement(coarse, time_limit_s=time_limit_s, threads=threads, warm_start=warm)
    except OpplanError:
        return None
    return expand_plan(fine, coarse, clusters, plan).makespan_tick


def bench_parallelism(quick: bool = False, *, round_s: float | None = None, plan_s: float | None = None,
                      threads: int = 8) -> list[dict]:
    """One row per graph and mode (module docstring)."""
    round_s = round_s if round_s is not None else (3.0 if quick else 10.0)
    plan_s = plan_s if plan_s is not None else (10.0 if quick else 30.0)
    target = DEFAULT_CLUSTERS["cpsat"]
    rows = []
    for label, fine in parallelism_graphs(quick):
        heft_tick = heft(fine).makespan_tick
        for mode in MODES:
            run = _coarsen_for(mode)
            t0 = time.perf_counter()
            result = run(fine, target_clusters=target, cp_tolerance=DEFAULT_COARSEN_POLICY.cp_tolerance)
            coarsen_s = time.perf_counter() - t0
            clusters = split_to_target(fine, result.clusters, target)
            op_cp, merged_cp = critical_paths(fine, [list(c) for c in result.clusters])
            _, solved_cp = critical_paths(fine, clusters)
            round_tick = linear_round(fine, clusters, round_s, threads)
            lines: list[str] = []
            with mock.patch.object(planner.search.linear_rounds, "coarsen", run):
                outcome = plan_instance(fine, SolveOptions(time_limit_s=plan_s, threads=threads), lines.append)
            linear = [r.makespan_tick for r in outcome.rounds[:sum("linear cluster round" in m and "clusters, plan"
                                                                   in m for m in lines)]]
            rows.append({
                "graph": label, "mode": mode, "n_tasks": fine.num_tasks, "segments": len(segments(fine)),
                "op_cp_tick": int(op_cp), "clusters": result.num_clusters, "coarse_cp_tick": int(merged_cp),
                "cp_ratio": round(merged_cp / op_cp, 3) if op_cp else 1.0, "solved_clusters": len(clusters),
                "solved_cp_tick": int(solved_cp), "coarsen_s": round(coarsen_s, 3), "heft_tick": heft_tick,
                f"round0_{round_s:g}s_tick": round_tick if round_tick is not None else "",
                "search_linear_rounds_tick": " ".join(map(str, linear)),
                f"search_{plan_s:g}s_tick": outcome.op_plan.makespan_tick,
                "found_by": outcome.phases[-1].source if outcome.phases else "",
            })
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m experiments.bench_coarsen`: no options; `--help` prints what it measures, an unknown flag is an error
    (exit 2), before anything runs."""
    about = (__doc__ or "").split("\n\n")[0]
    argparse.ArgumentParser(prog="python -m experiments.bench_coarsen", description=about).parse_args(argv)
    for row in bench_coarsen(tolerances=(None, DEFAULT_COARSEN_POLICY.cp_tolerance)) + bench_parallelism():
        print(row)


if __name__ == "__main__":
    main()
