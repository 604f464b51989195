"""The search never fails on a valid input: the whole planner on many random layered graphs (sizes, widths,
communication ratios, device counts, memory limits), each plan checked by the validator; and the parts it is
built from (clusters that respect a plan, one LNS move) on more graphs without a time budget."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import planner.decompose as decompose_module
import planner.lns as lns_module
import planner.search.cluster_rounds as cluster_rounds_module
from experiments.layered import layered_dag
from formulations.model_api import SolveParams
from planner.coarsen.respect import respecting_clusters
from planner.errors import InfeasibleError
from planner.heuristics.list_schedule import heft
from planner.heuristics.memory_list import memory_list
from planner.lns import _window, lns, neighbourhood_move
from planner.schedule.plan_io import load_plan, save_plan
from planner.schedule.simulate import plan_orders
from planner.schedule.validate import validate_plan
from planner.solve import SolveOptions, plan_instance

CASES = [  # (tasks, devices, comm ratio, width, heterogeneous, memory-limited)
    (6, 2, 1.0, 2, False, False),
    (12, 1, 0.5, 3, False, False),
    (20, 3, 2.0, None, True, False),
    (25, 4, 1.0, 8, False, True),
    (30, 2, 0.0, 5, False, False),
    (35, 4, 2.0, 2, True, False),
    (40, 3, 1.0, None, False, True),
    (45, 8, 0.5, 10, True, False),
]


def _instance(n: int, d: int, comm: float, width: int | None, hetero: bool, memory: bool, seed: int):
    inst = layered_dag(n, d, seed=seed, comm_ratio=comm, width=width, heterogeneous=hetero)
    if memory:  # parameters that bind: room for about a third of them per device, at least the largest task
        rng = np.random.default_rng(seed)
        params = rng.integers(1, 100, size=n).astype(np.int64)
        cap = max(int(params.max()) + n, int(params.sum()) // max(1, d - 1) + n)
        inst = dataclasses.replace(inst, param_bytes=params, capacity_bytes=np.full(d, cap, dtype=np.int64))
    return inst


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}x{c[1]}-c{c[2]}" for c in CASES])
def test_planner_returns_a_valid_plan_no_worse_than_heft(case) -> None:
    inst = _instance(*case, seed=CASES.index(case))
    try:
        reference = heft(inst)
    except InfeasibleError:
        try:  # phase 0 falls back to the memory-aware list schedule when HEFT hits a memory dead end
            reference = memory_list(inst)
        except InfeasibleError:
            with pytest.raises(InfeasibleError):
                plan_instance(inst, SolveOptions(time_limit_s=1.0, threads=1))
            return
    out = plan_instance(inst, SolveOptions(time_limit_s=1.5, threads=1))
    validate_plan(inst, out.op_plan)
    validate_plan(out.coarse, out.plan)
    assert out.op_plan.makespan_tick <= reference.makespan_tick
    assert inst.trivial_lower_bound_tick() <= out.lower_bound_tick <= out.op_plan.makespan_tick
    assert out.phases and out.found_by == out.phases[-1].source
    steps = [p.makespan_tick for p in out.phases]
    assert steps == sorted(steps, reverse=True) and steps[-1] == out.op_plan.makespan_tick


@pytest.mark.parametrize("seed", range(12))
def test_respecting_clusters_express_the_plan_without_lengthening_it(seed: int) -> None:
    rng = np.random.default_rng(seed)
    inst = layered_dag(int(rng.integers(5, 80)), int(rng.integers(1, 6)), seed=seed,
                       comm_ratio=float(rng.choice([0.0, 0.5, 1.0, 2.0])), heterogeneous=bool(seed % 2))
    plan = heft(inst)
    clusters, coarse, projected = respecting_clusters(inst, plan)
    assert sorted(v for c in clusters for v in c) == list(range(inst.num_tasks))
    validate_plan(coarse, projected)
    assert projected.makespan_tick <= plan.makespan_tick
    by = plan.by_task()
    orders = plan_orders(inst, plan)
    for members in clusters:  # on one device in the plan, consecutive there
        devices = {by[inst.task_names[v]].device for v in members}
        assert len(devices) == 1
        row = orders[devices.pop()]
        where = sorted(row.index(v) for v in members)
        assert where == list(range(where[0], where[0] + len(members)))


@pytest.mark.parametrize("seed", range(6))
def test_an_lns_move_is_a_valid_plan_or_rejected(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    inst = layered_dag(int(rng.integers(10, 60)), int(rng.integers(2, 5)), seed=seed, comm_ratio=1.5)
    plan = heft(inst)
    window = _window(inst, plan, int(rng.integers(0, plan.makespan_tick)), 10)
    new, _optimal = neighbourhood_move(inst, plan, window, time_limit_s=1.0, threads=1)
    if new is not None:
        validate_plan(inst, new)


def test_lns_never_returns_a_longer_plan() -> None:
    inst = layered_dag(60, 4, seed=7, comm_ratio=2.0)
    plan = heft(inst)
    out = lns(inst, plan, SolveParams(time_limit_s=2.0, threads=1), bound_tick=inst.trivial_lower_bound_tick())
    validate_plan(inst, out.plan)
    assert out.plan.makespan_tick <= plan.makespan_tick
    assert out.moves >= 1


def test_a_phase_that_fails_inside_is_logged_and_the_plan_still_comes_back(monkeypatch, caplog) -> None:
    failed: list[str] = []

    def broken(*_args, **_kwargs):
        failed.append("phase")
        raise RuntimeError("simulated bug")

    for module, phase in ((decompose_module, "decompose_and_solve"), (cluster_rounds_module, "respecting_clusters"),
                          (lns_module, "lns")):  # each phase of the search fails inside
        monkeypatch.setattr(module, phase, broken)
    inst = layered_dag(30, 3, seed=3, comm_ratio=2.0)
    messages: list[str] = []
    out = plan_instance(inst, SolveOptions(time_limit_s=2.0, threads=1), progress=messages.append)
    validate_plan(inst, out.op_plan)
    assert out.op_plan.makespan_tick <= heft(inst).makespan_tick
    # every phase that ran and failed says so; which of the three run within 2 s depends on timing (a later phase
    # starts only when its estimated cost is left): run alone this test saw only the decomposition fail, within
    # the suite all three, so it counts what ran rather than assuming three
    assert failed and sum("internal error" in m for m in messages) == len(failed)
    assert "Traceback" in caplog.text or any(r.exc_info for r in caplog.records)


def test_the_plan_file_says_which_part_found_the_plan(tmp_path) -> None:
    inst = layered_dag(40, 4, seed=11, comm_ratio=2.0)
    out = plan_instance(inst, SolveOptions(time_limit_s=1.5, threads=1))
    saved = out.saved_plan()
    assert saved.search and saved.search[-1] == (out.found_by, out.op_plan.makespan_tick)
    save_plan(saved, tmp_path / "p.json")
    assert load_plan(tmp_path / "p.json").search == saved.search
