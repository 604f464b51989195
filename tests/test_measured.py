"""Measured op times override the roofline: from a CSV, and from a real onnxruntime profile of the bundled MoE."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from planner.cost.measured import load_measured_times
from planner.errors import InputError
from planner.ir.hardware import DEFAULT_PROFILE, load_topology
from planner.prepare import prepare

REPO = Path(__file__).resolve().parents[1]
MOE = REPO / "planner" / "data" / "models" / "moe.onnx"


def test_onnxruntime_profile_times_replace_the_roofline(tmp_path):
    opts = ort.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(tmp_path / "ort")
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # keep one kernel per node
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(MOE), opts, providers=["CPUExecutionProvider"])
    ids = np.random.default_rng(0).integers(0, 256, size=(1, 32)).astype(np.int64)
    for _ in range(3):
        sess.run(None, {"token_ids": ids})
    profile = Path(sess.end_profiling())
    measured = load_measured_times(profile)
    assert "layer0/expert1/fc1" in measured and measured["layer0/expert1/fc1"] > 0
    topology = load_topology(DEFAULT_PROFILE)
    prepared = prepare(MOE, topology, measured_s=measured)
    inst = prepared.instance
    i = inst.task_index["layer0/expert1/fc1"]
    expected = int(np.ceil(measured["layer0/expert1/fc1"] / inst.tick_s - 1e-9))
    assert inst.duration_tick[i].tolist() == [max(1, expected)] * topology.num_devices


def test_csv_profile_and_its_errors(tmp_path):
    good = tmp_path / "t.csv"
    good.write_text("op,seconds\nlayer0/attn/softmax,0.002\n")
    assert load_measured_times(good) == {"layer0/attn/softmax": 0.002}
    prepared = prepare(MOE, load_topology(DEFAULT_PROFILE), measured_s=load_measured_times(good))
    i = prepared.instance.task_index["layer0/attn/softmax"]
    assert prepared.instance.duration_tick[i, 0] * prepared.instance.tick_s == pytest.approx(0.002)
    bad = tmp_path / "bad.csv"
    bad.write_text("name,time\nx,1\n")
    with pytest.raises(InputError, match="'op' and 'seconds'"):
        load_measured_times(bad)
    unknown = tmp_path / "unknown.csv"
    unknown.write_text("op,seconds\nno_such_op,1\n")
    from planner.cost.model import build_instance
    from planner.ir.onnx_import import load_onnx

    with pytest.raises(InputError, match="does not have"):
        build_instance(load_onnx(MOE), load_topology(DEFAULT_PROFILE), measured_s=load_measured_times(unknown))


def test_profile_naming_ops_the_model_lacks_is_refused_by_prepare(tmp_path):
    with pytest.raises(InputError, match="does not have"):
        prepare(MOE, load_topology(DEFAULT_PROFILE), measured_s={"no_such_op": 1.0})
