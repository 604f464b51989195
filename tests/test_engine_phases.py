"""The wiring of the engine's new parts in `planner.solve` and `planner.decompose`: phase 0 takes PEFT into account,
the op-level bound includes the communication-aware bound, the iterated list scheduler shows up in the search's
history when it improves, and a long segment solve reports its progress."""

from __future__ import annotations

import pytest
from checks import check_plan_valid
from instances import make_instance

import planner.lns as lns_module
import planner.search.iterated as iterated_phase
import planner.search.list_scheduling as list_scheduling
from experiments.layered import layered_dag
from planner.decompose import _segment_progress
from planner.errors import InfeasibleError
from planner.heuristics.comm_bound import comm_lower_bound_tick
from planner.heuristics.list_schedule import Rank, heft
from planner.heuristics.memory_list import memory_list
from planner.heuristics.memory_pack import packed_plan
from planner.heuristics.peft import peft
from planner.ir.units import format_time
from planner.search.policy import SearchPolicy
from planner.solve import SolveOptions, baseline_makespans, plan_instance


def test_phase_zero_takes_peft_when_it_is_shortest() -> None:
    inst = layered_dag(40, 3, seed=24, comm_ratio=2.0)  # PEFT beats HEFT here (test_list_schedulers_more)
    best = list_scheduling.best_list_schedule(inst)
    assert best.makespan_tick == min(heft(inst).makespan_tick, heft(inst, rank=Rank.SUM).makespan_tick,
                                     peft(inst).makespan_tick)
    assert best.makespan_tick <= peft(inst).makespan_tick


def test_bound_includes_transfers_and_proves_the_join_optimal() -> None:
    inst = make_instance("join", [[5, 5], [5, 5], [1, 1]], [(0, 2, 10), (1, 2, 10)])
    out = plan_instance(inst, SolveOptions(time_limit_s=5, threads=1))
    assert out.lower_bound_tick == comm_lower_bound_tick(inst) == 11
    assert out.op_plan.makespan_tick == 11
    assert out.op_plan.status == "optimal"


def test_iterated_phase_beats_the_classic_schedulers_and_is_recorded() -> None:
    inst = layered_dag(120, 8, seed=5, comm_ratio=2.0)
    best_classic = min(heft(inst).makespan_tick, heft(inst, rank=Rank.SUM).makespan_tick, peft(inst).makespan_tick)
    out = plan_instance(inst, SolveOptions(time_limit_s=10, threads=1, decomposition_share=0.0))
    check_plan_valid(inst, out.op_plan)
    assert out.op_plan.makespan_tick < best_classic
    sources = [p.source for p in out.phases]
    assert "iterated list scheduling" in sources or "LNS" in sources
    assert out.lower_bound_tick >= comm_lower_bound_tick(inst)


def test_segment_progress_is_throttled() -> None:
    said: list[str] = []
    report = _segment_progress(said.append, 3, 96)  # the policy's default spacing
    PROGRESS_EVERY_S = SearchPolicy().progress_every_s  # noqa: N806 (the policy's constant, named as one)
    report(0.1, 100.0, 80.0, 0.2)
    report(0.2 + PROGRESS_EVERY_S / 2, 99.0, 81.0, 0.18)  # too soon after the first line
    report(0.2 + PROGRESS_EVERY_S, 98.0, None, None)
    report(0.3 + 3 * PROGRESS_EVERY_S, None, 82.0, None)  # no incumbent yet: nothing to say
    # in time units (ticks of an instance without a tick length), the bound named as the segment's own
    assert said == ["segment 3 (96 tasks):   0.1s incumbent 100 tick, segment bound 80 tick",
                    f"segment 3 (96 tasks): {0.2 + PROGRESS_EVERY_S:5.1f}s incumbent 98 tick, segment bound -"]
    seconds: list[str] = []
    _segment_progress(seconds.append, 1, 8, lambda tick: format_time(tick * 1e-6))(0.1, 1500.0, 1200.0, 0.2)
    assert seconds == ["segment 1 (8 tasks):   0.1s incumbent 1.5ms, segment bound 1.2ms"]
    # another spacing from the caller: a line 2 s after the first, which the default's 5 s would hold back
    spaced: list[str] = []
    report = _segment_progress(spaced.append, 2, 8, every_s=1.5)
    report(0.1, 10.0, 5.0, 0.5)
    report(2.1, 9.0, 5.0, 0.4)
    assert [line.split("s incumbent")[0][-4:] for line in spaced] == [" 0.1", " 2.1"]


def test_baselines_reuse_phase_zero_heft() -> None:
    # the baselines take HEFT's makespan from phase 0 rather than schedule the op graph again; same figures
    inst = layered_dag(60, 3, seed=7, comm_ratio=1.0)
    computed: dict[str, int] = {}
    list_scheduling.best_list_schedule(inst, computed)
    assert computed == {"heft": heft(inst).makespan_tick}
    assert baseline_makespans(inst, computed) == baseline_makespans(inst)
    assert baseline_makespans(inst, {"heft": -1})["heft"] == -1  # a known figure is taken as it is


def _infeasible(*_args, **_kwargs):
    raise InfeasibleError("forced: no plan fits memory")


def test_phase_zero_falls_back_to_the_memory_aware_list_schedule(monkeypatch) -> None:
    # when HEFT and its variants run into a memory dead end (forced here: on real models it happens near the least
    # feasible capacity), the memory-aware list schedule starts the search and the planner still returns a plan
    inst = layered_dag(40, 3, seed=3, comm_ratio=1.0)
    monkeypatch.setattr(list_scheduling, "heft", _infeasible)
    monkeypatch.setattr(list_scheduling, "peft", _infeasible)
    computed: dict[str, int] = {}
    first = list_scheduling.best_list_schedule(inst, computed)
    assert first.makespan_tick == memory_list(inst).makespan_tick and computed == {}
    out = plan_instance(inst, SolveOptions(time_limit_s=3, threads=1, decomposition_share=0.0))
    check_plan_valid(inst, out.op_plan)
    assert out.op_plan.makespan_tick <= first.makespan_tick


def test_phase_zero_raises_heft_error_when_nothing_fits(monkeypatch) -> None:
    inst = layered_dag(20, 2, seed=1, comm_ratio=1.0)
    monkeypatch.setattr(list_scheduling, "heft", _infeasible)
    monkeypatch.setattr(list_scheduling, "peft", _infeasible)
    monkeypatch.setattr(list_scheduling, "memory_list", lambda *_a, **_k: _infeasible())
    monkeypatch.setattr(list_scheduling, "packed_plan", lambda *_a, **_k: _infeasible())
    with pytest.raises(InfeasibleError, match="forced: no plan fits memory"):
        list_scheduling.best_list_schedule(inst)


def test_phase_zero_takes_the_memory_aware_schedule_when_heft_hits_memory(monkeypatch) -> None:
    # HEFT in a memory dead end while HEFT/CPoP found a plan: the memory-aware list schedule still runs (it can be
    # the shorter one) and the best of the two is phase 0's plan
    inst = layered_dag(20, 2, seed=1, comm_ratio=1.0)
    calls: list[str] = []

    def heft_stuck_unless_sum(instance, *args, rank=Rank.UPWARD, **kwargs):
        if rank is not Rank.SUM:
            _infeasible()
        return heft(instance, *args, rank=rank, **kwargs)

    def counted_memory_list(instance, *args, **kwargs):
        calls.append("memory_list")
        return memory_list(instance, *args, **kwargs)

    monkeypatch.setattr(list_scheduling, "heft", heft_stuck_unless_sum)
    monkeypatch.setattr(list_scheduling, "peft", _infeasible)
    monkeypatch.setattr(list_scheduling, "memory_list", counted_memory_list)
    plan = list_scheduling.best_list_schedule(inst)
    assert calls == ["memory_list"]
    check_plan_valid(inst, plan)
    assert plan.makespan_tick == min(heft(inst, rank=Rank.SUM).makespan_tick, memory_list(inst).makespan_tick)


def test_phase_zero_falls_back_to_the_packed_plan(monkeypatch) -> None:
    # below what the list schedulers fit, the parameters-first packed plan is the last resort before infeasible
    inst = layered_dag(20, 2, seed=1, comm_ratio=1.0)
    monkeypatch.setattr(list_scheduling, "heft", _infeasible)
    monkeypatch.setattr(list_scheduling, "peft", _infeasible)
    monkeypatch.setattr(list_scheduling, "memory_list", lambda *_a, **_k: _infeasible())
    plan = list_scheduling.best_list_schedule(inst)
    check_plan_valid(inst, plan)
    assert plan.method == packed_plan(inst).method


def test_a_phase_that_finds_no_plan_is_skipped_not_fatal(monkeypatch) -> None:
    # near the least feasible capacity the iterated list scheduler can find no list schedule at all while phase 0
    # (memory-aware) has one: that is no proof of infeasibility, so the search says so and keeps the incumbent
    inst = layered_dag(60, 3, seed=11, comm_ratio=2.0)

    def no_plan(*_args, **_kwargs):
        raise InfeasibleError("no list schedule fits (every starting priority failed)")

    monkeypatch.setattr(iterated_phase, "iterated_list_schedule", no_plan)
    monkeypatch.setattr(lns_module, "lns", no_plan)
    said: list[str] = []
    out = plan_instance(inst, SolveOptions(time_limit_s=3, threads=1, decomposition_share=0.0), said.append)
    check_plan_valid(inst, out.op_plan)
    assert any(m.startswith("iterated list scheduling found no plan (no list schedule fits") for m in said)
    assert any(m.startswith("LNS found no plan") for m in said)
    assert not any("internal error" in m for m in said)
