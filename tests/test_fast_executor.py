"""The fast executor: segments cut at the communication points, engines per segment, shared-memory transport,
and the choice between one rank with every core and the plan's ranks.

Plans run for real on 2 forked ranks and match onnxruntime within 1e-5 (float32; torch kernels against
onnxruntime's, or onnxruntime against itself on cut-out segments).
"""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest
import torch

from planner.cli import solve_main
from planner.cli_run import run_main
from planner.execute.fast_choice import RunConfig, choose_run, run_config
from planner.execute.partition import Transfer, partition_plan
from planner.execute.program import default_feeds
from planner.execute.runner import load_checked_plan
from planner.execute.segments import rank_segments
from planner.execute.shm_transport import ShmTransport
from planner.ir.onnx_values import run_onnxruntime

ATOL = 1e-5


def _plan(tmp, model, hw, name, method="heft"):
    out = tmp / f"{name}.json"
    rc = solve_main(["--model", str(model), "--hw", str(hw), "--method", method, "--out", str(out),
                     "--no-pictures", "--quiet", "--format", "json"])
    assert rc == 0
    return out


@pytest.fixture(scope="module")
def plans(tmp_path_factory, repo_root, light_models_dir, hw_dir):
    tmp = tmp_path_factory.mktemp("fast")
    hw = hw_dir / "cpu-4.yaml"
    return {"moe": _plan(tmp, repo_root / "planner" / "data" / "models" / "moe.onnx", hw, "moe", "round_robin"),
            "inception_v1": _plan(tmp, light_models_dir / "light_inception_v1.onnx", hw, "inception_v1")}


def test_segments_cover_the_rank_order_and_cut_at_every_send_and_first_receive(plans):
    plan, graph = load_checked_plan(plans["moe"])
    part = partition_plan(plan, graph, 2)
    assert part.transfers, "a round-robin plan over two ranks must transfer tensors"
    for rank in (0, 1):
        segments = rank_segments(part, graph, rank)
        assert tuple(op for seg in segments for op in seg.ops) == part.rank_ops[rank]
        sends = part.sends_after(rank)
        received = {tr.tensor for lst in part.incoming(rank).values() for tr in lst}
        seen: set[str] = set()
        for seg in segments:
            # a send leaves right after its producer: the producer ends the segment, and no other op sends inside it
            assert all(op not in sends for op in seg.ops[:-1])
            assert {tr.tensor for tr in seg.send} == {tr.tensor for tr in sends.get(seg.ops[-1], ())}
            # a received tensor is waited for right before the first op that reads it, which starts its segment
            first_reads = {t for t in graph.op(seg.ops[0]).reads if t in received and t not in seen}
            assert set(seg.receive) == first_reads
            assert all(t not in received or t in seen or t in first_reads
                       for op in seg.ops for t in graph.op(op).reads)
            seen.update(seg.receive)
            assert not set(seg.inputs) & graph.initializers
        assert seen | ({t for t in part.outputs} if rank == 0 else set()) >= received


@pytest.mark.dist
@pytest.mark.parametrize("engine", ["torch", "onnxruntime", "auto"])
def test_two_ranks_match_onnxruntime_on_every_engine(plans, engine):
    plan, graph = load_checked_plan(plans["moe"])
    feeds = default_feeds(graph)
    trial, run = run_config(plan, graph, feeds, RunConfig(2, 1, engine), repeat=2, warmup=2)
    ref = run_onnxruntime(plan.model_path, feeds, list(run.outputs))
    for name, value in ref.items():
        np.testing.assert_allclose(run.outputs[name], value, atol=ATOL)
    assert len(trial.makespans_s) == 2 and all(t > 0 for t in trial.makespans_s)
    segments = sum(len(rank_segments(partition_plan(plan, graph, 2), graph, r)) for r in (0, 1))
    assert sum(trial.engines.values()) == segments
    if engine != "auto":
        assert set(trial.engines) == {engine}


@pytest.mark.dist
def test_a_model_nobody_here_wrote_runs_split_and_matches(plans):
    plan, graph = load_checked_plan(plans["inception_v1"])
    feeds = default_feeds(graph)
    _, run = run_config(plan, graph, feeds, RunConfig(2, 1, "auto"), repeat=1, warmup=2)
    ref = run_onnxruntime(plan.model_path, feeds, list(run.outputs))
    for name, value in ref.items():
        np.testing.assert_allclose(run.outputs[name], value, atol=ATOL)


@pytest.mark.dist
def test_choice_measures_every_candidate_and_says_why(plans):
    plan, graph = load_checked_plan(plans["moe"])
    lines: list[str] = []
    choice = choose_run(plan, graph, default_feeds(graph), cores=2, repeat=5, warmup=2, say=lines.append)
    assert [t.config for t in choice.trials] == [RunConfig(1, 2), RunConfig(1, 1), RunConfig(2, 1)]
    assert len(lines) == 3 and "1 rank x 2 threads" in lines[0] and "1 rank x 1 thread:" in lines[1]
    assert "2 ranks x 1 thread" in lines[2]
    *singles, split = choice.trials
    single = min(singles, key=lambda t: t.median_s)
    noise = max(single.noise_s, split.noise_s)
    expected = split if single.median_s - split.median_s > noise else single
    assert choice.chosen is expected
    assert ("faster than one rank" in choice.reason) == (expected is split)


def test_noise_is_the_interquartile_range_so_one_slow_repetition_does_not_hide_a_gain():
    from planner.execute.fast_choice import Trial

    trial = Trial(RunConfig(1, 1), (1.0, 1.0, 1.1, 1.2, 9.0), {})
    assert trial.spread_s == pytest.approx(8.0)
    assert trial.noise_s == pytest.approx(statistics.quantiles(trial.makespans_s, n=4)[2] - 1.0)
    assert Trial(RunConfig(1, 1), (1.0, 2.0), {}).noise_s == pytest.approx(1.0)  # too few for quartiles: the spread


def test_shared_memory_refuses_a_tensor_the_plan_does_not_expect_and_times_out_by_name():
    tr = Transfer("x", 0, 1, 0, 7, (2, 3), "float", "producer", 24)
    transport = ShmTransport([tr], 2, timeout_s=0.2)
    with pytest.raises(RuntimeError, match=r"'x' for rank 1 is \(3, 2\)"):
        transport.send(tr, torch.zeros(3, 2))
    with pytest.raises(RuntimeError, match=r"receiving 'x' from rank 0 timed out"):
        transport.receive(tr)
    transport.send(tr, torch.arange(6, dtype=torch.float32).reshape(2, 3))
    assert transport.receive(tr).tolist() == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.dist
def test_plan_run_choose_reports_its_choice_and_checks(plans, capsys):
    assert run_main(["--plan", str(plans["moe"]), "--choose", "--repeat", "2", "--check", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["executor"] == "fast" and report["reason"]
    assert report["ranks"] in (1, 2) and report["max_abs_error"] <= ATOL
    assert len(report["measured_makespans_s"]) == 2


def test_plan_run_fast_refuses_what_it_cannot_do(plans, capsys):
    assert run_main(["--plan", str(plans["moe"]), "--executor", "fast", "--backend", "nccl"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fast executor" in err[0]


@pytest.mark.dist
def test_ranks_forked_after_the_parent_used_torch_threads_still_run(plans):
    """A parent whose torch kernels already ran on two threads (OpenMP's pool started) forks ranks that run torch
    kernels with two threads asked for: they finish (torch stays on one thread in a rank) and match."""
    from planner.execute.fast_run import FastSpec, launch_fast

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.mm(torch.ones(512, 512), torch.ones(512, 512))
        plan, graph = load_checked_plan(plans["moe"])
        feeds = default_feeds(graph)
        run = launch_fast(FastSpec(plan.model_path, graph, partition_plan(plan, graph, 1), feeds, threads=2,
                                   engine="torch", repeat=1, warmup=1, run_timeout_s=60))
    finally:
        torch.set_num_threads(before)
    ref = run_onnxruntime(plan.model_path, feeds, list(run.outputs))
    for name, value in ref.items():
        np.testing.assert_allclose(run.outputs[name], value, atol=ATOL)


def test_engine_op_times_name_every_op_and_feed_the_planner(plans, tmp_path, repo_root):
    """plan-calibrate --engine onnxruntime writes one time per op of the planned graph (the planner's names), and
    plan-solve plans on them."""
    from planner.cli_calibrate import calibrate_main
    from planner.cost.measured import load_measured_times
    from planner.execute.program import prepared_graph

    model = repo_root / "planner" / "data" / "models" / "moe.onnx"
    times = tmp_path / "moe.times.csv"
    assert calibrate_main(["--quick", "--model", str(model), "--engine", "onnxruntime", "--out",
                           str(tmp_path / "cal.yaml"), "--op-times", str(times), "--quiet",
                           "--no-op-factors", "--no-runtime-probe", "--no-sharing"]) == 0
    measured = load_measured_times(times)
    graph = prepared_graph(model)
    assert set(measured) == {op.name for op in graph.ops}
    assert all(v >= 0 for v in measured.values())
    assert all(measured[op.name] > 0 for op in graph.ops if op.op_type == "MatMul")
    out = tmp_path / "plan.json"
    assert solve_main(["--model", str(model), "--measured", str(times), "--method", "heft", "--out", str(out),
                       "--no-pictures", "--quiet", "--format", "json"]) == 0


@pytest.mark.dist
def test_a_static_batch_changed_at_planning_runs_and_checks_against_the_rebatched_model(tmp_path, hw_dir, capsys):
    """A model exported at batch 1 (a Reshape to [1, 2, 2] carries the batch) planned at batch 8 with
    --input-shape runs, and --check compares with onnxruntime on the model at batch 8 (the file refuses it)."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Sigmoid", ["x"], ["r"], name="sigmoid"),
             helper.make_node("Reshape", ["r", "shape"], ["y"], name="flatten")]
    graph = helper.make_graph(nodes, "fixed-batch", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 2])],
                              [helper.make_tensor("shape", TensorProto.INT64, [3], [1, 2, 2])])
    model = tmp_path / "fixed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    plan = tmp_path / "plan.json"
    assert solve_main(["--model", str(model), "--hw", str(hw_dir / "cpu-4.yaml"), "--input-shape", "x=8x4",
                       "--method", "round_robin", "--out", str(plan), "--no-pictures", "--quiet",
                       "--format", "json"]) == 0
    capsys.readouterr()
    assert run_main(["--plan", str(plan), "--executor", "fast", "--nproc", "2", "--repeat", "1", "--check",
                     "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["max_abs_error"] is not None and report["max_abs_error"] <= 1e-6


@pytest.mark.dist
def test_plan_calibrate_prices_the_shared_memory_link_when_asked(tmp_path, capsys):
    from planner.cli_calibrate import calibrate_main
    from planner.ir.hardware import load_topology

    out = tmp_path / "shm.yaml"
    assert calibrate_main(["--quick", "--nproc", "2", "--transport", "shm", "--out", str(out), "--quiet",
                           "--no-op-factors", "--no-runtime-probe", "--no-sharing"]) == 0
    text = out.read_text()
    assert "shared-memory-measured" in text and "gloo ping-pong" not in text
    topology = load_topology(out)
    assert topology.devices and len(topology.devices) == 2
    capsys.readouterr()
    assert calibrate_main(["--quick", "--transport", "shm", "--out", str(tmp_path / "x.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--nproc 2" in err[0] and not (tmp_path / "x.yaml").exists()
