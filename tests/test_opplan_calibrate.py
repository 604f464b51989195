"""`opplan.calibrate` on this machine (tiny sizes, one process, no op factors, runtime probe or sharing: seconds):
its figures frame, its op-times frame for both engines, the profile it writes (read back by the planner's loader)
and the op-times CSV written from that frame, byte for byte the formatting ``plan-calibrate`` always had."""

from __future__ import annotations

import csv
import io
import math

import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper

import opplan
import planner.cli_calibrate
from planner.calibration import measure_profile
from planner.cli_calibrate import calibrate_main
from planner.cost.measured import load_measured_times
from planner.execute.calibrate_profile import op_csv, op_frame, op_frame_csv, summary_lines
from planner.ir.hardware import load_topology

QUICK = {"quick": True, "repeats": 1, "op_factors": False, "runtime_probe": False, "sharing": False}
OPS = ["mm", "bias", "relu"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """x @ w + b, then Relu: three ops with the names the op-times frame must carry."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["a"], name="bias"),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    inits = [helper.make_tensor("w", TensorProto.FLOAT, [16, 16], [0.01] * 256),
             helper.make_tensor("b", TensorProto.FLOAT, [16], [0.1] * 16)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], inits)
    path = tmp_path_factory.mktemp("calibrate") / "mlp.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.fixture(scope="module")
def torch_calibration(model):
    lines: list[str] = []
    cal = opplan.calibrate(model=model, progress=lines.append, **QUICK)
    return cal, lines


def _old_op_csv(op_seconds, more=None) -> str:
    """The op-times CSV as plan-calibrate wrote it before the frame: csv.writer, every time as f"{x:.9g}"."""
    more = more or {}
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["op", "seconds", *more])
    for op, seconds in op_seconds.items():
        writer.writerow([op, f"{seconds:.9g}", *(f"{column.get(op, 0.0):.9g}" for column in more.values())])
    return buf.getvalue()


@pytest.mark.parametrize("times, more", [
    ({"a": 0.0, "b": 1e-9, "c": 123.456789012, "d": 1, "e": -0.0}, None),
    ({"x,y": 1.5e-5, 'q"uote': 0.25, "": 5e-324, "big": 1e300, "inf": math.inf, "nan": math.nan},
     {"seconds_2_threads": {"x,y": 7.25e-6, "big": 2**60}, "seconds_4_threads": {}}),
    ({}, {"seconds_2_threads": {}}),
])
def test_the_op_times_csv_from_its_frame_has_the_old_bytes(times, more) -> None:
    assert op_csv(times, more) == _old_op_csv(times, more)
    assert op_frame_csv(op_frame(times, more)) == _old_op_csv(times, more)


@pytest.mark.dist  # forks a measuring rank
def test_the_figures_frame_and_the_op_times_frame_of_a_torch_calibration(torch_calibration, model) -> None:
    cal, _ = torch_calibration
    figures = cal.to_frame()
    assert list(figures.columns) == ["name", "value", "unit", "spread", "samples"]
    assert list(figures["name"]) == list(cal.measured.calibration.figures)
    assert {"launch_overhead Relu", "memory_bandwidth add"} <= set(figures["name"])
    assert set(figures["unit"]) <= {"s", "FLOP/s", "B/s", "x"}
    assert (figures["value"] > 0).all() and (figures["spread"] == 0).all() and (figures["samples"] == 1).all()
    times = cal.op_times_frame()
    assert list(times.columns) == ["op", "seconds"] and list(times["op"]) == OPS
    assert (times["seconds"] > 0).all()
    assert cal.op_cost_factors == {} and cal.wall_s > 0


@pytest.mark.dist  # forks a measuring rank
def test_a_written_calibration_is_a_profile_and_the_op_times_are_its_frame(torch_calibration, tmp_path) -> None:
    cal, _ = torch_calibration
    profile, times = cal.write(tmp_path / "out" / "cal.yaml")
    assert times == tmp_path / "out" / "mlp.times.csv"
    topology = load_topology(profile)
    assert topology.num_devices == 1 and "plan-calibrate" in topology.notes["provenance"]
    assert topology.devices[0].launch_overhead_s > 0
    frame = cal.op_times_frame()
    text = times.read_text()
    assert text == op_frame_csv(frame) == _old_op_csv(cal.measured.calibration.op_seconds)
    back = pd.read_csv(times)
    assert list(back.columns) == list(frame.columns) and list(back["op"]) == list(frame["op"])
    assert back["seconds"].tolist() == pytest.approx(frame["seconds"].tolist(), rel=1e-8)
    assert load_measured_times(times) == pytest.approx(dict(zip(frame["op"], frame["seconds"], strict=True)),
                                                       rel=1e-8)
    assert opplan.load_hardware(str(profile)).num_devices == 1


@pytest.mark.dist  # forks a measuring rank
def test_progress_goes_to_the_callback_and_nothing_prints(capfd) -> None:
    lines: list[str] = []
    cal = opplan.calibrate(progress=lines.append, **QUICK)
    printed = capfd.readouterr()
    assert printed.out == "" and printed.err == ""
    assert lines[0].startswith("calibrate: measuring with 1 process(es)")
    assert any(line.startswith("launch_overhead Relu") for line in lines)
    assert cal.op_times_frame() is None


@pytest.mark.dist  # forks a measuring rank
def test_without_a_model_only_the_profile_is_written(tmp_path) -> None:
    cal = opplan.calibrate(**QUICK)
    profile, times = cal.write(tmp_path / "cal.yaml")
    assert times is None and [p.name for p in tmp_path.iterdir()] == ["cal.yaml"]
    assert load_topology(profile).num_devices == 1


@pytest.mark.dist  # forks two measuring ranks
def test_the_onnxruntime_engine_times_ops_on_one_thread_and_on_every_core(model) -> None:
    # two ranks of one torch thread each, not one rank of two: a rank forked from a process whose OpenMP pool has
    # run (this test process, after other tests) hangs when it starts torch threads of its own
    cal = opplan.calibrate(model=model, engine="onnxruntime", nproc=2, threads=1, **QUICK)
    times = cal.op_times_frame()
    assert list(times.columns) == ["op", "seconds", "seconds_2_threads"] and list(times["op"]) == OPS
    assert (times[["seconds", "seconds_2_threads"]] >= 0).all().all() and times["seconds"].sum() > 0
    engine = cal.measured.engine_times
    assert [m.threads for m in engine] == [1, 2]
    assert op_frame_csv(times) == _old_op_csv(engine[0].op_s, {"seconds_2_threads": engine[1].op_s})


@pytest.mark.dist  # forks a measuring rank
def test_plan_calibrate_prints_and_writes_the_frames_the_api_returns(model, tmp_path, capsys, monkeypatch) -> None:
    """The command's measurement, kept as it passes (the real `measure_profile` runs), is what the API wraps: its
    printed table is the figures frame, its files are the profile text and the op-times frame's CSV."""
    kept = []

    def keep(request):
        kept.append(measure_profile(request))
        return kept[-1]

    monkeypatch.setattr(planner.cli_calibrate, "measure_profile", keep)
    out = tmp_path / "cal.yaml"
    assert calibrate_main(["--quick", "--repeats", "1", "--no-op-factors", "--no-runtime-probe", "--no-sharing",
                           "--model", str(model), "--out", str(out)]) == 0
    cal = opplan.Calibration(kept[0])
    printed = capsys.readouterr().out.splitlines()
    table = summary_lines(list(cal.to_frame().itertuples(index=False, name=None)))
    assert printed[:len(table)] == table
    assert out.read_text() == cal.profile_text
    assert (tmp_path / "mlp.times.csv").read_text() == op_frame_csv(cal.op_times_frame())
    assert list(cal.op_times_frame()["op"]) == OPS


@pytest.mark.parametrize("kwargs, words", [
    ({"model": "no-such.onnx"}, "model not found"),
    ({"transport": "shm"}, "--nproc 2"),
    ({"engine": "tvm"}, "unknown engine"),
    ({"nproc": 0}, "1 or more"),
])
def test_a_request_that_cannot_be_measured_is_refused_before_measuring(kwargs, words, tmp_path) -> None:
    with pytest.raises(opplan.InputError, match=words):
        opplan.calibrate(**{**QUICK, **kwargs})
