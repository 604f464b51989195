"""plan-compare on unit costs and the pipeline formulation (formulations/pipeline.py).

Bubble ratio here is the docs/architecture.md one: total idle time / (devices x makespan).
"""

from __future__ import annotations

import csv

import pytest

from formulations.pipeline import device_bound_tick, solve_pipeline, split_start_times
from planner.cli_compare import compare_main
from planner.compare.pipelines import CSV_COLUMNS, compare
from planner.errors import InfeasibleError
from planner.pipeline.registry import UnitCosts
from planner.pipeline.unroll import uniform_pipeline, unroll


def test_formulation_finds_the_hand_derived_optimum_of_two_stages():
    # 2 stages on 2 devices, 2 micro-batches, F = B = W = 1, no memory cap.
    # Device 1 can start only at 1 (after 0F0) and runs 6 tasks; its last task then needs 0B1 (1) and 0W1 (1)
    # after 1B1 unless it ends with W's: 1F0 1B0 1F1 1B1 on [1,5), 1W0 1W1 on [5,7); device 0 runs 0B1 at 5,
    # 0W1 at 6 -> makespan 7 = 1 (head) + 6 (work), the device bound.
    pipe = uniform_pipeline(2, 2)
    sol = solve_pipeline(pipe, time_limit_s=10)
    assert sol.plan.makespan_tick == 7 == device_bound_tick(sol.instance, [1 if n.startswith("1") else 0
                                                                         for n in sol.instance.task_names])
    assert sol.status == "optimal" and sol.gap == 0
    sol.schedule.check_complete()


def test_memory_cap_binds_and_infeasible_caps_are_typed():
    # 1 stage, 3 micro-batches, F=B=W=1, activation 1: with cap 1 only one micro-batch may be in flight, so the
    # device runs F B W three times in a row: makespan 9, peak 1.
    pipe = uniform_pipeline(1, 3)
    sol = solve_pipeline(pipe, 1, time_limit_s=10)
    assert sol.plan.makespan_tick == 9
    with pytest.raises(InfeasibleError, match="memory cap 0"):
        solve_pipeline(pipe, 0, time_limit_s=10)


def test_warm_start_from_a_baseline_is_kept_or_improved():
    cmp = compare(4, 8, UnitCosts(), schedules=("dualpipe",), opplan=False)
    dp = cmp.row("dualpipe")
    times = split_start_times(dp.pipeline, dp.timeline)
    assert times is not None and set(times) == set(unroll(dp.pipeline).task_names)
    sol = solve_pipeline(dp.pipeline, dp.figures.max_peak_memory_bytes, warm_start=times, time_limit_s=20)
    assert sol.plan.makespan_tick <= dp.figures.makespan_tick


def test_compare_skips_unmet_requirements_with_the_reason():
    cmp = compare(3, 5, UnitCosts(), opplan=False)
    skipped = {r.name: r.skipped for r in cmp.rows if r.skipped}
    assert "dualpipe" in skipped and "even number of devices" in skipped["dualpipe"]
    assert "1f1b" not in skipped
    assert "skipped: " in cmp.table()


def test_table_marks_the_best_known_schedule_and_the_planned_one_when_it_is_best():
    # unit costs p = 4, m = 8: ZB-V (25.5) is the shortest baseline; the planned schedule reaches 25 (optimal)
    cmp = compare(4, 8, UnitCosts(), schedules=("1f1b", "zb-v", "dualpipe"), time_limit_s=20)
    assert cmp.best_marks() == {"zb-v": "best known", "opplan": "best of all"}
    lines = {line.split()[0]: line for line in cmp.table().splitlines()[2:] if line.strip()}
    assert lines["zb-v"].endswith("<- best known") and lines["opplan"].endswith("<- best of all")
    assert "<-" not in lines["1f1b"] and "<-" not in lines["dualpipe"]
    plain = compare(4, 8, UnitCosts(), schedules=("1f1b", "zb-v"), opplan=False)
    assert plain.best_marks() == {"zb-v": "best known"}


def test_cli_writes_csv_torch_csvs_and_pictures(tmp_path, capsys):
    out = tmp_path / "cmp"
    rc = compare_main(["--stages", "2", "--microbatches", "4", "--time-limit", "5", "--out", str(out)])
    assert rc == 0
    rows = list(csv.DictReader((out / "compare.csv").open()))
    assert tuple(rows[0]) == CSV_COLUMNS
    names = [r["schedule"] for r in rows]
    assert names[-1] == "opplan" and "dualpipe" in names and "1f1b" in names
    by = {r["schedule"]: r for r in rows}
    # 1F1B on 2 stages, 4 micro-batches, F=B=W=1: makespan (m+p-1)(F+B+W) = 15, idle 2 x 3 of 2 x 15
    assert float(by["1f1b"]["makespan"]) == 15 and float(by["1f1b"]["bubble_ratio"]) == pytest.approx(0.2)
    assert float(by["opplan"]["peak_memory"]) <= float(by["dualpipe"]["peak_memory"])
    assert float(by["opplan"]["makespan"]) <= float(by["dualpipe"]["makespan"])
    for n in names:
        assert (out / f"{n}.png").stat().st_size > 0
        assert (out / f"{n}.torch.csv").read_text().strip()
    assert (out / "side_by_side.png").exists()
    printed = capsys.readouterr().out
    assert "opplan" in printed and "makespan" in printed


def test_cli_reports_bad_arguments_as_one_line(capsys):
    assert compare_main(["--stages", "2", "--microbatches", "4", "--f", "-1", "--no-opplan"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_a_placement_that_gives_no_schedule_says_why(monkeypatch):
    # the planned row's skipped reason names each placement and its error, not a guess (such as "within the memory
    # cap" whatever the solver raised)
    import planner.compare.pipelines as pipelines_module
    import planner.compare.planned_row as planned_row_module
    from planner.errors import OpplanError

    def failing(*_args, **_kwargs):
        raise OpplanError("forced: the solver's schedule failed validation")

    monkeypatch.setattr(planned_row_module, "solve_pipeline_lns", failing)  # the planned row's solve (with the search)
    cmp = pipelines_module.compare(4, 8, UnitCosts(), schedules=("dualpipe",), opplan_placement="v", time_limit_s=2)
    row = cmp.row("opplan")
    assert row.skipped == "no placement gave a schedule (v placement: forced: the solver's schedule failed validation)"


def test_pairs_with_sends_as_edge_delays_get_a_valid_planned_schedule():
    # two overlapped pairs on different devices are joined by two edges (the activation one way, the gradient the
    # other); the merged instance summed their delays, so the validator rejected the formulation's (valid) schedule
    # and the planned row was skipped; each edge is its own delay, the merged one waits for the longer
    cmp = compare(2, 4, UnitCosts(fb_overlap=0.6, comm=0.5), schedules=("zb-v", "dualpipev"), opplan_placement="v",
                  time_limit_s=5)
    row = cmp.row("opplan")
    assert not row.skipped, row.skipped
    assert row.figures is not None and row.figures.makespan_tick <= min(
        r.figures.makespan_tick for r in cmp.ok_rows() if r.name != "opplan" and r.figures is not None)


def test_the_cli_says_which_torch_csvs_torch_cannot_run(tmp_path, capsys):
    # DualPipe's two directions are refused by torch's pipelining runtime (tests/test_torch_pipelining_run.py);
    # plan-compare says so beside the file, and not for the schedules torch runs
    assert compare_main(["--stages", "4", "--microbatches", "8", "--schedules", "dualpipe,zb-v", "--no-opplan",
                         "--no-pictures", "--out", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "note: dualpipe.torch.csv runs two model copies in two directions" in out
    assert "zb-v.torch.csv runs" not in out
