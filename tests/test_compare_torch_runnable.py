"""plan-compare writes a planned schedule torch's pipelining runtime runs: ``opplan.torch.csv`` itself when its
placement is one chain of stages, else ``opplan-runnable.torch.csv`` beside it, and one line says which.

The runnable file is loaded and executed by torch's own runtime on forked gloo ranks (tiny Linear+ReLU stages,
float64), its losses and gradients matching a single-process reference (`test_torch_pipelining_run`'s check).
On unit costs at p = 4, m = 8 plan-compare's default keeps DualPipe's two directions (its schedule reaches 25, the
optimum, below the V placement's bound of 25.5, so the V is not even solved), which torch refuses: the case the
runnable alternative is for, solved on its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from test_torch_pipelining_run import _check_against_reference  # noqa: E402

from planner.cli_compare import compare_main  # noqa: E402
from planner.compare.baselines import scales_of, simulate_baseline  # noqa: E402
from planner.compare.pipelines import compare  # noqa: E402
from planner.compare.planned_row import PlacementJob, RowSearch  # noqa: E402
from planner.compare.torch_runnable import RUNNABLE_NAME, runnable_row, torch_runs  # noqa: E402
from planner.pipeline.registry import UnitCosts  # noqa: E402
from planner.schedule.torch_csv import read_torch_csv  # noqa: E402

TIME_LIMIT = "6"  # seconds: the unit-cost pipelines at p = 4 are solved (or nearly) well within it


def _torch_lines(printed: str) -> list[str]:
    return [line for line in printed.splitlines() if line.startswith("torch: ")]


@pytest.mark.dist
def test_default_placement_torch_cannot_run_gets_a_runnable_file_torch_runs(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert compare_main(["--stages", "4", "--microbatches", "8", "--time-limit", TIME_LIMIT, "--bound-time", "0",
                         "--no-pictures", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "placement dualpipe" in printed  # the default kept DualPipe's two directions here (module docstring)
    [line] = _torch_lines(printed)
    assert line.startswith(f"torch: {RUNNABLE_NAME}.torch.csv runs in torch.distributed.pipelining's runtime")
    assert "opplan.torch.csv cannot: it runs two model copies in two directions" in line
    runnable = out / f"{RUNNABLE_NAME}.torch.csv"
    schedule = read_torch_csv(runnable)
    assert schedule.num_devices == 4 and schedule.num_stages in (4, 8)
    assert (out / "opplan.torch.csv").exists()  # the planned row's own file stays
    _check_against_reference(runnable, 4, 8)  # loaded and run by torch's runtime on 4 gloo ranks


def test_a_runnable_planned_schedule_is_said_so_and_no_alternative_is_written(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert compare_main(["--stages", "2", "--microbatches", "4", "--placement", "v", "--time-limit", "3",
                         "--bound-time", "0", "--no-pictures", "--out", str(out)]) == 0
    [line] = _torch_lines(capsys.readouterr().out)
    assert line == ("torch: opplan.torch.csv runs in torch.distributed.pipelining's runtime (one chain of 4 stages, "
                    "the v placement)")
    assert not (out / f"{RUNNABLE_NAME}.torch.csv").exists()


def test_a_runnable_row_already_solved_is_taken_without_another_solve(monkeypatch):
    # `compare(opplan_placement="both")` solves both placements; when DualPipe's wins, the V row solved beside it is
    # the runnable one, and no third solve runs (the solve below fails the test if it is called)
    import planner.compare.torch_runnable as torch_runnable

    def no_solve(*_args, **_kwargs):
        raise AssertionError("a row already solved on a runnable placement was solved again")

    costs = UnitCosts()
    rows = {pl: compare(2, 4, costs, schedules=("dualpipe",), opplan_placement=pl, time_limit_s=2,
                        bound_time_s=0).row("opplan") for pl in ("dualpipe", "v")}
    monkeypatch.setattr(torch_runnable, "plan_placement", no_solve)
    job = PlacementJob("", 2, 4, costs, scales_of(costs), {}, None)
    alt = runnable_row(job, rows, 1.0, RowSearch())
    assert alt.name == RUNNABLE_NAME and alt.schedule is rows["v"].schedule and torch_runs(alt)
    assert alt.notes["placement"] == "v" and alt.notes["solved"] == "with the planned row"
    assert rows["v"].name == "opplan"  # the planned row's own record is left as it was
    assert not torch_runs(rows["dualpipe"])


@pytest.mark.parametrize("name,runs", [("dualpipe", False), ("1f1b", True), ("interleaved-1f1b", True),
                                       ("zb-v", True), ("dualpipev", True)])
def test_torch_runs_only_one_chain_of_stages(name, runs):
    costs = UnitCosts()
    assert torch_runs(simulate_baseline(name, 4, 8, costs, scales_of(costs))) is runs


def test_written_files_of_the_runnable_case_name_the_file(tmp_path):
    # write_outputs writes the runnable row's CSV under its name, beside the planned row's
    from planner.compare.pipelines import write_outputs

    cmp = compare(4, 8, UnitCosts(), schedules=("dualpipe",), opplan_placement="dualpipe", time_limit_s=4,
                  bound_time_s=0, runnable=True)
    assert cmp.runnable is not None and cmp.runnable.notes["solved"] == "on its own"
    written = [Path(p).name for p in write_outputs(cmp, tmp_path, pictures=False)]
    assert written == ["compare.csv", "dualpipe.torch.csv", "opplan.torch.csv", f"{RUNNABLE_NAME}.torch.csv"]
