"""What the placement search's phases share: the op graph, the incumbent, the settings, and what phases leave for
later ones (the rounds on clusters, the decomposition)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from formulations.model_api import SolveParams
from planner.cost.instance import SchedulingInstance
from planner.schedule.errors import PlanInvalidError
from planner.schedule.plan import Plan
from planner.schedule.validate import validate_plan
from planner.search.budget import Budget
from planner.search.options import SolveOptions
from planner.search.phases import Candidate, Incumbent, ProgressFn
from planner.search.policy import SearchPolicy


@dataclass(frozen=True)
class ClusterSolution:
    """One candidate answer of the search: a plan over clusters, its expansion to ops (same makespan), the cluster
    instance and the clusters (member lists over the op-level instance), and the solver's bound on those clusters
    (for the phase-1 incumbent over one-op clusters: the op-level bound)."""

    plan: Plan
    op_plan: Plan
    coarse: SchedulingInstance
    clusters: list[list[int]]
    cluster_bound_tick: int


@dataclass(frozen=True)
class RoundLog:
    """One solve of the placement model on clusters: its clusters, the op plan's makespan, the solver's bound on
    the clusters, its status and seconds."""

    round: int
    clusters: int
    makespan_tick: int
    cluster_bound_tick: int
    status: str
    seconds: float


def valid_on(fine: SchedulingInstance) -> Callable[[Plan], bool]:
    """Whether a plan passes the validator on `fine`."""
    def valid(plan: Plan) -> bool:
        try:
            validate_plan(fine, plan)
        except PlanInvalidError:
            return False
        return True
    return valid


@dataclass
class SearchState:
    """The placement search in progress.  `incumbent.detail` is the `ClusterSolution` behind the incumbent when a
    cluster phase found it (else None).  `budget` is the whole search's; `list_s` the fastest list schedule's
    seconds, the unit of the startup estimates (`startup_s`); `decomposition` is phase 1's
    `planner.decompose.Decomposition` (None when it did not run), which the segment neighbourhoods start from."""

    fine: SchedulingInstance
    incumbent: Incumbent[Plan]
    options: SolveOptions
    policy: SearchPolicy
    budget: Budget
    list_s: float
    say: ProgressFn
    unit: Callable[[int], str]
    decomposition: object = None
    rounds: list[RoundLog] = field(default_factory=list)

    @property
    def params(self) -> SolveParams:
        return self.options.params()

    @property
    def plan(self) -> Plan:
        return self.incumbent.plan

    @property
    def bound_tick(self) -> int:
        return self.incumbent.bound_tick

    def startup_s(self, list_schedules: float) -> float:
        """Seconds of a step that costs about `list_schedules` list schedules."""
        return list_schedules * self.list_s

    def cluster_target(self) -> int:
        """The cluster count a round gives the backend's model."""
        return self.policy.clusters_for(self.options.backend, self.options.target_clusters)


def cluster_candidate(source: str, found: tuple[ClusterSolution | None, list[RoundLog]],
                      state: SearchState) -> Candidate | None:
    """Keep a cluster phase's rounds in `state`; its best solution as a candidate (None when it found none)."""
    solution, rounds = found
    state.rounds.extend(rounds)
    if solution is None:
        return None
    return Candidate(solution.op_plan, solution.op_plan.makespan_tick, source,
                     seconds=sum(r.seconds for r in rounds), detail=solution)
