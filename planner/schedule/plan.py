"""`Plan`: the answer of every planning method — where and when each task runs, and how good that is.

Times are integer ticks of the instance (`tick_s` seconds each, or the task-graph file's own unit).  The plan file
format (versioned JSON, atomic writes) lives in `planner/schedule/plan_io.py`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class PlanStatus(enum.StrEnum):
    """How good a plan is known to be.  A `StrEnum`: the plan file stores the value ('optimal', ...) and a
    comparison with the plain string still holds (``PlanStatus.OPTIMAL == "optimal"``)."""

    OPTIMAL = "optimal"  # proven: the lower bound meets the makespan (bottleneck, ...)
    FEASIBLE = "feasible"  # a solver incumbent (or a warm start) with a gap
    HEURISTIC = "heuristic"  # no proof attempted beyond the trivial bound
    INFEASIBLE = "infeasible"  # proven: nothing fits


class PlanMethod(enum.StrEnum):
    """Which planner produced a plan; the value is what the plan file stores.

    Every planner in this repository uses one of these.  `Plan.method` may still be a plain string for plans
    that are not planned but replayed or derived: a hand-designed pipeline schedule simulated under its own name
    (``'1f1b'``, ``'zb-v'``), a re-timed plan (``'heft+retime'``), a caller's own list-scheduling policy; and a
    plan file written by another tool loads with whatever string it holds (`plan_io.parse_method`).
    """

    PLACEMENT = "placement"  # formulations.solve_instance.solve_placement on one instance
    MILP = "milp"  # planner.solve's bi-level search (placement formulation on clusters); a stage MILP alone
    MILP_DP = "milp+dp"  # the stage MILP warm-started by the exact DP
    DP = "dp"  # the exact stage DP
    PIPELINE_MILP = "pipeline-milp"  # formulations.pipeline.solve_pipeline
    HEFT = "heft"
    HEFT_SUM = "heft-sum"  # HEFT with CPOP's priority (upward + downward rank)
    LIST_SCHEDULE = "list_schedule"  # planner.heuristics.list_schedule with no method name of its own
    ROUND_ROBIN = "round_robin"
    SINGLE_DEVICE = "single_device"
    PROJECTED = "projected"  # a cluster plan's orders replayed on the op graph
    REPLAY = "replay"  # a plan's per-device orders simulated again
    DECOMPOSITION = "decomposition"  # planner.decompose's stitched sub-plans


def parse_status(value: str) -> PlanStatus:
    """The status a plan file stores; ValueError for a value that is none of `PlanStatus`."""
    return PlanStatus(value)


def parse_method(value: str) -> PlanMethod | str:
    """The method a plan file stores: a `PlanMethod` when it is one, else the string itself (see `PlanMethod`)."""
    try:
        return PlanMethod(value)
    except ValueError:
        return value


@dataclass(frozen=True)
class RunAdvice:
    """How the plan is predicted to run fastest on a CPU host: `ranks` processes with `threads` intra-op threads
    each, `predicted_s` seconds a step; `options_s` every configuration considered (label -> predicted seconds)
    and `reason` why this one (`planner.run_advice`); `bound_s`, where known, the least any run on the host's cores
    can take with the measured op times (`planner.cost.core_bound`).  One rank runs every op of the plan in its
    order."""

    ranks: int
    threads: int
    predicted_s: float
    options_s: tuple[tuple[str, float], ...] = ()
    reason: str = ""
    bound_s: float | None = None

    def label(self) -> str:
        return run_label(self.ranks, self.threads)


def run_label(ranks: int, threads: int) -> str:
    """'2 ranks x 1 thread': how a run configuration reads in outputs."""
    return f"{ranks} rank{'s' if ranks > 1 else ''} x {threads} thread{'s' if threads > 1 else ''}"


@dataclass(frozen=True, slots=True)
class TaskPlacement:
    """Task `task` runs on device index `device` from `start_tick` to `end_tick` (exclusive), in `stage`."""

    task: str
    device: int
    start_tick: int
    end_tick: int
    stage: int | None = None


@dataclass(frozen=True)
class Plan:
    """A schedule of one step plus its provenance and quality.

    `status` is a `PlanStatus`: optimal (proven), feasible (a solver incumbent with a gap), heuristic (no proof
    attempted beyond the trivial bound), infeasible.  `method` is a `PlanMethod` (or a replayed schedule's name).
    `lower_bound_tick` is never below the trivial bound
    max(critical path, total work / total speed); `gap` = (makespan - bound) / makespan.
    """

    instance_name: str
    placements: tuple[TaskPlacement, ...]
    device_names: tuple[str, ...]
    makespan_tick: int
    lower_bound_tick: int
    status: PlanStatus
    method: PlanMethod | str
    solver: str = ""
    solver_version: str = ""
    solve_time_s: float = 0.0
    tick_s: float | None = None
    time_unit: str = "tick"
    model_path: str = ""
    model_sha256: str = ""
    hardware_path: str = ""
    hardware_sha256: str = ""
    task_ops: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # planner.solve's search: (part, makespan_tick) per step that improved the plan, the last one found it; a last
    # step "runtime replay: <candidate>" when plan-solve chose another candidate by the runtime's replay
    # (planner.runtime_choice: longer in the placement model, shorter as the runtime runs it)
    search: tuple[tuple[str, int], ...] = ()
    # the --input-shape and --input-value options the model was planned with (ONNX models; empty otherwise)
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    input_values: dict[str, tuple[float, ...]] = field(default_factory=dict)
    # cluster -> its member ops, recorded beside an op-level plan (whose tasks are the input's own ids) to show how
    # the planner grouped them; informational, nothing reads it back into the schedule
    clusters: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # plan-solve's advice on ranks and threads when it planned on op times measured for several thread counts
    run: RunAdvice | None = None

    @property
    def gap(self) -> float:
        if self.makespan_tick <= 0:
            return 0.0
        return max(0.0, (self.makespan_tick - self.lower_bound_tick) / self.makespan_tick)

    def by_task(self) -> dict[str, TaskPlacement]:
        return {p.task: p for p in self.placements}
