"""Processor sharing between the ranks of one host (`planner.cost.sharing`, `simulate(..., sharing=)`):
hand-checked schedules of 2 ranks on one host, profiles without the figure unchanged, the profile field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from instances import random_instance, round_robin_orders

from planner.cli import solve_main
from planner.cli_calibrate import calibrate_main
from planner.cli_run import run_main
from planner.cost.instance import SchedulingInstance
from planner.cost.sharing import SharedHosts, effective_parallelism, load_shared_hosts, shared_hosts
from planner.errors import InputError
from planner.execute.calibrate_profile import op_csv, profile_document, profile_yaml
from planner.execute.run_sharing import sharing_report, summary_line
from planner.execute.runner import load_checked_plan
from planner.ir.hardware import Profile, load_topology, topology_from_profile
from planner.ir.load import load_model
from planner.prepare import run_passes
from planner.schedule.errors import DeadlockError, SimulationError
from planner.schedule.simulate import simulate

# 2 ranks on one host with one core's throughput (E = 1), figures measured with both computing (n = 2): each
# priced duration is twice the solo work
ONE_CORE = SharedHosts((0, 0), (1.0,), (2,))


def _times(tl) -> dict[str, tuple[int, int, int]]:
    return {p.task: (p.device, p.start_tick, p.end_tick) for p in tl.placements}


def test_speed_is_min_one_e_over_k() -> None:
    hosts = SharedHosts((0, 0, 0, -1), (1.5,), (3,))
    assert hosts.speed(0, 1) == 1.0
    assert hosts.speed(0, 2) == 0.75
    assert hosts.speed(0, 3) == 0.5
    assert hosts.calibrated_speed(0) == 0.5
    assert hosts.speed(-1, 4) == 1.0 and hosts.calibrated_speed(-1) == 1.0
    assert SharedHosts((0, 0), (4.0,), (2,)).speed(0, 2) == 1.0  # enough cores: nobody slows down
    assert effective_parallelism(2, 40e9, 80e9) == 1.0
    with pytest.raises(ValueError):
        effective_parallelism(2, 0.0, 1.0)
    with pytest.raises(ValueError):
        SharedHosts((0, 1), (1.0,), (2,))


def test_one_rank_alone_runs_at_solo_speed() -> None:
    # a chain of two tasks of 100 priced ticks on one device, the other idle: solo work 50 each
    inst = SchedulingInstance.uniform("chain", [100, 100], [(0, 1, 0)], 2)
    tl = simulate(inst, [[0, 1], []], sharing=ONE_CORE)
    assert _times(tl) == {"t0": (0, 0, 50), "t1": (0, 50, 100)}
    assert simulate(inst, [[0, 1], []]).makespan_tick == 200  # the plain replay: as priced


def test_both_ranks_busy_run_as_priced() -> None:
    # two independent tasks of 100 priced ticks, one per device: both compute throughout, at the calibration's
    # concurrency, so the times are the priced ones
    inst = SchedulingInstance.uniform("pair", [100, 100], [], 2)
    tl = simulate(inst, [[0], [1]], sharing=ONE_CORE)
    assert _times(tl) == {"t0": (0, 0, 100), "t1": (1, 0, 100)}


def test_rates_change_when_the_other_rank_stops() -> None:
    # t0 (priced 100: solo work 50) on p0, t1 (priced 40: solo work 20) on p1.  Both at half speed until t1 ends
    # at 40 (20 solo ticks done on each); t0 has 30 solo ticks left, alone at full speed: ends at 70
    inst = SchedulingInstance.uniform("mixed", [100, 40], [], 2)
    tl = simulate(inst, [[0], [1]], sharing=ONE_CORE)
    assert _times(tl) == {"t0": (0, 0, 70), "t1": (1, 0, 40)}
    # with a core per rank (E = 2) nothing is shared: the plain times
    two_cores = SharedHosts((0, 0), (2.0,), (2,))
    assert _times(simulate(inst, [[0], [1]], sharing=two_cores)) == _times(simulate(inst, [[0], [1]]))


def test_transfer_wait_then_both_busy() -> None:
    # t0 (priced 20) on p0 -> t2 on p1 across a comm of 10; t1 (priced 60) on p0 after t0; t2 (priced 40) on p1.
    # 0-10: t0 alone (solo work 10) ends at 10; t1 starts at 10 alone; t2's input arrives at 20.
    # 10-20: t1 alone, 10 of its 30 solo ticks done.  From 20 both run at half speed: t2 (solo 20) and t1 (20
    # left) end together at 60.
    inst = SchedulingInstance.uniform("wait", [20, 60, 40], [(0, 2, 10)], 2)
    tl = simulate(inst, [[0, 1], [2]], sharing=ONE_CORE)
    assert _times(tl) == {"t0": (0, 0, 10), "t1": (0, 10, 60), "t2": (1, 20, 60)}
    (x,) = tl.transfers
    assert (x.start_tick, x.end_tick) == (10, 20)


def test_a_device_on_its_own_host_is_never_slowed() -> None:
    hosts = SharedHosts((0, -1), (1.0,), (2,))
    inst = SchedulingInstance.uniform("own", [100, 100], [], 2)
    assert _times(simulate(inst, [[0], [1]], sharing=hosts)) == {"t0": (0, 0, 50), "t1": (1, 0, 100)}


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 10), st.integers(1, 3), st.booleans(), st.booleans())
def test_sharing_with_a_core_per_rank_is_the_plain_replay(seed, tasks, devices, hetero, contention) -> None:
    inst = random_instance(seed, tasks, devices, heterogeneous=hetero)
    orders = round_robin_orders(inst)
    plain = simulate(inst, orders, link_contention=contention)
    enough = SharedHosts(tuple([0] * devices), (float(devices),), (devices,))
    shared = simulate(inst, orders, link_contention=contention, sharing=enough)
    assert _times(shared) == _times(plain)
    assert shared.makespan_tick == plain.makespan_tick


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 10), st.integers(1, 3))
def test_sharing_keeps_order_and_precedence(seed, tasks, devices) -> None:
    inst = random_instance(seed, tasks, devices, heterogeneous=True)
    orders = round_robin_orders(inst)
    one = SharedHosts(tuple([0] * devices), (1.0,), (devices,))
    tl = simulate(inst, orders, sharing=one)
    by = tl.by_task()
    for row in orders:
        names = [inst.task_names[t] for t in row]
        for a, b in zip(names, names[1:]):
            assert by[a].end_tick <= by[b].start_tick + 1  # rounding of continuous times to ticks
    for x in tl.transfers:
        assert by[x.dst_task].start_tick >= x.end_tick - 1
    # never faster than the solo work of all tasks at the host's one core's throughput
    solo_work = sum(int(inst.duration_tick[t, by[n].device]) for t, n in enumerate(inst.task_names)) / devices
    assert tl.makespan_tick >= solo_work - devices


def test_deadlock_and_wrong_device_count_under_sharing() -> None:
    inst = SchedulingInstance.uniform("dl", [5, 5], [(0, 1, 0), (1, 0, 0)][:1], 2)
    with pytest.raises(DeadlockError):
        simulate(inst, [[1, 0], []], sharing=ONE_CORE)
    with pytest.raises(SimulationError):
        simulate(inst, [[0, 1], []], sharing=SharedHosts((0,), (1.0,), (2,)))


# --------------------------------------------------------------------------------------------- the profile
def _profile(sharing: dict | None) -> dict:
    host: dict = {"name": "node0", "devices": [{"kind": "cpu-process", "count": 2, "name_prefix": "cpu",
                                                "peak_flops": {"float": "20GFLOPS"}, "memory": "1GiB",
                                                "memory_bandwidth": "2GB/s", "launch_overhead": "20us"}]}
    if sharing is not None:
        host["sharing"] = sharing
    return {"name": "t", "hosts": [host], "links": {"intra_host": {"latency": "100us", "bandwidth": "1GB/s"}}}


def test_profile_sharing_block_reads_and_prices_the_same(tmp_path) -> None:
    with_block = Profile.model_validate(_profile({"effective_parallelism": 0.96, "measured_ranks": 2}))
    without = Profile.model_validate(_profile(None))
    assert topology_from_profile(with_block).devices == topology_from_profile(without).devices
    hosts = shared_hosts(with_block, topology_from_profile(with_block))
    assert hosts == SharedHosts((0, 0), (0.96,), (2,))
    assert shared_hosts(without, topology_from_profile(without)) is None
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(_profile({"effective_parallelism": 1.1, "measured_ranks": 2})))
    assert load_shared_hosts(path, load_topology(path)) == SharedHosts((0, 0), (1.1,), (2,))
    assert load_shared_hosts(tmp_path / "missing.yaml", load_topology(path)) is None


@pytest.mark.parametrize("bad", [{"effective_parallelism": 0, "measured_ranks": 2},
                                 {"effective_parallelism": 1.0, "measured_ranks": 0},
                                 {"effective_parallelism": 1.0},
                                 {"effective_parallelism": 1.0, "measured_ranks": 2, "cores": 1}])
def test_bad_sharing_block_is_refused(tmp_path, bad) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_profile(bad)))
    with pytest.raises(InputError, match="sharing"):
        load_topology(path)


# ------------------------------------------------------------------------- plan-calibrate and the run report
REPO = Path(__file__).resolve().parents[1]
MOE = REPO / "planner" / "data" / "models" / "moe.onnx"
FIGS = {"float_flops": 2e10, "double_flops": 1e10, "memory_bandwidth": 5e9, "launch_overhead": 2e-5,
        "link_latency": 4e-5, "link_bandwidth": 3e9}
MEASURED = {"matmul_float 32x32x32": "torch.matmul", "p2p_oneway 256": "ping-pong"}


def _written(tmp: Path, e: float | None, nproc: int = 2, name: str = "cal") -> Path:
    figures = {**FIGS, **({"effective_parallelism": e} if e is not None else {})}
    doc = profile_document(figures, MEASURED, {}, nproc=nproc, threads=1, torch_version="2.x", host="box",
                           date="2026-12-01T18:00:00+00:00", memory_bytes=2**34)
    path = tmp / f"{name}.yaml"
    path.write_text(profile_yaml(doc))
    return path


def _plan(tmp: Path, hw: Path, name: str = "plan", *extra: str) -> Path:
    out = tmp / f"{name}.json"
    assert solve_main(["--model", str(MOE), "--hw", str(hw), "--method", "heft", "--out", str(out),
                       "--no-pictures", "--quiet", "--format", "json", *extra]) == 0
    return out


def test_the_profile_document_writes_the_sharing_block_only_when_measured(tmp_path) -> None:
    doc = yaml.safe_load(_written(tmp_path, 0.9637).read_text())
    assert doc["hosts"][0]["sharing"] == {"effective_parallelism": 0.964, "measured_ranks": 2}
    assert "sharing" not in yaml.safe_load(_written(tmp_path, None, name="none").read_text())["hosts"][0]
    one = profile_document({**FIGS, "effective_parallelism": 1.0}, {}, {}, nproc=1, threads=1, torch_version="x")
    assert "sharing" not in one["hosts"][0]  # one process shares nothing
    # the block changes no price: the same topology with and without it
    assert load_topology(_written(tmp_path, 0.9)).devices == load_topology(_written(tmp_path, None, name="n")).devices


def test_the_sharing_report_replays_the_plans_schedule(tmp_path) -> None:
    enough = _written(tmp_path, 2.0, name="enough")  # a core per rank: the plan's own makespan
    plan, graph = load_checked_plan(_plan(tmp_path, enough, "p1"))
    planned_s = plan.makespan_tick * plan.tick_s
    block = sharing_report(plan, graph, load_topology(enough), 2 * planned_s)
    assert block["profile"] == "shared" and block["priced_by"] == "profile"
    assert block["simulated_makespan_s"] == pytest.approx(planned_s, rel=1e-12)
    assert block["unshared_makespan_s"] == pytest.approx(planned_s, rel=1e-12)
    assert block["measured_vs_simulated"] == pytest.approx(2.0)
    # one core for both ranks: each op's solo work is half its price, so the replay is at most the plan's makespan
    # and at least half of it
    one = _written(tmp_path, 1.0, name="one")
    plan1, graph1 = load_checked_plan(_plan(tmp_path, one, "p2"))
    planned1 = plan1.makespan_tick * plan1.tick_s
    shared = sharing_report(plan1, graph1, load_topology(one), planned1, {"stretch": 2.0})
    assert planned1 / 2 - len(plan1.placements) * plan1.tick_s <= shared["simulated_makespan_s"] <= planned1
    assert shared["resimulated_makespan_s"] == pytest.approx(2 * shared["simulated_makespan_s"])
    assert "effective parallelism 1.00" in summary_line(shared)
    # a profile without the block: nothing replayed
    plain = _written(tmp_path, None, name="plain")
    plan2, graph2 = load_checked_plan(_plan(tmp_path, plain, "p3"))
    none = sharing_report(plan2, graph2, load_topology(plain), planned1)
    assert none["profile"] == "none" and "sharing" in none["note"] and summary_line(none) is None


def test_a_plan_priced_by_measured_op_times_takes_them_as_solo_work(tmp_path) -> None:
    one = _written(tmp_path, 1.0, name="one")
    graph = run_passes(load_model(MOE))
    times = tmp_path / "t.csv"
    times.write_text(op_csv({op.name: 2e-5 for op in graph.ops}))
    plan, graph = load_checked_plan(_plan(tmp_path, one, "m", "--measured", str(times)))
    block = sharing_report(plan, graph, load_topology(one), 1e-3)
    assert block["priced_by"] == "measured op times"
    # solo work = the plan's own durations: a schedule on one device replays exactly, never shorter
    used = {p.device for p in plan.placements}
    planned_s = plan.makespan_tick * plan.tick_s
    if len(used) == 1:
        assert block["simulated_makespan_s"] == pytest.approx(planned_s, rel=1e-12)
    assert block["simulated_makespan_s"] >= sum(p.end_tick - p.start_tick for p in plan.placements) \
        * plan.tick_s - len(plan.placements) * plan.tick_s


@pytest.mark.dist
def test_calibrate_measures_the_host_sharing_and_no_sharing_leaves_it_out(tmp_path) -> None:
    out = tmp_path / "cal.yaml"
    args = ["--nproc", "2", "--quick", "--repeats", "1", "--no-op-factors", "--no-runtime-probe", "--quiet",
            "--timeout", "300"]
    assert calibrate_main([*args, "--out", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    sharing = doc["hosts"][0]["sharing"]
    assert sharing["measured_ranks"] == 2 and 0 < sharing["effective_parallelism"] < 100
    measured = doc["provenance"]["measured"]
    assert "effective_parallelism" in measured
    assert any(k.startswith("sharing_solo matmul") for k in measured)
    assert any(k.startswith("host_parallelism conv") for k in measured)
    assert load_shared_hosts(out, load_topology(out)) is not None
    bare = tmp_path / "bare.yaml"
    assert calibrate_main([*args, "--no-sharing", "--out", str(bare)]) == 0
    assert "sharing" not in yaml.safe_load(bare.read_text())["hosts"][0]


@pytest.mark.dist
def test_a_run_on_a_profile_with_sharing_reports_both_predictions(tmp_path, capsys) -> None:
    hw = _written(tmp_path, 1.0)
    plan = _plan(tmp_path, hw)
    report_path = tmp_path / "run.json"
    assert run_main(["--plan", str(plan), "--nproc", "2", "--repeat", "1", "--no-probe", "--report",
                     str(report_path)]) == 0
    assert "under processor sharing (effective parallelism 1.00)" in capsys.readouterr().out
    report = json.loads(report_path.read_text())
    block = report["sharing"]
    assert block["profile"] == "shared" and block["effective_parallelism"] == [1.0]
    assert report["simulated_shared_makespan_s"] == block["simulated_makespan_s"] > 0
    assert report["measured_vs_simulated_shared"] == pytest.approx(
        report["measured_makespan_s"] / block["simulated_makespan_s"])
    assert report["measured_vs_resimulated_shared"] is None  # no probe, no stretch
    # the plan's own prediction is untouched
    assert report["simulated_makespan_s"] == pytest.approx(block["unshared_makespan_s"], rel=1e-12)


def test_transfers_charged_to_their_ranks_streams() -> None:
    # t0 (priced 20) on p0 -> t1 (priced 20) on p1 across a comm of 30 that holds 10 of sending and 10 of receiving
    inst = SchedulingInstance.uniform("send", [20, 20], [(0, 1, 30)], 2)
    enough = SharedHosts((0, 0), (2.0,), (2,))
    # no sharing: p0 computes 0-20 and sends 20-30; the transfer leaves at 30 and arrives after the rest of its
    # comm (10) at 40; p1 receives (10) and computes (20) from 40: ends at 70, as the plain replay's consumer
    tl = simulate(inst, [[0], [1]], sharing=enough, rank_transfer_tick=(10.0, 10.0))
    assert _times(tl) == {"t0": (0, 0, 20), "t1": (1, 40, 70)}
    (x,) = tl.transfers
    assert (x.start_tick, x.end_tick) == (30, 40)
    assert simulate(inst, [[0], [1]]).makespan_tick == 70
    # one core for both (priced at half speed): t0 alone 0-10, its send alone 10-15, arrival 25, t1's receive and
    # compute (solo 5 + 10) alone 25-40
    tl1 = simulate(inst, [[0], [1]], sharing=ONE_CORE, rank_transfer_tick=(10.0, 10.0))
    assert _times(tl1) == {"t0": (0, 0, 10), "t1": (1, 25, 40)}
    with pytest.raises(SimulationError, match="needs sharing"):
        simulate(inst, [[0], [1]], rank_transfer_tick=(1.0, 1.0))


def test_a_sender_busy_sending_slows_the_other_rank_under_sharing() -> None:
    # t0 (priced 20) on p0 feeds t2 on p1; t1 (priced 40) on p1 runs meanwhile.  E = 1, n = 2.  0-20: both
    # compute at half speed (t0's solo 10 done at 20; t1 has 10 of its 20 left); 20-30: p0 sends (solo 5) beside
    # t1, both at half speed: t1 has 5 left at 30, the send is done; 30-35: t1 alone ends at 35.
    inst = SchedulingInstance.uniform("busy", [20, 40, 2], [(0, 2, 10)], 2)
    tl = simulate(inst, [[0], [1, 2]], sharing=ONE_CORE, rank_transfer_tick=(10.0, 0.0))
    times = _times(tl)
    assert times["t0"] == (0, 0, 20) and times["t1"] == (1, 0, 35)
    (x,) = tl.transfers
    assert x.start_tick == 30 and x.end_tick == 30  # comm 10, all of it the send: arrives when sent


def test_the_report_charges_transfers_to_the_ranks_when_the_profile_has_their_overheads(tmp_path) -> None:
    figures = {**FIGS, "effective_parallelism": 2.0, "send_overhead": 3e-5, "recv_overhead": 2e-5}
    doc = profile_document(figures, MEASURED, {}, nproc=2, threads=1, torch_version="2.x", host="box",
                           date="2026-12-01T18:00:00+00:00", memory_bytes=2**34)
    hw = tmp_path / "probe.yaml"
    hw.write_text(profile_yaml(doc))
    plan, graph = load_checked_plan(_plan(tmp_path, hw))
    block = sharing_report(plan, graph, load_topology(hw), 1e-3)
    assert block["send_overhead_s"] == pytest.approx(3e-5) and block["recv_overhead_s"] == pytest.approx(2e-5)
    # a core per rank: the work moved from the link onto the ranks can only delay, never speed up, the schedule
    assert block["charged_makespan_s"] >= block["simulated_makespan_s"] - len(plan.placements) * plan.tick_s
    assert block["measured_vs_charged"] == pytest.approx(1e-3 / block["charged_makespan_s"])
    assert "send / receive work on the ranks" in summary_line(block)
    if len({p.device for p in plan.placements}) == 1:  # no transfers: nothing to charge
        assert block["charged_makespan_s"] == pytest.approx(block["simulated_makespan_s"])
    # a plan on a profile without the overheads: no charged replay
    plain = _written(tmp_path, 2.0)
    plan2, graph2 = load_checked_plan(_plan(tmp_path, plain, "plain"))
    assert "charged_makespan_s" not in sharing_report(plan2, graph2, load_topology(plain), 1e-3)
