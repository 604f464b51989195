"""plan-compare's memory what-if (`planner.compare.memory_sweep`, ``--memory-sweep``): the planned schedule at each
memory cap beside the baselines, the CSV built from one frame and the picture drawn from it."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from planner.cli_compare import compare_main
from planner.compare.baselines import scales_of
from planner.compare.memory_sweep import PLANNED, MemorySweep, _cap_units, memory_sweep, parse_caps
from planner.compare.sweep_plot import sweep_figure, write_sweep
from planner.errors import InputError
from planner.pipeline.registry import UnitCosts

MIB = 2**20


@pytest.fixture(scope="module")
def sweep() -> MemorySweep:
    """4 devices, 8 micro-batches on unit costs, caps from one that nothing fits (half a stage's activation) to
    above DualPipe's peak (5)."""
    costs = UnitCosts()
    per = scales_of(costs).bytes_per_unit
    return memory_sweep(4, 8, costs, [round(c * per) for c in (0.5, 3, 4, 5, 6)], time_limit_s=12.0)


def _planned(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["schedule"] == PLANNED].reset_index(drop=True)


def test_planned_makespan_never_rises_with_the_cap_and_fits_it(sweep: MemorySweep) -> None:
    planned = _planned(sweep.frame()).query("feasible == 1")
    assert len(planned) >= 3  # 4, 5, 6 at least: the baselines fit there and warm-start the solve
    assert list(planned["makespan_unit"]) == sorted(planned["makespan_unit"], reverse=True)
    assert (planned["peak_memory_unit"] <= planned["memory_cap_unit"]).all()
    assert (planned["bound_unit"] <= planned["makespan_unit"]).all()
    for pt in sweep.points:
        if pt.row is not None:
            assert pt.row.figures.max_peak_memory_bytes <= pt.cap_bytes


def test_a_schedule_a_larger_cap_found_serves_a_smaller_cap_it_fits(sweep: MemorySweep) -> None:
    """A solve at a larger cap can find a schedule whose peak also fits a smaller cap: that cap keeps it where it
    is shorter than its own, its bound no higher than the makespan; a schedule that does not fit is never taken."""
    from planner.compare.memory_sweep import SweepPoint, _carried_down

    top = sweep.points[-1]
    planned = top.row
    assert planned is not None and planned.figures is not None
    peak = planned.figures.max_peak_memory_bytes
    longer = max((r for r in sweep.baselines.ok_rows() if r.figures is not None
                  and r.figures.makespan_tick > planned.figures.makespan_tick), key=lambda r: r.figures.makespan_tick)
    held = SweepPoint(peak, longer, peak, bound_tick=10**9)
    (got,) = _carried_down([held], [(planned, top.cap_bytes)])
    assert (got.row, got.found_at_bytes, got.baseline) == (planned, top.cap_bytes, "")
    assert got.bound_tick == planned.figures.makespan_tick  # the held bound, cut to the kept makespan
    (tight,) = _carried_down([SweepPoint(peak - 1, longer, peak - 1)], [(planned, top.cap_bytes)])
    assert tight.row is longer  # one byte short: it does not fit


def test_planned_never_above_a_baseline_that_fits_the_same_cap(sweep: MemorySweep) -> None:
    frame = sweep.frame()
    for cap, at_cap in frame.groupby("memory_cap_unit"):
        fitting = at_cap[(at_cap["schedule"] != PLANNED) & (at_cap["feasible"] == 1)]
        planned = at_cap[at_cap["schedule"] == PLANNED].iloc[0]
        if len(fitting):
            assert planned["feasible"] == 1, cap
            assert planned["makespan_unit"] <= fitting["makespan_unit"].min(), cap
        # a baseline fits exactly when its peak is at most the cap
        base = at_cap[at_cap["schedule"] != PLANNED]
        assert list(base["feasible"]) == [int(v) for v in base["peak_memory_unit"] <= cap]


def test_caps_below_the_smallest_feasible_say_why(sweep: MemorySweep) -> None:
    planned = _planned(sweep.frame())
    first = planned.index[planned["feasible"] == 1][0]
    below = planned.iloc[:first]
    assert len(below) >= 1 and below["memory_cap_unit"].iloc[0] == 0.5
    assert below["reason"].str.len().gt(0).all()
    assert below["makespan_unit"].isna().all()
    assert "\n" not in "".join(below["reason"])
    assert "infeasible (" in sweep.point_line(sweep.points[0])


def test_csv_equals_the_frame(sweep: MemorySweep, tmp_path) -> None:
    written = write_sweep(sweep, tmp_path, pictures=False)
    assert [p.name for p in written] == ["memory_sweep.csv"]
    read = pd.read_csv(written[0])
    read[["source", "reason"]] = read[["source", "reason"]].fillna("")
    frame = sweep.frame()
    assert list(read.columns) == ["memory_cap_unit", "schedule", "makespan_unit", "peak_memory_unit", "bound_unit",
                                  "gap", "feasible", "source", "reason"]
    pd.testing.assert_frame_equal(read, frame, check_dtype=False, rtol=1e-9)


def test_the_picture_draws_the_csv(sweep: MemorySweep) -> None:
    frame = sweep.frame()
    ax = sweep_figure(sweep).axes[0]
    points = next(c for c in ax.collections if c.get_gid() == "baselines").get_offsets()
    base = frame[frame["schedule"] != PLANNED].drop_duplicates("schedule")
    np.testing.assert_allclose(np.asarray(points), base[["peak_memory_unit", "makespan_unit"]].to_numpy())
    assert sorted(t.get_text() for t in ax.texts) == sorted(base["schedule"])
    lines = {line.get_gid(): line for line in ax.lines}
    planned = _planned(frame).query("feasible == 1")
    np.testing.assert_allclose(np.asarray(lines["planned"].get_xdata(), dtype=float), planned["memory_cap_unit"])
    np.testing.assert_allclose(np.asarray(lines["planned"].get_ydata(), dtype=float), planned["makespan_unit"])
    np.testing.assert_allclose(np.asarray(lines["bound"].get_ydata(), dtype=float), planned["bound_unit"])
    assert lines["bound"].get_linestyle() == "--"
    own = next(c for c in ax.collections if c.get_gid() == "planned_peak").get_offsets()
    np.testing.assert_allclose(np.asarray(own), planned[["peak_memory_unit", "makespan_unit"]].to_numpy())
    assert ax.get_title(loc="left").startswith("makespan against memory: 4 devices")
    assert sweep_figure(sweep, what="unit costs").axes[0].get_title(loc="left").startswith("unit costs: makespan")


def test_caps_read_in_the_comparisons_memory_unit() -> None:
    assert parse_caps("2:4:1", 2, sizes=False) == [4, 6, 8]
    assert parse_caps("1.5,0.5", 2, sizes=False) == [1, 3]
    assert parse_caps("512:1GiB:256", MIB, sizes=True) == [512 * MIB, 768 * MIB, 1024 * MIB]
    with pytest.raises(InputError, match="not a number"):
        parse_caps("1GiB:2GiB:1GiB", 2, sizes=False)


@pytest.mark.parametrize("bad", ["1:2", "4:2:1", "0:2:1", "a:b:c", "1:3:0", "1:inf:1", "1GiB:2GiB:1GiB"])
def test_a_bad_range_is_one_error_line_and_exit_2(bad: str, tmp_path, capsys) -> None:
    status = compare_main(["--stages", "2", "--microbatches", "4", "--memory-sweep", bad, "--out",
                           str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith("error: --memory-sweep") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_memory_and_memory_sweep_exclude_each_other(tmp_path, capsys) -> None:
    status = compare_main(["--stages", "2", "--microbatches", "4", "--memory-sweep", "1:2:1", "--memory", "2",
                           "--out", str(tmp_path / "out")])
    assert status == 2 and capsys.readouterr().err.count("\n") == 1


def test_the_command_prints_a_line_per_cap_and_writes_the_csv_and_picture(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    status = compare_main(["--stages", "2", "--microbatches", "4", "--memory-sweep", "1:3:1", "--time-limit", "6",
                           "--out", str(out)])
    lines = capsys.readouterr().out.splitlines()
    assert status == 0
    assert [line.split(":")[0] for line in lines[:3]] == [f"memory cap {c} unit" for c in (1, 2, 3)]
    assert lines[3].startswith("memory sweep: 3 caps")
    assert sorted(p.name for p in out.iterdir()) == ["memory_sweep.csv", "memory_sweep.png"]
    frame = pd.read_csv(out / "memory_sweep.csv")
    assert sorted(set(frame["memory_cap_unit"])) == [1, 2, 3]
    assert not math.isnan(frame[frame["schedule"] == PLANNED]["makespan_unit"].iloc[-1])


def test_a_decimal_step_reaches_its_end() -> None:
    caps = parse_caps("0.5:1.2:0.1", MIB, sizes=True)
    assert len(caps) == 8 and caps[0] == MIB // 2 and caps[-1] == round(1.2 * MIB)
    # and the frame states each cap as the user wrote it, not as its whole bytes divide
    assert [_cap_units(c, MIB) for c in caps] == [0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2]


def test_a_cap_keeps_the_shortest_baseline_that_fits_where_the_solve_gives_nothing(monkeypatch) -> None:
    import planner.compare.pipelines as pipelines
    from planner.compare.compare_row import CompareRow

    # the fault forced: every solve of the planned row ends without a schedule
    monkeypatch.setattr(pipelines, "plan_placement", lambda job, budget_s: CompareRow(PLANNED, skipped="forced"))
    costs = UnitCosts()
    per = scales_of(costs).bytes_per_unit
    got = memory_sweep(4, 8, costs, [2 * per, 4 * per, 5 * per], time_limit_s=6.0)
    frame = got.frame()
    planned = _planned(frame)
    assert list(planned["feasible"]) == [0, 1, 1]
    assert planned["reason"][0] == "forced"
    for cap in (4, 5):
        at_cap = frame[(frame["memory_cap_unit"] == cap) & (frame["schedule"] != PLANNED) & (frame["feasible"] == 1)]
        best = at_cap.loc[at_cap["makespan_unit"].idxmin()]
        row = planned[planned["memory_cap_unit"] == cap].iloc[0]
        assert row["makespan_unit"] == best["makespan_unit"]
        assert row["source"].startswith(f"baseline {best['schedule']}")


def test_the_python_api_sweeps_the_bundled_model(tmp_path) -> None:
    import io

    import opplan

    model, hw = opplan.load_model(opplan.BUNDLED_MODEL), opplan.load_hardware("h100-8-nvlink.yaml")
    got = opplan.compare_memory_sweep(model, hw, stages=2, microbatches=4, memory_caps_mib=[0.5, 2.0],
                                      time_limit_s=6.0, stage_time_limit_s=2.0, progress=lambda _line: None)
    frame = got.to_frame()
    planned = _planned(frame)
    # half a MiB holds less than one stage's parameters and one micro-batch's activations: proved, with why
    assert list(planned["feasible"]) == [0, 1]
    assert "memory cap" in planned["reason"][0]
    at_two = frame[(frame["memory_cap_MiB"] == 2.0) & (frame["feasible"] == 1)]
    assert planned["makespan_us"][1] == at_two["makespan_us"].min()
    read = pd.read_csv(io.StringIO(got.csv_text()))
    read[["source", "reason"]] = read[["source", "reason"]].fillna("")
    pd.testing.assert_frame_equal(read, frame, check_dtype=False, rtol=1e-9)
    assert sorted(p.name for p in got.write(tmp_path)) == ["memory_sweep.csv", "memory_sweep.png"]


@pytest.mark.parametrize("p, m, schedules", [(4, 8, None), (8, 20, None), (4, 8, ("1f1b", "zb-h1", "gpipe"))])
def test_auto_caps_run_from_below_every_peak_to_above_dualpipes(p: int, m: int, schedules) -> None:
    from planner.compare.memory_sweep import DEFAULT_MEMORY_SWEEP_POLICY as policy
    from planner.compare.memory_sweep import auto_caps
    from planner.compare.pipelines import compare

    base = compare(p, m, UnitCosts(), schedules=schedules, opplan=False)
    peaks = {r.name: r.figures.max_peak_memory_bytes for r in base.ok_rows()}  # type: ignore[union-attr]
    top = peaks.get("dualpipe", max(peaks.values())) * policy.auto_high  # the largest peak without DualPipe
    caps = auto_caps(base)
    assert caps == sorted(set(caps))
    assert caps[0] <= min(peaks.values()) * policy.auto_low < caps[1]
    assert caps[-2] < top <= caps[-1]
    assert len({b - a for a, b in zip(caps, caps[1:], strict=False)}) == 1  # evenly spaced
    assert 4 <= len(caps) <= policy.auto_caps + 1


def test_auto_caps_on_mib_are_round_and_about_the_policys_count() -> None:
    from pathlib import Path

    from planner.compare.memory_sweep import MemorySweepPolicy, auto_caps
    from planner.compare.pipelines import compare
    from planner.compare.presets import preset_costs
    from planner.ir.hardware import load_topology

    hw = Path(__file__).resolve().parents[1] / "hardware_profiles" / "h100-2x8-ib.yaml"
    base = compare(4, 8, preset_costs("deepseek-v3", load_topology(hw), 4, num_layers=8), opplan=False)
    per = base.scales.bytes_per_unit
    assert per == MIB
    policy = MemorySweepPolicy(auto_caps=6)
    caps = auto_caps(base, policy)
    assert policy.auto_caps <= len(caps) <= policy.auto_caps + 1
    # a step of two significant digits in MiB, and every cap a whole multiple of it: round figures
    step = _cap_units(caps[1] - caps[0], per)
    assert len(f"{step:e}".split("e")[0].rstrip("0").replace(".", "")) <= 2
    assert all(math.isclose(_cap_units(c, per) / step, round(_cap_units(c, per) / step)) for c in caps)
    with pytest.raises(InputError, match="no baseline ran"):
        auto_caps(dataclasses.replace(base, rows=[]))


def test_the_command_takes_the_caps_from_the_baselines_with_auto(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    status = compare_main(["--stages", "2", "--microbatches", "4", "--memory-sweep", "auto", "--time-limit", "8",
                           "--out", str(out)])
    lines = capsys.readouterr().out.splitlines()
    assert status == 0
    frame = pd.read_csv(out / "memory_sweep.csv")
    caps = sorted(set(frame["memory_cap_unit"]))
    assert [line.split(":")[0] for line in lines[:len(caps)]] == [f"memory cap {c:g} unit" for c in caps]
    peaks = frame[frame["schedule"] != PLANNED].groupby("schedule")["peak_memory_unit"].first()
    assert caps[0] < peaks.min() and caps[-1] > peaks["dualpipe"]
