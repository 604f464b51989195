"""Scaling study: plan time, memory and quality from 1k to 1M ops, and anytime curves.

`main(quick, out_dir)` writes, CSV first, then PNG pictures read back from the CSV files:

* `scaling.csv` - one row per (graph, size, method): the stacked MoE (`planner.ir.moe_model`, as `make bench` builds
  it: 4 experts, hidden 16, ~125 ops per layer, on `cpu-4.yaml`) and random layered DAGs (`experiments.layered`,
  8 identical devices, layers of 16 tasks, comm/compute 2: graphs where HEFT is not optimal), from 1k ops to 100k
  (quick) or 1M (full).
  Methods: `bilevel` (`plan_instance`, the planner as `plan-solve` runs it), `flat` (the placement model on the op
  graph, no coarsening, with the same budget; only up to FLAT_MAX_TASKS tasks and within a hard timeout, since it
  cannot even be built beyond that) and `heft`.  End to end = build (ONNX import + passes + costing, or generating
  the DAG) + planning + writing the plan file, each as wall AND cpu seconds of the process that ran it (one child
  process per row, so `peak_rss_bytes` is that row's own peak), with the 1-minute load average at the start:
  the machine is shared, so wall seconds are inflated by the load and cpu seconds are the comparable figure.
* `anytime.csv` - the planner on one graph where HEFT is not optimal (a layered DAG), run again with growing
  budgets (fractions of the full budget): makespan and lower bound against the time budget, next to HEFT.
* `scaling_time.png`, `scaling_quality.png`, `anytime.png`.

Quick mode (the `make experiments` default) runs 1k-100k ops with short budgets; the full mode adds 1M ops with the
budgets of the issue's targets (100k under 60 s, 1M under 10 minutes end to end).  Run one row by hand with
`python -m experiments.study_scaling --one '{"graph": "moe", "ops": 100000, "method": "bilevel", "budget_s": 20}'`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MOE_OPS_PER_LAYER = 125  # the stacked MoE below has 125 ops per layer (+ 5 outside the layers)
LAYERED_DEVICES = 8
# layers twice as wide as the devices, transfers twice the mean op: HEFT stays ~30 % above the trivial bound at
# every size (with layers of sqrt(ops) tasks, wide graphs are work-bound and HEFT meets the bound to 0.01 %)
LAYERED_COMM_RATIO = 2.0
FLAT_MAX_TASKS = 10_000  # the flat placement model is not built above this many ops (it could not be in time)
QUICK_SIZES = (1_000, 10_000, 100_000)
FULL_SIZES = (1_000, 10_000, 100_000, 1_000_000)
ANYTIME_FRACTIONS = (0.05, 0.1, 0.25, 0.5, 1.0)


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...]
    flat_sizes: tuple[int, ...]
    anytime_ops: int
    anytime_budget_s: float
    anytime_fractions: tuple[float, ...] = ANYTIME_FRACTIONS
    budgets_s: tuple[tuple[int, float], ...] = ((1_000_000, 300.0), (100_000, 20.0), (0, 10.0))
    graphs: tuple[str, ...] = ("moe", "layered")
    # each row in a child process (its own peak memory, a hard timeout); False runs them here (the smoke test)
    isolate: bool = True


    def budget_s(self, ops: int) -> float:
        """The planner's time limit for a graph of `ops` ops (the first of `budgets_s`, largest size first, that
        `ops` reaches): what end to end must fit around."""
        return next(budget for least, budget in self.budgets_s if ops >= least)


QUICK = Settings(QUICK_SIZES, (1_000,), 10_000, 20.0)
FULL = Settings(FULL_SIZES, (1_000, 10_000), 10_000, 120.0)


# ------------------------------------------------------------------------------------------- one measured row
def _moe_model(ops: int, folder: Path) -> Path:
    """The stacked MoE of about `ops` ops, written (once) into `folder`."""
    from planner.ir.moe_model import MoEConfig, write_moe_model

    layers = max(1, round(ops / MOE_OPS_PER_LAYER))
    path = folder / f"moe-{layers}-layers.onnx"
    if not path.exists():
        config = MoEConfig(layers=layers, experts=4, hidden=16, ffn=32, heads=2, seq_len=8, vocab=32)
        write_moe_model(path, config)
    return path


def _build(graph: str, ops: int, folder: Path):
    """The op-level instance of a case: the MoE from its ONNX file (import, passes, costing) or a layered DAG."""
    if graph == "moe":
        from planner.ir.hardware import DEFAULT_PROFILE, load_topology
        from planner.prepare import prepare

        return prepare(_moe_model(ops, folder), load_topology(DEFAULT_PROFILE)).instance
    from experiments.layered import layered_dag

    return layered_dag(ops, LAYERED_DEVICES, seed=0, comm_ratio=LAYERED_COMM_RATIO, width=2 * LAYERED_DEVICES)


def measure_one(graph: str, ops: int, method: str, budget_s: float, folder: Path) -> dict:
    """Build, plan and write one case in this process; the row of `scaling.csv` (module docstring)."""
    from planner.cli import plan_in_user_ids
    from planner.schedule.plan_io import save_plan
    from planner.solve import Method, SolveOptions, plan_instance

    load = os.getloadavg()[0]
    w0, c0 = time.perf_counter(), time.process_time()
    instance = _build(graph, ops, folder)
    w1, c1 = time.perf_counter(), time.process_time()
    row: dict = {"graph": graph, "ops": instance.num_tasks, "edges": len(instance.edges),
                 "devices": instance.num_devices, "method": method, "budget_s": budget_s}
    bound = instance.trivial_lower_bound_tick()
    if method == "flat":
        from formulations.solve_instance import solve_placement

        plan = solve_placement(instance, time_limit_s=budget_s)
        bound = max(bound, min(plan.lower_bound_tick, plan.makespan_tick))
        found_by = "flat"
    else:
        options = SolveOptions(method=Method.MILP if method == "bilevel" else Method.HEFT, time_limit_s=budget_s)
        outcome = plan_instance(instance, options)
        plan = plan_in_user_ids(outcome)
        bound = max(bound, outcome.lower_bound_tick)
        found_by = outcome.found_by
    w2, c2 = time.perf_counter(), time.process_time()
    save_plan(plan, folder / f"plan-{graph}-{ops}-{method}.json")
    w3, c3 = time.perf_counter(), time.process_time()
    makespan = plan.makespan_tick
    row.update(build_wall_s=round(w1 - w0, 2), build_cpu_s=round(c1 - c0, 2), plan_wall_s=round(w2 - w1, 2),
               plan_cpu_s=round(c2 - c1, 2), write_wall_s=round(w3 - w2, 2), end_to_end_wall_s=round(w3 - w0, 2),
               end_to_end_cpu_s=round(c3 - c0, 2),
               peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
               makespan_tick=makespan, lower_bound_tick=bound,
               gap=round((makespan - bound) / makespan, 4) if makespan else 0.0,
               tick_s=instance.tick_s or "", found_by=found_by, load_1min=round(load, 2), status="ok")
    return row


def _run(case: dict, folder: Path, timeout_s: float, settings: Settings) -> dict:
    """One row: in a child process when `settings.isolate`, else here (peak memory then is this process's)."""
    if settings.isolate:
        return measure_in_child(case, folder, timeout_s)
    return measure_one(case["graph"], int(case["ops"]), case["method"], float(case["budget_s"]), folder)


def measure_in_child(case: dict, folder: Path, timeout_s: float) -> dict:
    """`measure_one` in a child process (its own peak memory; a hard timeout for what cannot finish)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    cmd = [sys.executable, "-m", "experiments.study_scaling", "--one", json.dumps(case), "--folder", str(folder)]
    base = {"graph": case["graph"], "ops": case["ops"], "method": case["method"], "budget_s": case["budget_s"],
            "load_1min": round(os.getloadavg()[0], 2)}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {**base, "status": f"timeout after {timeout_s:.0f}s"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return {**base, "status": f"failed: {last[:200]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------ the study
def _timeout_s(method: str, ops: int, budget_s: float) -> float:
    """A child's hard limit: the flat model gets its budget plus a minute to be built (it is the row that may
    not build at all); the others get room for building and writing (minutes at 1M ops) and for a machine
    shared with other jobs, where they may get a tenth of a core."""
    if method == "flat":
        return 3 * budget_s + 60
    return 10 * budget_s + 600 + ops / 100


def scaling_rows(settings: Settings, folder: Path, say=print) -> list[dict]:
    rows = []
    for graph in settings.graphs:
        for ops in settings.sizes:
            budget = settings.budget_s(ops)
            flat = ops in settings.flat_sizes and ops <= FLAT_MAX_TASKS
            for method in ["heft", "bilevel"] + (["flat"] if flat else []):
                case = {"graph": graph, "ops": ops, "method": method, "budget_s": budget}
                row = {"target_ops": ops, **_run(case, folder, _timeout_s(method, ops, budget), settings)}
                say(f"  {row}")
                rows.append(row)
            if not flat:
                why = f"not built (over {FLAT_MAX_TASKS} ops)" if ops > FLAT_MAX_TASKS else "skipped in this mode"
                rows.append({"target_ops": ops, "graph": graph, "ops": ops, "method": "flat", "budget_s": budget,
                             "status": why})
    return rows


def anytime_rows(settings: Settings, folder: Path, say=print) -> list[dict]:
    """The planner on a layered DAG with growing budgets (and HEFT once, as the reference line)."""
    rows = []
    ops, full = settings.anytime_ops, settings.anytime_budget_s
    heft_row = _run({"graph": "layered", "ops": ops, "method": "heft", "budget_s": full}, folder,
                    _timeout_s("heft", ops, full), settings)
    for fraction in settings.anytime_fractions:
        budget = round(full * fraction, 3)
        row = _run({"graph": "layered", "ops": ops, "method": "bilevel", "budget_s": budget}, folder,
                   _timeout_s("bilevel", ops, budget), settings)
        row.update(fraction=fraction, full_budget_s=full, heft_makespan_tick=heft_row.get("makespan_tick", ""))
        say(f"  {row}")
        rows.append(row)
    return rows


def write_csv(path: Path, rows: list[dict]) -> None:
    fields: list[str] = []
    for row in rows:
        fields.extend(k for k in row if k not in fields)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _num(value: str) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


# ------------------------------------------------------------------------------------------------ pictures
def plot_scaling(csv_path: Path, out_dir: Path) -> list[Path]:
    """Plan time (wall and cpu, end to end) and gap against ops, from `scaling.csv`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in read_csv(csv_path) if r.get("status") == "ok"]
    series: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        series.setdefault((r["graph"], r["method"]), []).append(r)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for (graph, method), rs in sorted(series.items()):
        rs = sorted(rs, key=lambda r: float(r["ops"]))
        x = [float(r["ops"]) for r in rs]
        line, = ax.plot(x, [float(r["end_to_end_wall_s"]) for r in rs], marker="o", label=f"{graph} {method} (wall)")
        ax.plot(x, [float(r["end_to_end_cpu_s"]) for r in rs], marker="x", linestyle="--", color=line.get_color(),
                label=f"{graph} {method} (cpu)")
    ax.axhline(60, color="grey", linewidth=0.8, linestyle=":")
    ax.axhline(600, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ops in the graph")
    ax.set_ylabel("end to end: build + plan + write (s)")
    ax.set_title("Plan time against graph size (dotted: 60 s and 10 min)")
    ax.legend(fontsize=7, ncol=2)
    time_png = _save(fig, out_dir / "scaling_time.png")

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for (graph, method), rs in sorted(series.items()):
        rs = sorted(rs, key=lambda r: float(r["ops"]))
        ax.plot([float(r["ops"]) for r in rs], [100 * float(r["gap"]) for r in rs], marker="o",
                label=f"{graph} {method}")
    ax.set_xscale("log")
    ax.set_xlabel("ops in the graph")
    ax.set_ylabel("gap to the lower bound (%)")
    ax.set_title("Plan quality against graph size (gap = (makespan - bound) / makespan)")
    ax.legend(fontsize=8)
    quality_png = _save(fig, out_dir / "scaling_quality.png")
    return [time_png, quality_png]


def plot_anytime(csv_path: Path, out_dir: Path) -> Path:
    """Makespan and lower bound against the time budget, from `anytime.csv`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted((r for r in read_csv(csv_path) if r.get("status") == "ok"), key=lambda r: float(r["budget_s"]))
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    if rows:
        x = [float(r["budget_s"]) for r in rows]
        ax.plot(x, [float(r["makespan_tick"]) for r in rows], marker="o", label="planner: makespan")
        ax.plot(x, [float(r["lower_bound_tick"]) for r in rows], marker="s", label="planner: lower bound")
        heft = _num(rows[0].get("heft_makespan_tick", ""))
        if heft is not None:
            ax.axhline(heft, color="grey", linestyle="--", label="HEFT makespan")
        final = float(rows[-1]["makespan_tick"])
        ax.axhline(1.1 * final, color="grey", linestyle=":", linewidth=0.8, label="final makespan + 10 %")
        ax.axvline(0.1 * float(rows[-1]["full_budget_s"]), color="grey", linestyle=":", linewidth=0.8,
                   label="a tenth of the budget")
        ax.set_title(f"Anytime: {rows[0]['graph']} DAG of {rows[0]['ops']} ops on {rows[0].get('devices', '?')} "
                     f"devices")
    ax.set_xlabel("time budget (s)")
    ax.set_ylabel("ticks")
    ax.legend(fontsize=8)
    return _save(fig, out_dir / "anytime.png")


def _save(fig, path: Path) -> Path:
    """Lay out, write (120 dpi) and close one of the study's figures; returns `path`."""
    import matplotlib.pyplot as plt  # the caller has already chosen the Agg backend

    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(quick: bool, out_dir: Path, settings: Settings | None = None) -> list[Path]:
    """Run the study (module docstring): CSV files first, then the PNG pictures read from them.  Returns the
    files written.  `settings` overrides the mode's sizes and budgets (the smoke test uses a tiny one)."""
    settings = settings or (QUICK if quick else FULL)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="study_scaling_") as tmp:
        folder = Path(tmp)
        print(f"scaling ({'quick' if quick else 'full'}): sizes {settings.sizes}", flush=True)
        scaling_csv = out_dir / "scaling.csv"
        write_csv(scaling_csv, scaling_rows(settings, folder))
        print(f"anytime: layered DAG of {settings.anytime_ops} ops, budget {settings.anytime_budget_s}s", flush=True)
        anytime_csv = out_dir / "anytime.csv"
        write_csv(anytime_csv, anytime_rows(settings, folder))
    pictures = plot_scaling(scaling_csv, out_dir) + [plot_anytime(anytime_csv, out_dir)]
    return [scaling_csv, anytime_csv, *pictures]


def _cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="study_scaling", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1k-100k ops, short budgets")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "experiments" / "scaling")
    parser.add_argument("--one", default=None, help="measure one case (JSON) in this process; prints its row")
    parser.add_argument("--folder", type=Path, default=None, help="with --one: where models and plans go")
    args = parser.parse_args(argv)
    if args.one is not None:
        case = json.loads(args.one)
        folder = args.folder or Path(tempfile.mkdtemp(prefix="study_scaling_"))
        row = measure_one(case["graph"], int(case["ops"]), case["method"], float(case["budget_s"]), folder)
        print(json.dumps(row), flush=True)
        return 0
    for path in main(args.quick, args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_cli())
