"""Tiny ONNX models for tests, built with onnx.helper (tests may import onnx; the layering rule is for planner/)."""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper


def make_model(nodes, inputs, outputs, inits=(), opset=17, value_info=(), extra_opsets=(), functions=()):
    """A model from nodes; `inputs`/`outputs` are (name, elem type, shape) triples, `inits` name -> array."""
    graph = helper.make_graph(
        nodes, "t",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(v), name=k) for k, v in dict(inits).items()],
        value_info=list(value_info))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra_opsets],
                             functions=list(functions))
