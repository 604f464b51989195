"""plan-solve's choice among candidate plans (`planner.schedule.runtime_replay`, `planner.runtime_choice`): transfers
counted as the runtime makes them, the runtime replay's candidates and choice, a re-plan that keeps the measured
run's plan unless it predicts a shorter one, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import solve_main
from planner.cost.instance import SchedulingInstance
from planner.cost.measured_transfers import measured_transfer_s, with_transfer_latency
from planner.cost.sharing import SharedHosts
from planner.execute.calibrate_profile import profile_document, profile_yaml
from planner.ir.hardware import DEFAULT_PROFILE, load_topology
from planner.runtime_choice import (
    DEFAULT_RUN_CHOICE_POLICY,
    RUN_PLAN,
    SEARCH,
    RunChoicePolicy,
    RunPlan,
    choose_plan,
    retimed_run_plan,
)
from planner.schedule.plan_io import load_plan, save_plan
from planner.schedule.runtime_replay import RuntimeReplay
from planner.schedule.simulate import simulate
from planner.schedule.validate import validate_plan
from planner.solve import Method, SolveOptions, plan_instance

NO_SHARING = SharedHosts((-1, -1), (), ())
MOE = Path(__file__).resolve().parents[1] / "planner" / "data" / "models" / "moe.onnx"


def _fork_join(comm: int = 1) -> SchedulingInstance:
    """t0 -> t1..t4 -> t5, 10 ticks each, on 2 identical devices."""
    edges = [(0, k, comm) for k in range(1, 5)] + [(k, 5, comm) for k in range(1, 5)]
    return SchedulingInstance.uniform("fork", [10] * 6, edges, 2)


def test_one_send_per_other_device_and_one_receive_before_its_first_reader() -> None:
    # t0 on p0 feeds t1 and t2, both on p1: the runtime sends t0's output once and receives it once, before t1
    inst = SchedulingInstance.uniform("fan", [10, 10, 10], [(0, 1, 5), (0, 2, 5)], 2)
    tl = simulate(inst, [[0], [1, 2]], sharing=NO_SHARING, rank_transfer_tick=(4.0, 3.0))
    times = {p.task: (p.start_tick, p.end_tick) for p in tl.placements}
    # t0 0-10, its one send 10-14, the rest of the comm (5 - 4 - 3 < 0: none) -> arrives 14; t1 receives (3) and
    # computes 14-27; t2 reads what t1's receive brought: no second receive, 27-37
    assert times == {"t0": (0, 10), "t1": (14, 27), "t2": (27, 37)}


def test_a_profile_without_the_probe_figures_has_no_replay(tmp_path) -> None:
    assert RuntimeReplay.of(DEFAULT_PROFILE, load_topology(DEFAULT_PROFILE)) is None
    hw = _profile(tmp_path, send_s=2e-4, recv_s=5e-5)
    replay = RuntimeReplay.of(hw, load_topology(hw))
    assert replay is not None and (replay.send_s, replay.recv_s) == (2e-4, 5e-5)
    assert replay.sharing.host_of_device == (-1, -1)  # no sharing block: nobody slows down


def test_the_runtime_replay_chooses_the_plan_that_transfers_less() -> None:
    inst = _fork_join()
    outcome = plan_instance(inst, SolveOptions(time_limit_s=5, threads=1))
    searched = outcome.op_plan
    assert len({p.device for p in searched.placements}) == 2 and searched.makespan_tick < 60  # the split wins
    # each send costs its rank 30 ticks: the split plan's replay is longer than one device's 60
    heavy = RuntimeReplay(30.0, 0.0, NO_SHARING)
    assert heavy.makespan_tick(inst, searched) > 60
    chosen, info = choose_plan(outcome, replay=heavy)
    assert info["chosen"] != SEARCH
    plan = chosen.op_plan
    validate_plan(inst, plan)
    assert heavy.makespan_tick(inst, plan) == min(c["score_s"] for c in info["candidates"].values()) == 60
    assert info["by"] == "runtime replay"
    assert plan.makespan_tick == 60 and chosen.found_by.startswith("chosen by runtime replay: ")
    assert plan.search[-1] == (chosen.found_by, 60) and plan.search[:-1] == searched.search
    assert plan.lower_bound_tick == outcome.lower_bound_tick <= 60
    assert chosen.saved_plan().makespan_tick == 60
    # free transfers: the search's plan is kept, untouched
    kept, info = choose_plan(outcome, replay=RuntimeReplay(0.0, 0.0, NO_SHARING))
    assert kept is outcome and info["chosen"] == SEARCH
    assert choose_plan(outcome) == (outcome, {})  # nothing to choose from


def test_the_run_plan_wins_when_the_search_found_nothing_shorter() -> None:
    inst = _fork_join()
    searched = plan_instance(inst, SolveOptions(time_limit_s=5, threads=1))
    weak = plan_instance(inst, SolveOptions(method=Method.SINGLE_DEVICE))  # a search that found one device's 60
    chosen, info = choose_plan(weak, run_plan=RunPlan(searched.op_plan))
    assert info["by"] == "placement model" and info["chosen"] == RUN_PLAN
    assert chosen.op_plan.makespan_tick == searched.op_plan.makespan_tick < 60
    assert chosen.found_by == "chosen by placement model: " + RUN_PLAN
    validate_plan(inst, chosen.op_plan)
    # the other way round: the single-device plan ran, the search found the split; the split is predicted 30%
    # shorter, so it wins unless the run's repeats spread by more than that
    ran = RunPlan(weak.op_plan, noise=0.1)
    assert choose_plan(searched, run_plan=ran)[1]["chosen"] == SEARCH
    gap = 1 - searched.op_plan.makespan_tick / weak.op_plan.makespan_tick
    noisy = RunPlan(weak.op_plan, noise=gap + 0.05)
    kept, info = choose_plan(searched, run_plan=noisy)
    assert info["chosen"] == RUN_PLAN and info["run_noise"] == noisy.noise
    assert kept.op_plan.makespan_tick == weak.op_plan.makespan_tick


def test_a_runs_noise_is_its_spread_capped_by_the_policy(tmp_path) -> None:
    # repeats of 1.0, 1.1 and 2.0 s: a spread of (2.0 - 1.0) / 1.1, capped at the policy's largest noise (half by
    # default); two repeats that agree say nothing (0), nor does one alone
    inst = _fork_join()
    ran = tmp_path / "ran.json"
    save_plan(plan_instance(inst, SolveOptions(method=Method.SINGLE_DEVICE)).op_plan, ran)
    report = tmp_path / "run.json"

    def noise(makespans: list[float], policy: RunChoicePolicy = DEFAULT_RUN_CHOICE_POLICY) -> float:
        report.write_text(json.dumps({"plan": str(ran), "measured_makespans_s": makespans}))
        found, why = retimed_run_plan(report, inst, policy)
        assert found is not None, why
        return found.noise

    assert noise([1.0, 1.1, 2.0]) == 0.5
    assert noise([1.0, 1.1, 2.0], RunChoicePolicy(max_noise=2.0)) == pytest.approx(1.0 / 1.1)
    assert noise([1.0, 1.1, 1.2]) == pytest.approx(0.2 / 1.1)
    assert noise([1.0, 1.0]) == noise([1.5]) == 0.0


def _profile(tmp: Path, *, send_s: float, recv_s: float) -> Path:
    figures = {"float_flops": 2e10, "double_flops": 1e10, "memory_bandwidth": 5e9, "launch_overhead": 2e-5,
               "link_latency": 4e-5, "link_bandwidth": 3e9, "send_overhead": send_s, "recv_overhead": recv_s}
    doc = profile_document(figures, {"p2p_oneway 256": "ping-pong"}, {}, nproc=2, threads=1, torch_version="2.x",
                           host="box", date="2026-12-01T18:00:00+00:00", memory_bytes=2**34)
    path = tmp / "probe.yaml"
    path.write_text(profile_yaml(doc))
    return path


def test_plan_solve_reports_the_replay_on_a_profile_with_the_probe_figures(tmp_path, capsys) -> None:
    hw = _profile(tmp_path, send_s=2e-4, recv_s=5e-5)
    out = tmp_path / "plan.json"
    assert solve_main(["--model", str(MOE), "--hw", str(hw), "--time-limit", "3", "--out", str(out),
                       "--no-pictures", "--quiet", "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    replay = summary["choice"]
    assert replay["by"] == "runtime replay" and set(replay["candidates"]) == {SEARCH, "HEFT", "single device"}
    best = min(c["score_s"] for c in replay["candidates"].values())
    assert replay["candidates"][replay["chosen"]]["score_s"] == best
    plan = load_plan(out)
    assert plan.makespan_tick * plan.tick_s == replay["candidates"][replay["chosen"]]["makespan_s"]
    # a bundled profile has no probe figures: no replay, no line
    assert solve_main(["--model", str(MOE), "--time-limit", "3", "--out", str(tmp_path / "p2.json"),
                       "--no-pictures", "--quiet", "--format", "json"]) == 0
    assert "choice" not in json.loads(capsys.readouterr().out)


def test_a_replan_keeps_the_measured_runs_plan_unless_it_predicts_a_shorter_one(tmp_path, capsys) -> None:
    # the run's plan: round-robin, far from the best; its run report says every op took what the profile prices
    # except one (measured op times); the re-plan must beat it, and keep it when it is the best there is
    ran = tmp_path / "ran.json"
    assert solve_main(["--model", str(MOE), "--method", "round_robin", "--out", str(ran), "--no-pictures",
                       "--quiet"]) == 0
    capsys.readouterr()
    plan = load_plan(ran)
    seconds = {p.task: (p.end_tick - p.start_tick) * plan.tick_s for p in plan.placements}
    report = tmp_path / "run.json"
    report.write_text(json.dumps({"plan": str(ran), "op_seconds": seconds, "measured_makespans_s": [1.0, 1.02, 0.99]}))
    out = tmp_path / "replan.json"
    assert solve_main(["--model", str(MOE), "--measured", str(report), "--time-limit", "3", "--out", str(out),
                       "--no-pictures", "--quiet", "--format", "json"]) == 0
    choice = json.loads(capsys.readouterr().out)["choice"]
    assert choice["by"] == "placement model" and set(choice["candidates"]) == {SEARCH, RUN_PLAN}
    assert choice["chosen"] == SEARCH  # round-robin's plan is far longer
    ran_s = choice["candidates"][RUN_PLAN]["makespan_s"]
    assert ran_s == pytest.approx(plan.makespan_tick * plan.tick_s, rel=0.05)
    assert ran_s > choice["candidates"][SEARCH]["makespan_s"]
    # the re-plan of a run of the re-plan: the search finds its plan again at best, and a tie keeps the run's plan;
    # whichever it keeps is no longer than the run's plan under the measured times
    best = load_plan(out)
    seconds = {p.task: (p.end_tick - p.start_tick) * best.tick_s for p in best.placements}
    report.write_text(json.dumps({"plan": str(out), "op_seconds": seconds}))
    again = tmp_path / "again.json"
    assert solve_main(["--model", str(MOE), "--measured", str(report), "--time-limit", "2", "--out", str(again),
                       "--no-pictures", "--quiet", "--format", "json"]) == 0
    choice = json.loads(capsys.readouterr().out)["choice"]
    run_s = choice["candidates"][RUN_PLAN]["makespan_s"]
    assert load_plan(again).makespan_tick <= run_s / best.tick_s + 1
    assert choice["chosen"] == (RUN_PLAN if run_s <= choice["candidates"][SEARCH]["makespan_s"] else SEARCH)
    # a measured CSV is no run report: nothing to choose from
    csv = tmp_path / "times.csv"
    csv.write_text("op,seconds\n" + "".join(f"{k},{v}\n" for k, v in seconds.items()))
    assert solve_main(["--model", str(MOE), "--measured", str(csv), "--time-limit", "2", "--out",
                       str(tmp_path / "c.json"), "--no-pictures", "--quiet", "--format", "json"]) == 0
    assert "choice" not in json.loads(capsys.readouterr().out)


def _breakdown(send_s: float, sends: int, post_s: float, late_s: float, recvs: int) -> dict:
    return {"send_s": send_s, "send_events": sends, "post_s": post_s, "recv_late_s": late_s, "recvs": recvs}


def test_a_run_reports_its_transfers_cost_per_send_and_per_receive(tmp_path) -> None:
    report = tmp_path / "run.json"
    report.write_text(json.dumps({"time_breakdown": [_breakdown(3e-3, 20, 1e-3, 2e-3, 10),
                                                     _breakdown(1e-3, 20, 4e-3, 1e-3, 30)]}))
    assert measured_transfer_s(report) == pytest.approx((4e-3 / 40, 8e-3 / 40))
    report.write_text(json.dumps({"time_breakdown": [_breakdown(0.0, 0, 1e-4, 0.0, 0)]}))
    assert measured_transfer_s(report) is None  # no transfer: nothing measured
    report.write_text(json.dumps({"op_seconds": {"a": 1.0}}))
    assert measured_transfer_s(report) is None
    topology = load_topology(DEFAULT_PROFILE)
    slow = with_transfer_latency(topology, 0.25)
    n = topology.num_devices
    assert all(slow.link(i, j).latency_s == (0.25 if i != j else 0.0) for i in range(n) for j in range(n))
    assert slow.link(0, 1).bandwidth_bytes_per_s == topology.link(0, 1).bandwidth_bytes_per_s


def test_a_replan_prices_transfers_as_the_run_measured_them(tmp_path, capsys) -> None:
    ran = tmp_path / "ran.json"
    assert solve_main(["--model", str(MOE), "--time-limit", "3", "--out", str(ran), "--no-pictures", "--quiet"]) == 0
    capsys.readouterr()
    plan = load_plan(ran)
    assert len({p.device for p in plan.placements}) > 1  # on cpu-4's nominal links the MoE is split
    seconds = {p.task: (p.end_tick - p.start_tick) * plan.tick_s for p in plan.placements}
    report = tmp_path / "run.json"
    # the run measured 5 ms of rank time per transfer (far above every op of the MoE): one device is the answer
    report.write_text(json.dumps({"plan": str(ran), "op_seconds": seconds,
                                  "time_breakdown": [_breakdown(2e-2, 10, 2e-2, 1e-2, 10)]}))
    out = tmp_path / "replan.json"
    assert solve_main(["--model", str(MOE), "--measured", str(report), "--time-limit", "3", "--out", str(out),
                       "--no-pictures", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert "transfers as the run measured them: 2000 us a send, 3000 us a receive" in captured.err
    choice = json.loads(captured.out)["choice"]
    assert choice["by"] == "runtime replay" and RUN_PLAN in choice["candidates"]
    assert len({p.device for p in load_plan(out).placements}) == 1
