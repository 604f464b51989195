"""The single-process executor runs whole graphs after passes and matches onnxruntime and the reference outputs
shipped with the onnx wheel.

Tolerances (float32): graph outputs within 1e-5 absolute of onnxruntime and of the shipped references (the
softmax outputs of the light models are ~1e-3); the MoE logits within 1e-5 absolute.  Intermediate tensors of
three CNNs (every op output, values up to ~1e3 with these weights) within 1e-4 relative + 1e-4 absolute.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from planner.execute.program import default_feeds, execute, prepared_graph

FAST = ["light_squeezenet", "light_inception_v1", "light_resnet50", "light_shufflenet", "light_inception_v2",
        "light_densenet121"]
SLOW = ["light_bvlc_alexnet", "light_vgg19", "light_zfnet512"]  # 2-5 s each in torch alone


def _ort(model: onnx.ModelProto, feeds, names=None):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = names or [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


@pytest.mark.parametrize("name", FAST + [pytest.param(n, marks=pytest.mark.slow) for n in SLOW])
def test_light_model_matches_onnxruntime_and_shipped_reference(light_models_dir, name):
    path = light_models_dir / f"{name}.onnx"
    graph = prepared_graph(path)
    feeds = default_feeds(graph)
    ours = execute(graph, path, feeds)
    ref = _ort(onnx.load(str(path)), feeds)
    shipped = numpy_helper.to_array(onnx.load_tensor(str(light_models_dir / f"{name}_output_0.pb")))
    (out,) = graph.graph_outputs
    np.testing.assert_allclose(ours[out], ref[out], rtol=0, atol=1e-5)
    np.testing.assert_allclose(ours[out], shipped, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["light_squeezenet", "light_inception_v1", "light_resnet50"])
def test_every_intermediate_tensor_matches_onnxruntime(light_models_dir, name):
    path = light_models_dir / f"{name}.onnx"
    graph = prepared_graph(path)
    feeds = default_feeds(graph)
    # every op output but Dropout masks (unused; onnxruntime leaves them unset before opset 12)
    inner = [t for op in graph.ops for t in (op.writes[:1] if op.op_type == "Dropout" else op.writes)]
    ours = execute(graph, path, feeds, keep=inner)
    model = onnx.load(str(path))
    known = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.helper.make_value_info(t, onnx.TypeProto()) for t in inner if t not in known)
    ref = _ort(model, feeds, inner)
    for t in inner:
        np.testing.assert_allclose(ours[t], ref[t], rtol=1e-4, atol=1e-4, err_msg=t)


def test_moe_matches_onnxruntime_in_any_topological_order(repo_root):
    path = repo_root / "planner" / "data" / "models" / "moe.onnx"
    graph = prepared_graph(path)
    feeds = default_feeds(graph)
    ref = _ort(onnx.load(str(path)), feeds)
    for order in (None, _reverse_kahn(graph)):
        ours = execute(graph, path, feeds, order=order)
        for k in graph.graph_outputs:
            np.testing.assert_allclose(ours[k], ref[k], rtol=0, atol=1e-5)


def _reverse_kahn(graph):
    """A topological order that prefers the last ready op (far from the graph's own order)."""
    indeg = [len(p) for p in graph.predecessors]
    ready = [i for i, d in enumerate(indeg) if d == 0]
    order = []
    while ready:
        i = ready.pop()
        order.append(graph.ops[i].name)
        for j in graph.successors[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
    return order
