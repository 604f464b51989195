"""Write a model of one ONNX node (`plan-calibrate`'s representative ops, `planner.execute.calibrate_ops`).

The node reads float32 graph inputs of the given shapes (fed at run time, so that constant folding keeps the node)
followed by float32 initializers (the given arrays), and writes one output whose shape onnx's shape inference
gives (the importer wants every output's shape).  onnx is imported here because only `planner/ir` may import it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["write_one_node_model"]


def write_one_node_model(path: str | Path, op_type: str, input_shapes: Sequence[Sequence[int]],
                         weights: Sequence[np.ndarray], attrs: Mapping[str, object], opset: int) -> None:
    """Write the model to `path`: inputs x0, x1, ... then initializers w0, w1, ... in the node's argument order,
    the node named "op", its output "y"."""
    names = [f"x{i}" for i in range(len(input_shapes))] + [f"w{i}" for i in range(len(weights))]
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, list(shape))
              for i, shape in enumerate(input_shapes)]
    inits = [numpy_helper.from_array(np.asarray(w, dtype=np.float32), f"w{i}") for i, w in enumerate(weights)]
    node = helper.make_node(op_type, names, ["y"], name="op")
    node.attribute.extend(helper.make_attribute(key, value) for key, value in attrs.items())
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], f"one-{op_type}", inputs, [output], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    model.graph.output[0].CopyFrom(inferred.graph.output[0])
    onnx.save(model, str(path))
