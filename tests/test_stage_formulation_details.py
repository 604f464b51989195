"""The stage formulation's traffic sums pinned by hand: an edge that carries nothing is skipped, never the end of
the sum, on a chain whose costly hop sits after a free one in the edge order."""

from __future__ import annotations

from instances import make_instance

from formulations.stages import solve_stages
from planner.heuristics.stage_dp import StagePlacement


def test_a_free_hop_before_a_costly_one_leaves_the_costly_one_in_the_period():
    # chain t0 -> t1 -> t2 -> t3 of 1 tick each on 2 devices, stages fixed on devices 0 and 1; the hops cost 0, 10
    # and 0 ticks in edge order.  Cuts: after t0: max(1 + 0, 3) = 3; after t1: max(2 + 10, 2) = 12; after t2:
    # max(3 + 0, 1) = 3.  A sum that stopped at the free first hop would see every cut free and take the middle
    # one (2), whose real bottleneck is 12.
    inst = make_instance("hops", [[1, 1]] * 4, [(0, 1, 0), (1, 2, 10), (2, 3, 0)])
    plan = solve_stages(inst, 2, placement=StagePlacement.FIXED, warm_start=False, comm_tiebreak=False,
                        time_limit_s=10, threads=1)
    assert plan.bottleneck_tick == 3
    assert plan.stage_tasks in ((("t0",), ("t1", "t2", "t3")), (("t0", "t1", "t2"), ("t3",)))
