"""plan-inspect end to end: real models, both formats, and one clear line with exit status 2 for each bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from planner.cli import inspect_main
from planner.coarsen import DEFAULT_COARSEN_POLICY, coarsen
from planner.ir.hardware import DEFAULT_PROFILE, load_topology
from planner.prepare import prepare
from planner.solve import DEFAULT_CLUSTERS

REPO = Path(__file__).resolve().parents[1]
MOE = REPO / "planner" / "data" / "models" / "moe.onnx"
HW = REPO / "hardware_profiles"
LIGHT = sorted((Path(onnx.__file__).parent / "backend" / "test" / "data" / "light").glob("*.onnx"))


def _json(capsys, argv) -> dict:
    assert inspect_main([*argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_inspect_bundled_moe_json_has_the_documented_totals(capsys):
    out = _json(capsys, ["--model", str(MOE)])
    for key in ("num_ops", "total_flops", "param_bytes", "activation_bytes"):
        assert isinstance(out[key], int) and out[key] > 0, key
    assert out["num_ops"] == 255
    assert out["critical_path"] > 0 and out["work_bound"] > 0
    assert out["critical_path"] <= out["serial_time_fastest_device"]
    assert len(out["heaviest_ops"]) == 10


@pytest.mark.parametrize("path", LIGHT, ids=lambda p: p.stem)
def test_inspect_every_light_model(capsys, path):
    out = _json(capsys, ["--model", str(path), "--hw", str(HW / "h100-8-nvlink.yaml")])
    assert out["num_ops"] > 0 and out["total_flops"] > 0
    assert len(out["hardware"]["devices"]) == 8


def test_inspect_table_format(capsys):
    assert inspect_main(["--model", str(MOE)]) == 0
    text = capsys.readouterr().out
    assert "critical path" in text and "Heaviest ops" in text


def _dynamic_model(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(model, path)
    return path


def _unknown_op_model(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    node = helper.make_node("FooBar", ["x"], ["y"], name="weird")
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(model, path)
    return path


def _bad_inputs(tmp: Path) -> dict[str, tuple[list[str], str]]:
    (tmp / "notonnx.onnx").write_text("hello, I am not a model\n")
    (tmp / "truncated.onnx").write_bytes(MOE.read_bytes()[: MOE.stat().st_size // 2])
    typo = (HW / "cpu-4.yaml").read_text().replace("memory:", "memroy:", 1)
    (tmp / "typo.yaml").write_text(typo)
    badunit = (HW / "cpu-4.yaml").read_text()
    import re

    badunit = re.sub(r"memory: *\S+", "memory: 8 GiBs", badunit, count=1)
    (tmp / "badunit.yaml").write_text(badunit)
    return {
        "missing": (["--model", str(tmp / "nope.onnx")], "nope.onnx"),
        "not onnx": (["--model", str(tmp / "notonnx.onnx")], "notonnx.onnx"),
        "truncated": (["--model", str(tmp / "truncated.onnx")], "truncated.onnx"),
        "unknown op": (["--model", str(_unknown_op_model(tmp / "unknown.onnx"))], "FooBar"),
        "dynamic shape": (["--model", str(_dynamic_model(tmp / "dyn.onnx"))], "--input-shape"),
        "yaml typo": (["--model", str(MOE), "--hw", str(tmp / "typo.yaml")], "did you mean 'memory'"),
        "bad unit": (["--model", str(MOE), "--hw", str(tmp / "badunit.yaml")], "GiBs"),
        "bad input-shape": (["--model", str(MOE), "--input-shape", "token_ids=1xQ"], "--input-shape"),
    }


@pytest.mark.parametrize("case", ["missing", "not onnx", "truncated", "unknown op", "dynamic shape", "yaml typo",
                                  "bad unit", "bad input-shape"])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, case):
    argv, fragment = _bad_inputs(tmp_path)[case]
    assert inspect_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert fragment in err
    assert "Traceback" not in err


def test_dynamic_shape_is_fixed_by_input_shape(tmp_path, capsys):
    path = _dynamic_model(tmp_path / "dyn.onnx")
    out = _json(capsys, ["--model", str(path), "--input-shape", "x=4x3"])
    assert out["num_ops"] == 1 and out["activation_bytes"] == 4 * 3 * 4


def test_console_script_exit_status_and_no_traceback(tmp_path):
    exe = Path(sys.executable).parent / "plan-inspect"
    proc = subprocess.run([str(exe), "--model", str(tmp_path / "missing.onnx")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_inspect_clusters_reports_and_writes_dot(tmp_path, capsys):
    dot = tmp_path / "clusters.dot"
    assert inspect_main(["--model", str(MOE), "--clusters", "--dot", str(dot), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_ops"] == 255 and 1 < out["num_clusters"] < 255
    assert sum(out["clusters"].values()) == 255
    assert 0 < out["cut_bytes"] < out["total_edge_bytes"]
    text = dot.read_text()
    assert text.startswith("digraph") and text.count("[label=") >= out["num_clusters"]


def test_inspect_clusters_shows_the_clusters_the_search_starts_from(capsys):
    """plan-inspect --clusters reports the search's coarsening (its default target and the merge that keeps the
    critical path), not the older merge to a fixed count."""
    instance = prepare(MOE, load_topology(DEFAULT_PROFILE)).instance
    searched = coarsen(instance, target_clusters=DEFAULT_CLUSTERS["cpsat"],
                       cp_tolerance=DEFAULT_COARSEN_POLICY.cp_tolerance)
    out = _json(capsys, ["--model", str(MOE), "--clusters"])
    assert out["num_clusters"] == searched.num_clusters
    assert sorted(out["clusters"].values(), reverse=True) == sorted(searched.sizes, reverse=True)
    older = coarsen(instance, target_clusters=DEFAULT_CLUSTERS["cpsat"])  # what it showed before
    assert sorted(older.sizes) != sorted(searched.sizes)
