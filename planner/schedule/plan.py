"""`Plan`: the answer of every planning method — where and when each task runs, and how good that is.

Times are integer ticks of the instance (`tick_s` seconds each, or the task-graph file's own unit).  The plan file
format (versioned JSON, atomic writes) lives in `planner/schedule/plan_io.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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

    `status` is one of 'optimal' (proven), 'feasible' (a solver incumbent with a gap), 'heuristic' (no proof
    attempted beyond the trivial bound), 'infeasible'.  `lower_bound_tick` is never below the trivial bound
    max(critical path, total work / total speed); `gap` = (makespan - bound) / makespan.
    """

    instance_name: str
    placements: tuple[TaskPlacement, ...]
    device_names: tuple[str, ...]
    makespan_tick: int
    lower_bound_tick: int
    status: str
    method: str
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

    @property
    def gap(self) -> float:
        if self.makespan_tick <= 0:
            return 0.0
        return max(0.0, (self.makespan_tick - self.lower_bound_tick) / self.makespan_tick)

    def by_task(self) -> dict[str, TaskPlacement]:
        return {p.task: p for p in self.placements}
