"""One plan, the same figures everywhere (`planner/report.py`): plan-solve's summary, the plan file, plan-simulate,
plan-inspect, plan-whatif, the memory error and the pictures report the same lower bound, gap, makespan,
parameter bytes and memory peaks, in the same units.

Pictures are checked on what is drawn (the matplotlib Figure's titles, axis labels, limits and line data), not on
the PNG's size.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
from pathlib import Path

import pytest

from planner.cli import inspect_main, simulate_main, solve_main, whatif_main
from planner.cli_compare import compare_main
from planner.compare.pipelines import compare
from planner.compare.plot import schedule_figure, side_by_side_figure
from planner.ir.hardware import DEFAULT_PROFILE, load_topology
from planner.ir.topology import Topology
from planner.ir.units import format_bytes
from planner.pipeline.registry import UnitCosts
from planner.plot import gantt_figure, whatif_figure
from planner.prepare import prepare
from planner.schedule.plan_io import load_plan
from planner.schedule.simulate import simulate_plan
from planner.whatif import WhatIfResult, WhatIfRow

REPO = Path(__file__).resolve().parents[1]
MOE = REPO / "planner" / "data" / "models" / "moe.onnx"
SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
BYTES = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
TITLE = re.compile(r"makespan (?P<t>[\d.]+) (?P<tu>\S+), peak memory (?P<m>[\d.]+) (?P<mu>[^,\s]+)")


def _json(main, argv, capsys) -> dict:
    assert main([*argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """The bundled MoE planned once by the default search (clusters, then written in the ops' own names)."""
    d = tmp_path_factory.mktemp("agree")
    plan_path = d / "plan.json"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert solve_main(["--time-limit", "6", "--out", str(plan_path), "--quiet", "--format", "json"]) == 0
    return plan_path, json.loads(buf.getvalue())


def test_solve_file_and_simulate_agree(planned, capsys):
    plan_path, solved = planned
    data = json.loads(plan_path.read_text())
    simulated = _json(simulate_main, ["--plan", str(plan_path)], capsys)
    for key in ("makespan", "lower_bound", "gap"):
        assert solved[key] == pytest.approx(data[key], rel=1e-12), key
        assert simulated[key] == pytest.approx(data[key], rel=1e-12), key
    assert solved["lower_bound_of"].startswith("op graph") and simulated["lower_bound_of"].startswith("op graph")
    assert simulated["param_bytes_as_placed"] == solved["param_bytes_as_placed"]
    assert [d["peak_memory_bytes"] for d in simulated["devices"]] == [d["peak_memory_bytes"] for d in
                                                                      solved["devices"]]
    assert simulated["peak_memory_bytes"] == solved["peak_memory_bytes"] == max(d["peak_memory_bytes"] for d in
                                                                                 solved["devices"])
    # the file lists the user's ops, and its times are the ones the replay shows
    assert max(t["end"] for t in data["tasks"]) == pytest.approx(data["makespan"])
    assert data["task_ops"] == {}


def test_inspect_whatif_and_the_memory_error_give_the_same_parameter_bytes(planned, tmp_path, capsys):
    _, solved = planned
    params = solved["param_bytes_as_placed"]
    inspected = _json(inspect_main, [], capsys)
    assert inspected["param_bytes_as_placed"] == params
    assert inspected["param_bytes"] <= params  # each initializer once: never more than as placed
    assert inspected["critical_path"] <= solved["lower_bound"] <= solved["makespan"]
    # one definition of the critical path: plan-inspect --clusters prints the op graph's beside its estimates
    clusters = _json(inspect_main, ["--clusters"], capsys)
    assert clusters["critical_path"] == pytest.approx(inspected["critical_path"])
    shown = f"parameters as placed ({params} bytes ({format_bytes(params)}) in all)"
    assert whatif_main(["--memory", "1KiB", "--out-dir", str(tmp_path / "w"), "--quiet"]) == 0
    assert shown in capsys.readouterr().out
    assert solve_main(["--memory", "100KiB", "--quiet", "--out", str(tmp_path / "p.json")]) == 2
    assert shown in capsys.readouterr().err


def _gantt_numbers(fig):
    """(makespan in s or unit, peak bytes or None, time-axis unit, x-limit, memory-axis unit or None) as drawn."""
    ax = fig.axes[0]
    m = TITLE.search(ax.get_title())
    assert m, ax.get_title()
    mem_ax = fig.axes[1] if len(fig.axes) > 1 else None
    xlabel = (mem_ax or ax).get_xlabel()
    return m, xlabel, ax.get_xlim(), mem_ax


def test_the_gantt_picture_states_the_plans_figures(planned):
    plan_path, solved = planned
    plan = load_plan(plan_path)
    fine = prepare(MOE, load_topology(DEFAULT_PROFILE)).instance
    timeline = simulate_plan(fine, plan)  # what plan-solve and plan-simulate draw
    fig = gantt_figure(timeline, title=f"{plan.instance_name}: {plan.method}")
    m, xlabel, xlim, mem_ax = _gantt_numbers(fig)
    unit = m["tu"]
    assert xlabel == f"time ({unit})"
    assert float(m["t"]) * SECONDS[unit] == pytest.approx(solved["makespan"], rel=1e-3)
    assert xlim[1] * SECONDS[unit] == pytest.approx(solved["makespan"], rel=1e-9)
    assert float(m["m"]) * BYTES[m["mu"]] == pytest.approx(solved["peak_memory_bytes"], rel=1e-3)
    assert mem_ax.get_ylabel() == f"memory ({m['mu']})"
    drawn_peaks = [max(line.get_ydata()) * BYTES[m["mu"]] for line in mem_ax.get_lines() if
                   line.get_linestyle() == "-"]
    assert drawn_peaks == pytest.approx([d["peak_memory_bytes"] for d in solved["devices"]], rel=1e-9)


def test_a_task_graph_is_drawn_in_its_own_unit_without_an_empty_memory_panel(tmp_path):
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps({"tasks": [{"id": "a", "duration": 5}, {"id": "b", "duration": 3}],
                                 "edges": [{"src": "a", "dst": "b", "comm": 1}]}))
    out = tmp_path / "p.json"
    assert solve_main(["--graph", str(graph), "--devices", "2", "--out", str(out), "--quiet", "--no-pictures"]) == 0
    plan = load_plan(out)
    fine = prepare(graph, Topology.identical(2)).instance
    fig = gantt_figure(simulate_plan(fine, plan))
    assert len(fig.axes) == 1  # nothing holds memory: no panel scaled to 1e-9
    ax = fig.axes[0]
    assert ax.get_xlabel() == "time (unit)"
    assert "makespan 8 unit" in ax.get_title() and "no memory" in ax.get_title()


def test_whatif_picture_uses_the_csvs_magnitudes_and_its_bound_never_rises(tmp_path, capsys):
    out = tmp_path / "w"
    assert whatif_main(["--hw", "h100-8-nvlink.yaml", "--memory", "100KiB:400KiB:100KiB", "--method", "heft",
                        "--out-dir", str(out), "--quiet", "--time-limit", "4"]) == 0
    rows = list(csv.DictReader((out / "whatif.csv").open()))
    feasible = [r for r in rows if r["feasible"] == "1"]
    assert feasible
    bounds = [float(r["lower_bound_s"]) for r in feasible]
    assert bounds == sorted(bounds, reverse=True)  # more memory never raises the bound
    assert all(float(r["lower_bound_s"]) <= float(r["makespan_s"]) for r in feasible)
    result = WhatIfResult(tuple(WhatIfRow(int(r["capacity_bytes"]), r["feasible"] == "1",
                                          float(r["makespan_s"] or "nan"), float(r["lower_bound_s"] or "nan"),
                                          int(r["peak_memory_bytes"]), int(r["plan_found_at_capacity_bytes"] or 0),
                                          r["reason"]) for r in rows), "s", 110985, "")
    ax = whatif_figure(result).axes[0]
    assert ax.get_xlabel() == "memory per device (KiB)"  # a KiB-sized sweep is not drawn in GiB
    unit = re.fullmatch(r"makespan \((\w+)\)", ax.get_ylabel())[1]
    planned_line = ax.get_lines()[0]
    assert list(planned_line.get_xdata()) == pytest.approx([int(r["capacity_bytes"]) / 1024 for r in feasible])
    assert list(planned_line.get_ydata()) == pytest.approx([float(r["makespan_s"]) / SECONDS[unit]
                                                            for r in feasible])


def test_compare_pictures_agree_with_compare_csv(tmp_path, capsys):
    out = tmp_path / "c"
    assert compare_main(["--stages", "4", "--microbatches", "8", "--schedules", "1f1b,dualpipe", "--no-opplan",
                         "--out", str(out)]) == 0
    rows = {r["schedule"]: r for r in csv.DictReader((out / "compare.csv").open())}
    cmp = compare(4, 8, UnitCosts(), schedules=("1f1b", "dualpipe"), opplan=False)
    assert cmp.scales.ticks_per_unit > 1  # the case of the issue: ticks are not the user's unit
    for r in cmp.ok_rows():
        fig = schedule_figure(cmp, r)
        m, xlabel, xlim, mem_ax = _gantt_numbers(fig)
        assert m["tu"] == "unit" and xlabel == "time (unit)" and mem_ax.get_ylabel() == "memory (unit)"
        assert float(m["t"]) == pytest.approx(float(rows[r.name]["makespan"]))
        assert xlim[1] == pytest.approx(float(rows[r.name]["makespan"]))
        assert float(m["m"]) == pytest.approx(float(rows[r.name]["peak_memory"]))
        drawn = max(max(line.get_ydata()) for line in mem_ax.get_lines() if line.get_linestyle() == "-")
        assert drawn == pytest.approx(float(rows[r.name]["peak_memory"]))
    titles = [ax.get_title(loc="left") for ax in side_by_side_figure(cmp).axes]
    for name, row in rows.items():
        assert any(t.startswith(f"{name}: makespan {float(row['makespan']):.4g} unit") for t in titles), titles


def test_compare_gantt_bubble_is_the_csvs_with_communication_streams(tmp_path, capsys):
    # sends on communication streams add rows to the timeline; the CSV's bubble counts the compute streams only
    out = tmp_path / "c"
    args = ["--stages", "4", "--microbatches", "8", "--schedules", "1f1b,zb-v", "--no-opplan", "--comm", "0.5",
            "--comm-stream"]
    assert compare_main([*args, "--no-pictures", "--out", str(out)]) == 0
    rows = {r["schedule"]: r for r in csv.DictReader((out / "compare.csv").open())}
    cmp = compare(4, 8, UnitCosts(comm=0.5, comm_stream=True), schedules=("1f1b", "zb-v"), opplan=False)
    for r in cmp.ok_rows():
        assert r.timeline.num_devices > 4  # communication streams are drawn
        title = schedule_figure(cmp, r).axes[0].get_title()
        drawn = re.search(r"bubble ratio ([0-9.]+)%", title)
        assert drawn, title
        assert float(drawn[1]) == pytest.approx(100 * float(rows[r.name]["bubble_ratio"]), abs=0.05)
