"""Plans run for real on 2-4 gloo ranks (forked) and match onnxruntime and the onnx wheel's reference outputs;
faults end the run quickly with the failing rank named; a plan for another model is refused.

Tolerance: outputs within 1e-5 absolute of onnxruntime and of the shipped references (float32; ranks run the
same torch kernels as the single-process executor, so the error is onnxruntime-vs-torch rounding only).
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from planner.cli import solve_main
from planner.errors import InputError
from planner.execute.dist import Fault, RunFailed
from planner.execute.partition import partition_plan
from planner.execute.program import prepared_graph
from planner.execute.runner import run_plan
from planner.schedule.plan_io import load_plan

ATOL = 1e-5


def _plan(tmp, model, method, hw, name, time_limit="5"):
    out = tmp / f"{name}.json"
    rc = solve_main(["--model", str(model), "--hw", str(hw), "--method", method, "--time-limit", time_limit,
                     "--out", str(out), "--no-pictures", "--quiet", "--format", "json"])
    assert rc == 0
    return out


@pytest.fixture(scope="module")
def plans(tmp_path_factory, repo_root, light_models_dir, hw_dir):
    tmp = tmp_path_factory.mktemp("plans")
    hw = hw_dir / "cpu-4.yaml"
    moe = repo_root / "planner" / "data" / "models" / "moe.onnx"
    light = {n: light_models_dir / f"light_{n}.onnx" for n in ("inception_v1", "resnet50", "squeezenet")}
    return {
        "moe_milp": _plan(tmp, moe, "milp", hw, "moe_milp", "4"),
        "moe_rr": _plan(tmp, moe, "round_robin", hw, "moe_rr"),
        "inception_v1": _plan(tmp, light["inception_v1"], "heft", hw, "inception_v1"),
        "resnet50": _plan(tmp, light["resnet50"], "round_robin", hw, "resnet50"),
        "squeezenet": _plan(tmp, light["squeezenet"], "round_robin", hw, "squeezenet"),
    }


def _shipped(light_models_dir, name):
    return numpy_helper.to_array(onnx.load_tensor(str(light_models_dir / f"light_{name}_output_0.pb")))


def test_partition_orders_are_topological_and_transfers_complete(plans):
    plan = load_plan(plans["moe_rr"])
    graph = prepared_graph(plan.model_path)
    for nproc in (None, 2):
        part = partition_plan(plan, graph, nproc)
        assert sorted(part.order) == sorted(op.name for op in graph.ops)
        pos = {n: i for i, n in enumerate(part.order)}
        for s, d in graph.edge_src_dst:
            assert pos[graph.ops[s].name] < pos[graph.ops[d].name]
        assert sum(len(r) for r in part.rank_ops) == graph.num_ops
        producer = {t: op.name for op in graph.ops for t in op.writes}
        sent = {(t.tensor, t.dst) for t in part.transfers}
        for op in graph.ops:
            r = part.rank_of_op[op.name]
            for t in op.reads:
                if t in producer and part.rank_of_op[producer[t]] != r:
                    assert (t, r) in sent
        pairs = {}
        for t in part.transfers:
            pairs.setdefault((t.src, t.dst), []).append(t.seq)
        assert all(seqs == list(range(len(seqs))) for seqs in pairs.values())
        assert len(part.transfers) > 0


@pytest.mark.dist
@pytest.mark.parametrize("key,nproc", [("moe_milp", None), ("moe_rr", None), ("moe_rr", 2)])
def test_moe_plan_matches_onnxruntime(plans, key, nproc):
    out = run_plan(plans[key], nproc=nproc, check=True, repeat=2)
    assert out.report["world_size"] == (nproc or 4)
    assert out.report["transfers"] > 0
    assert out.report["max_abs_error"] <= ATOL
    assert out.outputs["logits"].shape == (1, 32, 256)


@pytest.mark.dist
@pytest.mark.parametrize("name,nproc", [("inception_v1", 3), ("resnet50", None), ("squeezenet", 2)])
def test_light_model_plan_matches_onnxruntime_and_reference(plans, light_models_dir, name, nproc):
    out = run_plan(plans[name], nproc=nproc, check=True)
    assert out.report["transfers"] > 0
    assert out.report["max_abs_error"] <= ATOL
    (value,) = out.outputs.values()
    np.testing.assert_allclose(value, _shipped(light_models_dir, name), rtol=0, atol=ATOL)


@pytest.mark.dist
@pytest.mark.parametrize("kind,expect", [("raise", "rank 1 failed: RuntimeError: injected fault"),
                                         ("kill", "rank 1 was killed by SIGKILL")])
def test_a_failing_rank_ends_the_run_with_its_error(plans, kind, expect):
    with pytest.raises(RunFailed, match=expect) as err:
        run_plan(plans["moe_rr"], fault=Fault(rank=1, kind=kind), comm_timeout_s=30, run_timeout_s=60)
    # bounded without a clock: the run ended on the fault itself (named first), not on a timeout
    assert "timed out" not in str(err.value).split("; then")[0]
    assert multiprocessing.active_children() == []


@pytest.mark.dist
def test_report_and_trace_are_written(plans, tmp_path):
    from planner.cli_run import run_main

    report = tmp_path / "out" / "run.json"
    assert run_main(["--plan", str(plans["squeezenet"]), "--nproc", "2", "--check", "--repeat", "3",
                     "--report", str(report)]) == 0
    data = json.loads(report.read_text())
    for key in ("max_abs_error", "max_rel_error", "measured_makespan_s", "simulated_makespan_s", "busy_s"):
        assert data[key] is not None
    assert len(data["measured_makespans_s"]) == 3 and len(data["busy_s"]) == 2
    # the light squeezenet's generated weights make every class 0.001: the check says it proved nothing
    assert "constant (0.001 everywhere): the check tested nothing" in data["check_note"]
    trace = json.loads((tmp_path / "out" / "run.trace.json").read_text())
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert len(names) >= prepared_graph(load_plan(plans["squeezenet"]).model_path).num_ops


def test_a_plan_for_another_model_is_refused(plans, tmp_path, capsys):
    from planner.cli_run import run_main

    data = json.loads(plans["moe_rr"].read_text())
    data["model_sha256"] = "0" * 64
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(InputError, match="hash mismatch"):
        run_plan(bad)
    assert run_main(["--plan", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "hash mismatch" in err and len(err.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def torch_only_python(tmp_path_factory):
    """A python that has torch but not opplan: a venv without pip whose only extra path is this venv's
    site-packages, added by a `.pth` path line (which does not run the `.pth` files there, so the editable opplan
    finder stays off).  Run with no PYTHONPATH, from a folder outside the repo."""
    import subprocess
    import sys
    import sysconfig

    venv = tmp_path_factory.mktemp("torch_only") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True,
                          capture_output=True, text=True, env=_torch_only_env()).stdout.strip()
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return py


def _torch_only_env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return dict(env, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")


@pytest.mark.dist
@pytest.mark.parametrize("key", ["squeezenet", "moe_rr"])
def test_generated_code_gives_the_same_outputs(plans, tmp_path, key, torch_only_python):
    """Generated code for the bundled MoE and SqueezeNet runs under torchrun with torch alone and matches
    onnxruntime; it is plain torch (direct calls, weights beside it, relative paths)."""
    import ast
    import subprocess
    import sys

    import torch

    from planner.cli_run import codegen_main
    from planner.ir.onnx_values import run_onnxruntime

    out = tmp_path / "code"
    assert codegen_main(["--plan", str(plans[key]), "--out", str(out), "--nproc", "2"]) == 0
    source = (out / "rank_1.py").read_text()
    assert "recv(0," in source and "send(" in source
    # the ops are direct torch calls, not a generic dispatcher; only ops with no single torch call use the helper
    assert "torch.matmul(" in source or "F.conv2d(" in source
    calls = [line for line in source.splitlines() if "onnx_op(" in line and "import" not in line]
    assert all("'ScatterND'" in line for line in calls), calls
    assert (out / "onnx_ops.py").exists() == (key == "moe_rr")
    for path in out.glob("*.py"):  # only torch and the standard library; no absolute paths, no opplan
        text = path.read_text()
        tops = {a.name.split(".")[0] for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Import) for a in n.names}
        tops |= {n.module.split(".")[0] for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ImportFrom)}
        assert tops <= {"torch", "p2p", "onnx_ops", "__future__"} | sys.stdlib_module_names, (path.name, tops)
        assert str(tmp_path) not in text and load_plan(plans[key]).model_path not in text and "/work/" not in text
    env = _torch_only_env()
    probe = subprocess.run([str(torch_only_python), "-c", "import planner"], cwd=out, env=env, capture_output=True)
    assert probe.returncode != 0 and b"No module named 'planner'" in probe.stderr
    proc = subprocess.run([str(torch_only_python), "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", "launch.py", "--repeat", "2"], cwd=out, env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    steps = json.loads((out / "timing.json").read_text())["steps_s"]
    assert len(steps) == 2 and all(s > 0 for s in steps) and "median step" in proc.stdout
    inputs = {k: v.numpy() for k, v in torch.load(out / "inputs.pt").items()}
    ours = {k: v.numpy() for k, v in torch.load(out / "outputs.pt").items()}
    ref = run_onnxruntime(load_plan(plans[key]).model_path, inputs)
    for k, v in ref.items():
        np.testing.assert_allclose(ours[k], v, rtol=0, atol=ATOL)
