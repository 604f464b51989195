"""Run a plan for real (`run`): ``plan-run``'s traced executor on local ranks of ``torch.distributed`` (forked, one
per planned device unless `nproc` says fewer), its outputs checked against onnxruntime.

torch is imported only when `run` is called (through `planner.execute`), so planning works where torch is absent.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from opplan.plans import Plan

__all__ = ["Run", "run"]


@dataclass(frozen=True)
class Run:
    """One run of `plan`: `report` is ``plan-run --format json``'s report (the run.json fields); times in
    seconds."""

    plan: Plan
    report: dict[str, Any]

    @property
    def measured_makespan_s(self) -> float:
        """The median over the measured repetitions of the step's wall time (first start to last end)."""
        return float(self.report["measured_makespan_s"])

    @property
    def simulated_makespan_s(self) -> float | None:
        """What the plan predicted (None for a plan not timed in seconds)."""
        value = self.report["simulated_makespan_s"]
        return None if value is None else float(value)

    @property
    def max_abs_error(self) -> float | None:
        """The largest absolute difference of any output from onnxruntime's (None: not checked)."""
        value = self.report["max_abs_error"]
        return None if value is None else float(value)

    def to_frame(self) -> pd.DataFrame:
        """One row per rank: ``rank``, ``devices`` (the planned devices it runs, comma-separated),
        ``busy_s`` (its measured busy time in the median repetition), ``simulated_busy_s`` (the plan's compute
        time of the ops it ran; NaN where the report has none), ``build_s`` (its set-up time)."""
        r = self.report
        ranks = range(r["world_size"])
        devices = [", ".join(name for name, rank in zip(r["device_names"], r["rank_of_device"]) if rank == k)
                   for k in ranks]
        simulated = r.get("simulated_busy_s") or [float("nan")] * len(ranks)
        return pd.DataFrame({"rank": ranks, "devices": devices, "busy_s": r["busy_s"], "simulated_busy_s": simulated,
                             "build_s": r["build_s"]})


def run(plan: Plan, *, nproc: int | None = None, check: bool = True, repeat: int = 1, warmup: int = 1,
        threads: int = 1, run_timeout_s: float = 600.0) -> Run:
    """Run `plan` (of an ONNX model) on local gloo ranks: `repeat` measured repetitions after `warmup`, `threads`
    per rank, at most `run_timeout_s` seconds in all; with `check`, compare the outputs with onnxruntime's
    (`Run.max_abs_error`).  `nproc` fewer than the planned devices runs device d on rank d % nproc.  Needs torch
    (``pip install opplan[torch]``); raises `InputError` for a plan that cannot run."""
    from planner.execute.runner import run_plan  # here: torch stays optional

    with tempfile.TemporaryDirectory(prefix="opplan-run-") as folder:
        path = plan.save(Path(folder) / "plan.json")
        outcome = run_plan(path, nproc=nproc, check=check, repeat=repeat, warmup=warmup, threads=threads,
                           run_timeout_s=run_timeout_s)
    return Run(plan, outcome.report)
