"""Constant evaluation at import does not pass third-party warnings on to the user: numpy's RuntimeWarnings from
onnx's reference evaluator (a division by zero in a folded constant) are silenced, the values are ONNX's."""

from __future__ import annotations

import warnings

import numpy as np
from onnx import helper

from planner.ir.onnx_eval import evaluate_node


def test_a_division_by_zero_in_a_constant_warns_nobody():
    node = helper.make_node("Div", ["a", "b"], ["c"], name="div")
    a, b = np.array([1.0, 0.0, -2.0], np.float32), np.zeros(3, np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (c,) = evaluate_node(node, [a, b], {"": 17}, 8)
    assert caught == []
    assert np.isposinf(c[0]) and np.isnan(c[1]) and np.isneginf(c[2])
