"""com.microsoft ops, which onnx cannot infer shapes for: the simple ones get shapes from opplan's own rules
(activations like their input, DynamicQuantizeLSTM from its X, W and hidden_size) and import; the runtime cannot
run them, and the warning before planning says so in one line."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper
from onnx_models import make_model

from planner.ir.load import load_model
from planner.ir.model_warnings import model_warnings

F = TensorProto.FLOAT
MS = [helper.make_opsetid("com.microsoft", 1)]


def _load(model, tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return load_model(path)


def test_a_contrib_activation_has_its_input_shape(tmp_path):
    model = make_model([helper.make_node("Gelu", ["x"], ["h"], name="gelu", domain="com.microsoft"),
                        helper.make_node("Relu", ["h"], ["y"], name="relu")],
                       [("x", F, [2, 5])], [("y", F, [2, 5])], extra_opsets=MS)
    graph = _load(model, tmp_path)
    assert graph.tensors["h"].shape == (2, 5) and graph.tensors["h"].dtype == "float"
    assert graph.op("gelu").flops == 8 * 10  # the com.microsoft Gelu rule, now that its shapes are known


def test_dynamic_quantize_lstm_imports_and_is_named_as_beyond_the_runtime(tmp_path):
    seq, batch, inp, hidden = 5, 2, 3, 4
    rng = np.random.default_rng(0)
    inits = {"W": rng.integers(-5, 5, (1, inp, 4 * hidden)).astype(np.int8),
             "R": rng.integers(-5, 5, (1, hidden, 4 * hidden)).astype(np.int8),
             "ws": np.full((1,), 0.1, np.float32), "wz": np.zeros((1,), np.int8),
             "rs": np.full((1,), 0.1, np.float32), "rz": np.zeros((1,), np.int8)}
    node = helper.make_node("DynamicQuantizeLSTM", ["x", "W", "R", "", "", "", "", "", "ws", "wz", "rs", "rz"],
                            ["y", "yh", "yc"], name="lstm", domain="com.microsoft", hidden_size=hidden)
    model = make_model([node, helper.make_node("Relu", ["y"], ["out"], name="relu")],
                       [("x", F, [seq, batch, inp])], [("out", F, [seq, 1, batch, hidden])], inits, extra_opsets=MS)
    graph = _load(model, tmp_path)
    assert graph.tensors["y"].shape == (seq, 1, batch, hidden)
    assert graph.tensors["yh"].shape == graph.tensors["yc"].shape == (1, batch, hidden)
    (line,) = model_warnings(graph)
    assert "cannot run 1 op(s)" in line and "lstm (domain com.microsoft)" in line
