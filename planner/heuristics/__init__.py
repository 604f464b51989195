"""Fast heuristics and exact DPs: list scheduling / HEFT (heterogeneous, communication- and memory-aware), simple
baselines, and the warm starts the formulations use.

Modules:

* `list_schedule` — `list_schedule` (priority + device policy, insertion, memory), `heft`, ranks
* `peft` — PEFT (optimistic cost table: HEFT's list scheduler with a look-ahead)
* `iterated` — iterated list scheduling: a search over task priorities with the list scheduler as decoder
* `assignment_search` — a local search over (device per task, order) at the plan's critical chain, decoded by a
  list schedule that follows the given devices
* `comm_bound` — a communication-aware lower bound on the makespan (heads/tails through joins and forks, energy)
* `baselines` — `single_device`, `round_robin`
* `horizon` — `critical_path_schedule` (a plain critical-path list schedule, memory ignored) and
  `serial_bound_tick`: the placement formulation's first hint and horizon
* `stage_dp` — pipeline stages: `StagePlacement`, `StagePlan`, the data, and `stages_dp`, the exact dynamic
  program (the stage formulation's warm start and, on a given map, its proof)
* `memory` — capacity lower bounds (`smallest_feasible_capacity_bytes`, `largest_memory_tasks`) and the
  conservative memory tracker used while scheduling

Timings are in `experiments/bench_heft.py`.
"""

from planner.heuristics.baselines import round_robin, single_device
from planner.heuristics.list_schedule import Rank, earliest_finish, heft, list_schedule
from planner.heuristics.memory import (
    CapacityBound,
    capacity_lower_bound,
    largest_memory_tasks,
    smallest_feasible_capacity_bytes,
)

__all__ = [
    "CapacityBound",
    "Rank",
    "capacity_lower_bound",
    "earliest_finish",
    "heft",
    "largest_memory_tasks",
    "list_schedule",
    "round_robin",
    "single_device",
    "smallest_feasible_capacity_bytes",
]
