"""Fast heuristics: list scheduling / HEFT (heterogeneous, communication- and memory-aware) and simple baselines.

Modules:

* `list_schedule` — `list_schedule` (priority + device policy, insertion, memory), `heft`, ranks
* `baselines` — `single_device`, `round_robin`
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
