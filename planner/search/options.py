"""What a caller asks of the planner (`SolveOptions`), and the backend-independent solver settings it carries."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from formulations.model_api import SolveParams


class Method(enum.Enum):
    """How to plan: the bi-level MILP, or one of the list-scheduling baselines on the op graph."""

    MILP = "milp"
    HEFT = "heft"
    ROUND_ROBIN = "round_robin"
    SINGLE_DEVICE = "single_device"


@dataclass(frozen=True)
class SolveOptions:
    """The planner's options (plan-solve's flags): the method, the backend and its settings, the cluster count of
    a round (None: the policy's default for the backend), the rounds per cluster phase, and the most of the budget
    the decomposition may use (0 skips it)."""

    method: Method = Method.MILP
    backend: str = "cpsat"
    time_limit_s: float = 60.0
    rel_gap: float = 0.0
    threads: int = 8
    seed: int = 0
    target_clusters: int | None = None
    max_rounds: int = 4
    decomposition_share: float = 0.5

    def params(self) -> SolveParams:
        """The backend-independent solver settings of these options (deterministic, as `solve_placement`)."""
        return SolveParams(time_limit_s=self.time_limit_s, rel_gap=self.rel_gap, threads=self.threads,
                           seed=self.seed)
