"""`make bench`: speed and quality measurements, each section written to `bench/results/<section>.csv`.

Timings on this machine are noisy (shared vCPUs): compare ratios measured side by side in one run, never
absolute seconds across runs.  Sections:

* `import`   - ONNX import + inspection of stacked MoE models of ~10k and ~100k ops (and per-op time).
* `coarsen`  - linear clustering of random layered DAGs of 10k and 100k tasks, and of the stacked MoE, merged to
               the count and within the critical-path tolerance; coarse vs op critical path and the cluster round's
               makespan on layered DAGs of 500 / 2,000 tasks and the bundled MoE (`experiments/bench_coarsen.py`).
* `heft`     - HEFT list scheduling of random layered DAGs of 10k and 100k tasks on 8 devices.
* `stg`      - the STG sets with proven optima, at most 10 s per instance: `stg-dev` (80 instances) and
               `stg-hard-dev` (30 whose optimum lies above the trivial bound); one CSV per set
               (`bench/results/stg-dev.csv`, `stg-hard-dev.csv`) besides the section's `stg.csv` (both, with a `set`
               column).
* `runtime`  - what running a model on this host gives: onnxruntime (1 thread, 2 intra-op, parallel mode), torch (1 and
               2 threads), opplan on one rank and as `plan-run --choose` runs its plan, with the effective
               parallelism at both ends (`experiments/bench_executor.py`).
* `runtime-calibration` - plan, calibrate, run and re-plan on 2 traced gloo ranks: measured against predicted
               (`experiments/bench_runtime.py`).
* `pipeline` - GPipe ... DualPipeV and the planned schedule at DualPipe's memory (unit costs and the MoE).
* `pipeline-sweep` - the memory what-if: the planned schedule at each memory cap from below the smallest baseline
               peak to above DualPipe's, beside every baseline, on the bundled MoE and the DeepSeek-V3-like preset
               (p = 8, m = 20); one picture per case beside the CSV (`experiments/bench_sweep.py`).
* `engine`   - the search (`plan_instance`) against HEFT, HEFT/CPoP, PEFT on 20 random layered DAGs (300-2,000 tasks,
               4 and 8 devices, comm/compute 0.5-2) and the bundled MoE on a100-4-pcie and cpu-4, 60 s each:
               what each phase reached, the final gap, which part found the plan (`experiments/bench_engine.py`).

Run one section with `python -m experiments.bench --only stg`; `--quick` shrinks the sizes for a smoke run.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# RESULTS and write_csv live in bench_common, which every bench module imports (no module imports this one)
from experiments.bench_common import RESULTS, write_csv
from experiments.readme_results import update_readme

REPO = Path(__file__).resolve().parents[1]
SHARED_BENCHMARKS = REPO.parent / "shared" / "benchmarks"
STG_SETS = ("stg-dev", "stg-hard-dev")


def _stacked_moe(layers: int, path: Path) -> Path:
    from planner.ir.moe_model import MoEConfig, write_moe_model

    config = MoEConfig(layers=layers, experts=4, hidden=16, ffn=32, heads=2, seq_len=8, vocab=32)
    return write_moe_model(path, config)


def bench_import(quick: bool) -> list[dict]:
    """Import + inspect stacked MoE models; per-op microseconds should stay flat from 10k to 100k ops."""
    from planner.cost.model import build_instance
    from planner.ir.hardware import DEFAULT_PROFILE, load_topology
    from planner.ir.onnx_import import load_onnx
    from planner.report import inspect_summary

    topology = load_topology(DEFAULT_PROFILE)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for layers in ((8, 80) if quick else (80, 800)):
            path = _stacked_moe(layers, Path(tmp) / f"moe{layers}.onnx")
            t0 = time.perf_counter()
            graph = load_onnx(path)
            t1 = time.perf_counter()
            instance = build_instance(graph, topology)
            inspect_summary(graph, instance)
            t2 = time.perf_counter()
            rows.append({"model": f"moe-{layers}-layers", "num_ops": graph.num_ops, "import_s": round(t1 - t0, 3),
                         "cost_and_inspect_s": round(t2 - t1, 3),
                         "us_per_op": round(1e6 * (t2 - t0) / graph.num_ops, 2)})
    return rows


def bench_coarsen(quick: bool) -> list[dict]:
    """Random layered DAGs (10k, 100k) and the stacked MoE (a real model's structure at 10k and 100k ops), merged to
    the count and within the critical-path tolerance; then whether coarsening keeps the parallelism
    (`experiments.bench_coarsen.bench_parallelism`)."""
    from experiments.bench_coarsen import bench_coarsen as run
    from experiments.bench_coarsen import bench_parallelism
    from planner.coarsen import DEFAULT_COARSEN_POLICY, coarsen
    from planner.ir.hardware import load_topology
    from planner.prepare import prepare

    tolerances = (None, DEFAULT_COARSEN_POLICY.cp_tolerance)
    rows = [{"graph": "random-layered", **row}
            for row in run([1_000, 10_000] if quick else [10_000, 100_000], tolerances=tolerances)]
    topology = load_topology(REPO / "hardware_profiles" / "h100-8-nvlink.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        for layers in ((8, 80) if quick else (80, 800)):
            inst = prepare(_stacked_moe(layers, Path(tmp) / f"moe{layers}.onnx"), topology).instance
            for tolerance in tolerances:
                t0 = time.perf_counter()
                result = coarsen(inst, cp_tolerance=tolerance)
                seconds = time.perf_counter() - t0
                rows.append({"graph": f"moe-{layers}-layers", "n_tasks": inst.num_tasks,
                             "cp_tolerance": "" if tolerance is None else tolerance, "n_edges": len(inst.edges),
                             "coarsen_s": round(seconds, 3), "us_per_task": round(1e6 * seconds / inst.num_tasks, 2),
                             "linear_clusters": result.num_linear_clusters, "clusters": result.num_clusters,
                             "critical_path_before_tick": result.critical_path_before_tick,
                             "critical_path_after_tick": result.critical_path_after_tick,
                             "cut_bytes": result.cut_bytes})
    return rows + bench_parallelism(quick)


def bench_heft(quick: bool) -> list[dict]:
    from experiments.bench_heft import bench_heft as run

    return run([1_000, 10_000] if quick else [10_000, 100_000])


def bench_stg(quick: bool) -> list[dict]:
    """Each STG set in turn; its rows also go to `bench/results/<set>[-quick].csv`."""
    from experiments.stg_bench import run_stg_benchmark

    rows: list[dict] = []
    for name in STG_SETS:
        found = run_stg_benchmark(SHARED_BENCHMARKS / name, time_limit_s=10, limit=8 if quick else None)
        write_csv(RESULTS / f"{name}{'-quick' if quick else ''}.csv", found)
        rows.extend({"set": name, **row} for row in found)
    return rows


def bench_runtime(quick: bool) -> list[dict]:
    from experiments.bench_executor import bench_executor as run

    return run(quick)


def bench_runtime_calibration(quick: bool) -> list[dict]:
    from experiments.bench_runtime import bench_calibration as run

    return run(quick)


def bench_pipeline(quick: bool) -> list[dict]:
    from experiments.bench_pipeline import bench_pipeline as run

    return run(quick)


def bench_pipeline_sweep(quick: bool) -> list[dict]:
    from experiments.bench_sweep import bench_sweep as run

    return run(quick)


def bench_engine(quick: bool) -> list[dict]:
    from experiments.bench_engine import bench_engine as run

    return run(quick)


SECTIONS: dict[str, Callable[[bool], list[dict]]] = {
    "import": bench_import,
    "coarsen": bench_coarsen,
    "heft": bench_heft,
    "stg": bench_stg,
    "runtime": bench_runtime,
    "runtime-calibration": bench_runtime_calibration,
    "pipeline": bench_pipeline,
    "pipeline-sweep": bench_pipeline_sweep,
    "engine": bench_engine,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args(argv)
    for name in args.only.split(","):
        if name not in SECTIONS:
            parser.error(f"unknown section {name!r}; choose from {', '.join(SECTIONS)}")
        print(f"== {name}", flush=True)
        rows = SECTIONS[name](args.quick)
        out = RESULTS / f"{name}{'-quick' if args.quick else ''}.csv"
        write_csv(out, rows)
        for row in rows:
            print("  ", row, flush=True)
        print(f"   -> {out.relative_to(REPO)}", flush=True)
    updated = update_readme(RESULTS, REPO / "README.md")
    print(f"== README result tables rewritten from {RESULTS.relative_to(REPO)}: {', '.join(updated) or 'none'}",
          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
