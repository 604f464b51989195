"""The heuristics' tuning, as data: the priority step both local searches share (`PriorityStep`), the iterated list
scheduler's (`IteratedPolicy`, `planner.heuristics.iterated`), the race of its two directions of time
(`MirrorRacePolicy`, `planner.heuristics.bidirectional`), the assignment search's (`AssignmentPolicy`,
`planner.heuristics.assignment_search`), the list scheduler's insertion (`ListPolicy`,
`planner.heuristics.list_schedule`) and the communication-aware bound's sampling (`CommBoundPolicy`,
`planner.heuristics.comm_bound` and `hub_bound`).  Each field is a knob with the value it runs with by default.

The placement search passes them down from its own policy (`planner.search.policy.SearchPolicy.iterated`,
``.assignment``, ``.comm_bound``, ``.mirror_race_share``); a study or a test that tries another value builds one with
`dataclasses.replace`, never by patching a module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DEFAULT_ASSIGNMENT_POLICY", "DEFAULT_COMM_BOUND_POLICY", "DEFAULT_ITERATED_POLICY", "DEFAULT_LIST_POLICY",
           "DEFAULT_MIRROR_RACE_POLICY", "AssignmentPolicy", "CommBoundPolicy", "IteratedPolicy", "ListPolicy",
           "MirrorRacePolicy", "PriorityStep"]


@dataclass(frozen=True)
class PriorityStep:
    """The size of the noise on task priorities, in units of the mean task duration, and how it adapts (the
    one-fifth rule's spirit: large steps while they pay, small ones near a local optimum)."""

    # the noise is in ticks: a step of about one task length reorders tasks of the same or neighbouring layers and
    # leaves the coarse order (sources before sinks) alone
    start: float = 1.0
    least: float = 0.02  # the step stays within [least, most]
    most: float = 8.0
    grow: float = 1.5  # factor after a move that found a shorter plan: large steps while they pay
    shrink: float = 0.95  # factor after a move that did not: small ones near a local optimum

    def after(self, sigma: float, better: bool) -> float:
        """The step after a move with step `sigma` that was `better` (or not), kept within [least, most]."""
        return min(self.most, sigma * self.grow) if better else max(self.least, sigma * self.shrink)


@dataclass(frozen=True)
class IteratedPolicy:
    """The iterated list scheduler (`planner.heuristics.iterated`, its module docstring)."""

    step: PriorityStep = field(default_factory=PriorityStep)
    # tasks a local move perturbs (consecutive in the parent's priority order): on large graphs a change everywhere
    # is almost never better everywhere, so every other move is local
    local_tasks: int = 64
    # moves without a better plan after which the parent goes back to the next start: a local optimum
    restart_every: int = 200
    # least seconds between two progress lines (a line per gain floods the terminal on small graphs)
    progress_every_s: float = 1.0


@dataclass(frozen=True)
class AssignmentPolicy:
    """The assignment search (`planner.heuristics.assignment_search`, its module docstring, "Moves")."""

    step: PriorityStep = field(default_factory=PriorityStep)  # the reorder move's noise
    # moves without a better plan before the best state is kicked (iterated local search: a local optimum), and
    # how many random tasks the kick moves to random eligible devices
    stall_moves: int = 400
    perturb_tasks: int = 4
    # the shares of the move kinds (module docstring, "Moves"; the rest: the single-task moves)
    priority_share: float = 0.0  # reorder, the iterated scheduler's move: off, measured no better
    window_share: float = 0.2
    unforce_share: float = 0.05
    segment_share: float = 0.3
    cluster_share: float = 0.1
    window_span: float = 1.0  # a window move frees the tasks starting within this many mean durations of t
    segment_max: int = 6  # critical-chain tasks a segment move takes at most
    local_tasks: int = 64  # tasks a reorder move perturbs (consecutive in the priority order, around t)
    # the coin flips inside the moves (module docstring, "Moves"): how often a segment goes to one of its own
    # tasks' devices (else a random eligible one), a cluster to the device of t's critical input (else a random
    # eligible one), a transfer is killed by moving t (else its input), t is ordered before the task it waited
    # for, and t goes next to a neighbour (else to a random eligible device)
    segment_own_device: float = 0.7
    cluster_input_device: float = 0.5
    kill_by_moving_t: float = 0.5
    wait_reorder: float = 0.3
    near_neighbour: float = 0.5
    # least seconds between two progress lines (a line per gain floods the terminal on small graphs)
    progress_every_s: float = 1.0


@dataclass(frozen=True)
class MirrorRacePolicy:
    """The race of the two directions of time (`planner.heuristics.bidirectional`, its module docstring)."""

    # of the budget, what each direction gets before the leader takes the rest: enough for both to leave their
    # starts behind (0.25 measured no better); 0: the forward search alone
    share: float = 0.15


@dataclass(frozen=True)
class ListPolicy:
    """The list scheduler's insertion (`planner.heuristics.list_schedule`, its module docstring, "Insertion")."""

    # idle gaps at or after the ready time a task may fill before it is appended after the device's last task: the
    # scan stays near-linear, and a gap further back rarely fits (appending is always valid: only quality is lost)
    max_gap_scan: int = 64


@dataclass(frozen=True)
class CommBoundPolicy:
    """The communication-aware bound's sampling (`planner.heuristics.comm_bound`, `planner.heuristics.hub_bound`):
    more thresholds and hubs can only raise the bound (each is a valid bound), at a cost linear in them."""

    # thresholds tried per side in the energy bound (quantiles of the heads and tails): a 2-D histogram of this
    # size squared is summed, which stays cheap beside the heads and tails on 1M-op graphs
    energy_samples: int = 256
    hub_candidates: int = 2  # sources and sinks tried as hubs, each side: the longest paths after (before) them
    # thresholds tried per side by the hub bound, fewer than the plain energy bound's: its cost is thresholds x n per
    # hub pair
    hub_samples: int = 64
    # above this many tasks the hub bound is not tried (its cost is ~thresholds x n): it is meant for the
    # decomposition's segments and mid-size graphs
    hub_max_tasks: int = 20_000


DEFAULT_ITERATED_POLICY = IteratedPolicy()  # for argument defaults
DEFAULT_ASSIGNMENT_POLICY = AssignmentPolicy()
DEFAULT_MIRROR_RACE_POLICY = MirrorRacePolicy()
DEFAULT_LIST_POLICY = ListPolicy()
DEFAULT_COMM_BOUND_POLICY = CommBoundPolicy()
