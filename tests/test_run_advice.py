"""plan-solve's advice on ranks and threads, from op times measured on 1 and on k threads, and plan-run following it.

The rule (`planner.run_advice`): one rank on t threads is predicted as its t-thread op times one after the other,
the plan's ranks as the plan's makespan; the split is advised only when it predicts at least `min_gain` shorter
than the best single rank.
"""

from __future__ import annotations

import dataclasses
import json

import onnx
import pytest
from onnx import TensorProto, helper

from planner.cli import solve_main
from planner.cli_run import run_main
from planner.cost.measured import load_thread_times
from planner.errors import InputError
from planner.execute.calibrate_profile import op_csv
from planner.run_advice import RunAdvicePolicy, advise_run
from planner.schedule.plan import RunAdvice
from planner.schedule.plan_io import load_plan, plan_from_dict, plan_to_dict

TIMES = {1: {"a": 0.004, "b": 0.004, "c": 0.002}, 2: {"a": 0.003, "b": 0.003, "c": 0.001}}


def test_the_split_is_advised_when_it_predicts_the_margin_or_more():
    # singles: 1 thread 10 ms, 2 threads 7 ms; the split at 5.6 ms is 20 % shorter than 7 ms
    advice = advise_run(0.0056, 2, TIMES, ["a", "b", "c"], RunAdvicePolicy(min_gain=0.2 - 1e-9))
    assert (advice.ranks, advice.threads, advice.predicted_s) == (2, 1, 0.0056)
    assert dict(advice.options_s) == pytest.approx(
        {"1 rank x 1 thread": 0.010, "1 rank x 2 threads": 0.007, "2 ranks x 1 thread": 0.0056})
    assert advice.reason == "the plan's 2 ranks are predicted 20% shorter than 1 rank x 2 threads"
    assert advise_run(0.0056, 2, TIMES, ["a", "b", "c"], RunAdvicePolicy(min_gain=0.2 + 1e-9)).ranks == 1


def test_a_split_under_the_margin_leaves_the_fastest_single_rank_and_says_why():
    advice = advise_run(0.0064, 2, TIMES, ["a", "b", "c"], RunAdvicePolicy(min_gain=0.1))
    assert (advice.ranks, advice.threads) == (1, 2)
    assert advice.predicted_s == pytest.approx(0.007)
    assert advice.reason == ("1 rank x 2 threads is predicted fastest: the plan's 2 ranks are predicted only 9% "
                             "shorter, under the 10% a split must gain")
    longer = advise_run(0.008, 2, TIMES, ["a", "b", "c"])
    assert longer.reason.endswith("the plan's 2 ranks are predicted longer")


def test_one_thread_wins_where_more_threads_are_slower_and_only_the_run_ops_count():
    slower = {1: {"a": 0.001, "b": 0.001}, 2: {"a": 0.002, "b": 0.002}}
    advice = advise_run(0.5, 1, slower, ["a"])  # b is not an op of the run
    assert (advice.ranks, advice.threads, advice.predicted_s) == (1, 1, 0.001)
    assert advice.reason == "1 rank x 1 thread is predicted fastest: the plan uses one device"
    assert advise_run(0.001, 2, {1: slower[1]}, ["a", "b"]) is None  # one thread count: nothing to choose


def test_thread_columns_round_trip_through_the_csv(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(op_csv(TIMES[1], {"seconds_2_threads": TIMES[2]}))
    assert load_thread_times(path) == TIMES
    plain = tmp_path / "plain.csv"
    plain.write_text(op_csv(TIMES[1]))
    assert load_thread_times(plain) == {1: TIMES[1]}
    bad = tmp_path / "bad.csv"
    bad.write_text("op,seconds,seconds_2_threads\na,0.1,fast\n")
    with pytest.raises(InputError, match="line 2: seconds_2_threads='fast' is not a number"):
        load_thread_times(bad)


def test_the_advice_round_trips_through_the_plan_file(tmp_path):
    from planner.schedule.plan import Plan, PlanStatus, TaskPlacement

    advice = RunAdvice(1, 2, 0.007, (("1 rank x 1 thread", 0.01), ("1 rank x 2 threads", 0.007)), "why")
    plan = Plan("p", (TaskPlacement("a", 0, 0, 5),), ("cpu0",), 5, 5, PlanStatus.HEURISTIC, "heft", run=advice)
    data = plan_to_dict(plan)
    assert data["run"] == {"ranks": 1, "threads": 2, "predicted_s": 0.007,
                           "options_s": {"1 rank x 1 thread": 0.01, "1 rank x 2 threads": 0.007}, "reason": "why"}
    assert plan_from_dict(json.loads(json.dumps(data))).run == advice
    assert "run" not in plan_to_dict(Plan("p", plan.placements, ("cpu0",), 5, 5, PlanStatus.HEURISTIC, "heft"))
    bounded = dataclasses.replace(advice, bound_s=0.004)
    data = plan_to_dict(dataclasses.replace(plan, run=bounded))
    assert data["run"]["bound_s"] == 0.004
    assert plan_from_dict(json.loads(json.dumps(data))).run == bounded


def _two_branches(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 8])
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="left"), helper.make_node("Tanh", ["x"], ["t"],
                                                                                       name="right"),
             helper.make_node("Add", ["s", "t"], ["y"], name="join")]
    onnx.save(helper.make_model(helper.make_graph(nodes, "branches", [x], [y]),
                                opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.dist
@pytest.mark.parametrize(("two_thread_s", "expected"), [(0.0001, (1, 2)), (0.001, (2, 1))])
def test_plan_solve_advises_and_plan_run_follows(tmp_path, hw_dir, capsys, two_thread_s, expected):
    """Op times where two threads are ten times faster advise one rank with both cores; where they gain nothing,
    the two branches on two ranks.  plan-run --executor fast runs what the plan file advises."""
    model = _two_branches(tmp_path / "branches.onnx")
    times = tmp_path / "times.csv"
    times.write_text(op_csv({"left": 0.001, "right": 0.001, "join": 0.0001},
                            {"seconds_2_threads": {"left": two_thread_s, "right": two_thread_s, "join": 0.0001}}))
    plan = tmp_path / "plan.json"
    assert solve_main(["--model", str(model), "--hw", str(hw_dir / "cpu-4.yaml"), "--measured", str(times),
                       "--method", "heft", "--out", str(plan), "--no-pictures", "--format", "json"]) == 0
    err = capsys.readouterr().err
    advice = load_plan(plan).run
    assert advice is not None and (advice.ranks, advice.threads) == expected
    assert f"run: {advice.label()} ({advice.reason})" in err
    # join alone, then the branches side by side: the longer of one branch at its fastest and their work on 2 cores
    bound_s = 0.0001 + max(min(0.001, two_thread_s), min(0.001, 2 * two_thread_s))
    assert advice.bound_s == pytest.approx(bound_s)
    assert f"no run on 2 cores is shorter than {bound_s * 1e3:.3g} ms" in err
    assert run_main(["--plan", str(plan), "--executor", "fast", "--repeat", "1", "--check", "--format",
                     "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["ranks"], report["threads"]) == expected
    assert report["reason"] == f"as plan-solve advised: {advice.reason}"
    assert report["simulated_makespan_s"] == pytest.approx(advice.predicted_s)
    assert report["max_abs_error"] <= 1e-6


def test_engine_op_times_share_out_the_whole_graphs_measured_run(repo_root):
    """The kernel times, profiled without fusion, are scaled so that they sum to the whole graph's optimized run;
    each op keeps its share of the profiled work."""
    from planner.execute.engine_times import engine_op_times
    from planner.execute.program import default_feeds, prepared_graph

    model = repo_root / "planner" / "data" / "models" / "moe.onnx"
    graph = prepared_graph(model)
    (times,) = engine_op_times(graph, model, default_feeds(graph), threads=2, repeat=5)
    assert times.threads == 2 and set(times.op_s) == {op.name for op in graph.ops}
    assert sum(times.op_s.values()) == pytest.approx(times.whole_s, rel=1e-9)
    assert times.whole_s > 0 and times.profiled_s > 0 and times.whole_noise_s >= 0
    matmuls = [op.name for op in graph.ops if op.op_type == "MatMul"]
    assert all(times.op_s[name] > 0 for name in matmuls)


@pytest.mark.dist
def test_a_crossing_is_timed_on_the_executor_itself(tmp_path):
    """The probe runs a chain of tiny ops on one rank and on two ranks that alternate at every op; a crossing's
    cost is the difference over the crossings (never negative), and calibrate writes it into the link."""
    from planner.execute.program import prepared_graph
    from planner.execute.shm_probe import crossing_s

    cost = crossing_s(tmp_path / "chain.onnx", crossings=6, repeat=3)
    graph = prepared_graph(tmp_path / "chain.onnx")
    assert [op.op_type for op in graph.ops] == ["Relu"] * 7
    assert 0.0 <= cost < 0.1


def test_the_shared_memory_link_carries_the_overhead_on_both_sides():
    from planner.execute.calibrate_profile import with_shared_memory_link

    doc = {"provenance": {"measured": {"send_overhead": "x"}, "spread": {}}}
    with_shared_memory_link(doc, 20e-6, 1e9, 15e-6)
    link = doc["links"]["intra_host"]
    assert (link["send_overhead"], link["recv_overhead"]) == (link["latency"].replace("20", "15"),) * 2
    assert "send_overhead" not in doc["provenance"]["measured"] and "crossing" in doc["provenance"]["measured"]["link"]


@pytest.mark.dist
def test_a_segments_overhead_is_its_time_beyond_its_ops(tmp_path):
    """Ops four at a time on alternating ranks: with op times of zero the overhead is the segments' mean time
    (positive), with op times far above any segment's it is clipped at zero."""
    from planner.execute.shm_probe import segment_overhead_s
    from planner.ir.onnx_segment import chain_model

    model = tmp_path / "chain.onnx"
    model.write_bytes(chain_model(12))
    ops = [f"op{i}" for i in range(12)]
    assert segment_overhead_s(model, dict.fromkeys(ops, 0.0), repeat=3) > 0
    assert segment_overhead_s(model, dict.fromkeys(ops, 1.0), repeat=3) == 0.0
