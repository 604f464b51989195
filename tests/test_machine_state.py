"""The machine's state at run time: plan-run --report probes the machine before and after the timed
repetitions with the figures the profile was calibrated with, says how much slower it is, and re-prices the
plan's schedule on the profile scaled by that; a nominal profile is marked, not compared.  Never asserts on speed:
only that the figures are there, positive and finite, and that the scaling and the re-simulation are exact."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from planner.cli import solve_main
from planner.cli_run import run_main
from planner.execute.calibrate_profile import profile_document, profile_yaml
from planner.execute.machine_scale import (
    FIGURES,
    ProbeSizes,
    combined,
    probe_sizes,
    profile_state,
    resimulated_makespan_s,
    scale_topology,
    slowdowns,
    state_report,
    summary_lines,
)
from planner.execute.runner import load_checked_plan, run_plan
from planner.ir.hardware import load_topology
from planner.ir.topology import LOCAL

REPO = Path(__file__).resolve().parents[1]
MOE = REPO / "planner" / "data" / "models" / "moe.onnx"
NOMINAL = REPO / "hardware_profiles" / "cpu-4.yaml"

# what plan-calibrate --quick writes into provenance.measured (besides the other figures)
MEASURED = {"launch_overhead Relu": "run_node", "matmul_float 32x32x32": "torch.matmul",
            "matmul_double 32x32x32": "torch.matmul float64", "conv_float 8x16x16->8 k3": "F.conv2d",
            "p2p_oneway 256": "ping-pong", "p2p_oneway 65536": "ping-pong", "p2p_oneway 4096": "ping-pong",
            "p2p_latency": "intercept", "memory_bandwidth add": "torch.add"}
FIGS = {"float_flops": 2e10, "double_flops": 1e10, "memory_bandwidth": 5e9, "launch_overhead": 2e-5,
        "link_latency": 4e-5, "link_bandwidth": 3e9, "op_overhead": 1e-5, "send_overhead": 3e-5,
        "recv_overhead": 2e-5}


def _calibrated(tmp: Path, nproc: int = 2) -> Path:
    """A profile as plan-calibrate --quick writes it (provenance and all), with figures set here."""
    doc = profile_document(FIGS, MEASURED, {}, nproc=nproc, threads=1, torch_version="2.x", host="box",
                           date="2026-12-01T18:00:00+00:00", memory_bytes=2**34)
    path = tmp / "cal.yaml"
    path.write_text(profile_yaml(doc))
    return path


def _plan(tmp: Path, hw: Path, name: str = "plan") -> Path:
    out = tmp / f"{name}.json"
    assert solve_main(["--model", str(MOE), "--hw", str(hw), "--method", "heft", "--out", str(out),
                       "--no-pictures", "--quiet", "--format", "json"]) == 0
    return out


# ------------------------------------------------------------------------------------------------ pure parts
def test_probe_sizes_are_the_sizes_the_profile_measured():
    sizes = probe_sizes(MEASURED)
    assert sizes is not None
    assert sizes.matmul == ((32, 32, 32),)  # float only: the profile's float figure
    assert sizes.conv == ((8, 16, 8, 3),)
    assert sizes.message_bytes == (256, 4096, 65536)
    assert probe_sizes({"launch_overhead Relu": "x"}) is None


def test_a_calibrated_profile_is_recognised_and_a_nominal_one_is_marked(tmp_path):
    state = profile_state(_calibrated(tmp_path))
    assert state.calibrated and "plan-calibrate" in state.note
    assert state.figures == pytest.approx({"float_flops": 2e10, "launch_overhead": 2e-5, "link_latency": 4e-5,
                                           "link_bandwidth": 3e9}, rel=1e-3)
    assert isinstance(state.sizes, ProbeSizes)
    nominal = profile_state(NOMINAL)
    assert not nominal.calibrated and "nominal" in nominal.note and nominal.sizes is None
    missing = profile_state(tmp_path / "gone.yaml")
    assert not missing.calibrated and "not a file" in missing.note


def test_slowdowns_say_how_many_times_slower_for_rates_and_times_alike():
    profile = {"float_flops": 2e10, "launch_overhead": 2e-5, "link_latency": 4e-5, "link_bandwidth": 3e9}
    probe = {"float_flops": 1e10, "launch_overhead": 6e-5, "link_latency": 2e-5}
    s = slowdowns(profile, probe)
    assert s == pytest.approx({"compute": 2.0, "overhead": 3.0, "latency": 0.5, "bandwidth": None})
    both = combined({"compute": 2.0, "overhead": 1.0, "latency": None, "bandwidth": None},
                    {"compute": 8.0, "overhead": 4.0, "latency": 3.0, "bandwidth": None})
    assert both == pytest.approx({"compute": 4.0, "overhead": 2.0, "latency": 3.0, "bandwidth": None})


def test_scaling_the_profile_scales_each_figure_by_its_slowdown(tmp_path):
    topology = load_topology(_calibrated(tmp_path))
    scaled = scale_topology(topology, {"compute": 2.0, "overhead": 3.0, "latency": 5.0, "bandwidth": 4.0})
    for before, after in zip(topology.devices, scaled.devices, strict=True):
        assert after.peak_flops_per_s == pytest.approx({k: v / 2 for k, v in before.peak_flops_per_s.items()})
        assert after.memory_bandwidth_bytes_per_s == pytest.approx(before.memory_bandwidth_bytes_per_s / 2)
        assert after.launch_overhead_s == pytest.approx(before.launch_overhead_s * 3)  # op_overhead included
        assert after.op_cost_factors == before.op_cost_factors and after.memory_bytes == before.memory_bytes
    link, new = topology.links[0][1], scaled.links[0][1]
    assert new.latency_s == pytest.approx(link.latency_s * 5)  # no share named as the ranks' own work
    assert new.bandwidth_bytes_per_s == pytest.approx(link.bandwidth_bytes_per_s / 4)
    assert scaled.links[0][0] == LOCAL  # a device to itself stays free
    # the profile's send + receive overheads (5e-5 of the link's 9e-5) are the ranks' work: scaled as overhead
    own_s = profile_state(_calibrated(tmp_path)).link_overhead_s
    assert own_s == pytest.approx(FIGS["send_overhead"] + FIGS["recv_overhead"], rel=1e-3)
    split = scale_topology(topology, {"compute": 2.0, "overhead": 3.0, "latency": 5.0, "bandwidth": 4.0}, own_s)
    assert split.links[0][1].latency_s == pytest.approx((link.latency_s - own_s) * 5 + own_s * 3)
    assert split.links[0][1].bandwidth_bytes_per_s == pytest.approx(link.bandwidth_bytes_per_s / 4)
    assert split.links[1][1] == LOCAL
    same = scale_topology(topology, {"compute": None, "overhead": 1.0})
    assert same.devices == topology.devices and same.links == topology.links


def test_the_resimulation_at_scale_one_is_the_plans_makespan_and_scales_with_it(tmp_path):
    hw = _calibrated(tmp_path)
    plan, graph = load_checked_plan(_plan(tmp_path, hw))
    topology = load_topology(hw)
    planned_s = plan.makespan_tick * plan.tick_s
    assert resimulated_makespan_s(plan, graph, topology) == pytest.approx(planned_s, rel=1e-12)
    ones = dict.fromkeys(("compute", "overhead", "latency", "bandwidth"), 1.0)
    assert resimulated_makespan_s(plan, graph, scale_topology(topology, ones)) == pytest.approx(planned_s, rel=1e-12)
    twice = resimulated_makespan_s(plan, graph, scale_topology(topology, dict.fromkeys(ones, 2.0)))
    # every op's and transfer's seconds doubled, then rounded up to the plan's tick: at most twice the makespan,
    # and short of it by at most a tick per task
    assert twice is not None
    assert 2 * planned_s - len(plan.placements) * plan.tick_s <= twice <= 2 * planned_s + 1e-12


def test_a_probe_that_sees_the_calibrated_machine_leaves_the_ratio_as_it_was(tmp_path):
    hw = _calibrated(tmp_path)
    plan, graph = load_checked_plan(_plan(tmp_path, hw))
    state = profile_state(hw)
    planned_s = plan.makespan_tick * plan.tick_s
    same = dict(state.figures)
    slower = {**same, "float_flops": same["float_flops"] / 2, "launch_overhead": same["launch_overhead"] * 2,
              "link_latency": same["link_latency"] * 2, "link_bandwidth": same["link_bandwidth"] / 2}
    report = state_report(state, same, same, plan, graph, load_topology(hw), 3 * planned_s)
    assert report["slowdown"] == pytest.approx(dict.fromkeys(("compute", "overhead", "latency", "bandwidth"), 1.0))
    assert report["stretch"] == pytest.approx(1.0) and report["measured_vs_resimulated"] == pytest.approx(3.0)
    # twice as slow before, as calibrated after: the geometric mean, sqrt(2) slower in every figure
    half = state_report(state, slower, same, plan, graph, load_topology(hw), 3 * planned_s)
    assert half["slowdown"] == pytest.approx(dict.fromkeys(("compute", "overhead", "latency", "bandwidth"),
                                                           math.sqrt(2)))
    assert 1.0 < half["stretch"] < 2.0 and half["measured_vs_resimulated"] < 3.0  # about sqrt(2), tick-rounded
    assert "x its schedule on the profile as calibrated" in summary_lines(half)[1]


# ------------------------------------------------------------------------------------------------ real runs
def _sane(figures: dict, world: int) -> None:
    assert set(figures) == (set(FIGURES) if world > 1 else {"float_flops", "launch_overhead"})
    for value in figures.values():
        assert math.isfinite(value) and value > 0
    assert figures["launch_overhead"] < 1.0  # seconds per one-element op: an absurd figure would be far above
    if world > 1:
        assert figures["link_latency"] < 1.0


@pytest.mark.dist
def test_a_two_rank_run_on_a_calibrated_profile_reports_the_machine_state(tmp_path, capsys):
    plan = _plan(tmp_path, _calibrated(tmp_path))
    report_path = tmp_path / "run.json"
    assert run_main(["--plan", str(plan), "--nproc", "2", "--repeat", "2", "--report", str(report_path)]) == 0
    printed = capsys.readouterr().out
    assert "machine now vs at calibration" in printed and "measured / re-simulated" in printed
    report = json.loads(report_path.read_text())
    state = report["machine_state"]
    assert state["profile"] == "calibrated"
    _sane(state["probe_before"], 2)
    _sane(state["probe_after"], 2)
    for key in ("slowdown_before", "slowdown_after", "slowdown"):
        assert set(state[key]) == {"compute", "overhead", "latency", "bandwidth"}
        assert all(v is not None and math.isfinite(v) and v > 0 for v in state[key].values())
    assert state["resimulated_unscaled_makespan_s"] == pytest.approx(report["simulated_makespan_s"], rel=1e-12)
    assert state["resimulated_makespan_s"] > 0
    assert report["measured_vs_resimulated"] == pytest.approx(
        report["measured_makespan_s"] / state["resimulated_makespan_s"])


@pytest.mark.dist
def test_a_nominal_profile_is_marked_and_not_probed(tmp_path):
    report = run_plan(_plan(tmp_path, NOMINAL), nproc=2, repeat=1, report_path=tmp_path / "run.json").report
    state = report["machine_state"]
    assert state["profile"] == "nominal" and "nominal" in state["note"]
    assert "probe_before" not in state and report["measured_vs_resimulated"] is None
    assert summary_lines(state)[0].startswith("machine state: not compared")


@pytest.mark.dist
def test_no_probe_leaves_the_calibrated_run_uncompared_and_says_so(tmp_path):
    plan = _plan(tmp_path, _calibrated(tmp_path))
    outcome = run_plan(plan, nproc=2, repeat=1, report_path=tmp_path / "run.json", probe=False)
    assert all(not r.probe_before and not r.probe_after for r in outcome.results)
    state = outcome.report["machine_state"]
    assert state["profile"] == "calibrated" and "did not run" in state["note"]
    assert outcome.report["measured_vs_resimulated"] is None
