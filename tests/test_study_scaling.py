"""Smoke test of the scaling study (experiments/study_scaling.py) in a tiny mode: CSV files first, then pictures
read from them; every row measured in its own child process."""

from __future__ import annotations

import csv

from experiments.study_scaling import Settings, main

TINY = Settings(sizes=(120,), flat_sizes=(120,), anytime_ops=120, anytime_budget_s=2.0, anytime_fractions=(0.5, 1.0),
                budgets_s=((0, 1.0),), isolate=False)


def _rows(path):
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_tiny_study_writes_csv_then_pictures(tmp_path):
    written = main(quick=True, out_dir=tmp_path, settings=TINY)
    names = {p.name for p in written}
    assert names == {"scaling.csv", "anytime.csv", "scaling_time.png", "scaling_quality.png", "anytime.png"}
    assert all(p.stat().st_size > 0 for p in written)

    scaling = _rows(tmp_path / "scaling.csv")
    assert {(r["graph"], r["method"]) for r in scaling} == {
        (g, m) for g in ("moe", "layered") for m in ("heft", "bilevel", "flat")}
    for r in scaling:
        assert r["status"] == "ok", r
        makespan, bound = int(r["makespan_tick"]), int(r["lower_bound_tick"])
        assert 0 < bound <= makespan
        assert float(r["end_to_end_cpu_s"]) > 0 and float(r["end_to_end_wall_s"]) > 0
        assert int(r["peak_rss_bytes"]) > 0 and r["load_1min"] != ""
    by = {(r["graph"], r["method"]): int(r["makespan_tick"]) for r in scaling}
    for g in ("moe", "layered"):
        assert by[g, "bilevel"] <= by[g, "heft"]  # the planner starts from HEFT and keeps the better plan

    anytime = _rows(tmp_path / "anytime.csv")
    assert [float(r["fraction"]) for r in anytime] == [0.5, 1.0]
    for r in anytime:
        assert r["status"] == "ok", r
        assert int(r["lower_bound_tick"]) <= int(r["makespan_tick"]) <= int(r["heft_makespan_tick"])


def test_one_row_in_a_child_process(tmp_path):
    from experiments.study_scaling import measure_in_child

    row = measure_in_child({"graph": "layered", "ops": 60, "method": "heft", "budget_s": 1.0}, tmp_path, timeout_s=300)
    assert row["status"] == "ok", row
    assert row["ops"] == 60 and int(row["makespan_tick"]) >= int(row["lower_bound_tick"]) > 0
