"""The placement search's phases one at a time on small instances, with exact rules: when each applies, its startup
estimate at the edges, which direction of time the iterated phase takes, phase 0's list schedules and their timing,
the cluster rounds' limits and stopping, the linear rounds' shares, warm start and stopping."""

from __future__ import annotations

import dataclasses
import types

from checks import check_plan_valid

import planner.search.list_scheduling as list_scheduling
from experiments.layered import layered_dag
from planner.coarsen import contract
from planner.coarsen.refine import project_plan
from planner.cost.instance import SchedulingInstance
from planner.errors import InfeasibleError
from planner.heuristics.baselines import round_robin, single_device
from planner.heuristics.comm_bound import comm_lower_bound_tick
from planner.heuristics.list_schedule import Rank, heft
from planner.heuristics.peft import peft
from planner.schedule.plan import Plan
from planner.search import assignment, cluster_rounds, comm_bound, iterated, linear_rounds
from planner.search.budget import Budget
from planner.search.options import SolveOptions
from planner.search.phases import Incumbent
from planner.search.policy import SearchPolicy
from planner.search.state import ClusterSolution, SearchState, valid_on


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, now_s: float = 1000.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def _state(fine: SchedulingInstance, plan: Plan | None = None, *, budget: Budget | None = None, list_s: float = 0.01,
           policy: SearchPolicy | None = None, said: list[str] | None = None, **options) -> SearchState:
    plan = plan if plan is not None else heft(fine)
    return SearchState(fine, Incumbent(plan, plan.makespan_tick, 0, valid_on(fine)),
                       SolveOptions(**{"threads": 1, **options}), policy or SearchPolicy(),
                       budget or Budget.starting_now(30.0), list_s, (said if said is not None else []).append, str)


def _one_task() -> SchedulingInstance:
    return SchedulingInstance.uniform("one", [3], [], 2)


def _two_tasks() -> SchedulingInstance:
    return SchedulingInstance.uniform("two", [3, 1], [(0, 1, 1)], 2)


def _fork() -> SchedulingInstance:
    return SchedulingInstance.uniform("fork", [2, 3, 3, 2], [(0, 1, 4), (0, 2, 4), (1, 3, 4), (2, 3, 4)], 2)


# ------------------------------------------------------------------------------------------- assignment search
def test_the_assignment_search_applies_to_two_tasks_and_a_share() -> None:
    assert not assignment.applies(_state(_one_task()))
    assert assignment.applies(_state(_two_tasks()))
    off = dataclasses.replace(SearchPolicy(), assignment_share=0.0)
    assert not assignment.applies(_state(_fork(), policy=off))


def test_a_short_assignment_share_needs_no_startup() -> None:
    clock = Clock()
    policy = dataclasses.replace(SearchPolicy(), assignment_share=0.5, assignment_start_cost=3)
    short = _state(_fork(), budget=Budget.starting_now(1.0, clock), list_s=0.5, policy=policy)
    assert assignment.startup_s(short) == 0.0  # half of 1 s is at the 0.5 s edge
    longer = _state(_fork(), budget=Budget.starting_now(2.0, clock), list_s=0.5, policy=policy)
    assert assignment.startup_s(longer) == 1.5


def test_the_assignment_phase_offers_its_plan() -> None:
    fine = layered_dag(12, 2, seed=1, comm_ratio=1.0)
    cand = assignment.run(_state(fine), Budget.starting_now(0.3))
    assert cand is not None and cand.source == "assignment search"
    check_plan_valid(fine, cand.plan)
    assert cand.makespan_tick == cand.plan.makespan_tick <= heft(fine).makespan_tick
    assert cand.summary.startswith("assignment search: ")


# ------------------------------------------------------------------------------------------------ comm bound
def test_the_comm_bound_step_raises_the_bound_and_says_it() -> None:
    fine = SchedulingInstance.uniform("join", [5, 5, 1], [(0, 2, 10), (1, 2, 10)], 2)
    said: list[str] = []
    state = _state(fine, said=said)
    assert comm_bound.run(state, Budget.starting_now(1.0)) is None
    assert state.bound_tick == comm_lower_bound_tick(fine) == 11
    assert said == ["communication-aware bound 11"]
    assert comm_bound.startup_s(_state(fine, list_s=0.5)) == 0.5 * SearchPolicy().comm_bound_cost


# ------------------------------------------------------------------------------------------------- iterated
def test_the_iterated_phase_applies_from_two_tasks() -> None:
    assert not iterated.applies(_state(_one_task()))
    assert iterated.applies(_state(_two_tasks()))


def _iterated(race_share: float, list_s: float) -> tuple[str, str]:
    clock = Clock()
    policy = dataclasses.replace(SearchPolicy(), mirror_race_share=race_share, iterated_start_cost=1)
    fine = layered_dag(12, 2, seed=3, comm_ratio=2.0)
    cand = iterated.run(_state(fine, list_s=list_s, policy=policy), Budget.starting_now(0.5, clock))
    assert cand is not None
    check_plan_valid(fine, cand.plan)
    if cand.source == "iterated list scheduling (mirrored)":
        assert cand.before is not None and cand.before.source == "iterated list scheduling"
        assert cand.summary.endswith("(mirrored)")
    else:
        assert cand.source == "iterated list scheduling" and cand.before is None
        assert not cand.summary.endswith("(mirrored)")
    return cand.source, cand.summary


def test_the_iterated_phase_races_when_its_race_share_holds_the_startup() -> None:
    _source, summary = _iterated(0.5, 0.25)  # a race share of 0.25 s holds exactly the 0.25 s startup
    assert "in both directions of time" in summary


def test_the_iterated_phase_searches_forward_when_the_race_share_is_short_or_off() -> None:
    for race_share, list_s in ((0.5, 0.3), (0.0, 0.0)):
        source, summary = _iterated(race_share, list_s)
        assert source == "iterated list scheduling" and "directions of time" not in summary


# ------------------------------------------------------------------------------------- phase 0: list schedules
def _scripted_clock(monkeypatch, steps: list[float]) -> None:
    """time.monotonic of `list_scheduling` returns the running sums of `steps` (then stays)."""
    values = iter(steps)
    now = [0.0]

    def monotonic() -> float:
        now[0] += next(values, 0.0)
        return now[0]

    monkeypatch.setattr(list_scheduling, "time", types.SimpleNamespace(monotonic=monotonic))


def test_phase_zero_takes_the_shortest_and_its_fastest_run_is_the_unit(monkeypatch) -> None:
    fine = layered_dag(30, 3, seed=24, comm_ratio=2.0)
    # heft takes 3 s, heft-sum 1 s (after a check), peft 2 s (after a check)
    _scripted_clock(monkeypatch, [0.0, 3.0, 0.0, 0.0, 1.0, 0.0, 0.0, 2.0])
    said: list[str] = []
    computed: dict[str, int] = {}
    plan, unit_s = list_scheduling.phase_zero(fine, computed, Budget(1e9), said.append, str)
    best = min(heft(fine).makespan_tick, heft(fine, rank=Rank.SUM).makespan_tick, peft(fine).makespan_tick)
    assert plan.makespan_tick == best and unit_s == 1.0
    assert computed == {"heft": heft(fine).makespan_tick}
    assert said == [f"list scheduling: {plan.method} {best} (the incumbent); trivial bound "
                    f"{fine.trivial_lower_bound_tick()} (critical path {fine.critical_path_tick()}, work / speed "
                    f"{fine.work_bound_tick()})"]


def test_a_list_scheduler_runs_while_the_time_left_holds_the_last_run(monkeypatch) -> None:
    fine = layered_dag(30, 3, seed=24, comm_ratio=2.0)
    # heft from 0 to 2; heft-sum checked at 2: 2 + 2 = 4 is the deadline, so it runs (to 3); peft checked at 3.5:
    # 3.5 + 1 > 4, skipped
    _scripted_clock(monkeypatch, [0.0, 2.0, 0.0, 0.0, 1.0, 0.5])
    said: list[str] = []
    seconds: list[float] = []
    plan = list_scheduling.best_list_schedule(fine, deadline=4.0, progress=said.append, seconds=seconds)
    assert seconds == [2.0, 1.0]
    assert plan.makespan_tick == min(heft(fine).makespan_tick, heft(fine, rank=Rank.SUM).makespan_tick)
    assert said == ["list scheduling: peft skipped for time (each takes about 1.0s)"]


def test_without_a_deadline_every_list_scheduler_runs_and_nothing_is_said(monkeypatch) -> None:
    fine = layered_dag(30, 3, seed=24, comm_ratio=2.0)
    _scripted_clock(monkeypatch, [0.0, 5.0, 0.0, 5.0, 0.0, 5.0])
    said: list[str] = []
    seconds: list[float] = []
    list_scheduling.best_list_schedule(fine, progress=said.append, seconds=seconds)
    assert seconds == [5.0, 5.0, 5.0] and said == []


# ----------------------------------------------------------------------------------------------- cluster rounds
def test_cluster_rounds_refuse_too_many_or_nearly_single_clusters() -> None:
    said: list[str] = []
    fine = SchedulingInstance.uniform("ten", [1] * 10, [], 2)
    state = _state(fine, said=said)
    factor = SearchPolicy().cluster_round_factor
    assert not cluster_rounds._too_many(state, SchedulingInstance.uniform("c", [1] * 8, [], 2), 8 // factor)
    assert cluster_rounds._too_many(state, SchedulingInstance.uniform("c", [1] * 9, [], 2), 8 // factor)
    assert said == ["cluster round skipped: the incumbent's runs make 9 clusters, more than 8 (LNS handles it)"]
    nine = SchedulingInstance.uniform("nine", [1] * 9, [], 2)
    state = _state(nine, said=said)
    assert cluster_rounds._too_many(state, SchedulingInstance.uniform("c", [1] * 8, [], 2), 100)
    assert said[-1] == ("cluster round skipped: the incumbent's runs make 8 clusters of 9 ops (nearly single ops; "
                        "the later phases handle it)")
    assert not cluster_rounds._too_many(_state(fine), SchedulingInstance.uniform("c", [1] * 8, [], 2), 100)


def test_cluster_rounds_improve_until_a_round_does_not() -> None:
    fine = layered_dag(10, 2, seed=3, comm_ratio=2.0)
    start = peft(fine)
    said: list[str] = []
    state = _state(fine, start, said=said, target_clusters=8)
    cand = cluster_rounds.run(state, Budget.starting_now(20.0))
    assert cand is not None and cand.source == "cluster round"
    check_plan_valid(fine, cand.plan)
    assert [(r.round, r.makespan_tick) for r in state.rounds] == [(0, 445), (1, 445)]
    assert start.makespan_tick == 457 and cand.makespan_tick == 445
    assert all(0 <= r.seconds < 20 for r in state.rounds)
    assert cand.seconds == sum(r.seconds for r in state.rounds)
    assert said[-1].startswith("cluster round 1: 1 clusters (the incumbent's runs; warm start 445), plan 445")
    assert cluster_rounds.startup_s(_state(fine, list_s=0.5)) == 0.5 * SearchPolicy().cluster_runs_cost


def test_cluster_rounds_need_more_than_a_second() -> None:
    clock = Clock()
    fine = layered_dag(10, 2, seed=3, comm_ratio=2.0)
    state = _state(fine, peft(fine), target_clusters=8)
    assert cluster_rounds.run(state, Budget.starting_now(1.0, clock)) is None and state.rounds == []


# ------------------------------------------------------------------------------------------------ linear rounds
def test_a_linear_round_gets_half_first_then_an_even_split() -> None:
    share = linear_rounds._round_share_s
    assert share(10.0, 0, 4) == 5.0
    assert share(10.0, 0, 1) == 10.0
    assert share(12.0, 1, 4) == 4.0
    assert share(12.0, 3, 4) == 12.0
    assert share(12.0, 5, 4) == 12.0


def test_the_warm_start_is_the_shorter_of_heft_and_the_projected_incumbent() -> None:
    # on one-op clusters: seed 2's projected PEFT plan (522) beats HEFT on the clusters (561); seed 1's does not
    for seed, heft_tick, projected_tick, chosen in ((2, 561, 522, "projected"), (1, 329, 346, "heft")):
        fine = layered_dag(12, 2, seed=seed, comm_ratio=1.0)
        clusters = [[t] for t in range(fine.num_tasks)]
        coarse = contract(fine, clusters)
        on_clusters, projected = heft(coarse), project_plan(peft(fine), coarse, clusters, fine)
        assert (on_clusters.makespan_tick, projected.makespan_tick) == (heft_tick, projected_tick)
        warm = linear_rounds._warm_start(fine, coarse, clusters, peft(fine))
        assert warm is not None
        assert warm.placements == (projected if chosen == "projected" else on_clusters).placements
    worst = linear_rounds._warm_start(fine, coarse, clusters, single_device(fine))
    assert worst is not None and worst.placements == on_clusters.placements


def test_linear_rounds_are_skipped_above_the_op_limit_and_the_cluster_limit() -> None:
    fine = layered_dag(12, 2, seed=1, comm_ratio=1.0)
    said: list[str] = []
    at = dataclasses.replace(SearchPolicy(), linear_max_ops=12)
    below = dataclasses.replace(SearchPolicy(), linear_max_ops=11)
    assert linear_rounds._clustered(_state(fine, policy=at, said=said), 4) is not None
    assert linear_rounds._clustered(_state(fine, policy=below, said=said), 4) is None
    assert said[-1] == ("linear clustering skipped: 12 ops (above 11, merging that keeps the critical path leaves far "
                        "more clusters than the solver takes)")
    # below 6 clusters, merging would lengthen the critical path: a target of 3 leaves 6, twice the target
    clustered = linear_rounds._clustered(_state(fine, policy=at), 3)
    assert clustered is not None and len(clustered[0]) == clustered[1].num_tasks == 6
    twice = dataclasses.replace(SearchPolicy(), cluster_round_factor=2)
    assert linear_rounds._clustered(_state(fine, policy=twice), 3) is not None
    once = dataclasses.replace(SearchPolicy(), cluster_round_factor=1)
    said.clear()
    assert linear_rounds._clustered(_state(fine, policy=once, said=said), 3) is None
    assert said[-1] == "linear cluster rounds skipped: 6 clusters, above the 3 the cpsat model is solved on in a round"
    assert said[0].startswith("linear clustering: 12 ops into 6 clusters (")


def test_linear_rounds_improve_a_poor_incumbent_and_stop_when_a_round_does_not() -> None:
    fine = layered_dag(12, 2, seed=1, comm_ratio=1.0)
    start = round_robin(fine)
    said: list[str] = []
    state = _state(fine, start, said=said, target_clusters=8)
    cand = linear_rounds.run(state, Budget.starting_now(20.0))
    assert cand is not None and cand.source == "linear cluster round"
    check_plan_valid(fine, cand.plan)
    assert (start.makespan_tick, cand.makespan_tick) == (437, 346)
    # the second round, on the refined clusters, is no shorter than the first: the phase ends there, and the tie
    # keeps the first round's solution
    assert [(r.round, r.clusters, r.makespan_tick) for r in state.rounds] == [(0, 8, 346), (1, 9, 346)]
    assert isinstance(cand.detail, ClusterSolution)
    assert cand.detail.coarse.num_tasks == len(cand.detail.clusters) == 8
    assert all(0 <= r.seconds < 20 for r in state.rounds)
    assert [line.split(":")[0] for line in said] == ["linear clustering"] + [
        f"linear cluster round {r.round}" for r in state.rounds]


def test_linear_rounds_need_more_than_a_second() -> None:
    fine = layered_dag(12, 2, seed=1, comm_ratio=1.0)
    state = _state(fine, target_clusters=8)
    assert linear_rounds.run(state, Budget.starting_now(1.0, Clock())) is None and state.rounds == []


def test_linear_rounds_refine_once_after_a_first_round_no_shorter_than_the_incumbent() -> None:
    # HEFT's 329 beats both rounds' 346: the first round refines anyway, the second ends the phase; nothing offered
    fine = layered_dag(12, 2, seed=1, comm_ratio=1.0)
    state = _state(fine, heft(fine), target_clusters=8)
    assert state.plan.makespan_tick == 329
    assert linear_rounds.run(state, Budget.starting_now(20.0)) is None
    assert [(r.round, r.clusters, r.makespan_tick) for r in state.rounds] == [(0, 8, 346), (1, 9, 346)]


def test_heft_runs_even_when_the_time_is_gone() -> None:
    # a deadline already passed and a caller's earlier seconds: HEFT still runs (the others are skipped)
    fine = layered_dag(30, 3, seed=24, comm_ratio=2.0)
    computed: dict[str, int] = {}
    seconds = [100.0]
    plan = list_scheduling.best_list_schedule(fine, computed, deadline=0.0, seconds=seconds)
    assert computed == {"heft": heft(fine).makespan_tick} == {"heft": plan.makespan_tick}
    assert len(seconds) == 2


def test_a_cluster_round_no_shorter_than_the_incumbent_ends_the_phase() -> None:
    fine = layered_dag(10, 2, seed=3, comm_ratio=2.0)
    first = cluster_rounds.run(_state(fine, peft(fine), target_clusters=8), Budget.starting_now(20.0))
    assert first is not None and first.makespan_tick == 445
    state = _state(fine, first.plan, target_clusters=8)
    assert cluster_rounds.run(state, Budget.starting_now(20.0)) is None
    assert [(r.round, r.makespan_tick) for r in state.rounds] == [(0, 445)]


def test_cluster_rounds_refused_once_are_not_tried_again() -> None:
    fine = layered_dag(24, 2, seed=0, comm_ratio=1.0)
    said: list[str] = []
    state = _state(fine, round_robin(fine), said=said, target_clusters=8)
    assert cluster_rounds.run(state, Budget.starting_now(20.0)) is None and state.rounds == []
    assert said == ["cluster round skipped: the incumbent's runs make 22 clusters of 24 ops (nearly single ops; the "
                    "later phases handle it)"]


def test_a_cluster_round_gets_its_share_of_the_time_left_and_reports_its_solver(monkeypatch) -> None:
    asked: list[float] = []
    real = cluster_rounds.solve_placement

    def spy(*args, **kwargs):
        asked.append(kwargs["time_limit_s"])
        return real(*args, **kwargs)

    monkeypatch.setattr(cluster_rounds, "solve_placement", spy)
    fine = layered_dag(10, 2, seed=3, comm_ratio=2.0)
    for left_s in (10.0, 1.5):
        said: list[str] = []
        cluster_rounds.run(_state(fine, peft(fine), said=said, target_clusters=8), Budget.starting_now(left_s, Clock()))
        assert any(line.startswith("cluster round 0: ") and "s incumbent " in line for line in said)
    # 0.3 of 10 s for both rounds (the clock stands still), then the least solver time for 0.3 of 1.5 s
    assert asked == [3.0, 3.0, 0.5, 0.5]


def test_linear_rounds_end_when_no_critical_cluster_can_be_split() -> None:
    # a target of every op: one-op clusters, nothing to refine after the first round
    fine = layered_dag(12, 2, seed=1, comm_ratio=1.0)
    state = _state(fine, round_robin(fine), target_clusters=12)
    cand = linear_rounds.run(state, Budget.starting_now(20.0))
    assert [(r.round, r.clusters) for r in state.rounds] == [(0, 12)]
    assert cand is not None and cand.makespan_tick == state.rounds[0].makespan_tick < 437


def test_a_linear_round_without_a_plan_ends_the_phase_and_says_why(monkeypatch) -> None:
    def no_plan(*_args, **_kwargs):
        raise InfeasibleError("forced: nothing fits on these clusters")

    monkeypatch.setattr(linear_rounds, "solve_placement", no_plan)
    fine = layered_dag(12, 2, seed=1, comm_ratio=1.0)
    said: list[str] = []
    state = _state(fine, round_robin(fine), said=said, target_clusters=8)
    assert linear_rounds.run(state, Budget.starting_now(20.0)) is None and state.rounds == []
    assert said[-1] == ("linear cluster round 0: no plan on these clusters (forced: nothing fits on these clusters); "
                        "phase skipped")


def test_on_a_tie_the_warm_start_stays_heft() -> None:
    # HEFT's plan projected onto one-op clusters is HEFT on them again: the same makespan, HEFT's own plan kept
    fine = layered_dag(12, 2, seed=1, comm_ratio=1.0)
    clusters = [[t] for t in range(fine.num_tasks)]
    coarse = contract(fine, clusters)
    warm = linear_rounds._warm_start(fine, coarse, clusters, heft(fine))
    assert warm is not None and warm.makespan_tick == heft(coarse).makespan_tick and warm.method == "heft"


def test_a_linear_round_as_long_as_the_incumbent_is_not_offered() -> None:
    # the rounds reach 346, which the incumbent already has
    fine = layered_dag(12, 2, seed=1, comm_ratio=1.0)
    first = linear_rounds.run(_state(fine, round_robin(fine), target_clusters=8), Budget.starting_now(20.0))
    assert first is not None and first.makespan_tick == 346
    state = _state(fine, first.plan, target_clusters=8)
    found = linear_rounds.linear_rounds(state, Budget.starting_now(20.0))
    assert found[0] is None and [r.makespan_tick for r in found[1]] == [346, 346]


def test_a_linear_round_gets_its_share_of_the_time_left(monkeypatch) -> None:
    asked: list[float] = []
    real = linear_rounds.solve_placement

    def spy(*args, **kwargs):
        asked.append(kwargs["time_limit_s"])
        return real(*args, **kwargs)

    monkeypatch.setattr(linear_rounds, "solve_placement", spy)
    fine = layered_dag(12, 2, seed=1, comm_ratio=1.0)
    linear_rounds.run(_state(fine, round_robin(fine), target_clusters=8, max_rounds=4),
                      Budget.starting_now(12.0, Clock()))
    # the clock stands still: half of 12 s first, then 12 s split over the three rounds left
    assert asked == [6.0, 4.0]


def test_a_later_linear_round_without_a_gain_ends_the_phase() -> None:
    # round 0 (528) beats round robin, round 1 on the refined clusters only ties it: no third round
    fine = layered_dag(12, 2, seed=2, comm_ratio=1.0)
    state = _state(fine, round_robin(fine), target_clusters=8)
    cand = linear_rounds.run(state, Budget.starting_now(20.0))
    assert cand is not None and cand.makespan_tick == 528
    assert [(r.round, r.clusters, r.makespan_tick) for r in state.rounds] == [(0, 9, 528), (1, 10, 528)]
