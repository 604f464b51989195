"""The STG development benchmark: P|prec|Cmax instances with known optima, solved by `solve_placement`.

`run_stg_benchmark(stg_dir)` reads every ``*.stg`` listed in ``optima.csv`` (graphs x processor counts), builds the
instance with `planner.cost.model.build_instance(graph, Topology.identical(procs))`, solves it within
`time_limit_s` and returns one row per instance.  ``python -m experiments.stg_bench [stg_dir] [--time-limit S]
[--backend NAME] [--limit N] [--csv OUT] [--nondeterministic]`` prints the rows and a per-processor-count table.

Two layouts of ``optima.csv`` are read (`reference_row`): stg-dev's ``graph,procs,trivial_lb,lower_bound,best_found,
status`` (the best known makespan and the best proven bound, which differ on open instances) and stg-hard-dev's
``graph,procs,trivial_lb,optimum`` (a proven optimum: it is both the best known makespan and the proven bound).
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections import defaultdict
from pathlib import Path

from formulations.solve_instance import solve_placement
from planner.cost.model import build_instance
from planner.ir.taskgraph import load_stg
from planner.ir.topology import Topology

DEFAULT_STG_DIR = Path(__file__).resolve().parents[2] / "shared" / "benchmarks" / "stg-dev"


def reference_row(row: dict[str, str]) -> tuple[int, int]:
    """(best known makespan, proven lower bound) of one ``optima.csv`` row, in either layout (module docstring).
    KeyError names the columns expected when the row has neither layout."""
    if "optimum" in row:
        optimum = int(row["optimum"])
        return optimum, optimum
    if "best_found" in row and "lower_bound" in row:
        return int(row["best_found"]), int(row["lower_bound"])
    raise KeyError(f"optima.csv has neither 'optimum' nor 'best_found' and 'lower_bound' columns: {sorted(row)}")


def run_stg_benchmark(stg_dir: str | Path = DEFAULT_STG_DIR, time_limit_s: float = 10.0, backend: str = "cpsat",
                      limit: int | None = None, *, deterministic: bool = True, threads: int = 8, seed: int = 0,
                      verbose: bool = False) -> list[dict]:
    """Solve the benchmark instances; per instance: graph, procs, makespan, optimum (best known), lower_bound
    (proven, from optima.csv), solver bound, status, time_s, reached (makespan <= optimum), pct_above."""
    stg_dir = Path(stg_dir)
    with open(stg_dir / "optima.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    if limit is not None:
        rows = rows[:limit]
    out: list[dict] = []
    graphs: dict[str, object] = {}
    for row in rows:
        name, procs = row["graph"], int(row["procs"])
        if name not in graphs:
            graphs[name] = load_stg(stg_dir / name)
        inst = build_instance(graphs[name], Topology.identical(procs))
        t0 = time.monotonic()
        plan = solve_placement(inst, backend=backend, time_limit_s=time_limit_s, threads=threads, seed=seed,
                               deterministic=deterministic)
        elapsed = time.monotonic() - t0
        optimum, known_lower_bound = reference_row(row)
        rec = {
            "graph": name, "procs": procs, "makespan": plan.makespan_tick, "optimum": optimum,
            "known_lower_bound": known_lower_bound, "bound": plan.lower_bound_tick, "status": plan.status,
            "time_s": round(elapsed, 3), "reached": plan.makespan_tick <= optimum,
            "pct_above": round(100.0 * (plan.makespan_tick - optimum) / optimum, 3),
        }
        out.append(rec)
        if verbose:
            print(",".join(str(v) for v in rec.values()), flush=True)
    return out


def summary_table(results: list[dict]) -> str:
    """Per processor count: instances, reached optimum, proven optimal, max % above, mean and max time."""
    by: dict[int, list[dict]] = defaultdict(list)
    for r in results:
        by[r["procs"]].append(r)
    lines = ["| procs | instances | reached optimum | proven optimal | max % above | mean time s | max time s |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for procs in sorted(by) + ["all"]:
        rs = results if procs == "all" else by[procs]
        if not rs:
            continue
        lines.append(f"| {procs} | {len(rs)} | {sum(r['reached'] for r in rs)} | "
                     f"{sum(r['status'] == 'optimal' for r in rs)} | {max(r['pct_above'] for r in rs):.2f} | "
                     f"{sum(r['time_s'] for r in rs) / len(rs):.2f} | {max(r['time_s'] for r in rs):.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stg_dir", nargs="?", default=str(DEFAULT_STG_DIR))
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--backend", default="cpsat")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--csv", default=None)
    ap.add_argument("--nondeterministic", action="store_true")
    args = ap.parse_args(argv)
    results = run_stg_benchmark(args.stg_dir, args.time_limit, args.backend, args.limit,
                                deterministic=not args.nondeterministic, verbose=True)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(results[0]))
            w.writeheader()
            w.writerows(results)
    print(summary_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
