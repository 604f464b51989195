"""The Python API (`opplan`): a user's three jobs through `import opplan` alone, and every frame against what the
command writes or prints for the same inputs.

The jobs: plan the bundled MoE on a bundled profile; compare the pipeline schedules against DualPipe; a memory
what-if.  The commands run in-process on the same inputs with a deterministic setting (HEFT for the placement,
baselines only for the comparison), so their files can be compared with the frames value for value.
"""

from __future__ import annotations

import ast
import inspect
import io
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import opplan

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def moe() -> opplan.Model:
    return opplan.load_model(opplan.BUNDLED_MODEL)


@pytest.fixture(scope="module")
def h100() -> opplan.Hardware:
    return opplan.load_hardware("h100-8-nvlink")


# ------------------------------------------------------------------------------------------------ the surface
def test_every_name_of_all_is_there_and_documented() -> None:
    assert len(set(opplan.__all__)) == len(opplan.__all__)
    for name in opplan.__all__:
        value = getattr(opplan, name)
        if inspect.isfunction(value) or inspect.isclass(value):
            assert (value.__doc__ or "").strip(), f"opplan.{name} has no docstring"
    for fn in (opplan.load_model, opplan.load_hardware, opplan.solve, opplan.simulate, opplan.compare, opplan.whatif,
               opplan.run, opplan.calibrate):
        assert fn.__annotations__.get("return"), f"{fn.__name__} has no return type"


def test_the_api_page_names_every_public_name() -> None:
    page = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    missing = [name for name in opplan.__all__ if f"`{name}" not in page]
    assert not missing, f"docs/api.md does not describe {missing}"


def test_bundled_profiles_load_by_name_and_a_missing_one_is_one_line() -> None:
    names = opplan.bundled_profile_names()
    assert "cpu-4.yaml" in names
    for name in names:
        hw = opplan.load_hardware(name.removesuffix(".yaml"))
        assert hw.num_devices == len(hw.device_names) > 0 and hw.path is not None and hw.path.is_file()
    with pytest.raises(opplan.InputError, match="no-such-profile"):
        opplan.load_hardware("no-such-profile")


def test_the_planner_never_imports_the_api() -> None:
    # opplan sits on top of planner: the layers below never reach up to it (tests/test_layering.py's one-way rule)
    upward = []
    for top in ("planner", "formulations", "experiments"):
        for path in sorted((REPO / top).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if not re.search(r"^\s*(?:from|import)\s.*\bopplan\b", text, re.MULTILINE):  # most files: no parse
                continue
            for node in ast.walk(ast.parse(text)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
                upward += [f"{path.relative_to(REPO)}: {n}" for n in names if n.split(".")[0] == "opplan"]
    assert not upward, upward


def test_the_api_imports_and_plans_without_torch() -> None:
    # torch only inside opplan.run (planner.execute): planning from Python works where torch is absent
    script = ("import sys; sys.modules['torch'] = None; import opplan; "
              "p = opplan.solve(opplan.load_model(opplan.BUNDLED_MODEL), opplan.load_hardware(), method='heft'); "
              "assert p.makespan_s > 0; assert not [m for m in sys.modules if m.startswith('planner.execute')]")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]


# ------------------------------------------------------------------------------------------------ job 1: plan
def test_plan_the_bundled_moe_on_a_bundled_profile(moe, caplog, capsys) -> None:
    hw = opplan.load_hardware("cpu-4")
    with caplog.at_level(logging.INFO, logger="opplan"):
        plan = opplan.solve(moe, hw, time_limit_s=2)
    assert 0 < plan.lower_bound_s <= plan.makespan_s
    assert plan.gap == pytest.approx((plan.makespan_s - plan.lower_bound_s) / plan.makespan_s)
    frame = plan.to_frame()
    assert list(frame.columns) == ["device", "ops", "busy_s", "busy_fraction", "peak_memory_bytes", "capacity_bytes"]
    assert list(frame["device"]) == list(hw.device_names)
    assert frame["ops"].sum() == plan.instance.num_tasks == len(plan.schedule.placements)
    assert (frame["busy_s"] <= plan.makespan_s + 1e-12).all()
    assert frame["peak_memory_bytes"].max() == plan.peak_memory_bytes
    # progress went to the logger, nothing to stdout
    assert any(r.name == "opplan" for r in caplog.records) and capsys.readouterr().out == ""


def test_the_plan_frame_is_what_plan_solve_reports(moe, h100, tmp_path) -> None:
    from planner.cli import solve_main

    plan = opplan.solve(moe, h100, method="heft")
    with _stdout() as out:
        assert solve_main(["--hw", "h100-8-nvlink", "--method", "heft", "--format", "json", "--quiet",
                           "--no-pictures", "--out", str(tmp_path / "plan.json")]) == 0
    summary = json.loads(out.getvalue())
    assert (summary["makespan"], summary["lower_bound"]) == (plan.makespan_s, plan.lower_bound_s)
    cli = pd.DataFrame(summary["devices"]).rename(columns={"tasks": "ops", "busy": "busy_s"})
    pd.testing.assert_frame_equal(plan.to_frame(), cli[list(plan.to_frame().columns)])
    saved = json.loads((tmp_path / "plan.json").read_text())
    mine = json.loads(plan.save(tmp_path / "api.json").read_text())
    for key in ("tasks", "model_sha256", "hardware_sha256", "hardware_path"):
        assert mine[key] == saved[key], key
    assert saved["model_sha256"] != ""


def test_simulate_on_other_hardware_is_what_plan_simulate_says(moe, tmp_path) -> None:
    from planner.cli import simulate_main

    plan = opplan.solve(moe, opplan.load_hardware("cpu-4"), method="heft")
    again = opplan.simulate(plan)
    assert again.makespan_s == plan.makespan_s and again.lower_bound_s == plan.lower_bound_s
    a100 = opplan.load_hardware("a100-4-pcie")
    other = opplan.simulate(plan, a100, contention=True)
    with _stdout() as out:
        assert simulate_main(["--plan", str(plan.save(tmp_path / "p.json")), "--hw", str(a100.path),
                              "--contention", "--format", "json"]) == 0
    summary = json.loads(out.getvalue())
    assert (summary["makespan"], summary["lower_bound"]) == (other.makespan_s, other.lower_bound_s)
    assert other.makespan_s != plan.makespan_s  # other devices, other times
    with pytest.raises(opplan.InputError, match="devices"):
        opplan.simulate(plan, opplan.load_hardware("h100-8-nvlink"))


# ------------------------------------------------------------------------------------------------ job 2: compare
def test_compare_against_dualpipe(moe, h100) -> None:
    cmp = opplan.compare(moe, h100, stages=2, microbatches=4, time_limit_s=4, stage_time_limit_s=5)
    frame = cmp.to_frame().set_index("schedule")
    assert list(frame.columns) == ["makespan_us", "bubble_ratio", "peak_memory_MiB", "param_memory_MiB"]
    assert {"gpipe", "1f1b", "dualpipe", "dualpipev", "opplan"} <= set(frame.index)
    dualpipe, planned = frame.loc["dualpipe"], frame.loc["opplan"]
    # the planned schedule starts from the best baseline within DualPipe's peak memory: never longer, never larger
    assert planned["makespan_us"] <= dualpipe["makespan_us"]
    assert planned["peak_memory_MiB"] <= dualpipe["peak_memory_MiB"]
    assert ((frame["bubble_ratio"] >= 0) & (frame["bubble_ratio"] < 1)).all()
    assert "dualpipe" in cmp.table()


def test_compare_plans_a_schedule_torch_runs_beside_dualpipes_placement(moe, h100, tmp_path) -> None:
    # the planned row on DualPipe's two directions is one torch's pipelining runtime refuses: the comparison also
    # plans one on a placement it runs, as plan-compare does, and says so
    cmp = opplan.compare(moe, h100, stages=2, microbatches=4, time_limit_s=6, stage_time_limit_s=5,
                         placement="dualpipe", bound_time_s=0)
    alt = cmp.runnable
    assert alt is not None and alt["schedule"] == "opplan-runnable"
    assert alt["peak_memory"] <= cmp.csv_frame().set_index("schedule").loc["dualpipe", "peak_memory"] + 1e-9
    line = cmp.torch_line()
    assert line is not None and "opplan-runnable.torch.csv runs" in line and "two directions" in line
    written = {p.name for p in cmp.write(tmp_path, pictures=False)}
    assert {"opplan.torch.csv", "opplan-runnable.torch.csv"} <= written
    # asked not to, it plans none and the line names the placements that run
    plain = opplan.compare(moe, h100, stages=2, microbatches=4, time_limit_s=4, stage_time_limit_s=5,
                           placement="dualpipe", bound_time_s=0, runnable=False)
    assert plain.runnable is None
    assert "--placement v or fixed" in (plain.torch_line() or "")


def test_the_compare_frame_is_plan_compares_csv(moe, h100, tmp_path) -> None:
    from planner.cli_compare import compare_main

    args = ["--stages", "2", "--microbatches", "4", "--stage-time-limit", "5", "--schedules", "1f1b,zb-v,dualpipe"]
    with _stdout():
        assert compare_main(["--model", str(opplan.BUNDLED_MODEL), "--hw", "h100-8-nvlink", *args, "--no-opplan",
                             "--no-pictures", "--out", str(tmp_path)]) == 0
    cmp = opplan.compare(moe, h100, stages=2, microbatches=4, stage_time_limit_s=5,
                         schedules=["1f1b", "zb-v", "dualpipe"], planned=False)
    written = (tmp_path / "compare.csv").read_text()
    assert cmp.csv_text() == written
    units = cmp.to_frame()
    read = pd.read_csv(tmp_path / "compare.csv")
    assert list(units.columns) == ["schedule", "makespan_us", "bubble_ratio", "peak_memory_MiB", "param_memory_MiB"]
    pd.testing.assert_frame_equal(units.set_axis(list(read.columns), axis=1), read)
    assert list(units["schedule"]) == ["1f1b", "zb-v", "dualpipe"]


# ------------------------------------------------------------------------------------------------ job 3: what-if
CAPS_BYTES = [100_000, 200_000, 400_000, 2**20]


def test_a_memory_whatif(moe, h100) -> None:
    sweep = opplan.whatif(moe, h100, memory_caps_bytes=CAPS_BYTES, time_limit_s=4)
    frame = sweep.to_frame()
    assert list(frame["capacity_bytes"]) == CAPS_BYTES
    feasible = frame[frame["feasible"] == 1]
    assert not feasible.empty and (frame["feasible"] == 0).any()  # the sweep crosses the smallest that fits
    assert sweep.smallest_feasible_bytes == feasible["capacity_bytes"].min()
    assert (feasible["peak_memory_bytes"] <= feasible["capacity_bytes"]).all()
    assert feasible["makespan_s"].is_monotonic_decreasing  # more memory never makes a plan longer
    assert (feasible["lower_bound_s"] <= feasible["makespan_s"]).all()
    assert frame.loc[frame["feasible"] == 0, "reason"].str.len().gt(0).all()
    gib = opplan.whatif(moe, h100, memory_caps_gib=[1], method="heft").to_frame()
    assert list(gib["capacity_bytes"]) == [opplan.GIB]


def test_the_whatif_frame_is_plan_whatifs_csv(moe, h100, tmp_path) -> None:
    from planner.cli import whatif_main

    with _stdout():
        assert whatif_main(["--hw", "h100-8-nvlink", "--memory", ",".join(map(str, CAPS_BYTES)), "--method", "heft",
                            "--quiet", "--out-dir", str(tmp_path)]) == 0
    sweep = opplan.whatif(moe, h100, memory_caps_bytes=CAPS_BYTES, method="heft")
    written = (tmp_path / "whatif.csv").read_bytes().decode()
    assert sweep.csv_text() == written
    read = pd.read_csv(tmp_path / "whatif.csv", keep_default_na=False, na_values={"makespan_s": [""],
                       "lower_bound_s": [""], "plan_found_at_capacity_bytes": [""]})
    frame = sweep.to_frame()
    assert list(frame.columns) == list(read.columns)
    pd.testing.assert_frame_equal(frame, read.astype(frame.dtypes.to_dict()))


def test_whatif_needs_a_positive_capacity(moe, h100) -> None:
    with pytest.raises(opplan.InputError, match="capacity"):
        opplan.whatif(moe, h100)
    with pytest.raises(opplan.InputError, match="method"):
        opplan.whatif(moe, h100, memory_caps_gib=[1], method="annealing")


class _stdout:
    """Capture what a command prints (the commands print their tables; the API prints nothing)."""

    def __enter__(self) -> io.StringIO:
        import contextlib

        self._buf = io.StringIO()
        self._redirect = contextlib.redirect_stdout(self._buf)
        self._redirect.__enter__()
        return self._buf

    def __exit__(self, *exc: object) -> None:
        self._redirect.__exit__(*exc)


# ------------------------------------------------------------------------------------------------ running a plan
@pytest.mark.dist
def test_run_a_plan_and_check_it_against_onnxruntime(moe) -> None:
    plan = opplan.solve(moe, opplan.load_hardware("cpu-4"), method="heft")
    done = opplan.run(plan, check=True)
    assert done.max_abs_error is not None and done.max_abs_error <= 1e-5
    assert done.simulated_makespan_s == plan.makespan_s and done.measured_makespan_s > 0
    frame = done.to_frame()
    assert list(frame.columns) == ["rank", "devices", "busy_s", "simulated_busy_s", "build_s"]
    assert list(frame["rank"]) == list(range(done.report["world_size"]))
    used = sorted({p.device for p in plan.schedule.placements})
    assert set(frame["devices"]) == {plan.hw.device_names[d] for d in used}  # one rank per device the plan uses
    assert (frame["busy_s"] > 0).all() and list(frame["busy_s"]) == done.report["busy_s"]
