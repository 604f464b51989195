"""plan-run --check says when it tested nothing: onnxruntime's output all zeros or constant (the onnx wheel's light
models, whose generated weights make every class 0.001) matches any run writing that constant."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from planner.execute.runner import degenerate_reference_note


def test_a_light_models_constant_output_is_named(light_models_dir):
    ref = numpy_helper.to_array(onnx.load_tensor(str(light_models_dir / "light_resnet50_output_0.pb")))
    note = degenerate_reference_note({"prob": ref})
    assert note == "the reference output 'prob' is constant (0.001 everywhere): the check tested nothing"


def test_zeros_and_constants_beside_a_varying_output():
    ref = {"a": np.zeros((2, 3), np.float32), "b": np.arange(4.0), "c": np.full(3, 7, np.int64)}
    assert degenerate_reference_note(ref) == ("the reference output 'a' is all zeros, 'c' is constant (7 everywhere):"
                                              " the check tested only the other outputs")
    assert degenerate_reference_note({"b": np.arange(4.0), "s": np.array(3.0)}) is None  # one element: no claim
