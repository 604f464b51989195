"""`plan-compare`'s memory-bound note (planner/compare/memory_bound_note.py): the half-bubble makespan it
asks about, each device's answer, and the row's bound, gap and status raised when the relaxation proves more than
the solver did, and the other placement's bound beside it."""

from __future__ import annotations

import dataclasses

from formulations.pipeline import solve_pipeline
from planner.compare.memory_bound_note import half_bubble_tick, note_memory_bound
from planner.compare.pipelines import CompareRow, _note_other_placements, scales_of, simulate_baseline
from planner.compare.table_text import memory_bound_text
from planner.pipeline.metrics import figures
from planner.pipeline.registry import Scales, UnitCosts
from planner.pipeline.unroll import StageCost, TrainingPipeline
from planner.schedule.plan import PlanStatus


def test_the_note_says_which_device_rules_out_half_the_bubble() -> None:
    # two stages, F = B = W = 1, 4 micro-batches, a cap of one activation on device 0: 20 is optimal (5 ticks per
    # round trip); with DualPipe's bubble taken as 20, half of it needs 2 x 20 - work 24 <= 10, a makespan <= 17
    c = StageCost(1, 1, 1, activation_bytes=10)
    pipe = TrainingPipeline((c, c), 4, 2, (0, 1), ((0, 1),))
    solved = solve_pipeline(pipe, 10, fifo=False, time_limit_s=30)
    fig = figures(pipe, solved.timeline)
    assert fig.makespan_tick == 20 and fig.bubble_tick == 16
    dualpipe = dataclasses.replace(fig, bubble_tick=20)
    assert half_bubble_tick(fig, dualpipe, 2) == 17
    # the solver's bound as if it had stopped at the device bound (13)
    row = CompareRow("opplan", pipe, None, solved.timeline, fig,
                     notes={"status": PlanStatus.FEASIBLE, "bound_tick": 13, "bound_units": 13, "gap": 0.35})
    note_memory_bound(row, dualpipe, 10, Scales(1, 1), time_s=60)
    note = row.notes["memory_bound"]
    assert isinstance(note, dict)
    # device 1 goes first (its device-bound term is larger) and fits by 17; device 0, holding one activation, cannot
    assert note["half_bubble_answers"] == "d1 feasible, d0 infeasible"
    assert note["half_bubble_unreachable"] is True and note["bound_tick"] == 20 and note["device"] == 0
    assert row.notes["bound_tick"] == 20 and row.notes["gap"] == 0 and row.notes["status"] is PlanStatus.OPTIMAL
    text = memory_bound_text(note, "ticks")
    assert "no schedule of this pipeline under the cap reaches it (d1 feasible, d0 infeasible)" in text
    assert note["half_bubble_reached"] is False


def test_the_devices_at_the_cap_are_asked_first() -> None:
    # the same row, its schedule holding device 0 at the cap (compare notes it before the bound): device 0 is asked
    # first and settles the question alone
    c = StageCost(1, 1, 1, activation_bytes=10)
    pipe = TrainingPipeline((c, c), 4, 2, (0, 1), ((0, 1),))
    solved = solve_pipeline(pipe, 10, fifo=False, time_limit_s=30)
    fig = figures(pipe, solved.timeline)
    dualpipe = dataclasses.replace(fig, bubble_tick=20)
    row = CompareRow("opplan", pipe, None, solved.timeline, fig,
                     notes={"status": PlanStatus.FEASIBLE, "bound_tick": 13, "bound_units": 13, "gap": 0.35,
                            "devices_at_cap": (0,)})
    note_memory_bound(row, dualpipe, 10, Scales(1, 1), time_s=60)
    note = row.notes["memory_bound"]
    assert isinstance(note, dict)
    assert note["half_bubble_answers"] == "d0 infeasible" and note["bound_tick"] == 20


def test_a_row_that_reaches_half_the_bubble_says_so() -> None:
    # the same pipeline with a cap that binds nothing: the device bound 13 is optimal, below the half-bubble
    # makespan 17 (DualPipe's bubble taken as 20 again, the same work 24), so nothing is probed at it
    c = StageCost(1, 1, 1, activation_bytes=10)
    pipe = TrainingPipeline((c, c), 4, 2, (0, 1), ((0, 1),))
    solved = solve_pipeline(pipe, 80, fifo=False, time_limit_s=30)
    fig = figures(pipe, solved.timeline)
    assert fig.makespan_tick == 13
    dualpipe = dataclasses.replace(fig, bubble_tick=20)
    row = CompareRow("opplan", pipe, None, solved.timeline, fig,
                     notes={"status": PlanStatus.FEASIBLE, "bound_tick": 12, "bound_units": 12, "gap": 0.08})
    note_memory_bound(row, dualpipe, 80, Scales(1, 1), time_s=30)
    note = row.notes["memory_bound"]
    assert isinstance(note, dict)
    assert note["half_bubble_reached"] is True and note["half_bubble_unreachable"] is False
    assert note["half_bubble_answers"] == ""
    assert memory_bound_text(note, "ticks").endswith("needs at most 17 ticks: this schedule reaches it")


def test_the_other_placement_gets_its_own_bound_where_half_the_bubble_is_ruled_out() -> None:
    # unit costs, p = 4, m = 8: the V's bound is ZB-V's makespan (25.5, so tight: a schedule meets it), above
    # work / devices (24); DualPipe's placement's is 25, the unit row's proven optimum (the bench's first row)
    costs = UnitCosts(f=1, b=1, w=1)
    scales = scales_of(costs)
    zbv = simulate_baseline("zb-v", 4, 8, costs, scales).figures
    assert zbv is not None
    row = CompareRow("opplan", notes={"placement": "dualpipe", "memory_bound": {"half_bubble_unreachable": True}})
    _note_other_placements(row, 4, 8, costs, scales, None)
    note = row.notes["memory_bound"]
    assert isinstance(note, dict)
    assert note["other_placements_units"] == {"v": zbv.makespan_tick / scales.ticks_per_unit} == {"v": 25.5}
    row = CompareRow("opplan", notes={"placement": "v", "memory_bound": {"half_bubble_unreachable": True}})
    _note_other_placements(row, 4, 8, costs, scales, None)
    assert row.notes["memory_bound"] == {"half_bubble_unreachable": True, "other_placements_units": {"dualpipe": 25.0}}
    text = memory_bound_text({"device": 0, "bound_units": 26, "probes": 1, "seconds": 1, "complete": True,
                               "half_bubble_units": 25.2, "half_bubble_unreachable": True,
                               "other_placements_units": {"v": 25.5}}, "F")
    assert text.endswith("reaches it; on its own cut, the v placement's bound 25.5 F (above it)")
    # not asked where the planned placement's question stayed open
    row = CompareRow("opplan", notes={"placement": "dualpipe", "memory_bound": {"half_bubble_unreachable": False}})
    _note_other_placements(row, 4, 8, costs, scales, None)
    assert "other_placements_units" not in row.notes["memory_bound"]  # type: ignore[operator]


def test_the_line_names_a_pair_that_raised_the_bound() -> None:
    note = {"bound_units": 40.0, "device": 0, "devices": (0, 1), "complete": True, "probes": 5, "seconds": 2.0,
            "half_bubble_units": 39.0, "half_bubble_unreachable": True, "half_bubble_answers": "d0 feasible, "
            "d1 feasible, d0+d1 infeasible"}
    text = memory_bound_text(note, "us")
    assert "(devices 0 and 1 together: their relaxation with the cap raised it;" in text
    assert "no schedule of this pipeline under the cap reaches it (d0 feasible, d1 feasible, d0+d1 infeasible)" in text
    alone = memory_bound_text({**note, "devices": (1,), "device": 1}, "us")
    assert "(device 1's relaxation with the cap raised it;" in alone
