"""The planner: prove how good a plan can be, then search for it.

The input is an op-level SchedulingInstance (the "fine" one; `planner.prepare` makes it from a model file).

    phase 0, list scheduling: the shortest of HEFT, HEFT with CPoP's priority (upward + downward rank) and PEFT
               (`planner.heuristics.peft`).  The op-level bound starts at the communication-aware bound
               (`planner.heuristics.comm_bound`: heads and tails that count the transfers joins and forks cannot
               avoid, and an energy bound over the windows they leave; never below the trivial bound).  Phase 0
               counts against the time limit: HEFT (or the memory-aware fallback) always runs, the other list
               schedulers only while time is left (`_phase_zero`).  Steps that cannot be stopped start only when
               their cost, estimated in list schedules, is left: the decomposition's work before its solver, then
               the bound (computed after phase 1, whose bound adds up the same bound over segments).
    phase 1, decomposition (`planner.decompose`): cut the op graph at its bottlenecks (ops that every other op
               precedes or follows: a layer's residual add, a module's concat); solve each segment's placement
               model at op level (CP-SAT, time shared by size, identical segments once; each warm-started from the
               shorter of HEFT on it and the incumbent's schedule of it; segments a list schedule solves to
               their trivial bound need no solver).  The segment optima add up to a lower bound for the whole
               op graph (usually far above max(critical path, work / speed), since it counts the transfers forks
               and joins cannot avoid), and the segment schedules join into an op plan.  The best of that plan and
               HEFT on the op graph is the incumbent.  When it meets the bound it is optimal and we stop.
    phase 2a, linear-clustering rounds (the original bi-level loop), only on graphs with bottlenecks (more than
               one segment: model graphs such as the bundled MoE, where they found the best plans; on graphs
               without bottlenecks they were 25-90 % worse than HEFT, issue 16): critical-path linear clustering
               and merging to the backend's cluster count, warm started from the incumbent projected onto the
               clusters (or HEFT on them), solved, then refined on the plan's critical path and solved again while
               a round improves, within LINEAR_SHARE of the time left.  Each round's plan is expanded to ops and
               validated like every candidate.
    phase 2b, cluster rounds (`planner.coarsen.respect`): the incumbent's runs (ops it runs one after another on
               one device whose outside inputs have arrived when the run starts) become clusters, so the
               incumbent is expressible on them: its projection is a valid warm start no longer than it.  The
               placement model on those clusters (CP-SAT by default) can only keep or improve it; repeated on the
               improved plan while a round improves it.  Skipped when the runs are more than
               CLUSTER_ROUND_FACTOR x the backend's cluster count (tight plans of large graphs: LNS handles those)
               or more than CLUSTER_MIN_SHRINK x the ops (nearly single ops: the op-level model again).
    phase 2c, segment neighbourhoods (`planner.segment_lns`), on graphs with bottlenecks whose segments the
               incumbent does not run in their proven bound: with SEGMENT_LNS_SHARE of the time left, re-solve the
               segment (group of identical segments) with the largest gap to its bound, warm-started from the
               incumbent, with CP-SAT's free portfolio; put the schedule back on every copy; a proof raises the
               decomposition bound.  On devices that are not all interchangeable the segments' bottlenecks are
               pinned, after a first sweep that chooses their kinds of device along the graph.  On the bundled MoE
               this is what shortens the plan after phase 1 (cpu-4: 1.302 -> 1.291 ms at 60 s): the window
               neighbourhoods of phase 3b do not reach what a whole expert segment's solve does.
    phase 3a, iterated list scheduling (`planner.heuristics.iterated`) with ITERATED_SHARE of the time left: a
               (1+1) evolution strategy over task priorities, decoded by the list scheduler, from the classic
               schedulers' priorities and the incumbent's order; every plan is a list schedule, hence valid.  It
               races in both directions of time (`planner.heuristics.bidirectional`): on the graph and on its
               mirror (edges reversed; a plan of it read backwards is a plan of the graph, brought back by a
               forward decode in its own order, within memory), MIRROR_RACE_SHARE of the budget each, then the
               direction whose plan is shorter gets the rest; the forward search alone when that share is under
               ITERATED_START_COST list schedules (the mirror's starts cost about as much as the forward ones).
    phase 3a', assignment search (`planner.heuristics.assignment_search`) with at most ASSIGNMENT_SHARE of the
               time left, from the incumbent: a local search over (device per task, order) decoded by a list
               schedule that follows the given devices, with moves at the plan's critical chain (a critical
               input's device for a task, a piece of the chain or a linear cluster onto one device, a window of
               tasks that choose again); it hands its time on to LNS after ASSIGNMENT_STALL_MOVES moves without
               gain.
    phase 3b, large-neighbourhood search on the op plan (`planner.lns`) with the time left: free a window of
               ops at the critical chain, freeze the rest, solve the window exactly with the placement model
               (release times, delivery tails), replay and accept what is no longer; until the budget is spent
               or the plan meets the bound.

Every candidate is checked before it can become the incumbent (the validator on the op graph); a phase that fails
inside is a bug, logged with its traceback, and the search continues with the incumbent it has (`_guarded`), so a
valid input always gets a valid plan.  A phase that finds no plan at all (its heuristics run into a memory dead end
near the least feasible capacity: `InfeasibleError`) proves nothing once phase 0 has a plan: it is reported and
skipped the same way, without a traceback.  `Outcome.phases` (and the plan file's `search`) lists each step that
improved the incumbent: the list scheduler, then 'decomposition', 'linear cluster round', 'cluster round',
'segment LNS', 'iterated list scheduling', 'iterated list scheduling (mirrored)', 'assignment search', 'LNS';
the last one found the plan.  When the plan is an op plan, it is returned over one-op clusters, so `Outcome.plan` is
always a plan of `Outcome.coarse` whose `task_ops` lead back to the ops.

The reported lower bound is for the real (op-level) problem: the best of the decomposition bound and the
communication-aware bound, never below max(critical path, total work / total speed) of the fine instance.  The
solver's bound on the clusters is reported apart (`cluster_bound_tick`), since a coarser problem's optimum is no
bound for the finer one (with one-op clusters the two coincide).  Time is integer ticks throughout; with
`deterministic` CP-SAT (the default of `solve_placement`) and a budget the solver does not hit, results are the
same from run to run (the iterated list scheduler's number of moves depends on the clock, like LNS's).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from formulations.backends import get_backend
from formulations.solve_instance import solve_placement
from planner.coarsen import DEFAULT_CP_TOLERANCE, coarsen, contract, critical_paths, expand_plan
from planner.coarsen.refine import as_singletons, project_plan, refine, replay, split_to_target
from planner.coarsen.respect import respecting_clusters
from planner.cost.instance import SchedulingInstance
from planner.decompose import Decomposition, decompose_and_solve, segments
from planner.errors import InfeasibleError, OpplanError
from planner.heuristics.assignment_search import assignment_search
from planner.heuristics.baselines import round_robin, single_device
from planner.heuristics.bidirectional import RACE_SHARE, bidirectional_iterated
from planner.heuristics.comm_bound import comm_lower_bound_tick
from planner.heuristics.iterated import classic_starts, iterated_list_schedule, order_start
from planner.heuristics.list_schedule import Rank, heft, upward_rank
from planner.heuristics.memory_list import memory_list
from planner.heuristics.memory_pack import packed_plan
from planner.heuristics.peft import peft
from planner.ir.units import format_time
from planner.lns import lns
from planner.schedule.errors import PlanInvalidError
from planner.schedule.plan import Plan, PlanMethod, PlanStatus
from planner.schedule.validate import validate_plan
from planner.segment_lns import MIN_MOVE_S as SEGMENT_MIN_MOVE_S
from planner.segment_lns import segment_lns

ProgressFn = Callable[[str], None]
T = TypeVar("T")
log = logging.getLogger(__name__)


class Method(enum.Enum):
    """How to plan: the bi-level MILP, or one of the list-scheduling baselines on the op graph."""

    MILP = "milp"
    HEFT = "heft"
    ROUND_ROBIN = "round_robin"
    SINGLE_DEVICE = "single_device"


@dataclass(frozen=True)
class SolveOptions:
    method: Method = Method.MILP
    backend: str = "cpsat"
    time_limit_s: float = 60.0
    rel_gap: float = 0.0
    threads: int = 8
    seed: int = 0
    target_clusters: int | None = None  # None: DEFAULT_CLUSTERS[backend]
    max_rounds: int = 4
    decomposition_share: float = 0.5  # most of the budget phase 1 (decomposition) may use; 0 skips it


# CP-SAT handles a hundred-odd clusters on 8 devices comfortably; big-M MILPs stall far earlier (see README).
DEFAULT_CLUSTERS = {"cpsat": 96, "scip": 24, "cbc": 16, "highs": 16}
CLUSTER_ROUND_FACTOR = 4  # a cluster round runs on at most this many times the backend's cluster count
CLUSTER_MIN_SHRINK = 0.8  # a cluster round runs only when the runs are fewer than this share of the ops
CLUSTER_SHARE = 0.3  # of the time left, what one cluster round may use (LNS gets the rest)
ONE_SEGMENT_TASKS = 150  # above this, a graph without bottlenecks gets only ONE_SEGMENT_SHARE for phase 1
ONE_SEGMENT_SHARE = 0.15
ITERATED_SHARE = 0.6  # of the time left after the cluster rounds, what the iterated list scheduler gets
# of phase 3a's budget, what each direction of time gets before the better one takes the rest
# (`planner.heuristics.bidirectional`); 0: the forward search alone (main's phase 3a before issue 16's mirror)
MIRROR_RACE_SHARE = RACE_SHARE
ASSIGNMENT_SHARE = 0.6  # of the time left after it, what the assignment search gets at most (LNS: the rest); 0: off
ASSIGNMENT_STALL_MOVES = 6000  # the assignment search hands its time on to LNS after this many moves without gain
SEGMENT_LNS_SHARE = 0.6  # of the time left after the cluster rounds, what the segment neighbourhoods get (phase 2c)
LINEAR_SHARE = 0.25  # of the time left after phase 1, what the linear rounds get on a graph with bottlenecks
# Steps that cannot be stopped start only when the time left is at least their cost estimated in list schedules
# (the fastest of phase 0's runs; measured at 10k-100k ops on stacked MoEs and layered DAGs): the
# communication-aware bound 4-9x, the decomposition's work before its solver (per-segment list schedules, bounds
# and validations, the stitch) about 5x on the 100k-op stacked MoE.
COMM_BOUND_COST = 8
DECOMPOSITION_COST = 5
CLUSTER_RUNS_COST = 8  # `respecting_clusters` on the incumbent (phase 2b), 7-9 s against a ~1 s list schedule
ITERATED_START_COST = 5  # phase 3a's priorities and first decodes of its four starts: 10 s at 100k ops
# phase 3a': its decoder, first decode and linear clusters, then a few moves (one cannot be stopped): measured at
# 10k and 100k layered ops, setup 0.73-0.87 list schedules and 0.13 per move (1.8 s and 0.27 s at 100k)
ASSIGNMENT_START_COST = 2
# Above this many ops the parallelism-keeping merge (planner/coarsen/bounded.py; ~3 s per 10k ops measured) leaves
# thousands of clusters (14,054 on a 100k-op stacked MoE), far above what a round solves: the phase is skipped.
LINEAR_MAX_OPS = 20_000


def _history(phases: Sequence[PhaseLog], unit: Callable[[int], str]) -> str:
    """The incumbent's history, each step with how much it took off the one before (a small gain would otherwise
    print as the same rounded time twice): ``heft 1.388ms -> decomposition 1.302ms (-6.2%)``."""
    parts = []
    for i, p in enumerate(phases):
        prev = phases[i - 1].makespan_tick if i else 0
        change = 100 * (p.makespan_tick - prev) / prev if i and prev > 0 else 0.0
        gain = f" ({'+' if change > 0 else '-'}{abs(change):.2g}%)" if i and prev > 0 else ""
        parts.append(f"{p.source} {unit(p.makespan_tick)}{gain}")
    return " -> ".join(parts)


def tick_formatter(instance: SchedulingInstance) -> Callable[[int], str]:
    """Ticks -> text with a unit: seconds when the instance has a tick length, else its own time unit."""
    if instance.tick_s:
        tick_s = instance.tick_s
        return lambda t: format_time(t * tick_s)
    unit = instance.time_unit or "tick"
    return lambda t: f"{t} {unit}"


@dataclass(frozen=True)
class PhaseLog:
    """A step of the search that improved the incumbent: which part (a list scheduler's name, 'decomposition',
    'cluster round', 'LNS'), the makespan it reached, and the seconds it took."""

    source: str
    makespan_tick: int
    seconds: float


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
    round: int
    clusters: int
    makespan_tick: int
    cluster_bound_tick: int
    status: str
    seconds: float


@dataclass(frozen=True)
class Outcome:
    """The chosen plan over clusters (with `task_ops`), its expansion to ops, and how it was found.  Both plans
    have the same makespan; `op_plan` passed the validator on the fine instance.  `saved_plan()` is what a plan
    file stores."""

    plan: Plan
    op_plan: Plan
    fine: SchedulingInstance
    coarse: SchedulingInstance
    clusters: tuple[tuple[int, ...], ...]
    rounds: tuple[RoundLog, ...] = ()
    cluster_bound_tick: int = 0
    baselines: Mapping[str, int] = field(default_factory=dict)
    lower_bound_tick: int = 0  # for the op graph (decomposition bound); equals op_plan.lower_bound_tick
    decomposition: Decomposition | None = None
    phases: tuple[PhaseLog, ...] = ()  # the incumbent's history: first the list schedule, last what found the plan

    @property
    def found_by(self) -> str:
        """The part of the search that found the returned plan (see `PhaseLog`)."""
        return self.phases[-1].source if self.phases else str(self.op_plan.method)

    def saved_plan(self) -> Plan:
        """The cluster plan (with its map back to ops), or, when no op was grouped with another, the op plan itself
        (task ids are the ops' own names) with the solver's bound, which is then a bound for the op graph too."""
        if not all(len(c) == 1 for c in self.clusters):
            return self.plan
        op = self.op_plan
        bound = max(op.lower_bound_tick, min(self.cluster_bound_tick, op.makespan_tick))
        status = PlanStatus.OPTIMAL if bound >= op.makespan_tick else PlanStatus(op.status)
        return dataclasses.replace(op, lower_bound_tick=bound, status=status, task_ops={},
                                   instance_name=self.fine.name, search=self.plan.search or op.search)


def _baseline(fine: SchedulingInstance, method: Method) -> Plan:
    if method is Method.HEFT:
        return heft(fine)
    if method is Method.ROUND_ROBIN:
        return round_robin(fine)
    return single_device(fine)


def baseline_makespans(fine: SchedulingInstance, known: Mapping[str, int] | None = None) -> dict[str, int]:
    """Makespan (ticks) of each list-scheduling baseline on the op graph; infeasible ones are left out.  `known`:
    baselines already computed (method value -> makespan), taken as they are (HEFT from phase 0: 1-4 s at 100k ops)."""
    out = dict(known or {})
    for method in (Method.HEFT, Method.ROUND_ROBIN, Method.SINGLE_DEVICE):
        if method.value in out:
            continue
        try:
            out[method.value] = _baseline(fine, method).makespan_tick
        except InfeasibleError:
            pass
    return out


def plan_instance(fine: SchedulingInstance, options: SolveOptions = SolveOptions(),
                  progress: ProgressFn | None = None) -> Outcome:
    """Plan an op-level instance with the chosen method (see module docstring); the result is validated.

    On a valid input this never fails because of the search: every candidate is checked before it can become the
    incumbent, and a phase that fails inside (a bug) is logged with its traceback and skipped, so the plan of
    the phases before it is returned.  Only what no search can fix (no device for a task, memory nothing fits:
    `InfeasibleError` from the list schedulers) reaches the caller."""
    say = progress or (lambda _msg: None)
    t0 = time.monotonic()
    if options.method is not Method.MILP:
        plan = _baseline(fine, options.method)
        validate_plan(fine, plan)
        singletons = tuple((i,) for i in range(fine.num_tasks))
        return Outcome(plan=plan, op_plan=plan, fine=fine, coarse=fine, clusters=singletons,
                       baselines=baseline_makespans(fine))
    get_backend(options.backend)  # an unknown or missing backend is the user's error, raised before the search
    unit = tick_formatter(fine)
    computed: dict[str, int] = {}  # baselines phase 0 ran anyway
    deadline = t0 + options.time_limit_s  # phase 0 counts against the budget too
    incumbent, list_s = _phase_zero(fine, computed, deadline, say, unit)
    fine_bound = fine.trivial_lower_bound_tick()
    phases = [PhaseLog(str(incumbent.method), incumbent.makespan_tick, time.monotonic() - t0)]
    decomposition = None
    phase1_s = deadline - time.monotonic()
    # the decomposition's work before any solver runs (per segment a list schedule, a bound, a validation; the
    # stitch) cannot be stopped; on one segment it includes the whole graph's communication-aware bound
    one_segment = fine.num_tasks > ONE_SEGMENT_TASKS and len(segments(fine)) == 1
    decomposition_s = (DECOMPOSITION_COST + (COMM_BOUND_COST if one_segment else 0)) * list_s
    if options.decomposition_share > 0 and fine.num_tasks > 1 and phase1_s < decomposition_s:
        say(f"decomposition skipped for time ({max(0.0, phase1_s):.1f}s left, about {decomposition_s:.1f}s needed "
            f"before any segment is solved)")
    elif options.decomposition_share > 0 and fine.num_tasks > 1:
        t1 = time.monotonic()
        share = options.decomposition_share
        if one_segment:
            share = min(share, ONE_SEGMENT_SHARE)  # one large segment: a bound, rarely a plan; LNS gets the time
        decomposition = _guarded("decomposition", say, lambda: decompose_and_solve(
            fine, time_limit_s=min(share * options.time_limit_s, phase1_s), backend=options.backend,
            threads=options.threads, seed=options.seed, progress=say, incumbent=incumbent))
        if decomposition is not None:
            fine_bound = max(fine_bound, min(decomposition.bound_tick, incumbent.makespan_tick))
            stitched = decomposition.plan
            if stitched is not None and stitched.makespan_tick < incumbent.makespan_tick:
                incumbent = stitched
                phases.append(PhaseLog("decomposition", stitched.makespan_tick, time.monotonic() - t1))
            say(f"decomposition: {len(decomposition.segments)} segments ({decomposition.solved} by the solver), "
                f"op-level bound {unit(fine_bound)}, stitched plan "
                f"{unit(stitched.makespan_tick) if stitched is not None else 'none'}; incumbent "
                f"{unit(incumbent.makespan_tick)}; {decomposition.seconds:.1f}s")
    fine_bound = max(fine_bound, _comm_bound_in_time(fine, deadline, list_s, say, unit))
    best: ClusterSolution | None = None  # the cluster plan behind the incumbent, when a round found it
    rounds: list[RoundLog] = []
    if incumbent.makespan_tick <= fine_bound:
        say(f"the incumbent ({incumbent.method}, {unit(incumbent.makespan_tick)}) meets the lower bound: optimal")
    else:

        def adopt(phase: str, found: tuple[ClusterSolution | None, list[RoundLog]] | None) -> None:
            """Keep a cluster phase's rounds, and its plan when it beats the incumbent."""
            nonlocal incumbent, best
            if found is None:  # the phase failed inside (logged by _guarded)
                return
            solution, phase_rounds = found
            rounds.extend(phase_rounds)
            if solution is not None and solution.op_plan.makespan_tick < incumbent.makespan_tick:
                phases.append(PhaseLog(phase, solution.op_plan.makespan_tick, sum(r.seconds for r in phase_rounds)))
                incumbent, best = solution.op_plan, solution

        def keep_op_plan(phase: str, found: Plan, seconds: float) -> None:
            """Make an op-level phase's plan the incumbent when it is shorter and valid."""
            nonlocal incumbent, best
            if found.makespan_tick < incumbent.makespan_tick and _valid(fine, found):
                phases.append(PhaseLog(phase, found.makespan_tick, seconds))
                incumbent, best = found, None

        if fine.num_tasks > 1 and len(segments(fine)) > 1:
            budget = LINEAR_SHARE * (options.time_limit_s - (time.monotonic() - t0))
            start = incumbent
            adopt("linear cluster round", _guarded(
                "linear cluster rounds", say,
                lambda: _linear_rounds(fine, start, options, time.monotonic() + budget, say, unit)))
        start = incumbent
        runs_s = CLUSTER_RUNS_COST * list_s  # finding the incumbent's runs cannot be stopped (7-9 s at 100k ops)
        if deadline - time.monotonic() < runs_s:
            say(f"cluster rounds skipped for time ({max(0.0, deadline - time.monotonic()):.1f}s left, about "
                f"{runs_s:.1f}s needed to find the incumbent's runs)")
        else:
            adopt("cluster round", _guarded("cluster rounds", say,
                                            lambda: _cluster_rounds(fine, start, options, t0, say, unit)))
        left = options.time_limit_s - (time.monotonic() - t0)
        if (incumbent.makespan_tick > fine_bound and decomposition is not None
                and len(decomposition.segments) > 1 and SEGMENT_LNS_SHARE * left >= SEGMENT_MIN_MOVE_S):
            start, phase1 = incumbent, decomposition
            resolved = _guarded("segment LNS", say, lambda: segment_lns(
                fine, start, phase1, time_limit_s=SEGMENT_LNS_SHARE * left, bound_tick=fine_bound,
                backend=options.backend, threads=options.threads, seed=options.seed, progress=say, unit=unit))
            if resolved is not None and resolved.moves:  # no move: every segment meets its bound in the incumbent
                fine_bound = max(fine_bound, min(resolved.bound_tick, incumbent.makespan_tick))
                say(f"segment LNS: {resolved.moves} moves ({resolved.improving_moves} improving, "
                    f"{resolved.rejected_moves} rejected) in {resolved.seconds:.1f}s: {unit(start.makespan_tick)} -> "
                    f"{unit(resolved.plan.makespan_tick)}; op-level bound {unit(fine_bound)}")
                keep_op_plan("segment LNS", resolved.plan, resolved.seconds)
        left = options.time_limit_s - (time.monotonic() - t0)
        if incumbent.makespan_tick > fine_bound and 0.5 < left < ITERATED_START_COST * list_s:
            say(f"iterated list scheduling skipped for time ({left:.1f}s left, about "
                f"{ITERATED_START_COST * list_s:.1f}s needed to decode its starts)")
        elif incumbent.makespan_tick > fine_bound and left > 0.5 and fine.num_tasks > 1:
            start = incumbent
            budget = ITERATED_SHARE * left
            # the race needs the mirror's starts too (about as much again as the forward ones) and the share of
            # the budget it gives each direction must hold them
            if MIRROR_RACE_SHARE > 0 and MIRROR_RACE_SHARE * budget >= ITERATED_START_COST * list_s:
                raced = _guarded("iterated list scheduling", say, lambda: bidirectional_iterated(
                    fine, time_limit_s=budget, starts=[*classic_starts(fine), order_start(fine, start)],
                    incumbent=start, bound_tick=fine_bound, seed=options.seed, race_share=MIRROR_RACE_SHARE,
                    progress=say, unit=unit, search=iterated_list_schedule))
                if raced is not None:
                    say(f"iterated list scheduling: {raced.moves} moves ({raced.improving_moves} improving) in "
                        f"{raced.seconds:.1f}s in both directions of time, from {unit(raced.start_makespan_tick)}: "
                        f"{unit(raced.plan.makespan_tick)} ({raced.direction})")
                    # each direction's step in the history: the forward search's plan, then the mirror's when shorter
                    keep_op_plan("iterated list scheduling", raced.forward_plan, raced.seconds)
                    if raced.direction == "mirrored":
                        keep_op_plan("iterated list scheduling (mirrored)", raced.plan, raced.seconds)
            else:
                searched_list = _guarded("iterated list scheduling", say, lambda: iterated_list_schedule(
                    fine, time_limit_s=budget, starts=[*classic_starts(fine), order_start(fine, start)],
                    bound_tick=fine_bound, seed=options.seed, progress=say, unit=unit))
                if searched_list is not None:
                    say(f"iterated list scheduling: {searched_list.moves} moves ({searched_list.improving_moves} "
                        f"improving) in {searched_list.seconds:.1f}s from {searched_list.start_name} "
                        f"{unit(searched_list.start_makespan_tick)}: {unit(searched_list.plan.makespan_tick)}")
                    keep_op_plan("iterated list scheduling", searched_list.plan, searched_list.seconds)
        left = options.time_limit_s - (time.monotonic() - t0)
        if incumbent.makespan_tick > fine_bound and 0.5 < ASSIGNMENT_SHARE * left < ASSIGNMENT_START_COST * list_s:
            say(f"assignment search skipped for time ({ASSIGNMENT_SHARE * left:.1f}s for it, about "
                f"{ASSIGNMENT_START_COST * list_s:.1f}s needed to set it up)")
        elif incumbent.makespan_tick > fine_bound and left > 0.5 and fine.num_tasks > 1 and ASSIGNMENT_SHARE > 0:
            start = incumbent
            budget = ASSIGNMENT_SHARE * left
            moved = _guarded("assignment search", say, lambda: assignment_search(
                fine, start, time_limit_s=budget, bound_tick=fine_bound, seed=options.seed,
                stall_moves=ASSIGNMENT_STALL_MOVES, progress=say, unit=unit))
            if moved is not None:
                say(f"assignment search: {moved.moves} moves ({moved.improving_moves} improving) in "
                    f"{moved.seconds:.1f}s from {unit(moved.start_makespan_tick)}: {unit(moved.plan.makespan_tick)}")
                keep_op_plan("assignment search", moved.plan, moved.seconds)
        left = options.time_limit_s - (time.monotonic() - t0)
        if incumbent.makespan_tick > fine_bound and left > 0.5:
            start = incumbent
            say(f"LNS on the op plan from {unit(start.makespan_tick)} ({left:.0f}s left; bound {unit(fine_bound)})")
            searched = _guarded("LNS", say, lambda: lns(
                fine, start, time_limit_s=left, bound_tick=fine_bound, backend=options.backend,
                threads=options.threads, seed=options.seed, progress=say, unit=unit))
            if searched is not None:
                say(f"LNS: {searched.moves} moves ({searched.improving_moves} improving, {searched.rejected_moves}"
                    f" rejected) in {searched.seconds:.1f}s: {unit(start.makespan_tick)} -> "
                    f"{unit(searched.plan.makespan_tick)}")
                keep_op_plan("LNS", searched.plan, searched.seconds)
    if best is None or incumbent.makespan_tick < best.op_plan.makespan_tick:
        coarse, clusters, plan = as_singletons(fine, incumbent)
        best = ClusterSolution(plan, incumbent, coarse, clusters, fine_bound)
    plan, op_plan, coarse, clusters = best.plan, best.op_plan, best.coarse, best.clusters
    fine_bound = min(fine_bound, op_plan.makespan_tick)
    status = PlanStatus.OPTIMAL if op_plan.makespan_tick <= fine_bound else PlanStatus.FEASIBLE
    elapsed = time.monotonic() - t0
    solver: dict[str, str] = {}  # solver name and version, when a solver ran
    if not plan.solver and (rounds or (decomposition is not None and decomposition.solved) or len(phases) > 1):
        backend = get_backend(options.backend)  # it proved the bound (and maybe found nothing better than HEFT)
        solver = {"solver": backend.name, "solver_version": backend.version}
    search = tuple((p.source, p.makespan_tick) for p in phases)
    final = dataclasses.replace(plan, method=PlanMethod.MILP, status=status, lower_bound_tick=fine_bound,
                                solve_time_s=elapsed, task_ops=dict(coarse.task_ops), search=search,
                                **solver)  # type: ignore[arg-type]  # mypy reads **dict as every field
    op_plan = dataclasses.replace(op_plan, method=PlanMethod.MILP, status=status, lower_bound_tick=fine_bound,
                                  solve_time_s=elapsed, search=search, **solver)  # type: ignore[arg-type]
    validate_plan(coarse, final)
    validate_plan(fine, op_plan)
    say(f"found by {phases[-1].source}: " + _history(phases, unit) + f"; bound {unit(fine_bound)}, gap "
        f"{100 * op_plan.gap:.1f}%")
    return Outcome(plan=final, op_plan=op_plan, fine=fine, coarse=coarse, clusters=tuple(map(tuple, clusters)),
                   rounds=tuple(rounds), cluster_bound_tick=best.cluster_bound_tick,
                   baselines=baseline_makespans(fine, computed), lower_bound_tick=fine_bound,
                   decomposition=decomposition, phases=tuple(phases))


def _phase_zero(fine: SchedulingInstance, computed: dict[str, int], deadline: float, say: ProgressFn,
                unit: Callable[[int], str]) -> tuple[Plan, float]:
    """Phase 0's list schedules (module docstring; `_best_list_schedule`: HEFT always, the others while time is
    left before `deadline`, time.monotonic()): (the incumbent, the fastest run's seconds: the unit the planner
    estimates its unstoppable steps in; the fastest, since the first run also pays one-off costs such as imports
    and the instance's cached adjacency, seconds on a loaded machine even for a tiny graph)."""
    seconds: list[float] = []
    incumbent = _best_list_schedule(fine, computed, deadline=deadline, progress=say, seconds=seconds)
    say(f"list scheduling: {incumbent.method} {unit(incumbent.makespan_tick)} (the incumbent); trivial bound "
        f"{unit(fine.trivial_lower_bound_tick())} (critical path {unit(fine.critical_path_tick())}, work / speed "
        f"{unit(fine.work_bound_tick())})")
    return incumbent, min(seconds)


def _comm_bound_in_time(fine: SchedulingInstance, deadline: float, list_s: float, say: ProgressFn,
                        unit: Callable[[int], str]) -> int:
    """The communication-aware bound of the op graph, or 0 when the time left before `deadline` is under
    COMM_BOUND_COST x `list_s` (a list schedule's seconds; the bound cannot be stopped once started).  It runs after
    the decomposition, which adds up the same bound over segments (on one segment: the same graph), so when time
    is short the stronger bound of the two is the one kept."""
    left_s = deadline - time.monotonic()
    if left_s < COMM_BOUND_COST * list_s:
        say(f"communication-aware bound skipped for time ({max(0.0, left_s):.1f}s left, about "
            f"{COMM_BOUND_COST * list_s:.1f}s needed)")
        return 0
    bound = _guarded("communication-aware bound", say, lambda: comm_lower_bound_tick(fine)) or 0
    say(f"communication-aware bound {unit(bound)}")
    return bound


def _best_list_schedule(fine: SchedulingInstance, computed: dict[str, int] | None = None, *,
                        deadline: float | None = None, progress: ProgressFn | None = None,
                        seconds: list[float] | None = None) -> Plan:
    """The shortest of the classic list schedules on the op graph (HEFT; HEFT with CPoP's priority; PEFT), and the
    memory-aware list schedule (`memory_list`) when HEFT does not fit memory: HEFT fills the fastest device first and
    can run into a dead end under a tight capacity where a plan that keeps room for the parameters to come exists;
    when that fails too, the parameters-first packed plan (`memory_pack.packed_plan`, which reaches within 0.01 % of
    the proven least capacity on the Mixtral what-if).
    `computed`, when given, receives HEFT's makespan under `Method.HEFT.value` (the baselines reuse it).  When no
    scheduler finds a plan, HEFT's `InfeasibleError` is raised.

    With a `deadline` (time.monotonic()), HEFT (or, when it finds no plan, the memory-aware fallback) always runs;
    each other scheduler only when the time left is at least what the previous one took (they cost about the same:
    one pass over the tasks and edges, after the shared ranks and adjacency are computed once, before the first
    run); `progress` hears which were skipped.  `seconds`, when given, receives each
    run's seconds in order (HEFT's first)."""
    plans: list[Plan] = []
    heft_error: InfeasibleError | None = None
    spent = seconds if seconds is not None else []
    if deadline is not None:
        # one-off work every list scheduler shares, kept out of the first run's seconds so that they estimate the
        # next runs: the instance's adjacency and topological order (cached) and HEFT's upward rank (cached per
        # instance; HEFT/CPoP adds to it).  At 1M ops it took more than half of HEFT's first 41 s.
        upward_rank(fine)
    skipped: list[str] = []

    def timed(name: str, run: Callable[[], Plan], *, always: bool = False) -> None:
        if not always and deadline is not None and spent and time.monotonic() + spent[-1] > deadline:
            skipped.append(name)
            return
        s0 = time.monotonic()
        try:
            plans.append(run())
        finally:
            spent.append(time.monotonic() - s0)

    try:
        timed("heft", lambda: heft(fine), always=True)
        if computed is not None:
            computed[Method.HEFT.value] = plans[0].makespan_tick
    except InfeasibleError as exc:
        heft_error = exc
    for name, other in (("heft-sum", lambda: heft(fine, rank=Rank.SUM)), ("peft", lambda: peft(fine))):
        try:
            timed(name, other)
        except InfeasibleError:
            pass
    if heft_error is not None:
        # memory binds (HEFT ran into a dead end), so the memory-aware list schedule runs even when HEFT/CPoP or
        # PEFT found a plan: it can be the shorter one (Mixtral on the mixed A100/H100 profile at 13.89 GiB: 639.6
        # against PEFT's 693.8 ms); it must run when nothing else found a plan
        try:
            timed("memory-aware list scheduling", lambda: memory_list(fine), always=not plans)
        except InfeasibleError:
            pass
    if not plans:  # nearest the least feasible capacity: parameters packed first, then scheduled (slow plans)
        try:
            timed("packed plan", lambda: packed_plan(fine), always=True)
        except InfeasibleError:
            assert heft_error is not None
            raise heft_error from None
    if skipped and progress is not None:
        progress(f"list scheduling: {', '.join(skipped)} skipped for time (each takes about {spent[-1]:.1f}s)")
    return min(plans, key=lambda p: p.makespan_tick)


def _valid(fine: SchedulingInstance, plan: Plan) -> bool:
    try:
        validate_plan(fine, plan)
    except PlanInvalidError:
        return False
    return True


def _guarded(what: str, say: ProgressFn, run: Callable[[], T]) -> T | None:
    """run(), or None when it raises: a phase of the search that fails is a bug, logged with its traceback, and
    the search goes on with what it has.  A phase that finds no plan (`InfeasibleError`) is no bug and no proof
    either — phase 0 already has a valid plan when any guarded phase runs — so it is said in one line and skipped."""
    try:
        return run()
    except InfeasibleError as exc:
        reason = " ".join(str(exc).split())
        say(f"{what} found no plan ({reason[:200]}); continuing with the incumbent")
        return None
    except Exception as exc:  # noqa: BLE001 - see the docstring: the user still gets a valid plan
        log.exception("%s failed (a bug); the search continues without it", what)
        say(f"internal error in {what} (a bug; traceback in the log): {type(exc).__name__}: {exc}; "
            f"continuing with the incumbent")
        return None


def _linear_rounds(fine: SchedulingInstance, incumbent: Plan, options: SolveOptions, deadline: float,
                   say: ProgressFn, unit: Callable[[int], str]) -> tuple[ClusterSolution | None, list[RoundLog]]:
    """Phase 2a (module docstring): the original bi-level loop until `deadline` (time.monotonic()).  (the best
    round whose expansion passed the validator and is shorter than `incumbent`, or None; the rounds)."""
    target = options.target_clusters or DEFAULT_CLUSTERS.get(options.backend, 32)
    if fine.num_tasks > LINEAR_MAX_OPS:
        say(f"linear clustering skipped: {fine.num_tasks} ops (above {LINEAR_MAX_OPS}, merging that keeps the "
            f"critical path leaves far more clusters than the solver takes)")
        return None, []
    result = coarsen(fine, target_clusters=target, cp_tolerance=DEFAULT_CP_TOLERANCE)
    clusters = split_to_target(fine, result.clusters, target)
    coarse = contract(fine, clusters)
    op_cp, coarse_cp = critical_paths(fine, clusters)  # the clusters the round solves (after split_to_target)
    say(f"linear clustering: {fine.num_tasks} ops into {coarse.num_tasks} clusters "
        f"({result.num_linear_clusters} linear clusters; critical path estimate "
        f"{unit(int(op_cp))} on ops -> {unit(int(coarse_cp))} on clusters)")
    if coarse.num_tasks > CLUSTER_ROUND_FACTOR * target:
        say(f"linear cluster rounds skipped: {coarse.num_tasks} clusters, above the {CLUSTER_ROUND_FACTOR * target} "
            f"the {options.backend} model is solved on in a round")
        return None, []
    # Infeasible on these clusters is no proof for the ops (a cluster holds all its members' memory): such a
    # round is skipped, not reported to the user.
    warm: Plan | None = None
    try:
        warm = heft(coarse)
    except InfeasibleError:
        pass
    try:
        projected = project_plan(incumbent, coarse, clusters, fine)
        if warm is None or projected.makespan_tick < warm.makespan_tick:
            warm = projected
    except OpplanError:  # the incumbent need not be expressible on these clusters (a deadlock, memory)
        pass
    best: ClusterSolution | None = None
    rounds: list[RoundLog] = []
    for rnd in range(options.max_rounds):
        remaining = deadline - time.monotonic()
        if remaining <= 1.0:
            break
        share = remaining * 0.5 if rnd == 0 and options.max_rounds > 1 else remaining / max(1, options.max_rounds - rnd)
        r0 = time.monotonic()
        try:
            plan = solve_placement(coarse, backend=options.backend, time_limit_s=max(0.5, share),
                                   rel_gap=options.rel_gap, threads=options.threads, seed=options.seed,
                                   warm_start=warm)
        except OpplanError as exc:  # infeasible or no plan in time on these clusters: the phase ends
            say(f"linear cluster round {rnd}: no plan on these clusters ({exc}); phase skipped")
            break
        op_plan = expand_plan(fine, coarse, clusters, plan)  # members back to back: the same makespan
        rounds.append(RoundLog(len(rounds), coarse.num_tasks, op_plan.makespan_tick, plan.lower_bound_tick,
                               plan.status, time.monotonic() - r0))
        say(f"linear cluster round {rnd}: {coarse.num_tasks} clusters, plan {unit(op_plan.makespan_tick)} "
            f"({plan.status} on these clusters)")
        improved = best is None or op_plan.makespan_tick < best.op_plan.makespan_tick
        if improved and op_plan.makespan_tick < incumbent.makespan_tick and _valid(fine, op_plan):
            best = ClusterSolution(plan, op_plan, coarse, clusters, plan.lower_bound_tick)
        elif rnd > 0:
            break
        refined = refine(fine, coarse, clusters, plan, target)
        if refined is None:
            break
        old_names = coarse.task_names
        clusters = refined.clusters
        coarse = contract(fine, clusters)
        warm = replay(coarse, plan, old_names, refined.parent)
    return best, rounds


def _cluster_rounds(fine: SchedulingInstance, incumbent: Plan, options: SolveOptions, t0: float, say: ProgressFn,
                    unit: Callable[[int], str]) -> tuple[ClusterSolution | None, list[RoundLog]]:
    """Phase 2 (module docstring): clusters that respect the incumbent, solved warm-started from its projection;
    repeated on the improved plan while a round improves it.  (best round or None, the rounds)."""
    limit = options.target_clusters or DEFAULT_CLUSTERS.get(options.backend, 32)
    best: ClusterSolution | None = None
    rounds: list[RoundLog] = []
    current = incumbent
    for rnd in range(options.max_rounds):
        remaining = options.time_limit_s - (time.monotonic() - t0)
        if remaining <= 1.0:
            break
        clusters, coarse, warm = respecting_clusters(fine, current)
        if coarse.num_tasks > CLUSTER_ROUND_FACTOR * limit:
            say(f"cluster round skipped: the incumbent's runs make {coarse.num_tasks} clusters, more than "
                f"{CLUSTER_ROUND_FACTOR * limit} (LNS handles it)")
            break
        if coarse.num_tasks > CLUSTER_MIN_SHRINK * fine.num_tasks:
            # Nearly one op per cluster: the round would be the op-level model again; on the engine bench (layered
            # 300x8, the MoE) such rounds spent 5-11 s and never improved the incumbent.
            say(f"cluster round skipped: the incumbent's runs make {coarse.num_tasks} clusters of "
                f"{fine.num_tasks} ops (nearly single ops; the later phases handle it)")
            break
        r0 = time.monotonic()
        share = remaining * CLUSTER_SHARE

        def report(elapsed_s, value, bound, gap, _rnd=rnd):
            if value is not None:
                say(f"cluster round {_rnd}: {elapsed_s:5.1f}s incumbent {unit(int(value))} cluster bound "
                    f"{unit(int(bound)) if bound is not None else '-'}")

        plan = solve_placement(coarse, backend=options.backend, time_limit_s=max(0.5, share), rel_gap=options.rel_gap,
                               threads=options.threads, seed=options.seed, warm_start=warm, progress=report)
        op_plan = expand_plan(fine, coarse, clusters, plan)
        validate_plan(fine, op_plan)
        rounds.append(RoundLog(rnd, coarse.num_tasks, op_plan.makespan_tick, plan.lower_bound_tick, plan.status,
                               time.monotonic() - r0))
        say(f"cluster round {rnd}: {coarse.num_tasks} clusters (the incumbent's runs; warm start "
            f"{unit(warm.makespan_tick)}), plan {unit(op_plan.makespan_tick)} ({plan.status} on these clusters)")
        if best is not None and op_plan.makespan_tick >= best.op_plan.makespan_tick:
            break
        if op_plan.makespan_tick >= current.makespan_tick:
            break
        best = ClusterSolution(plan, op_plan, coarse, clusters, plan.lower_bound_tick)
        current = op_plan
    return best, rounds
