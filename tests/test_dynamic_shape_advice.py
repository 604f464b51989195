"""The --input-shape the dynamic-shape error suggests works: an image model gets a typical image size (a 1x1
image fails its convolution), and when no typical size passes shape inference, the dims needing a real value are
named instead of a made-up example."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_models import make_model

from planner.errors import DynamicShapeError
from planner.ir.load import load_model

F = TensorProto.FLOAT


def _advice(path) -> str:
    with pytest.raises(DynamicShapeError) as err:
        load_model(path)
    return str(err.value)


def test_an_image_model_is_advised_a_typical_image_size_that_imports(tmp_path):
    w = np.zeros((8, 3, 7, 7), np.float32)
    model = make_model([helper.make_node("Conv", ["images", "w"], ["c"], strides=[2, 2]),
                        helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[3, 3], strides=[2, 2])],
                       [("images", F, ["N", 3, "H", "W"])], [("p", F, ["N", 8, "h", "w"])], {"w": w}, opset=13)
    path = tmp_path / "cnn.onnx"
    path.write_bytes(model.SerializeToString())
    text = _advice(path)
    assert "--input-shape images=1x3x224x224" in text
    dims = re.search(r"images=(\S+)\)", text).group(1)  # type: ignore[union-attr]
    graph = load_model(path, {"images": [int(d) for d in dims.split("x")]})
    assert graph.tensors["p"].shape == (1, 8, 54, 54)


def test_dims_no_typical_size_fits_are_named(tmp_path):
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F, ["N", "L"])],
                       [("y", F, ["N", 4])], {"w": np.zeros((7, 4), np.float32)}, opset=13)
    path = tmp_path / "fixed.onnx"
    path.write_bytes(model.SerializeToString())
    assert "the size the model is used with: --input-shape x=<N>x<L>" in _advice(path)
