"""`make bench`'s section `pipeline-sweep` (`experiments.bench_sweep`): a quick run on the bundled MoE at 4 stages
writes one row per cap with the check against the best baseline computed, and its picture; the check says False
where a planned schedule is longer than a baseline that fits the cap."""

from __future__ import annotations

import csv
import dataclasses

import pytest

from experiments.bench import SECTIONS
from experiments.bench_common import write_csv
from experiments.bench_sweep import SweepBenchPolicy, bench_sweep, sweep_rows
from experiments.readme_results import TABLES
from planner.compare.baselines import scales_of
from planner.compare.memory_sweep import SweepPoint, memory_sweep
from planner.pipeline.registry import UnitCosts

COLUMNS = ["case", "p", "m", "time_unit", "memory_unit", "cap", "planned_makespan", "planned_peak", "bound", "gap",
           "source", "best_baseline", "best_baseline_makespan", "best_baseline_peak", "baselines_fitting",
           "planned_not_above_best_baseline", "margin_vs_best_baseline", "reason", "picture"]


def test_a_quick_run_writes_a_row_per_cap_with_the_check_computed(tmp_path) -> None:
    rows = bench_sweep(True, only=("moe",), out_dir=tmp_path, policy=SweepBenchPolicy(quick_case_s=20.0))
    write_csv(tmp_path / "pipeline-sweep-quick.csv", rows)
    read = list(csv.DictReader((tmp_path / "pipeline-sweep-quick.csv").open()))
    assert list(read[0]) == COLUMNS
    assert {(r["p"], r["m"], r["memory_unit"]) for r in read} == {("4", "8", "MiB")}
    caps = [float(r["cap"]) for r in read]
    assert caps == sorted(caps) and len(caps) >= 5
    # the caps run from below every baseline's peak (none fits the first) to above DualPipe's (all fit the last)
    total = read[0]["baselines_fitting"].split(" of ")[1]
    assert read[0]["baselines_fitting"] == f"0 of {total}" and read[-1]["baselines_fitting"] == f"{total} of {total}"
    for r in read:
        assert r["planned_not_above_best_baseline"] in ("True", "False")
        if r["best_baseline"]:
            assert r["planned_makespan"], r  # a baseline fits: so does a planned schedule
            shorter = float(r["planned_makespan"]) <= float(r["best_baseline_makespan"])
            assert r["planned_not_above_best_baseline"] == str(shorter)
            assert float(r["best_baseline_peak"]) <= float(r["cap"])
        if r["planned_makespan"]:
            assert float(r["planned_peak"]) <= float(r["cap"]) * (1 + 1e-6)
            assert float(r["bound"]) <= float(r["planned_makespan"])
            assert 0 <= float(r["gap"]) < 1
            assert r["source"]
    assert all(r["planned_not_above_best_baseline"] == "True" for r in read)
    assert {r["picture"] for r in read} == {"pipeline-sweep-quick-moe.png"}
    assert (tmp_path / "pipeline-sweep-quick-moe.png").stat().st_size > 10_000


def test_the_check_says_false_where_a_baseline_that_fits_is_shorter() -> None:
    costs = UnitCosts()
    per = scales_of(costs).bytes_per_unit
    sweep = memory_sweep(4, 8, costs, [5 * per], time_limit_s=4.0)
    by_name = {r.name: r for r in sweep.baselines.ok_rows()}
    # GPipe's schedule held at a cap where DualPipe fits and is shorter: the planned row a broken sweep would keep
    slow, fast = by_name["gpipe"], by_name["dualpipe"]
    assert slow.figures.makespan_tick > fast.figures.makespan_tick  # type: ignore[union-attr]
    cap = max(slow.figures.max_peak_memory_bytes, fast.figures.max_peak_memory_bytes)  # type: ignore[union-attr]
    broken = dataclasses.replace(sweep, points=(SweepPoint(cap, slow, cap, baseline="gpipe"),))
    [row] = sweep_rows("unit", broken, "x.png")
    assert row["planned_not_above_best_baseline"] is False
    assert row["margin_vs_best_baseline"] < 0
    [row] = sweep_rows("unit", sweep, "x.png")
    assert row["planned_not_above_best_baseline"] is True and row["best_baseline"]


def test_the_section_and_its_readme_table_are_registered() -> None:
    assert "pipeline-sweep" in SECTIONS
    table = next(t for t in TABLES if t.name == "pipeline-sweep")
    assert table.csv_name == "pipeline-sweep.csv" and table.select is not None
    # one row per case from the CSV's one row per cap, every shown column filled
    caps = [dict.fromkeys(COLUMNS, "") | {"case": "c", "p": "4", "m": "8", "memory_unit": "MiB", "cap": cap,
                                            "gap": gap, "best_baseline": base, "picture": "c.png",
                                            "planned_not_above_best_baseline": ok}
            for cap, gap, base, ok in (("1", "0.25", "", "True"), ("2", "0.05", "1f1b", "True"),
                                       ("3", "0.1", "zb-v", "False"))]
    (shown,) = table.select(caps)
    assert [shown[c] for c in table.columns] == ["c", "4", "8", "3: 1 to 3", "MiB", "1", "2 of 3", "5.0 to 25.0",
                                                 "c.png"]
    with pytest.raises(ValueError, match="unknown case"):
        bench_sweep(True, only=("nosuch",))
