"""The study modules and their runner (`experiments/run_studies.py`) on tiny inputs: CSV first, PNG from it."""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from experiments import run_studies, study_memory_whatif, study_milp_vs_heuristics
from experiments.realsize import GIB, load_case, model_file, smallest_feasible, with_capacity
from planner.heuristics.memory import capacity_lower_bound
from planner.heuristics.memory_list import memory_list, peak_memory_bytes

TINY = {"layers": 1, "hidden": 64, "heads": 4, "kv_heads": 2, "head_dim": 16, "ffn": 96, "expert_ffn": 96,
        "vocab": 128, "batch": 1, "seq_len": 16}


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_discover_finds_both_studies_of_this_branch() -> None:
    names = run_studies.discover()
    assert {"memory_whatif", "milp_vs_heuristics"} <= set(names)


def test_smallest_feasible_lies_between_the_bound_and_the_device(tmp_path) -> None:
    inst = load_case(model_file("mixtral-8x7b", tmp_path, **TINY), "a100-4-pcie.yaml")
    bound = capacity_lower_bound(inst).capacity_bytes
    found = smallest_feasible(inst, memory_list, bound, 80 * GIB, resolution_bytes=1024)
    assert found is not None and bound <= found
    here = with_capacity(inst, found)
    assert max(peak_memory_bytes(here, memory_list(here))) <= found


def test_memory_whatif_smoke(tmp_path) -> None:
    out = tmp_path / "whatif"
    study_memory_whatif.main(True, out, cases=[("mixtral-8x7b", TINY, "a100-4-pcie.yaml")], time_limit_s=1.0)
    rows = _rows(out / "whatif.csv")
    summary = _rows(out / "summary.csv")
    assert len(summary) == 1 and list(out.glob("*.png"))
    s = summary[0]
    assert float(s["proven_min_gib"]) <= float(s["smallest_found_gib"]) <= 80
    methods = {r["method"] for r in rows}
    assert {"planned", "heft", "memory_list", "single_device", "heft_ignoring_memory",
            "round_robin_ignoring_memory"} <= methods
    for r in rows:  # a plan that fits is never below the bound of its capacity
        if r["fits"] == "1":
            assert float(r["makespan_ms"]) >= float(r["lower_bound_ms"]) * (1 - 1e-9)
            assert float(r["peak_gib"]) <= float(r["capacity_gib"]) + 1e-9


def test_milp_vs_heuristics_smoke(tmp_path) -> None:
    out = tmp_path / "cmp"
    study_milp_vs_heuristics.main(True, out, cases=[("tiny", "mixtral-8x7b", TINY, "mixed-a100-h100.yaml")],
                                  time_limit_s=1.0)
    rows = _rows(out / "comparison.csv")
    assert [r["method"] for r in rows] == list(study_milp_vs_heuristics.METHODS)
    assert (out / "comparison.png").exists()
    planned = rows[0]
    assert planned["fits"] == "1" and float(planned["gap_pct"]) >= -1e-9
    for r in rows[1:]:
        if r["fits"] == "1":
            assert float(r["makespan_ms"]) >= float(planned["bound_ms"]) * (1 - 1e-9)
            assert not math.isnan(float(r["vs_planned_pct"]))


def test_runner_reports_a_failing_study_and_goes_on(tmp_path, monkeypatch) -> None:
    # each study runs in a child process: one that dies (here: exit status 3, as a native crash would give a
    # non-zero status) is reported and the next still runs
    def fake(name: str, quick: bool, out_dir: Path) -> list[str]:
        code = 3 if name == "broken" else 0
        return [sys.executable, "-c", f"import pathlib, sys; pathlib.Path({str(out_dir)!r}).mkdir(parents=True);"
                f" sys.exit({code})"]

    monkeypatch.setattr(run_studies, "command", fake)
    rows = run_studies.run(["broken", "ok"], quick=True, out_root=tmp_path)
    assert [r["status"] for r in rows] == ["failed (exit status 3)", "ok"]
    assert (tmp_path / "ok").is_dir()
    assert [r["study"] for r in _rows(tmp_path / "run_studies.csv")] == ["broken", "ok"]


def test_child_command_runs_one_study_in_its_mode(tmp_path) -> None:
    cmd = run_studies.command("memory_whatif", False, tmp_path)
    assert cmd[1:5] == ["-m", "experiments.run_studies", "--one", "memory_whatif"] and cmd[-1] == "--full"
    assert "--full" not in run_studies.command("memory_whatif", True, tmp_path)


@pytest.mark.parametrize("argv", [["--only", "nonexistent"]])
def test_runner_rejects_unknown_study(argv) -> None:
    with pytest.raises(SystemExit):
        run_studies.main(argv)


def test_capacities_are_within_found_and_device() -> None:
    caps = study_memory_whatif._capacities(20 * GIB, 80 * GIB, quick=False)
    assert caps[0] == 20 * GIB and caps[-1] == 80 * GIB and caps == sorted(set(caps))
    assert np.all(np.diff(caps) > 0)
