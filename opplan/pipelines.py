"""Pipeline schedules compared (`compare`): the hand-designed baselines (GPipe, 1F1B, interleaved 1F1B, ZB-H1,
ZB-H2, ZB-V, DualPipe, DualPipeV) and the planned schedule, on one model cut into pipeline stages.

What ``plan-compare --model M --hw H`` runs: the stage cut of the model (`pipeline_costs`), then
`planner.compare.pipelines.compare` on it within the time limit; figures in microseconds and MiB.
`Comparison.to_frame()` holds one row per schedule with the units in the column names; `Comparison.csv_frame()`
holds the same values under the column names of ``compare.csv`` (which carry no units), and
`Comparison.csv_text()` is that file's text.  `compare_memory_sweep` is ``plan-compare --model --memory-sweep``:
the planned schedule at each memory cap beside the baselines (`MemorySweep`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from opplan.inputs import Hardware, Model, costed
from opplan.progress import Progress, progress_or_log
from planner.compare.compare_policy import ComparePolicy
from planner.compare.memory_sweep import MemorySweep as PlannerSweep
from planner.compare.memory_sweep import memory_sweep
from planner.compare.model_costs import ModelCosts, model_costs
from planner.compare.pipelines import Comparison as PlannerComparison
from planner.compare.pipelines import compare as compare_pipelines
from planner.compare.pipelines import write_outputs
from planner.compare.sweep_plot import write_sweep
from planner.compare.torch_runnable import torch_line
from planner.cost.training_costs import training_costs
from planner.ir.moe_structure import find_moe_layers

__all__ = ["Comparison", "MemorySweep", "compare", "compare_memory_sweep", "pipeline_costs"]

PLANNED = "opplan"
"""The planned schedule's row name (the baselines' rows are their schedule names, e.g. ``dualpipe``)."""


@dataclass(frozen=True)
class Comparison:
    """Every schedule of a comparison on `model` and `hw`: `result` holds the rows (figures, schedules, timelines,
    the planned row's notes); times in `time_unit` (microseconds), memory in `memory_unit` (MiB)."""

    model: Model
    hw: Hardware
    result: PlannerComparison

    @property
    def time_unit(self) -> str:
        return self.result.units()[0]

    @property
    def memory_unit(self) -> str:
        return self.result.units()[1]

    def csv_frame(self) -> pd.DataFrame:
        """One row per schedule that ran, in ``compare.csv``'s columns (`CSV_COLUMNS`): ``schedule``,
        ``makespan`` (time unit), ``bubble_ratio`` (idle / (devices x makespan)), ``peak_memory`` and
        ``param_memory`` (memory unit, the largest device's)."""
        return self.result.csv_frame()

    def to_frame(self) -> pd.DataFrame:
        """`csv_frame()` with the units in the column names: ``makespan_us``, ``peak_memory_MiB``,
        ``param_memory_MiB`` (``bubble_ratio`` is a fraction)."""
        t, m = self.time_unit, self.memory_unit
        return self.csv_frame().rename(columns={"makespan": f"makespan_{t}", "peak_memory": f"peak_memory_{m}",
                                                "param_memory": f"param_memory_{m}"})

    def csv_text(self) -> str:
        """``compare.csv`` as ``plan-compare`` writes it (`csv_frame()`, LF line ends)."""
        return self.result.csv_text()

    def table(self, *, verbose: bool = False) -> str:
        """The table ``plan-compare`` prints (`verbose`: with how the planned row's search went)."""
        return self.result.table(verbose=verbose)

    def write(self, out_dir: str | Path, *, pictures: bool = True) -> list[Path]:
        """``compare.csv``, one ``<schedule>.torch.csv`` per schedule, ``opplan-runnable.torch.csv`` when the
        comparison planned one (`runnable`) and (`pictures`) the Gantt pictures, as ``plan-compare --out``; returns
        the paths written."""
        return write_outputs(self.result, out_dir, pictures=pictures)

    @property
    def runnable(self) -> pd.Series | None:
        """The planned schedule torch's pipelining runtime runs, when the planned row's own cannot (DualPipe's two
        directions) and `compare(runnable=True)` planned one: its ``csv_frame()`` row (``schedule`` is
        ``opplan-runnable``; `write` writes it as ``opplan-runnable.torch.csv``); None otherwise."""
        row = self.result.runnable
        if row is None or row.figures is None:
            return None
        return pd.Series(self.result.values(row))

    def torch_line(self) -> str | None:
        """The line ``plan-compare`` prints about torch: whether ``opplan.torch.csv`` runs in
        torch.distributed.pipelining's runtime and, when it does not, which file does and why; None without a
        planned row."""
        planned = next((r for r in self.result.ok_rows() if r.name == PLANNED and r.pipeline is not None), None)
        if planned is None:
            return None
        return torch_line(planned, self.result.runnable, self.time_unit, self.result.scales.ticks_per_unit)


def pipeline_costs(model: Model, hw: Hardware, stages: int, *, stage_time_limit_s: float = 20.0,
                   backend: str = "cpsat", comm_stream: bool = True, uniform_backward: bool = False,
                   expert_parallel: int | None = None) -> ModelCosts:
    """`model` on the first `stages` devices of `hw`, cut into `stages` stages (each in two chunks) by the stage
    formulation within `stage_time_limit_s` seconds, with per-operator backward costs (`uniform_backward`: B = W =
    F) and the MoE layers found from the graph's structure (experts over `expert_parallel` devices; default the
    stages): ``plan-compare --model``'s costs."""
    prepared = costed(model, hw)
    instance = prepared.instance
    training = None if uniform_backward else training_costs(prepared.graph, prepared.topology, instance)
    costs = model_costs(instance, stages, time_limit_s=stage_time_limit_s, backend=backend, comm_stream=comm_stream,
                        training=training)
    return dataclasses.replace(costs, moe=find_moe_layers(prepared.graph), expert_parallel=expert_parallel)


def compare(model: Model, hw: Hardware, *, stages: int, microbatches: int, time_limit_s: float = 120.0,
            schedules: Sequence[str] | None = None, planned: bool = True, memory_cap_mib: float | None = None,
            placement: str = "auto", stage_time_limit_s: float = 20.0, granularity: int | None = 1,
            fb_overlap: float = 1.0, a2a: bool = True, comm_stream: bool = True, uniform_backward: bool = False,
            expert_parallel: int | None = None, backend: str = "cpsat", lns_share: float | None = None,
            bound_time_s: float | None = None, runnable: bool = True,
            progress: Progress | None = None) -> Comparison:
    """Compare the pipeline schedules of `model` on `stages` devices of `hw` with `microbatches` micro-batches
    per step, as ``plan-compare --model``: `time_limit_s` seconds in all (the stage cut of at most
    `stage_time_limit_s` included).

    `schedules`: the baselines to run (default all); `planned`: also solve the planned schedule (row ``opplan``)
    under `memory_cap_mib` MiB per device (default DualPipe's peak) on `placement` (``auto``, ``both``, ``warm``,
    ``dualpipe``, ``v``, ``fixed``), splitting every piece into `granularity` sub-chunks (None: chosen by the task
    count); `fb_overlap`: an overlapped F&B pair lasts this fraction of its halves; `a2a`: MoE all-to-all tasks;
    `lns_share`: each solve's share for the neighbourhood search (None: the policy's); `bound_time_s`: at most this
    long for the memory bound after the solves (None: the comparison's default); `runnable`: when the planned
    schedule is one torch's pipelining runtime cannot run (DualPipe's two directions), also plan one it can, as
    ``plan-compare`` does (`Comparison.runnable`, `Comparison.torch_line`).  `progress` gets the solves' lines
    (default: the ``opplan`` logger)."""
    started = time.monotonic()
    costs = pipeline_costs(model, hw, stages, stage_time_limit_s=stage_time_limit_s, backend=backend,
                           comm_stream=comm_stream, uniform_backward=uniform_backward,
                           expert_parallel=expert_parallel)
    costs = dataclasses.replace(costs, fb_overlap=fb_overlap, a2a=a2a)
    policy = ComparePolicy() if lns_share is None else dataclasses.replace(ComparePolicy(), lns_share=lns_share)
    bound: dict[str, Any] = {} if bound_time_s is None else {"bound_time_s": bound_time_s}
    result = compare_pipelines(stages, microbatches, costs, schedules=tuple(schedules) if schedules else None,
                               opplan=planned, memory_cap_units=memory_cap_mib, opplan_placement=placement,
                               time_limit_s=max(1.0, time_limit_s - (time.monotonic() - started)),
                               backend=backend, granularity=granularity, policy=policy,
                               progress=progress_or_log(progress), runnable=runnable, **bound)
    return Comparison(model, hw, result)


@dataclass(frozen=True)
class MemorySweep:
    """The planned schedule at each memory cap beside the baselines (`planner.compare.memory_sweep`): `result`
    holds the points and the baselines; times in microseconds, memory in MiB."""

    model: Model
    hw: Hardware
    result: PlannerSweep

    def to_frame(self) -> pd.DataFrame:
        """One row per cap and schedule, ``memory_sweep.csv``'s columns: ``memory_cap_MiB``, ``schedule``,
        ``makespan_us``, ``peak_memory_MiB``, ``bound_us``, ``gap``, ``feasible``, ``source``, ``reason``."""
        return self.result.frame()

    def csv_text(self) -> str:
        """``memory_sweep.csv`` as ``plan-compare --memory-sweep`` writes it."""
        return self.result.csv_text()

    def write(self, out_dir: str | Path, *, pictures: bool = True) -> list[Path]:
        """``memory_sweep.csv`` and (`pictures`) ``memory_sweep.png``; returns the paths written."""
        return write_sweep(self.result, out_dir, pictures=pictures)


def compare_memory_sweep(model: Model, hw: Hardware, *, stages: int, microbatches: int,
                         memory_caps_mib: Sequence[float], time_limit_s: float = 120.0,
                         schedules: Sequence[str] | None = None, placement: str = "auto",
                         stage_time_limit_s: float = 20.0, backend: str = "cpsat",
                         progress: Progress | None = None) -> MemorySweep:
    """``plan-compare --model --memory-sweep``: the stage cut of `model` on `stages` devices of `hw` (at most
    `stage_time_limit_s`), the baselines once, and the planned schedule at each of `memory_caps_mib` (MiB per
    device), `time_limit_s` seconds in all; each cap keeps the shortest schedule that fits it (its own solve's, a
    smaller cap's, or a baseline's), so the planned makespan never rises with the cap.  `progress` gets a line per
    cap and the solves' lines (default: the ``opplan`` logger)."""
    started = time.monotonic()
    costs = pipeline_costs(model, hw, stages, stage_time_limit_s=stage_time_limit_s, backend=backend)
    say = progress_or_log(progress)
    caps = [round(c * costs.bytes_per_unit) for c in memory_caps_mib]
    result = memory_sweep(stages, microbatches, costs, caps,
                          time_limit_s=max(1.0, time_limit_s - (time.monotonic() - started)), report=say,
                          schedules=tuple(schedules) if schedules else None, opplan_placement=placement,
                          backend=backend, progress=say)
    return MemorySweep(model, hw, result)
