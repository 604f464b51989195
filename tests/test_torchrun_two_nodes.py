"""A plan across two hosts: two torchrun agents (`--nnodes 2`, one rank each, c10d rendezvous) on this machine
stand for two hosts, as on real ones (`planner.execute.torchrun` says how); the plan's four devices fold onto the
two ranks (`--ranks`).  The run matches onnxruntime (`--check`) and rank 0 writes the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from planner.cli import solve_main
from planner.execute.procs import free_port


@pytest.mark.dist
def test_a_plan_runs_on_two_torchrun_nodes_and_matches_onnxruntime(tmp_path, repo_root, hw_dir):
    plan = tmp_path / "plan.json"
    assert solve_main(["--model", str(repo_root / "planner" / "data" / "models" / "moe.onnx"),
                       "--hw", str(hw_dir / "cpu-4.yaml"), "--method", "round_robin", "--out", str(plan),
                       "--no-pictures", "--quiet", "--format", "json"]) == 0
    report = tmp_path / "run.json"
    port = free_port()
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
         "--node-rank", str(node), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
         "--rdzv-id", "opplan-two-nodes", "-m", "planner.execute.torchrun", "--plan", str(plan), "--ranks", "2",
         "--check", "--report", str(report), "--timeout", "60"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for node in (0, 1)]
    outputs = []
    try:
        for proc in nodes:
            out, _ = proc.communicate(timeout=240)
            outputs.append(out)
    finally:
        for proc in nodes:
            proc.kill()
    assert [p.returncode for p in nodes] == [0, 0], outputs
    run = json.loads(report.read_text())
    assert run["world_size"] == 2 and run["transfers"] > 0
    assert run["max_abs_error"] is not None and run["max_abs_error"] <= 1e-5
    assert "measured makespan" in outputs[0] + outputs[1]
