"""plan-solve, plan-simulate and plan-whatif end to end, on the README's task graph and the bundled MoE."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from planner.cli import simulate_main, solve_main, whatif_main
from planner.data import BUNDLED_MODEL
from planner.ir.hardware import load_topology
from planner.prepare import prepare

REPO = Path(__file__).resolve().parents[1]
HW = REPO / "hardware_profiles"

# The README's example: a(5) feeds b(3) with comm 15 and c(4) with comm 1, on 2 devices.
# All on one device: 12.  a and b together, c on the other device: c starts at 5 + 1 = 6, ends 10; b ends 8.
# a and c together, b elsewhere: b starts at 5 + 15 = 20.  So the optimum is 10.
EXAMPLE = {
    "tasks": [{"id": "a", "duration": 5, "memory": 0}, {"id": "b", "duration": 3}, {"id": "c", "duration": 4}],
    "edges": [{"src": "a", "dst": "b", "comm": 15, "bytes": 0}, {"src": "a", "dst": "c", "comm": 1}],
}


def test_task_graph_plan_file_has_the_documented_shape(tmp_path, capsys):
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(EXAMPLE))
    out = tmp_path / "plan.json"
    assert solve_main(["--graph", str(graph), "--devices", "2", "--time-limit", "5", "--out", str(out),
                       "--quiet", "--no-pictures"]) == 0
    plan = json.loads(out.read_text())
    assert plan["makespan"] == 10
    assert plan["lower_bound"] <= 10 and plan["status"] in ("optimal", "feasible")
    rows = {t["id"]: t for t in plan["tasks"]}
    assert set(rows) == {"a", "b", "c"}
    assert rows["a"]["device"] == rows["b"]["device"] != rows["c"]["device"]
    assert rows["c"]["start"] == 6 and rows["b"]["end"] == 8
    assert "makespan" in capsys.readouterr().out


def test_default_solve_plans_the_bundled_moe_and_draws_it(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert solve_main(["--time-limit", "8", "--out", str(out), "--quiet"]) == 0
    plan = json.loads(out.read_text())
    # `tasks` lists every op of the model under its own name, exactly once; when the search ended on a
    # cluster plan, its clusters are recorded beside (each cluster's ops share one device)
    model_ops = prepare(BUNDLED_MODEL, load_topology(HW / "cpu-4.yaml")).instance.task_names
    assert plan["task_ops"] == {}
    ops = [t["id"] for t in plan["tasks"]]
    assert len(ops) == len(set(ops)) and sorted(ops) == sorted(model_ops)
    by_op = {t["id"]: t for t in plan["tasks"]}
    clustered = [op for members in plan.get("clusters", {}).values() for op in members]
    assert len(clustered) == len(set(clustered)) and set(clustered) <= set(ops)
    for name, members in plan.get("clusters", {}).items():
        assert len({by_op[op]["device"] for op in members}) == 1, name  # a cluster's ops share its device
    assert plan["lower_bound"] <= plan["makespan"]
    assert max(t["end"] for t in plan["tasks"]) == pytest.approx(plan["makespan"])
    assert (tmp_path / "plan.gantt.png").stat().st_size > 10_000
    trace = json.loads((tmp_path / "plan.trace.json").read_text())
    from planner.schedule.trace import COMPUTE_TID

    compute = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("tid") == COMPUTE_TID]
    expected = {t["id"]: t["device_index"] for t in plan["tasks"]}  # one trace event per op, named by the op,
    assert len(compute) == len(expected)                              # on the compute thread of its device
    assert {e["name"]: e["pid"] for e in compute} == expected


def test_simulate_retimes_a_plan_on_other_hardware(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert solve_main(["--method", "heft", "--out", str(out), "--quiet", "--no-pictures"]) == 0
    capsys.readouterr()
    assert simulate_main(["--plan", str(out), "--format", "json"]) == 0
    same = json.loads(capsys.readouterr().out)
    planned = json.loads(out.read_text())["makespan"]
    assert same["makespan"] == pytest.approx(planned)  # same hardware, same model: the plan's own times
    assert simulate_main(["--plan", str(out), "--hw", str(HW / "a100-4-pcie.yaml"), "--format", "json"]) == 0
    other = json.loads(capsys.readouterr().out)
    assert other["makespan"] != pytest.approx(planned)
    assert simulate_main(["--plan", str(out), "--hw", str(HW / "h100-8-nvlink.yaml")]) == 2
    assert "4 devices" in capsys.readouterr().err


def test_whatif_is_monotone_and_says_why_small_capacities_fail(tmp_path, capsys):
    assert whatif_main(["--hw", str(HW / "h100-8-nvlink.yaml"), "--memory", "100KiB:400KiB:100KiB", "--method",
                        "heft", "--out-dir", str(tmp_path), "--quiet"]) == 0
    rows = list(csv.DictReader((tmp_path / "whatif.csv").open()))
    assert [int(r["capacity_bytes"]) for r in rows] == [100 * 1024 * k for k in (1, 2, 3, 4)]
    assert rows[0]["feasible"] == "0" and "smallest capacity" in rows[0]["reason"]
    spans = [float(r["makespan_s"]) for r in rows if r["feasible"] == "1"]
    assert spans and all(a >= b for a, b in zip(spans, spans[1:]))  # more memory never makes it slower
    assert (tmp_path / "whatif.png").stat().st_size > 5_000


@pytest.mark.parametrize("argv, fragment", [
    (["--backend", "gurobi"], "cpsat"),
    (["--graph", "x.json", "--model", "y.onnx"], "either --model or --graph"),
    (["--pin", "nothing-matches*=node0/cpu0"], "matches no op"),
    (["--pin", "layer0/*=node9/gpu0"], "no device named"),
    (["--memory", "1KiB"], "1024"),
])
def test_solve_errors_are_one_line(tmp_path, capsys, argv, fragment):
    assert solve_main([*argv, "--time-limit", "2", "--out", str(tmp_path / "p.json"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and fragment in err, err
    assert not (tmp_path / "p.json").exists()


def test_whatif_with_the_milp_planner_is_monotone(tmp_path, capsys):
    assert whatif_main(["--hw", str(HW / "h100-8-nvlink.yaml"), "--memory", "100KiB,200KiB,300KiB,1GiB",
                        "--time-limit", "3", "--out-dir", str(tmp_path), "--quiet"]) == 0
    rows = list(csv.DictReader((tmp_path / "whatif.csv").open()))
    assert rows[0]["feasible"] == "0" and rows[0]["reason"]
    spans = [float(r["makespan_s"]) for r in rows if r["feasible"] == "1"]
    assert len(spans) >= 2 and all(a >= b for a, b in zip(spans, spans[1:]))
    assert "smallest feasible capacity in the sweep" in capsys.readouterr().out
