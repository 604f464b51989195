"""Segment neighbourhoods (`planner.segment_lns`): a whole segment re-solved and put back on every identical copy,
the decomposition bound raised by the proof, a failed stitch rejected."""

from __future__ import annotations

import dataclasses

import pytest

from formulations.model_api import SolveParams
from formulations.solve_instance import solve_placement
from planner import segment_lns as segment_lns_module
from planner.decompose import Decomposition, SegmentSource, decompose_and_solve, segment_span
from planner.heuristics.baselines import single_device
from planner.schedule.plan import PlanMethod
from planner.schedule.simulate import simulate
from planner.schedule.validate import validate_plan
from planner.segment_lns import open_segment_groups, segment_lns
from tests.instances import make_instance

FORK = 4  # parallel ops between two bottlenecks
SEGMENTS = 3


def _fork_joins(devices: int = 3):
    """SEGMENTS identical fork-joins in a row: a bottleneck (1 tick), FORK ops of 5 ticks, the next bottleneck; a
    transfer costs 1 tick.  Identical devices, so a segment's schedule fits every copy."""
    durations, edges = [[1] * devices], []
    for _ in range(SEGMENTS):
        b = len(durations) - 1
        fork = list(range(b + 1, b + 1 + FORK))
        durations += [[5] * devices for _ in fork] + [[1] * devices]
        join = len(durations) - 1
        edges += [(b, t, 1) for t in fork] + [(t, join, 1) for t in fork]
    return make_instance("fork-joins", durations, edges)


def _open_decomposition(fine) -> Decomposition:
    """Phase 1's decomposition of `fine` as if its budget had run out before any segment was solved: every
    segment's bound its trivial bound, so every group is open (on this graph the list schedule would otherwise
    solve them)."""
    found = decompose_and_solve(fine, SolveParams(time_limit_s=0.0))
    results = tuple(dataclasses.replace(r, how=SegmentSource.NO_TIME, bound_tick=r.instance.trivial_lower_bound_tick())
                    for r in found.segments)
    shared = SEGMENTS - 1  # inner bottlenecks, counted in two segments (1 tick each)
    return dataclasses.replace(found, segments=results, bound_tick=sum(r.bound_tick for r in results) - shared)


def test_a_segment_move_shortens_every_copy_and_raises_the_bound():
    fine = _fork_joins()
    start = single_device(fine)
    decomposition = _open_decomposition(fine)
    assert open_segment_groups(fine, decomposition, start) == 1  # three copies of one segment
    found = segment_lns(fine, start, decomposition, SolveParams(time_limit_s=20.0))
    validate_plan(fine, found.plan)
    before, after = start.by_task(), found.plan.by_task()
    for r in decomposition.segments:  # the one solve is put back on all three copies
        assert segment_span(after, r.instance) < segment_span(before, r.instance)
    optimum = solve_placement(fine, time_limit_s=20.0)
    assert optimum.status == "optimal"
    assert found.plan.makespan_tick == optimum.makespan_tick  # segments in a row: their optima add up
    # every group proven: the raised bound adds up the segments' optima, which is the graph's
    assert decomposition.bound_tick < found.bound_tick == optimum.makespan_tick
    assert found.improving_moves >= 1 and found.rejected_moves == 0


def test_a_failed_stitch_is_a_rejected_move_and_keeps_the_plan(monkeypatch):
    fine = _fork_joins()
    start = single_device(fine)
    monkeypatch.setattr(segment_lns_module, "stitch_segments", lambda *_args: None)
    found = segment_lns(fine, start, _open_decomposition(fine), SolveParams(time_limit_s=20.0))
    assert found.plan is start
    assert found.rejected_moves >= 1 and found.improving_moves == 0


def test_no_group_opens_on_one_segment_or_without_a_decomposition():
    fine = _fork_joins()
    assert open_segment_groups(fine, None, single_device(fine)) == 0
    one = make_instance("one", [[5, 5]] * 3, [(0, 1, 1), (0, 2, 1)])  # one segment: the other phases' job
    assert open_segment_groups(one, decompose_and_solve(one, SolveParams(time_limit_s=1.0)), single_device(one)) == 0


@pytest.mark.parametrize("devices", [2, 4])
def test_the_search_stops_when_every_group_is_proven(devices):
    fine = _fork_joins(devices)
    found = segment_lns(fine, single_device(fine), _open_decomposition(fine), SolveParams(time_limit_s=60.0))
    assert found.moves == 1  # the tiny segment is proven optimal in its first move, and nothing is left open


def test_the_planner_records_the_segment_phase_and_its_bound(monkeypatch):
    # the state phase 2c exists for, forced: phase 0 left a poor plan and phase 1 ran out of time before any
    # segment's solve (its stitched plan none, every segment open)
    import planner.decompose as decompose_module
    import planner.search.linear_rounds as linear_rounds_module
    import planner.solve as solve_module
    from planner.solve import SolveOptions, plan_instance

    fine = _fork_joins()
    poor = single_device(fine)
    monkeypatch.setattr(solve_module, "phase_zero", lambda *_args: (poor, 0.001))
    monkeypatch.setattr(decompose_module, "decompose_and_solve",
                        lambda *_args, **_kwargs: dataclasses.replace(_open_decomposition(fine), plan=None))
    monkeypatch.setattr(linear_rounds_module, "linear_rounds", lambda *_args: (None, []))
    said: list[str] = []
    out = plan_instance(fine, SolveOptions(time_limit_s=20.0), said.append)
    validate_plan(fine, out.op_plan)
    assert [p.source for p in out.phases][:2] == ["single_device", "segment LNS"]
    optimum = solve_placement(fine, time_limit_s=20.0)
    assert out.op_plan.makespan_tick == out.lower_bound_tick == optimum.makespan_tick  # its proof closes the gap
    assert any(m.startswith("segment LNS: 1 moves (1 improving") for m in said)


def _two_kinds():
    """Two fork-joins on two kinds of device (d0, d1; not interchangeable): b0 -> x1, x2 -> b1 -> y1, y2 -> b2, the
    x fast on d0, the y fast on d1, a transfer 5 ticks.  Alone, segment 0 wants the shared bottleneck b1 on d0 and
    segment 1 wants it on d1, so phase 1's stitch (which can only swap interchangeable devices) fails.  With b1 on
    d0 the best plan takes 14 ticks, on d1 12."""
    durations = [[1, 1], [1, 10], [1, 10], [3, 1], [10, 1], [10, 1], [1, 1]]  # b0, x1, x2, b1, y1, y2, b2
    edges = [(0, 1, 5), (0, 2, 5), (1, 3, 5), (2, 3, 5), (3, 4, 5), (3, 5, 5), (4, 6, 5), (5, 6, 5)]
    return make_instance("two-kinds", durations, edges)


def test_the_sweep_chooses_the_bottlenecks_kinds_where_the_stitch_cannot():
    fine = _two_kinds()
    decomposition = decompose_and_solve(fine, SolveParams(time_limit_s=10.0))
    assert len(decomposition.segments) == 2 and decomposition.plan is None  # the case the sweep is for
    # every op on d0: pinned to that plan's devices, b1 would stay on d0 (14 ticks at best)
    start = simulate(fine, [list(range(fine.num_tasks)), []]).to_plan(method=PlanMethod.HEFT, lower_bound_tick=0)
    found = segment_lns(fine, start, decomposition, SolveParams(time_limit_s=10.0))
    validate_plan(fine, found.plan)
    optimum = solve_placement(fine, time_limit_s=20.0)
    assert optimum.status == "optimal" and optimum.makespan_tick == 12
    assert start.makespan_tick > found.plan.makespan_tick == optimum.makespan_tick
    assert found.bound_tick == decomposition.bound_tick  # pinned models prove nothing for the free segments


def test_a_sweep_out_of_time_is_a_rejected_move():
    fine = _two_kinds()
    decomposition = decompose_and_solve(fine, SolveParams(time_limit_s=10.0))
    start = simulate(fine, [list(range(fine.num_tasks)), []]).to_plan(method=PlanMethod.HEFT, lower_bound_tick=0)
    assert segment_lns_module._sweep(fine, start, decomposition.segments, time_limit_s=0.0, backend="cpsat",
                                     threads=1, seed=0) is None
