"""Closing the loop from run to plan: ranks release activations after their last use, the run report carries
measured op times that plan-solve --measured reads, the prediction's quality, and measured vs predicted peak
tensor bytes per rank."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from planner.cli import solve_main
from planner.cost.measured import load_measured_times
from planner.errors import InputError
from planner.execute.partition import partition_plan, release_after
from planner.execute.program import prepared_graph
from planner.execute.runner import run_plan
from planner.schedule.plan_io import load_plan

REPO = Path(__file__).resolve().parents[1]
MOE = REPO / "planner" / "data" / "models" / "moe.onnx"


def _plan(tmp: Path, method: str, name: str, measured: Path | None = None) -> Path:
    out = tmp / f"{name}.json"
    args = ["--model", str(MOE), "--hw", "cpu-4.yaml", "--method", method, "--out", str(out), "--no-pictures",
            "--quiet", "--format", "json"]
    assert solve_main(args + (["--measured", str(measured)] if measured else [])) == 0
    return out


@pytest.fixture(scope="module")
def moe_rr(tmp_path_factory) -> Path:
    return _plan(tmp_path_factory.mktemp("rr"), "round_robin", "rr")


@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_every_activation_is_released_once_after_its_last_use_on_its_rank(moe_rr, nproc):
    graph = prepared_graph(MOE)
    part = partition_plan(load_plan(moe_rr), graph, nproc)
    producer = {t: op.name for op in graph.ops for t in op.writes}
    for rank in range(nproc):
        ops = part.rank_ops[rank]
        position = {name: i for i, name in enumerate(ops)}
        release = release_after(part, graph, rank)
        released = [t for ts in release.values() for t in ts]
        assert len(released) == len(set(released))
        kept = set(graph.graph_inputs) | set(graph.initializers) | (set(part.outputs) if rank == 0 else set())
        assert not set(released) & kept
        touched = {t for name in ops for t in (*graph.op(name).reads, *graph.op(name).writes)} - kept
        assert set(released) == touched  # nothing held to the end of the repetition
        for after, tensors in release.items():
            for t in tensors:
                users = [position[n] for n in ops if t in graph.op(n).reads or t in graph.op(n).writes]
                assert position[after] == max(users)
                if producer.get(t) in position:  # made here: released no earlier than its maker
                    assert position[after] >= position[producer[t]]


@pytest.mark.dist
def test_the_run_report_says_how_good_the_prediction_was_and_replans(moe_rr, tmp_path):
    report_path = tmp_path / "run.json"
    outcome = run_plan(moe_rr, nproc=2, repeat=2, report_path=report_path)
    report = json.loads(report_path.read_text())
    graph = prepared_graph(MOE)
    assert set(report["op_seconds"]) == {op.name for op in graph.ops}
    assert all(v > 0 for v in report["op_seconds"].values())
    part = outcome.partition
    assert report["op_rank"] == {op: part.rank_of_op[op] for op in report["op_seconds"]}
    assert report["measured_vs_simulated"] == pytest.approx(
        report["measured_makespan_s"] / report["simulated_makespan_s"])
    assert len(report["simulated_busy_s"]) == 2 and all(s > 0 for s in report["simulated_busy_s"])
    devs = report["op_deviations"]
    assert 0 < len(devs) <= 10
    gaps = [abs(d["measured_s"] - d["simulated_s"]) for d in devs]
    assert gaps == sorted(gaps, reverse=True)
    # memory: the plan's prediction per rank (two of cpu-4's devices on each) beside the measured peak; weights
    # dominate the MoE and every rank holds its ops' weights, so the two agree well
    assert len(report["predicted_peak_bytes_per_device"]) == 4
    for measured, predicted, fixed in zip(report["peak_tensor_bytes"], report["predicted_peak_bytes"],
                                          report["fixed_tensor_bytes"], strict=True):
        assert 0 < fixed <= measured and predicted > 0
        assert 0.5 < measured / predicted < 2.0
    # re-planning from the run reads op_seconds
    measured = load_measured_times(report_path)
    assert measured == pytest.approx(report["op_seconds"])
    replanned = _plan(tmp_path, "heft", "again", measured=report_path)
    assert load_plan(replanned).makespan_tick > 0


@pytest.mark.dist
def test_a_rank_holds_less_than_every_activation_at_once(tmp_path):
    # one device: without releasing, the rank would hold every activation of the step at its end
    plan = _plan(tmp_path, "single_device", "one")
    report = run_plan(plan, nproc=1, repeat=1, report_path=tmp_path / "r.json").report
    graph = prepared_graph(MOE)
    every_activation = sum(graph.tensors[t].size_bytes for op in graph.ops for t in op.writes)
    (peak,), (fixed,) = report["peak_tensor_bytes"], report["fixed_tensor_bytes"]
    assert fixed < peak < fixed + every_activation / 2


def test_measured_reads_a_run_report(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"plan": "p.json", "op_seconds": {"a": 1e-5, "b": 2}}))
    assert load_measured_times(path) == {"a": 1e-5, "b": 2.0}


@pytest.mark.parametrize("times,expect", [({"a": -1}, "not a non-negative number"), ({"a": "x"}, "not a non-"),
                                          ({}, "op_seconds is empty"), ([1, 2], "not a mapping")])
def test_a_bad_run_report_is_refused(tmp_path, times, expect):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"op_seconds": times}))
    with pytest.raises(InputError, match=expect):
        load_measured_times(path)


@pytest.mark.parametrize("nproc", [2, 4])
def test_receives_are_posted_by_their_first_reader_and_acks_name_received_sends(moe_rr, nproc):
    graph = prepared_graph(MOE)
    plan = load_plan(moe_rr)
    part = partition_plan(plan, graph, nproc)
    start = {p.task: p.start_tick for p in plan.placements}
    end = {p.task: p.end_tick for p in plan.placements}
    by_tag = {t.tag: t for t in part.transfers}
    assert part.post_before and set(part.post_before) <= set(by_tag)
    for tag, op in part.post_before.items():
        tr = by_tag[tag]
        ops = part.rank_ops[tr.dst]
        readers = [i for i, name in enumerate(ops) if tr.tensor in graph.op(name).reads]
        point = ops.index(op)
        assert 0 < point and (not readers or point <= readers[0])
        assert start[op] >= end[tr.producer] or (readers and point == readers[0])
    for tr in part.transfers:
        ack = part.acks[tr.tag]
        if ack < 0:
            continue
        (back,) = [t for t in part.transfers if (t.src, t.dst, t.seq) == (tr.dst, tr.src, ack)]
        before = part.rank_ops[tr.src][: part.rank_ops[tr.src].index(tr.producer)]
        assert any(back.tensor in graph.op(name).reads for name in before)


def test_load_factors_make_a_ranks_ops_add_up_to_its_mean_busy_time():
    from planner.execute.dist import RankResult, RankRun
    from planner.execute.run_report import load_factors, measured_op_seconds

    runs = [RankRun(1.0, [("op", "a", 0.0, 0.1), ("op", "b", 0.1, 0.2)]),
            RankRun(1.0, [("op", "a", 0.0, 0.1), ("op", "b", 0.1, 0.9)]),  # preempted inside b once
            RankRun(1.0, [("op", "a", 0.0, 0.1), ("op", "b", 0.1, 0.2)])]
    results = [RankResult(0, 0.0, runs), RankResult(1, 0.0, [RankRun(0.0)])]
    medians = measured_op_seconds(results, statistics.median)
    assert medians == pytest.approx({"a": 0.1, "b": 0.1})
    factors = load_factors(results, medians)
    assert factors[1] == 1.0
    mean_busy = (0.2 + 0.9 + 0.2) / 3
    assert factors[0] * (medians["a"] + medians["b"]) == pytest.approx(mean_busy)
