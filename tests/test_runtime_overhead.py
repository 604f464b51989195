"""The runtime's overhead in the cost model: the profile's `op_overhead` and the links' `send_overhead` /
`recv_overhead` (validated, priced, absent = priced as before), the runtime probe that `plan-calibrate` measures
them with, and the per-rank time breakdown a run report carries."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from planner.cli import solve_main
from planner.cost.model import compute_seconds
from planner.errors import InputError
from planner.execute.calibrate import Calibration, CalibrationSpec, Figure
from planner.execute.calibrate_probe import ProbeSpec, probe_plan, run_probe
from planner.execute.calibrate_profile import profile_document, profile_yaml
from planner.execute.dist import RankResult, RankRun
from planner.execute.partition import partition_plan
from planner.execute.run_breakdown import time_breakdown
from planner.execute.run_report import summary_lines
from planner.execute.runner import chrome_trace_of_run, run_plan
from planner.ir.hardware import load_topology
from planner.ir.load import load_model
from planner.prepare import run_passes
from planner.schedule.plan import Plan, PlanStatus, TaskPlacement

REPO = Path(__file__).resolve().parents[1]
CPU4 = REPO / "hardware_profiles" / "cpu-4.yaml"
MOE = REPO / "planner" / "data" / "models" / "moe.onnx"


def _cpu4(tmp_path: Path, group: dict | None = None, link: dict | None = None) -> Path:
    doc = yaml.safe_load(CPU4.read_text())
    doc["hosts"][0]["devices"][0].update(group or {})
    doc["links"]["intra_host"].update(link or {})
    path = tmp_path / f"p{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# ------------------------------------------------------------------------------------------ schema and pricing
def test_the_overheads_add_to_the_launch_overhead_and_the_link_latency(tmp_path):
    topology = load_topology(_cpu4(tmp_path, {"op_overhead": "7us"}, {"send_overhead": "40us",
                                                                       "recv_overhead": "25us"}))
    assert topology.devices[0].launch_overhead_s == pytest.approx(10e-6 + 7e-6)
    assert topology.links[0][1].latency_s == pytest.approx(30e-6 + 40e-6 + 25e-6)
    assert topology.links[0][1].transfer_s(3000) == pytest.approx(95e-6 + 1e-6)
    one_side = load_topology(_cpu4(tmp_path, link={"recv_overhead": "5us"}))
    assert one_side.links[0][1].latency_s == pytest.approx(35e-6)


def test_a_profile_without_them_prices_exactly_as_before(tmp_path):
    graph = run_passes(load_model(MOE))
    plain = load_topology(CPU4)
    assert plain.devices[0].launch_overhead_s == 10e-6 and plain.links[0][1].latency_s == 30e-6  # bit for bit
    zero = load_topology(_cpu4(tmp_path, {"op_overhead": 0}, {"send_overhead": 0, "recv_overhead": 0}))
    assert np.array_equal(compute_seconds(graph, plain), compute_seconds(graph, zero))
    with_op = load_topology(_cpu4(tmp_path, {"op_overhead": "20us"}))
    assert np.allclose(compute_seconds(graph, with_op) - compute_seconds(graph, plain), 20e-6, rtol=0, atol=1e-12)


@pytest.mark.parametrize("group,link,expect", [
    ({"op_overhead": "-3us"}, {}, "hosts[0].devices[0].op_overhead: must not be negative"),
    ({"op_overhead": "fast"}, {}, "hosts[0].devices[0].op_overhead: expected a time"),
    ({}, {"send_overhead": "1 parsec"}, "links.intra_host.send_overhead: expected a time"),
    ({}, {"recv_overhead": "-1ms"}, "links.intra_host.recv_overhead: must not be negative"),
    ({}, {"send_overheads": "1us"}, "links.intra_host.send_overheads: unknown key"),
])
def test_bad_overheads_are_refused_in_one_line_naming_the_key(tmp_path, group, link, expect):
    with pytest.raises(InputError) as err:
        load_topology(_cpu4(tmp_path, group, link))
    text = str(err.value)
    assert expect in text and "\n" not in text


# ------------------------------------------------------------------------------------------ calibration side
FIGURES = {"float_flops": 2e10, "double_flops": 1e10, "memory_bandwidth": 5e9, "launch_overhead": 2e-5,
           "link_latency": 4e-5, "link_bandwidth": 3e9}


def test_the_profile_carries_the_probe_figures_only_when_measured(tmp_path):
    def written(figures):
        doc = profile_document(figures, {}, {}, nproc=2, threads=1, torch_version="2.x", host="box",
                               date="2026-12-02T00:00:00+00:00", memory_bytes=2**34)
        path = tmp_path / "p.yaml"
        path.write_text(profile_yaml(doc))
        return doc, load_topology(path)

    doc, topology = written(FIGURES)
    assert "op_overhead" not in doc["hosts"][0]["devices"][0] and "send_overhead" not in doc["links"]["intra_host"]
    assert topology.devices[0].launch_overhead_s == pytest.approx(2e-5)
    doc, topology = written({**FIGURES, "op_overhead": 1e-5, "send_overhead": 6e-5, "recv_overhead": 3e-5})
    assert doc["hosts"][0]["devices"][0]["op_overhead"] == "10us"
    assert topology.devices[0].launch_overhead_s == pytest.approx(3e-5)
    assert topology.links[0][1].latency_s == pytest.approx(4e-5 + 6e-5 + 3e-5)


def test_the_probe_figures_are_the_profiles_overheads():
    def cal(runtime_loop: float) -> Calibration:
        figures = {"launch_overhead Relu": Figure("launch_overhead Relu", "s", [2e-5, 2e-5], ""),
                   "runtime_loop x": Figure("runtime_loop x", "s", [runtime_loop, 1.0, runtime_loop], ""),
                   "runtime_send x": Figure("runtime_send x", "s", [7e-5], ""),
                   "runtime_post x": Figure("runtime_post x", "s", [4e-5], "")}
        return Calibration(CalibrationSpec(), figures)

    got = cal(5e-6).profile_figures()
    assert got["op_overhead"] == 5e-6  # the median: one preempted repetition (1 s) does not move it
    assert got["launch_overhead"] == 2e-5  # untouched: the overhead is added when the profile is read
    assert got["send_overhead"] == 7e-5 and got["recv_overhead"] == 4e-5
    none = Calibration(CalibrationSpec(), {}).profile_figures()
    assert none["op_overhead"] is None and none["send_overhead"] is None


def test_the_probe_is_a_chain_per_rank_that_sends_every_few_ops():
    spec = ProbeSpec(nproc=2, ops_per_rank=8, every=4)
    plan, graph, program = probe_plan(spec)
    part = partition_plan(plan, graph, 2)
    assert [len(ops) for ops in part.rank_ops] == [8, 8]
    assert set(program.nodes) == {op.name for op in graph.ops}
    adds = [op for op in graph.ops if op.op_type == "Add"]
    assert len(adds) == 2 * (8 // 4)
    # each rank sends its chain's value at the cross steps, and rank 1 its last value (a graph output) to rank 0
    assert sorted((t.src, t.dst) for t in part.transfers) == [(0, 1), (0, 1), (1, 0), (1, 0), (1, 0)]
    single_plan, single_graph, _ = probe_plan(ProbeSpec(nproc=1, ops_per_rank=5))
    assert {op.op_type for op in single_graph.ops} == {"Relu"} and len(single_plan.placements) == 5


def test_the_probe_with_work_computes_between_transfers_of_the_same_small_messages():
    plan, graph, program = probe_plan(ProbeSpec(nproc=2, ops_per_rank=8, every=4, work_rows=64))
    part = partition_plan(plan, graph, 2)
    # 6 work steps per rank become an Expand and a ReduceMean each; the 2 cross steps stay Adds
    assert [len(ops) for ops in part.rank_ops] == [14, 14]
    assert sum(op.op_type == "Expand" for op in graph.ops) == sum(op.op_type == "ReduceMean" for op in graph.ops) == 12
    assert {t.shape for t in part.transfers} == {(16,)}  # the messages are as small as without work
    assert "work_shape" in program.constants and "work_shape" in graph.initializers
    assert plan.makespan_tick == max(p.end_tick for p in plan.placements) == 15  # step 7 (an Add) at ticks 14-15


@pytest.mark.dist
def test_the_probe_with_work_counts_the_late_wait_in_the_receive():
    samples = run_probe(ProbeSpec(nproc=2, ops_per_rank=8, every=2, repeat=2, work_rows=64))
    assert set(samples) == {"runtime_loop", "runtime_send", "runtime_post"}
    assert all(len(v) == 4 and all(x > 0 for x in v) for k, v in samples.items() if k != "runtime_loop")


@pytest.mark.dist
def test_the_probe_runs_through_the_rank_loop_and_measures_all_three():
    samples = run_probe(ProbeSpec(nproc=2, ops_per_rank=8, every=2, repeat=2))
    assert set(samples) == {"runtime_loop", "runtime_send", "runtime_post"}
    assert all(len(v) == 4 and all(x >= 0 for x in v) for v in samples.values())  # 2 ranks x 2 repetitions
    assert all(x > 0 for k in ("runtime_send", "runtime_post") for x in samples[k])


# ------------------------------------------------------------------------------------------ the breakdown
def _two_rank_plan() -> tuple[Plan, object, object]:
    plan, graph, _ = probe_plan(ProbeSpec(nproc=2, ops_per_rank=4, every=2))
    return plan, graph, partition_plan(plan, graph, 2)


def test_the_breakdown_splits_receive_waits_at_the_senders_op_end_and_adds_up():
    plan, graph, part = _two_rank_plan()
    # rank 1 left the barrier 1 ms after rank 0; it waits for r0_t1 (made by rank 0's r0_op1, ending at 5 ms on
    # rank 0's clock = 4 ms on rank 1's) from 2 ms to 6 ms: 2 ms early (the plan's wait), 2 ms late (transport)
    r0 = RankRun(10e-3, [("post", "", 0.0, 1e-4), ("op", "r0_op0", 1e-3, 2e-3), ("op", "r0_op1", 2e-3, 5e-3),
                         ("send", "r0_op1", 5e-3, 6e-3), ("tail", "", 9e-3, 10e-3)], start_s=100.0)
    r1 = RankRun(8e-3, [("op", "r1_op0", 0.0, 1e-3), ("recv", "r0_t1", 2e-3, 6e-3), ("op", "r1_op1", 6e-3, 7e-3)],
                 start_s=100.001)
    rows = time_breakdown(plan, part, [RankResult(0, 0.0, [r0]), RankResult(1, 0.0, [r1])], 0, graph)
    a, b = rows
    assert a["ops_s"] == pytest.approx(4e-3) and a["send_s"] == pytest.approx(1e-3)
    assert a["post_s"] == pytest.approx(1e-4) and a["tail_s"] == pytest.approx(1e-3)
    assert b["recv_early_s"] == pytest.approx(2e-3) and b["recv_late_s"] == pytest.approx(2e-3)
    for row in rows:
        parts = sum(row[k] for k in ("ops_s", "recv_early_s", "recv_late_s", "send_s", "post_s", "tail_s",
                                     "other_s"))
        assert parts == pytest.approx(row["end_s"], abs=1e-6)
    assert b["per_send_s"] is None and a["per_send_s"] == pytest.approx(1e-3)
    # the plan's side: each rank's planned busy time (4 steps of 1 us) and its end
    assert a["sim_busy_s"] == pytest.approx(4e-6) and a["sim_end_s"] == pytest.approx(4e-6)


def test_the_trace_puts_sends_posts_and_the_tail_on_their_own_rows():
    runs = [RankRun(1.0, [("post", "", 0.0, 0.1), ("op", "a", 0.1, 0.2), ("send", "a", 0.2, 0.3),
                          ("recv", "t", 0.3, 0.4), ("tail", "", 0.4, 0.5)], start_s=0.0)]
    trace = chrome_trace_of_run([RankResult(0, 0.0, runs)], 0, ["d0"], [0])
    tids = {e["cat"]: e["tid"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert tids == {"op": 0, "recv": 1, "post": 1, "send": 2, "tail": 2}


@pytest.mark.dist
def test_a_run_report_breaks_each_ranks_time_down(tmp_path):
    plan_path = tmp_path / "probe.json"
    assert solve_main(["--model", str(MOE), "--hw", "cpu-4.yaml", "--method", "round_robin", "--out",
                       str(plan_path), "--no-pictures", "--quiet", "--format", "json"]) == 0
    run_plan(plan_path, nproc=2, repeat=2, report_path=tmp_path / "run.json")
    report = json.loads((tmp_path / "run.json").read_text())
    rows = report["time_breakdown"]
    assert [r["rank"] for r in rows] == [0, 1]
    for row in rows:
        assert row["ops"] > 0 and row["ops_s"] > 0 and row["recvs"] > 0 and row["send_events"] > 0
        parts = sum(row[k] for k in ("ops_s", "recv_early_s", "recv_late_s", "send_s", "post_s", "tail_s",
                                     "other_s"))
        assert parts == pytest.approx(row["end_s"], abs=1e-5)
        assert row["sim_busy_s"] > 0
    assert sum(r["ops"] for r in rows) == len(report["op_seconds"])
    printed = [line for line in summary_lines(report) if line.startswith("rank ")]
    assert len(printed) == 2 and all("receive waits" in line and "simulated busy" in line for line in printed)


def test_the_probe_plan_is_a_plan_of_seconds():
    plan, _, _ = probe_plan(ProbeSpec(nproc=2, ops_per_rank=3))
    assert plan.status == PlanStatus.HEURISTIC and plan.time_unit == "s"
    assert all(isinstance(p, TaskPlacement) for p in plan.placements)
