"""`planner.search.budget` and `planner.search.phases`: the time shares and the one loop every phase runs in."""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import InfeasibleError
from planner.search.budget import Budget
from planner.search.phases import Candidate, Incumbent, Phase, run_phases


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_budget_shares_what_is_left_and_charges_startups() -> None:
    clock = FakeClock()
    budget = Budget.starting_now(10.0, clock)
    clock.now_s += 4.0
    assert budget.left_s() == 6.0
    assert budget.share(0.5) == 3.0 and budget.share(0.01, floor_s=0.5) == 0.5
    assert budget.holds(3.0, 0.5) and not budget.holds(3.1, 0.5)
    assert budget.sub(2.0).deadline_s == 106.0
    clock.now_s += 10.0
    assert budget.left_s() == -4.0  # past the deadline: the sign is kept


@dataclass
class State:
    incumbent: Incumbent[str]


def _state(makespan: int = 10, bound: int = 0) -> State:
    return State(Incumbent("start", makespan, bound, valid=lambda plan: plan != "invalid"))


def _offering(plan: str, makespan: int):
    return lambda _state, _budget: Candidate(plan, makespan, source=plan, seconds=1.0, summary=f"{plan} ran")


def test_the_loop_keeps_shorter_valid_plans_and_records_them() -> None:
    state, said = _state(), []
    phases = [Phase("a", _offering("a", 8)), Phase("worse", _offering("worse", 9)),
              Phase("invalid", _offering("invalid", 1)), Phase("b", _offering("b", 7))]
    run_phases(phases, state, Budget.starting_now(60.0), said.append)
    assert state.incumbent.plan == "b" and state.incumbent.makespan_tick == 7
    assert [(s.source, s.makespan_tick) for s in state.incumbent.history] == [("a", 8), ("b", 7)]
    assert said == ["a ran", "worse ran", "invalid ran", "b ran"]


def test_a_failing_phase_leaves_the_incumbent_and_the_search_goes_on() -> None:
    def broken(_state, _budget):
        raise RuntimeError("simulated bug")

    def no_plan(_state, _budget):
        raise InfeasibleError("nothing fits")

    state, said = _state(), []
    run_phases([Phase("broken", broken), Phase("none", no_plan), Phase("a", _offering("a", 5))], state,
               Budget.starting_now(60.0), said.append)
    assert state.incumbent.plan == "a"
    assert said[0].startswith("internal error in broken") and said[1].startswith("none found no plan (nothing fits")


def test_phases_are_skipped_when_closed_inapplicable_or_short_of_time() -> None:
    ran: list[str] = []

    def recording(name):
        def run(_state, _budget):
            ran.append(name)
        return run

    clock = FakeClock()
    said: list[str] = []
    state = _state()
    run_phases([Phase("off", recording("off"), applies=lambda _s: False),
                Phase("slow", recording("slow"), startup_s=lambda _s: 20.0, startup_why="to start"),
                Phase("late", recording("late"), min_left_s=30.0),
                Phase("on", recording("on"))], state, Budget.starting_now(10.0, clock), said.append)
    assert ran == ["on"]
    assert said == ["slow skipped for time (10.0s left, about 20.0s needed to start)"]
    closed = _state(makespan=5, bound=5)
    run_phases([Phase("open", recording("open")), Phase("bound", recording("bound"), while_open=False)], closed,
               Budget.starting_now(10.0, clock), said.append)
    assert ran == ["on", "bound"]


def test_a_phase_gets_its_share_of_the_time_left() -> None:
    clock = FakeClock()
    seen: list[float] = []
    run_phases([Phase("half", lambda _s, budget: seen.append(budget.left_s()), share=0.5),
                Phase("floor", lambda _s, budget: seen.append(budget.left_s()), share=0.0, floor_s=0.5)],
               _state(), Budget.starting_now(10.0, clock), lambda _m: None)
    assert seen == [5.0, 0.5]
