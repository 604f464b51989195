"""The placement search's results at fixed settings, against figures recorded once (`tests/golden/search_golden.json`).

Each case is chosen so that its result does not depend on the clock (CP-SAT runs in its deterministic mode, the
default of `solve_placement`):

* the bundled MoE on the 8-GPU NVLink profile: phase 0, the decomposition and the communication-aware bound prove
  HEFT's plan optimal in well under a second of a 20 s budget, so the search stops on its own;
* the bundled MoE on the default profile (cpu-4) with no time at all: HEFT always runs, every later step is skipped
  for time (its deadline has passed), so the plan is HEFT's;
* two small layered graphs without the decomposition (`decomposition_share=0`), where the iterated list scheduler
  (phase 3a), in its forward direction, reaches the communication-aware bound within about a second of a 120 s
  budget (its forward slice of the race is about 10 s) and so stops on its own;
* every instance of the STG development set (zero communication, identical processors) with a 60 s budget: each
  ends with the plan meeting its bound (by a list schedule or the decomposition's proof) within about a second,
  far inside the decomposition's share even on a loaded machine.

Regenerate (only when a change of the search's results is intended) with
``.venv/bin/python tests/test_search_golden.py --regen``; `golden_figures()` computes what is stored.
"""

from __future__ import annotations

import csv
import hashlib
import json
import sys
from pathlib import Path

import pytest

from planner.cost.instance import SchedulingInstance
from planner.data import BUNDLED_MODEL
from planner.ir.hardware import load_topology
from planner.prepare import prepare
from planner.solve import SolveOptions, plan_instance

GOLDEN = Path(__file__).resolve().parent / "golden" / "search_golden.json"
STG_DEV = Path(__file__).resolve().parents[2] / "shared" / "benchmarks" / "stg-dev"
# (case name, hardware profile bundled with the package, time limit in seconds)
MOE_CASES = (("moe-h100-8-nvlink", "h100-8-nvlink.yaml", 20.0), ("moe-cpu-4-no-time", "cpu-4.yaml", 0.0))
STG_TIME_LIMIT_S = 60.0
# (case name, tasks, devices, seed, comm/compute ratio) of `experiments.layered.layered_dag`
LAYERED_CASES = (("layered-20x2-s1-c1", 20, 2, 1, 1.0), ("layered-30x2-s0-c1", 30, 2, 0, 1.0))
LAYERED_TIME_LIMIT_S = 120.0


def _options(time_limit_s: float, decomposition_share: float = 0.5) -> SolveOptions:
    return SolveOptions(time_limit_s=time_limit_s, threads=1, seed=0, decomposition_share=decomposition_share)


def placement_digest(plan) -> str:
    """A short hash of every op's (name, device, start tick): equal digests mean the same placement and order."""
    rows = sorted((p.task, p.device, p.start_tick) for p in plan.placements)
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


def _figures(instance: SchedulingInstance, options: SolveOptions, *, placement: bool) -> dict:
    out = plan_instance(instance, options)
    plan = out.op_plan
    figures = {"makespan_tick": plan.makespan_tick, "lower_bound_tick": plan.lower_bound_tick,
               "status": str(plan.status), "search": [list(step) for step in plan.search]}
    if placement:
        figures["placement"] = placement_digest(plan)
    return figures


def moe_figures(profile: str, time_limit_s: float) -> dict:
    return _figures(prepare(BUNDLED_MODEL, load_topology(profile)).instance, _options(time_limit_s), placement=True)


def layered_figures(tasks: int, devices: int, seed: int, comm_ratio: float) -> dict:
    from experiments.layered import layered_dag

    return _figures(layered_dag(tasks, devices, seed=seed, comm_ratio=comm_ratio),
                    _options(LAYERED_TIME_LIMIT_S, decomposition_share=0.0), placement=True)


def stg_rows() -> list[tuple[str, int]]:
    with open(STG_DEV / "optima.csv", newline="") as f:
        return [(row["graph"], int(row["procs"])) for row in csv.DictReader(f)]


def stg_figures(graph: str, procs: int) -> dict:
    from planner.cost.model import build_instance
    from planner.ir.taskgraph import load_stg
    from planner.ir.topology import Topology

    return _figures(build_instance(load_stg(STG_DEV / graph), Topology.identical(procs)), _options(STG_TIME_LIMIT_S),
                    placement=False)


def golden_figures() -> dict:
    """What `search_golden.json` stores: per MoE case, layered case and STG instance (``graph/procs``), the op
    plan's makespan, lower bound, status and search history (and, but for STG, its placement digest)."""
    return {"moe": {name: moe_figures(profile, limit) for name, profile, limit in MOE_CASES},
            "layered": {name: layered_figures(*case) for name, *case in LAYERED_CASES},
            "stg": {f"{graph}/{procs}": stg_figures(graph, procs) for graph, procs in stg_rows()}}


def _golden() -> dict:
    return json.loads(GOLDEN.read_text())


@pytest.mark.parametrize(("name", "profile", "time_limit_s"), MOE_CASES)
def test_moe_plan_is_the_recorded_one(name, profile, time_limit_s):
    assert moe_figures(profile, time_limit_s) == _golden()["moe"][name]


@pytest.mark.parametrize(("name", "tasks", "devices", "seed", "comm_ratio"), LAYERED_CASES)
def test_layered_plan_is_the_recorded_one(name, tasks, devices, seed, comm_ratio):
    assert layered_figures(tasks, devices, seed, comm_ratio) == _golden()["layered"][name]


def test_stg_dev_plans_are_the_recorded_ones():
    if not STG_DEV.is_dir():
        pytest.skip(f"shared benchmarks not found at {STG_DEV}")
    expected = _golden()["stg"]
    assert sorted(expected) == sorted(f"{g}/{p}" for g, p in stg_rows())
    got = {f"{graph}/{procs}": stg_figures(graph, procs) for graph, procs in stg_rows()}
    assert {k: v for k, v in got.items() if v != expected[k]} == {}


if __name__ == "__main__":
    if sys.argv[1:] != ["--regen"]:
        sys.exit("usage: python tests/test_search_golden.py --regen  (rewrites tests/golden/search_golden.json)")
    GOLDEN.write_text(json.dumps(golden_figures(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
