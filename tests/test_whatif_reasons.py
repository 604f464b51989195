"""plan-whatif says why a capacity is infeasible in one short line; the planner's full words come once."""

from __future__ import annotations

import csv
import dataclasses

import numpy as np
from instances import random_instance

from planner.heuristics.memory import capacity_lower_bound
from planner.solve import SolveOptions
from planner.whatif import REASON_CHARS, memory_sweep, short_reason, write_whatif


def test_short_reason_keeps_the_first_clause_within_the_limit():
    assert short_reason("task 'a' fits on no device: it needs 4 KiB; the best device has 1 KiB") == \
        "task 'a' fits on no device: it needs 4 KiB"
    long = "word " * 100
    cut = short_reason(long)
    assert len(cut) <= REASON_CHARS and cut.endswith("...") and "  " not in cut


def test_sweep_reasons_are_short_and_details_come_once(tmp_path):
    inst = random_instance(4, 24, 3)
    inst = dataclasses.replace(inst, param_bytes=np.full(inst.num_tasks, 4096, dtype=np.int64),
                               activation_bytes=np.full(inst.num_tasks, 1024, dtype=np.int64))
    bound = capacity_lower_bound(inst).capacity_bytes
    said: list[str] = []
    capacities = [bound // 4, bound // 3, bound // 2, bound, 64 * bound]
    result = memory_sweep(inst, capacities, SolveOptions(time_limit_s=4), progress=said.append)
    infeasible = [r for r in result.rows if not r.feasible]
    assert len(infeasible) >= 3 and result.rows[-1].feasible
    for r in infeasible:
        assert r.reason and len(r.reason) <= REASON_CHARS and "\n" not in r.reason
    below = [r for r in infeasible if r.capacity_bytes < bound]
    assert all("smallest capacity that can fit" in r.reason and not r.details for r in below)
    # one progress line per capacity, each short
    assert len(said) == len(capacities) and all(len(line) < 200 for line in said)
    csv_path, _ = write_whatif(result, tmp_path)
    rows = list(csv.DictReader(csv_path.open()))
    details = [r["details"] for r in rows if r["details"]]
    assert len(details) == len(set(details))  # no row repeats another's details
    assert all(len(r["reason"]) <= REASON_CHARS for r in rows)


def test_plan_whatif_prints_short_reasons_and_the_details_with_verbose(tmp_path, capsys):
    from planner.cli import whatif_main

    args = ["--memory", "100KiB,250KiB,300KiB", "--time-limit", "3", "--quiet"]
    assert whatif_main([*args, "--out-dir", str(tmp_path / "a")]) == 0
    short = capsys.readouterr().out
    assert whatif_main([*args, "--verbose", "--out-dir", str(tmp_path / "b")]) == 0
    long = capsys.readouterr().out
    assert max(len(line) for line in short.splitlines()) < 200
    assert len(long) > len(short)
    bound_line = next(x for x in long.splitlines() if x.startswith("smallest capacity that can fit at all"))
    assert len(bound_line) > 200  # the lower bound's full reason, once
