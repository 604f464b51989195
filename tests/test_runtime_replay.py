"""plan-solve's runtime replay (`planner.cost.runtime_replay`, `planner.runtime_choice`): transfers counted as the
runtime makes them, the replay's candidates and the choice, and the CLI on a profile with the probe's figures."""

from __future__ import annotations

import json
from pathlib import Path

from planner.cli import solve_main
from planner.cost.instance import SchedulingInstance
from planner.cost.runtime_replay import RuntimeReplay
from planner.cost.sharing import SharedHosts
from planner.execute.calibrate_profile import profile_document, profile_yaml
from planner.ir.hardware import DEFAULT_PROFILE, load_topology
from planner.runtime_choice import SEARCH, choose_by_runtime_replay
from planner.schedule.plan_io import load_plan
from planner.schedule.simulate import simulate
from planner.schedule.validate import validate_plan
from planner.solve import SolveOptions, plan_instance

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
    chosen, info = choose_by_runtime_replay(outcome, heavy)
    assert info["chosen"] != SEARCH
    plan = chosen.op_plan
    validate_plan(inst, plan)
    assert heavy.makespan_tick(inst, plan) == min(c["replay_s"] for c in info["candidates"].values()) == 60
    assert plan.makespan_tick == 60 and chosen.found_by.startswith("runtime replay: ")
    assert plan.search[-1] == (chosen.found_by, 60) and plan.search[:-1] == searched.search
    assert plan.lower_bound_tick == outcome.lower_bound_tick <= 60
    assert chosen.saved_plan().makespan_tick == 60
    # free transfers: the search's plan is kept, untouched
    kept, info = choose_by_runtime_replay(outcome, RuntimeReplay(0.0, 0.0, NO_SHARING))
    assert kept is outcome and info["chosen"] == SEARCH


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
    replay = summary["runtime_replay"]
    assert set(replay["candidates"]) == {SEARCH, "HEFT", "single device"}
    best = min(c["replay_s"] for c in replay["candidates"].values())
    assert replay["candidates"][replay["chosen"]]["replay_s"] == best
    plan = load_plan(out)
    assert plan.makespan_tick * plan.tick_s == replay["candidates"][replay["chosen"]]["makespan_s"]
    # a bundled profile has no probe figures: no replay, no line
    assert solve_main(["--model", str(MOE), "--time-limit", "3", "--out", str(tmp_path / "p2.json"),
                       "--no-pictures", "--quiet", "--format", "json"]) == 0
    assert "runtime_replay" not in json.loads(capsys.readouterr().out)
