"""What the real-size studies share: model files on demand, instances, and one comparison row per method.

Not a study itself (the runner `experiments/run_studies.py` runs `study_*.py` only).

* `model_file(preset, models_dir, **overrides)` — writes a `planner.ir.llm_model` preset (weights as a sparse
  external-data file) into `models_dir` unless it is there already; `"moe"` is the bundled small MoE.
* `load_case(model, profile)` — the op-level instance of a model file on a bundled hardware profile.
* `compare_methods(instance, time_limit_s)` — the planner against the list schedulers at the instance's capacity:
  one `MethodRow` per method.  Memory-aware methods either fit or raise `InfeasibleError` (the row says so, with
  the reason); the methods that ignore memory always give a plan, and the row reports the memory it would use.
* `smallest_feasible(instance, scheduler, lo, hi)` — bisection on one capacity for every device.
* `write_csv` / `read_csv` — the studies write CSV first and draw their pictures from the CSV they wrote.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.cost.instance import SchedulingInstance
from planner.data import BUNDLED_MODEL, PROFILES_DIR
from planner.errors import InfeasibleError
from planner.heuristics import heft, round_robin, single_device
from planner.heuristics.memory_list import memory_list, peak_memory_bytes
from planner.heuristics.memory_pack import packed_plan
from planner.ir.hardware import load_topology
from planner.ir.llm_model import preset, write_llm_model
from planner.prepare import prepare
from planner.schedule.plan import Plan
from planner.solve import SolveOptions, plan_instance

GIB = 2**30
# CP-SAT workers: the planner's default (8, as plan-solve and make bench use).  With 2 workers CP-SAT aborted the
# whole process once in a full run here ("Check failed: heuristics.fixed_search != nullptr", inside OR-Tools).
THREADS = SolveOptions().threads

Scheduler = Callable[[SchedulingInstance], Plan]

MEMORY_AWARE: dict[str, Scheduler] = {
    "heft": heft,  # the library's HEFT: earliest finish among the devices the memory tracker accepts
    "memory_list": memory_list,
    "single_device": single_device,
    "memory_pack": packed_plan,  # parameters packed first, then scheduled: for the least capacity, not for speed
}
IGNORING_MEMORY: dict[str, Scheduler] = {
    "heft_ignoring_memory": lambda inst: heft(inst, respect_memory=False),
    "round_robin_ignoring_memory": lambda inst: round_robin(inst, respect_memory=False),
    "single_device_ignoring_memory": lambda inst: single_device(inst, respect_memory=False),
}


def model_file(name: str, models_dir: Path, **overrides: object) -> Path:
    """The model file of a preset (with `overrides`), written once into `models_dir`; "moe": the bundled MoE."""
    if name == "moe":
        return BUNDLED_MODEL
    config = preset(name, **overrides)
    tag = "-".join(f"{k}{v}" for k, v in sorted(overrides.items()))
    path = models_dir / f"{name}{'-' + tag if tag else ''}.onnx"
    if not path.exists() or not path.with_suffix(".weights").exists():
        write_llm_model(path, config)
    return path


def load_case(model: Path, profile: str) -> SchedulingInstance:
    """Op-level instance (after the passes) of `model` on the bundled profile file `profile`."""
    return prepare(model, load_topology(PROFILES_DIR / profile)).instance


def with_capacity(instance: SchedulingInstance, capacity_bytes: int) -> SchedulingInstance:
    return dataclasses.replace(instance, capacity_bytes=np.full(instance.num_devices, capacity_bytes, dtype=np.int64))


@dataclass(frozen=True)
class MethodRow:
    """One method at one capacity.  `fits`: the plan is within every device's capacity (False with no plan);
    makespan and peak are NaN / 0 when there is no plan; `reason` says why not."""

    method: str
    fits: bool
    makespan_ms: float
    peak_gib: float
    lower_bound_ms: float = float("nan")
    solve_s: float = 0.0
    reason: str = ""
    found_by: str = ""


def _row_of(instance: SchedulingInstance, method: str, plan: Plan, solve_s: float,
            lower_bound_tick: int | None = None) -> MethodRow:
    tick_ms = (instance.tick_s or 1.0) * 1e3
    peaks = peak_memory_bytes(instance, plan)
    fits = all(p <= c for p, c in zip(peaks, instance.capacity_bytes.tolist(), strict=True))
    lb = float("nan") if lower_bound_tick is None else lower_bound_tick * tick_ms
    return MethodRow(method, fits, plan.makespan_tick * tick_ms, max(peaks, default=0) / GIB, lb, solve_s)


def run_scheduler(instance: SchedulingInstance, method: str, scheduler: Scheduler) -> MethodRow:
    try:
        plan = scheduler(instance)
    except InfeasibleError as err:
        return MethodRow(method, False, float("nan"), 0.0, reason=" ".join(str(err).split())[:300])
    return _row_of(instance, method, plan, plan.solve_time_s)


def run_planner(instance: SchedulingInstance, time_limit_s: float) -> MethodRow:
    """`plan_instance` within the budget (its first phase falls back to the memory-aware list schedule when HEFT
    and its variants run into a memory dead end; `found_by` says which phase found the plan)."""
    t0 = time.monotonic()
    try:
        outcome = plan_instance(instance, SolveOptions(time_limit_s=time_limit_s, threads=THREADS))
    except InfeasibleError as err:
        return MethodRow("planned", False, float("nan"), 0.0, reason=" ".join(str(err).split())[:300])
    plan = outcome.op_plan
    return dataclasses.replace(_row_of(instance, "planned", plan, time.monotonic() - t0, plan.lower_bound_tick),
                               found_by=outcome.found_by)


def compare_methods(instance: SchedulingInstance, time_limit_s: float,
                    methods: Iterable[str] | None = None) -> list[MethodRow]:
    """The planner, the memory-aware list schedulers and the ones that ignore memory, at the instance's capacity."""
    wanted = set(methods) if methods is not None else None
    rows = [run_planner(instance, time_limit_s)] if wanted is None or "planned" in wanted else []
    for name, scheduler in {**MEMORY_AWARE, **IGNORING_MEMORY}.items():
        if wanted is None or name in wanted:
            rows.append(run_scheduler(instance, name, scheduler))
    return rows


def smallest_feasible(instance: SchedulingInstance, scheduler: Scheduler, lo_bytes: int, hi_bytes: int,
                      resolution_bytes: int = GIB // 16) -> int | None:
    """The smallest capacity in [lo, hi] (to `resolution`) at which `scheduler` finds a plan within capacity,
    found by bisection (a heuristic's success is not monotone in capacity, so this is *a* feasible capacity, not
    the least); None when it finds none even at `hi`."""
    def fits(cap: int) -> bool:
        inst = with_capacity(instance, cap)
        try:
            plan = scheduler(inst)
        except InfeasibleError:
            return False
        return max(peak_memory_bytes(inst, plan)) <= cap

    if fits(lo_bytes):
        return lo_bytes
    if not fits(hi_bytes):
        return None
    lo, hi = lo_bytes, hi_bytes  # infeasible at lo, feasible at hi
    while hi - lo > resolution_bytes:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi


def write_csv(path: Path, rows: Sequence[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else [])
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
    return path


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def study_cli(doc: str, study: str, main: Callable[..., object]) -> None:
    """The command line every study module shares: `python -m experiments.study_X [--full] [--out DIR]` runs
    `main(quick=..., out_dir=...)` (default output `experiments/results/<study>/`)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / study)
    args = parser.parse_args()
    main(quick=not args.full, out_dir=args.out)
    print(f"wrote {args.out}")


def num(text: str) -> float:
    """A CSV cell as a float ('' and 'nan' -> NaN)."""
    try:
        return float(text)
    except ValueError:
        return float("nan")
