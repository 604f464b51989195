"""Plan a model on a profile (`solve`) and replay a plan, on its own hardware or another (`simulate`).

`solve` runs what ``plan-solve`` runs on a model (the bi-level search or a list heuristic, then the choice among
candidate plans by the runtime replay where the profile is calibrated), and returns the plan the command would
write, in the model's own op names, with the per-device figures ``plan-solve`` prints.  `simulate` is
``plan-simulate`` on a plan in memory.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from opplan.inputs import Hardware, Model, costed
from opplan.progress import Progress, progress_or_log
from planner.cli import plan_in_user_ids
from planner.cost.instance import SchedulingInstance
from planner.errors import InputError
from planner.report import plan_summary
from planner.runtime_choice import choose_plan
from planner.schedule.plan import Plan as SavedPlan
from planner.schedule.plan_io import save_plan
from planner.schedule.runtime_replay import RuntimeReplay
from planner.schedule.simulate import retime_plan, simulate_plan
from planner.schedule.timeline import Timeline
from planner.search.options import Method, SolveOptions
from planner.solve import plan_instance

__all__ = ["Plan", "simulate", "solve", "solve_options"]


@dataclass(frozen=True)
class Plan:
    """A plan of `model` on `hw` and its replay.

    Times are in the instance's time unit (`time_unit`: seconds for ONNX models, a task graph's own unit
    otherwise); `gap` = (makespan - lower bound) / makespan, with the op graph's lower bound; memory in bytes.
    `schedule` is what a plan file stores (every op under its own name with its device, start and end in ticks);
    `summary` is what ``plan-solve --format json`` prints."""

    model: Model
    hw: Hardware
    schedule: SavedPlan
    timeline: Timeline
    instance: SchedulingInstance
    summary: dict[str, Any]
    found_by: str = ""

    @property
    def time_unit(self) -> str:
        return self.instance.time_unit

    @property
    def makespan_s(self) -> float:
        return float(self.summary["makespan"])

    @property
    def lower_bound_s(self) -> float:
        return float(self.summary["lower_bound"])

    @property
    def gap(self) -> float:
        return float(self.summary["gap"])

    @property
    def status(self) -> str:
        return str(self.schedule.status)

    @property
    def peak_memory_bytes(self) -> int:
        """The largest device's peak memory."""
        return int(self.summary["peak_memory_bytes"])

    def to_frame(self) -> pd.DataFrame:
        """One row per device: ``device``, ``ops`` (how many it runs), ``busy_<unit>`` (its busy time),
        ``busy_fraction`` (of the makespan), ``peak_memory_bytes`` (from the replay), ``capacity_bytes``."""
        unit = self.time_unit
        return pd.DataFrame([{"device": d["device"], "ops": d["tasks"], f"busy_{unit}": d["busy"],
                              "busy_fraction": d["busy_fraction"], "peak_memory_bytes": d["peak_memory_bytes"],
                              "capacity_bytes": d["capacity_bytes"]} for d in self.summary["devices"]])

    def save(self, path: str | Path) -> Path:
        """Write the plan file ``plan-simulate``, ``plan-run`` and ``plan-codegen`` read (the model's and the
        profile's paths and hashes included)."""
        save_plan(self.schedule, path)
        return Path(path)


def _provenance(model: Model, hw: Hardware, source_sha256: str) -> dict[str, Any]:
    """The model and hardware a plan file names, as ``plan-solve`` records them."""
    topology = hw.topology
    return {
        "model_path": str(model.path.resolve()) if model.path is not None else "", "model_sha256": source_sha256,
        "hardware_path": str(Path(topology.source_path).resolve()) if topology.source_path else "",
        "hardware_sha256": topology.source_sha256, "input_shapes": dict(model.input_shapes),
        "input_values": dict(model.input_values),
    }


def solve_options(method: str, *, backend: str, time_limit_s: float, rel_gap: float = 0.0, threads: int = 8,
                  seed: int = 0) -> SolveOptions:
    """The planner's options for a method named as ``plan-solve --method`` names it; `InputError` for another."""
    try:
        return SolveOptions(method=Method(method), backend=backend, time_limit_s=time_limit_s, rel_gap=rel_gap,
                            threads=threads, seed=seed)
    except ValueError:
        raise InputError(f"unknown method {method!r}", fix=f"use one of {', '.join(m.value for m in Method)}") \
            from None


def solve(model: Model, hw: Hardware, *, time_limit_s: float = 60.0, method: str = "milp", backend: str = "cpsat",
          rel_gap: float = 0.0, threads: int = 8, seed: int = 0, memory_bytes: int | None = None,
          progress: Progress | None = None) -> Plan:
    """Place and order every op of `model` on the devices of `hw` within `time_limit_s` seconds in all.

    `method`: ``milp`` (the bi-level search, with a proven lower bound) or a list heuristic (``heft``,
    ``round_robin``, ``single_device``); `backend`: the MILP solver (``cpsat``, ``scip``, ``cbc``, ``highs``);
    `rel_gap`: stop at this relative gap; `memory_bytes`: every device's memory instead of the profile's.
    `progress` gets the search's progress lines (default: the ``opplan`` logger at INFO).  The plan is valid
    (checked on the op graph); raises `planner.errors.InfeasibleError` when nothing fits, `InputError` for a bad
    option."""
    options = solve_options(method, backend=backend, time_limit_s=time_limit_s, rel_gap=rel_gap, threads=threads,
                            seed=seed)
    prepared = costed(model, hw, capacity_bytes=memory_bytes)
    say = progress_or_log(progress)
    outcome = plan_instance(prepared.instance, options, progress=say)
    topology = hw.topology
    replay = RuntimeReplay.of(topology.source_path, topology) if options.method is Method.MILP else None
    outcome, choice = choose_plan(outcome, replay=replay, say=say)
    source = prepared.graph.source
    schedule = dataclasses.replace(plan_in_user_ids(outcome),
                                   **_provenance(model, hw, source.sha256 if source else ""))
    timeline = simulate_plan(outcome.fine, schedule)  # the times every other output shows
    extra: dict[str, Any] = {"found_by": outcome.found_by, **({"choice": choice} if choice else {})}
    summary = plan_summary(schedule, timeline, outcome.fine, baselines=dict(outcome.baselines), extra=extra)
    return Plan(model, hw, schedule, timeline, outcome.fine, summary, outcome.found_by)


def simulate(plan: Plan, hw: Hardware | None = None, *, contention: bool = False) -> Plan:
    """Replay `plan` (the same devices and per-device orders, times recomputed) on its own hardware or on `hw`,
    which must have as many devices; `contention` serialises the transfers on each directed link.

    The lower bound is the plan's own on the same hardware, else the op graph's critical path / work bound on `hw`
    (as ``plan-simulate``); ``summary["planned_makespan"]`` keeps the plan's makespan before the replay."""
    target = hw or plan.hw
    if target.num_devices != len(plan.schedule.device_names):
        raise InputError(f"the plan uses {len(plan.schedule.device_names)} devices, {target.name} has "
                         f"{target.num_devices}", fix="simulate on hardware with the same number of devices")
    fine = costed(plan.model, target).instance
    topology = target.topology
    retimed = retime_plan(plan.schedule, fine, link_contention=contention,
                          hardware_path=topology.source_path, hardware_sha256=topology.source_sha256)
    same_hw = topology.source_sha256 == plan.schedule.hardware_sha256 and fine.tick_s == plan.schedule.tick_s
    bound = fine.trivial_lower_bound_tick()
    if same_hw:
        bound = max(bound, plan.schedule.lower_bound_tick)
    bound = min(bound, retimed.makespan_tick)
    unchanged = same_hw and retimed.makespan_tick == plan.schedule.makespan_tick
    retimed = dataclasses.replace(retimed, lower_bound_tick=bound,
                                  status=plan.schedule.status if unchanged else retimed.status)
    timeline = simulate_plan(fine, retimed, link_contention=contention)
    summary = plan_summary(retimed, timeline, fine, extra={"planned_makespan": plan.makespan_s})
    return Plan(plan.model, target, retimed, timeline, fine, summary, plan.found_by)
