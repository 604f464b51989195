"""The placement search's tuning: one frozen record, passed in (`plan_instance(..., policy=SearchPolicy())`).

Shares are fractions of the time left when a phase starts (`planner.search.budget`).  Startup costs are in list
schedules: the fastest of phase 0's runs is the unit, so the estimates scale with the instance and the machine.
A study or a test that wants another setting passes ``dataclasses.replace(SearchPolicy(), knob=value)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from formulations.model_api import SolvePolicy
from planner.coarsen.policy import CoarsenPolicy
from planner.heuristics.policy import DEFAULT_MIRROR_RACE_POLICY, AssignmentPolicy, CommBoundPolicy, IteratedPolicy

DEFAULT_CLUSTERS: Mapping[str, int] = MappingProxyType({"cpsat": 96, "scip": 24, "cbc": 16, "highs": 16})
"""How many clusters a round gives each backend's placement model (`SearchPolicy.default_clusters`)."""


@dataclass(frozen=True)
class SearchPolicy:
    """Every knob of the placement search (`planner.solve`), each with the reason for its value."""

    # CP-SAT handles a hundred-odd clusters on 8 devices comfortably; big-M MILPs stall far earlier
    default_clusters: Mapping[str, int] = field(default_factory=lambda: DEFAULT_CLUSTERS)
    # a cluster round's model beyond this many times the backend's cluster count does not solve in a round
    cluster_round_factor: int = 4
    # runs that are nearly single ops (above this share of the ops) make the op-level model again: no gain
    cluster_min_shrink: float = 0.8
    # of the time left, what one cluster round may use; LNS needs the rest on tight plans of large graphs
    cluster_share: float = 0.3
    # a cluster round (on the incumbent's runs, or a linear round) starts only with more than this many seconds
    # left: less does not pay for its model's build
    cluster_round_min_left_s: float = 1.0
    # least solver time a cluster round's model gets, however small its share: less finds no plan on it
    cluster_round_min_solve_s: float = 0.5
    # a graph without bottlenecks above this many ops is one large segment: a bound, rarely a plan
    one_segment_tasks: int = 150
    # what the decomposition may use of the budget on such a graph (LNS gets the time instead)
    one_segment_share: float = 0.15
    # of the time left after the segment neighbourhoods, what the iterated list scheduler gets
    iterated_share: float = 0.6
    # of the iterated search's budget, what each direction of time gets before the shorter one takes the rest;
    # 0: the forward search alone (the value and its reason: `planner.heuristics.policy.MirrorRacePolicy`)
    mirror_race_share: float = DEFAULT_MIRROR_RACE_POLICY.share
    # the iterated list scheduler's own tuning (its step, local moves and restarts), in the op-level phase and in
    # the segments' warm starts
    iterated: IteratedPolicy = field(default_factory=IteratedPolicy)
    # of the time left after the iterated search, what the assignment search gets at most (LNS the rest); 0: off
    assignment_share: float = 0.6
    # the assignment search hands its time on to LNS after this many moves without gain
    assignment_stall_moves: int = 6000
    # the assignment search's own tuning (its move kinds, kicks and priority step)
    assignment: AssignmentPolicy = field(default_factory=AssignmentPolicy)
    # a share of at most this many seconds runs the assignment search without its startup estimate (the estimate is
    # sized for large graphs)
    assignment_short_share_s: float = 0.5
    # of the time left after the cluster rounds, what the segment neighbourhoods get
    segment_lns_share: float = 0.6
    # of the time left after the decomposition, what the linear rounds get on a graph with bottlenecks
    linear_share: float = 0.25
    # of the linear rounds' time, what the first of several gets (the rest split evenly): the first round starts
    # from the incumbent and gains the most
    linear_first_round_share: float = 0.5
    # above this many ops the parallelism-keeping merge leaves thousands of clusters, far above what a round solves
    linear_max_ops: int = 20_000
    # the coarsening's own tuning in the linear rounds (its critical-path tolerance, rounds and pushes)
    coarsen: CoarsenPolicy = field(default_factory=CoarsenPolicy)
    # the communication-aware bound costs 4-9 list schedules (10k-100k ops) and cannot be stopped
    comm_bound_cost: float = 8
    # the communication-aware bound's own sampling (its thresholds and hubs), on the graph and on each segment
    comm_bound: CommBoundPolicy = field(default_factory=CommBoundPolicy)
    # the formulations' knobs (the least solve time, CP-SAT's reservoir expansion, the cumulative model's energy
    # bounds) in every placement solve of the search
    solve: SolvePolicy = field(default_factory=SolvePolicy)
    # the decomposition's work before its solver (per-segment list schedules, bounds, validations, the stitch)
    decomposition_cost: float = 5
    # finding the incumbent's runs for the cluster rounds (`respecting_clusters`) cannot be stopped
    cluster_runs_cost: float = 8
    # the iterated search's priorities and the first decodes of its starts
    iterated_start_cost: float = 5
    # the assignment search's decoder, first decode and linear clusters, and a first move (which cannot be stopped)
    assignment_start_cost: float = 2
    # the op-level searches (iterated, assignment, LNS) start only with more than this many seconds left: less
    # finds nothing and only delays the answer
    least_left_s: float = 0.5
    # LNS windows start at 2 ops per device within these bounds: fewer frees too little to move the plan, more makes
    # a neighbourhood the solver does not close in a move's time
    lns_min_window_ops: int = 8
    lns_max_window_ops: int = 48
    # most time one neighbourhood solve gets: many short moves beat few long ones
    lns_move_time_s: float = 0.5
    # after this many moves in a row without a shorter plan the window grows by a quarter (a local optimum of this
    # size)
    lns_stale_moves: int = 8
    # the factor the window grows by when stuck (plus one op): a quarter larger reaches past the local optimum
    lns_window_growth: float = 1.25
    # one move in this many starts at a random tick; the others just before an op of the critical chain, where a
    # shorter plan must change something
    lns_random_move_every: int = 4
    # no LNS move starts with less than this many seconds left: a neighbourhood's model does not solve in less
    lns_min_left_s: float = 0.3
    # least seconds between two LNS progress lines (a line per gain floods the terminal on small graphs)
    lns_progress_every_s: float = 1.0
    # a neighbourhood's tails run only through the ops after the window, and the first op after the window on a
    # device is released when the window opens; False: tails through the whole plan (window included) and that op
    # released at its start in the plan, which over-constrains the neighbourhood (kept to measure the difference)
    lns_tails_after_window: bool = True
    # segments larger than this are not given to the solver: its model would not close in a share of the budget
    # (their trivial bound and HEFT's schedule are used)
    segment_max_tasks: int = 400
    # up to this many tasks the bottlenecks (segment cuts) are found exactly, with bit sets (quadratic memory);
    # above, by a linear-time rule that may miss some (larger segments, never wrong ones)
    exact_bottleneck_tasks: int = 20_000
    # a segment goes to the solver only with at least this many seconds, and its solve never gets less: a placement
    # model does not find a plan in less
    segment_min_solve_s: float = 0.2
    # least seconds between two progress lines of one segment's solve (a long solve otherwise prints nothing for
    # half the budget)
    progress_every_s: float = 5.0
    # of a segment's solver time, what the iterated list scheduler gets first: a shorter warm start than HEFT's
    # lets CP-SAT spend its time below it
    segment_iterated_share: float = 1 / 3
    # of the segment neighbourhoods' budget, what pinned mode's first move (the sweep over device kinds) may use
    segment_sweep_share: float = 0.5
    # least time a segment move gets: a CP-SAT model of ~100 ops takes about a second to build
    segment_min_move_s: float = 2.0
    # least solver time of one option of a segment move (a restricted segment model)
    segment_option_min_s: float = 0.1

    def clusters_for(self, backend: str, target: int | None = None) -> int:
        """The cluster count a round gives `backend`'s model: `target` when given, else this policy's default."""
        return target or self.default_clusters.get(backend, 32)
