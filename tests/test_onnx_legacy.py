"""Models below opset 7 (`planner.ir.onnx_legacy`): upgraded before import, so that ops whose meaning changed at
opset 7 (legacy `broadcast`/`axis` broadcasting, PRelu's per-channel slope) run as their opset meant; a model the
converter cannot upgrade is refused with the fix; `plan-run --check` compares against onnxruntime on the upgraded
model, since onnxruntime runs no op version below opset 7.

The models here are built so that today's rules give another answer than opset 6's: B of shape [3] added at
`axis=0` to a 3 x 3 matrix (today's rule would add it along the rows' other axis), and a PRelu with three random
slopes over an input of shape [2, 3, 3] (today's rule would apply them along the last axis).  The onnx wheel's own
opset-6 files (pytorch-converted, pytorch-operator) are checked too, against the outputs shipped beside them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from experiments.corpus import CorpusEntry, evaluate, write_corpus
from planner.errors import InputError
from planner.execute.runner import run_plan
from planner.ir import onnx_legacy
from planner.ir.onnx_import import load_onnx, normalized_model
from planner.ir.onnx_legacy import LEGACY_OPSET, default_opset, upgrade_legacy
from planner.ir.onnx_values import REFERENCE_FILE, REFERENCE_UPGRADED, reference_outputs

RNG = np.random.default_rng(7)
SLOPE = RNG.uniform(0.1, 0.9, size=3).astype(np.float32)  # three different slopes: the axis they meet matters
SHIPPED = Path(onnx.__file__).parent / "backend" / "test" / "data"


def _opset6_model(path: Path) -> Path:
    """Y = A + B (broadcast=1, axis=0: B runs down A's rows) and Z = PRelu(X, slope) with a per-channel slope."""
    nodes = [helper.make_node("Add", ["A", "B"], ["Y"], name="add_axis0", broadcast=1, axis=0),
             helper.make_node("PRelu", ["X", "slope"], ["Z"], name="prelu_channels")]
    slope = numpy_helper.from_array(SLOPE, "slope")
    graph = helper.make_graph(
        nodes, "legacy",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [3, 3]),
         helper.make_tensor_value_info("B", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3, 3]),
         helper.make_tensor_value_info("slope", TensorProto.FLOAT, [3])],  # IR 3 lists initializers as inputs
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 3]),
         helper.make_tensor_value_info("Z", TensorProto.FLOAT, [2, 3, 3])],
        initializer=[slope])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)], ir_version=3)
    onnx.save(model, str(path))
    return path


def _feeds() -> dict[str, np.ndarray]:
    return {"A": RNG.standard_normal((3, 3)).astype(np.float32), "B": np.array([1.0, 10.0, 100.0], np.float32),
            "X": RNG.standard_normal((2, 3, 3)).astype(np.float32)}


def _as_opset6_meant(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    x = feeds["X"]
    return {"Y": feeds["A"] + feeds["B"][:, None],
            "Z": np.where(x < 0, x * SLOPE[None, :, None], x)}


def test_an_opset_6_model_is_upgraded_and_computes_what_opset_6_meant(tmp_path):
    path = _opset6_model(tmp_path / "legacy.onnx")
    with pytest.raises(Exception, match="NOT_IMPLEMENTED|Could not find an implementation"):
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])  # why the reference needs the upgrade
    upgraded = normalized_model(path)
    assert default_opset(upgraded) >= LEGACY_OPSET
    assert [n.name for n in upgraded.graph.node if n.op_type in ("Add", "PRelu")] == ["add_axis0", "prelu_channels"]
    feeds = _feeds()
    got = dict(zip(("Y", "Z"), ort.InferenceSession(upgraded.SerializeToString(),
                                                    providers=["CPUExecutionProvider"]).run(["Y", "Z"], feeds)))
    want = _as_opset6_meant(feeds)
    for name in ("Y", "Z"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6)
    # today's rules on the same numbers would differ: the test can tell the two apart
    assert not np.allclose(feeds["A"] + feeds["B"], want["Y"])
    assert not np.allclose(np.where(feeds["X"] < 0, feeds["X"] * SLOPE, feeds["X"]), want["Z"])
    graph = load_onnx(path)
    assert {op.name for op in graph.ops} >= {"add_axis0", "prelu_channels"}


def test_a_model_at_opset_7_or_above_is_left_as_it_is(tmp_path):
    model = onnx.load(str(_opset6_model(tmp_path / "legacy.onnx")))
    model.opset_import[0].version = LEGACY_OPSET
    assert upgrade_legacy(model, "m.onnx") is model


def test_a_model_the_converter_cannot_upgrade_is_refused_with_the_fix(tmp_path, monkeypatch):
    path = _opset6_model(tmp_path / "legacy.onnx")
    monkeypatch.setattr(onnx_legacy, "upgrade_opset", lambda model: None)  # force the converter's failure
    with pytest.raises(InputError) as err:
        upgrade_legacy(onnx.load(str(path)), str(path))
    text = str(err.value)
    assert str(path) in text and "opset 6" in text and "re-export the model at opset 7" in text


def test_the_check_runs_the_upgraded_model_below_opset_7_and_the_file_otherwise(tmp_path):
    path = _opset6_model(tmp_path / "legacy.onnx")
    feeds = _feeds()
    ref, which = reference_outputs(path, feeds, ["Y", "Z"], {}, {})
    assert which == REFERENCE_UPGRADED
    for name, want in _as_opset6_meant(feeds).items():
        np.testing.assert_allclose(ref[name], want, rtol=1e-6)
    modern = onnx.load(str(path))
    modern.opset_import[0].version = 13  # Add without the legacy attributes means numpy's rule here
    del modern.graph.node[0].attribute[:]
    onnx.save(modern, str(tmp_path / "modern.onnx"))
    _, which = reference_outputs(tmp_path / "modern.onnx", feeds, ["Y"], {}, {})
    assert which == REFERENCE_FILE


@pytest.mark.dist
def test_an_opset_6_model_plans_runs_on_two_ranks_and_matches(tmp_path):
    path = _opset6_model(tmp_path / "legacy.onnx")
    feeds = _feeds()
    row = evaluate(CorpusEntry("legacy", "opset 6", "test", path=path, feeds=feeds), tmp_path)
    assert row["result"] == "ok", row["result"]
    plan = next(tmp_path.glob("legacy.*.plan.json"))
    outcome = run_plan(plan, nproc=2, check=True, feeds=feeds, comm_timeout_s=60, run_timeout_s=120)
    assert outcome.report["reference_model"] == REFERENCE_UPGRADED
    for name, want in _as_opset6_meant(feeds).items():
        np.testing.assert_allclose(outcome.outputs[name], want, rtol=1e-6)


@pytest.mark.dist
@pytest.mark.parametrize("name", ["pytorch-operator/test_operator_add_broadcast",
                                  "pytorch-converted/test_PReLU_2d_multiparam", "pytorch-converted/test_Linear"])
def test_the_onnx_wheels_opset_6_files_match_their_shipped_outputs(tmp_path, name):
    folder = SHIPPED / name
    if not folder.exists():
        pytest.skip(f"this onnx wheel does not ship {name}")
    assert default_opset(onnx.load(str(folder / "model.onnx"))) == 6
    # the corpus's onnx-data entry: the file as shipped, its shipped inputs and outputs
    (entry,) = write_corpus(tmp_path, sources=("onnx-data",), only=[folder.name])
    assert entry.path == folder / "model.onnx" and entry.feeds and entry.expected
    row = evaluate(entry, tmp_path)
    assert row["result"] == "ok", row["result"]
    plan = sorted(tmp_path.glob("*.plan.json"))[-1]
    outcome = run_plan(plan, nproc=2, check=False, feeds=entry.feeds, comm_timeout_s=60, run_timeout_s=120)
    for out_name, want in entry.expected.items():
        np.testing.assert_allclose(outcome.outputs[out_name], want, rtol=1e-5, atol=1e-6)
