"""Both directions of time (`planner.heuristics.justify`, `planner.heuristics.bidirectional`): the mirrored graph is
the graph with its edges reversed and the same delays, a plan read backwards is a plan of the mirror, the
forward-backward pass never lengthens a plan, and the race between the two directions returns valid plans no longer
than its starts, within memory where it binds, the same for a seed; the planner names the mirror when it found the
plan."""

from __future__ import annotations

import numpy as np
import pytest
from checks import check_plan_valid
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from instances import layered_with_heft

from experiments.bench_engine import BEFORE_SETTINGS, MAIN_SETTING, phase_setting
from experiments.layered import layered_dag
from planner.errors import InfeasibleError
from planner.heuristics.assignment_search import Decoder, decoded_of
from planner.heuristics.bidirectional import MIRRORED_METHOD, bidirectional_iterated
from planner.heuristics.iterated import ITERATED_METHOD, iterated_list_schedule
from planner.heuristics.justify import Justifier, mirrored, mirrored_plan
from planner.heuristics.list_schedule import heft, heuristic_plan
from planner.heuristics.memory import memory_never_binds
from planner.search.policy import SearchPolicy


def test_the_mirror_reverses_every_edge_and_keeps_each_delay() -> None:
    inst = layered_dag(60, 4, seed=1, comm_ratio=2.0)
    mirror = mirrored(inst)
    assert mirror.edges == tuple((b, a) for a, b in inst.edges)
    assert mirrored(mirror).edges == inst.edges
    for e in range(len(inst.edges)):
        for d1 in range(inst.num_devices):
            for d2 in range(inst.num_devices):
                # the edge a -> b from d1 to d2 is b -> a in the mirror, the data going from d2 back to d1
                assert inst.comm(e, d1, d2) == mirror.comm(e, d2, d1)
    assert memory_never_binds(mirror)


def test_a_plan_read_backwards_is_a_plan_of_the_mirror() -> None:
    inst = layered_dag(80, 4, seed=2, comm_ratio=1.0)
    plan = heft(inst)
    back = mirrored_plan(mirrored(inst), plan)
    check_plan_valid(mirrored(inst), back)
    assert back.makespan_tick == plan.makespan_tick


@pytest.mark.parametrize("capacity", [None, 24])
def test_justify_never_lengthens_a_plan_and_stays_valid(capacity) -> None:
    kw = {} if capacity is None else {"capacity_bytes": capacity}
    checked = 0
    for seed in range(6):
        inst = layered_dag(50, 3, seed=seed, comm_ratio=1.0 + seed / 2, **kw)
        assert (capacity is None) == memory_never_binds(inst)
        try:
            start = heft(inst)
        except InfeasibleError:  # the cap is below what HEFT fits on this graph: nothing to start from
            continue
        justifier = Justifier(Decoder(inst))
        state = decoded_of(inst, start)
        once = justifier.justify(state)
        if once is None:  # memory: the forward decode found no slot for the right-justified order
            assert capacity is not None
            continue
        assert once.makespan_tick <= state.makespan_tick
        assert justifier.right_justified(state).makespan_tick <= state.makespan_tick
        check_plan_valid(inst, heuristic_plan(inst, once.dev, once.start, once.end, "justified", 0.0))
        checked += 1
    assert checked >= 2


def test_race_takes_the_mirror_where_it_is_better_and_is_deterministic() -> None:
    inst = layered_dag(80, 4, seed=8, comm_ratio=1.0)
    # from the classic starts alone (no moves), the mirror's plan is the shorter one here (1102 against 1154 ticks)
    starts_only = bidirectional_iterated(inst, time_limit_s=1e9, max_moves=0, seed=0)
    check_plan_valid(inst, starts_only.plan)
    assert starts_only.direction == "mirrored" and starts_only.plan.method == MIRRORED_METHOD
    assert starts_only.mirrored_tick == starts_only.plan.makespan_tick < starts_only.forward_tick
    assert starts_only.forward_plan.makespan_tick == starts_only.forward_tick == starts_only.start_makespan_tick
    runs = [bidirectional_iterated(inst, time_limit_s=1e9, max_moves=100, seed=3) for _ in range(2)]
    check_plan_valid(inst, runs[0].plan)
    assert runs[0].plan.placements == runs[1].plan.placements
    assert runs[0].moves == runs[1].moves
    assert runs[0].plan.makespan_tick <= starts_only.plan.makespan_tick
    assert runs[0].plan.makespan_tick <= runs[0].forward_plan.makespan_tick <= runs[0].start_makespan_tick
    assert runs[0].plan.method == (MIRRORED_METHOD if runs[0].direction == "mirrored" else ITERATED_METHOD)


def test_race_under_a_memory_cap_stays_within_it() -> None:
    inst = layered_dag(50, 3, seed=4, comm_ratio=1.0, capacity_bytes=24)
    assert not memory_never_binds(inst)
    start = heft(inst)
    found = bidirectional_iterated(inst, time_limit_s=1e9, max_moves=60, seed=0, incumbent=start)
    check_plan_valid(inst, found.plan)  # the validator checks memory too
    assert found.plan.makespan_tick <= found.start_makespan_tick


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 50), devices=st.integers(1, 5), comm=st.sampled_from([0.5, 1.0, 2.0]),
       seed=st.integers(0, 10_000), moves=st.integers(0, 60), capacity=st.sampled_from([None, 12, 30]))
def test_race_keeps_or_improves_its_starts_and_every_plan_validates(n, devices, comm, seed, moves,
                                                                    capacity) -> None:
    inst, start = layered_with_heft(n, devices, seed=seed, comm=comm, capacity=capacity)
    if start is None:  # the cap is below what HEFT fits on this graph: nothing to start from
        return
    try:
        found = bidirectional_iterated(inst, time_limit_s=1e9, max_moves=moves, seed=seed, incumbent=start)
    except InfeasibleError:  # no classic start decodes within the tracker (HEFT alone did)
        assert capacity is not None
        return
    check_plan_valid(inst, found.plan)
    check_plan_valid(inst, found.forward_plan)
    assert found.plan.makespan_tick <= found.forward_plan.makespan_tick <= found.start_makespan_tick
    justifier = Justifier(Decoder(inst))
    state = decoded_of(inst, found.plan)
    justified = justifier.justify(state)
    assert justified is None or justified.makespan_tick <= state.makespan_tick


def test_plan_instance_names_the_mirror_when_it_found_the_plan(plan_with) -> None:
    # with the later phases out of the way and each iterated search capped at 10 moves (so that how many moves a
    # machine makes in the race's time does not decide it: uncapped, the forward search catches up after ~1000),
    # the race's mirrored plan is the final one on a graph where the mirror wins, and the history shows the
    # forward step before it
    def ten_moves(*args, **kwargs):
        return iterated_list_schedule(*args, **dict(kwargs, max_moves=10))

    out, said = plan_with(layered_dag(80, 4, seed=8, comm_ratio=1.0), off=("assignment_search", "lns"),
                          replace={"iterated_list_schedule": ten_moves})
    assert out.found_by == "iterated list scheduling (mirrored)"
    assert out.phases[-1].makespan_tick == out.op_plan.makespan_tick < out.phases[0].makespan_tick
    assert any(m.startswith("iterated list scheduling race: forward") for m in said)


def test_the_main_setting_turns_the_race_off_and_leaves_the_default() -> None:
    before = SearchPolicy().mirror_race_share
    assert before > 0
    assert phase_setting(BEFORE_SETTINGS["main"]).mirror_race_share == MAIN_SETTING["mirror_race_share"] == 0
    assert SearchPolicy().mirror_race_share == before
    assert np.isclose(SearchPolicy().iterated_share, 0.6)
