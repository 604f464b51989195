"""A periodic schedule of a long pipeline: one micro-batch of every chain per period, the same timing shifted by
the period for each next micro-batch (modulo scheduling), as a warm start for the pipeline search
(`planner.search.pipeline.periodic`).

Why.  The search improves a schedule a few hundred tasks at a time.  Where the busiest stream carries all-to-alls
and sends, a steady state in which it idles between micro-batches (each gap one compute task that outlasts the
all-to-all run beside it) needs every device's stream order changed together to close, which no neighbourhood of
that size reaches.  A periodic schedule plans exactly that steady state across all devices at once, on one
micro-batch's tasks.

The model (CP-SAT by default, through `formulations.backends`; the pipeline unrolled with one micro-batch per
chain; the period T fixed):

* every task t gets an offset o_t: micro-batch k of t starts at o_t + k T.  o_t lies between its head (longest
  path into it) and `span` less its tail, so the span of one micro-batch is at most the critical path + `slack`;
* precedences: o_v >= o_u + d_u + the edge's delay (the micro-batches are independent: no edge joins two);
* streams: a stream runs one task at a time, every period the same ones, so the positions p_t = o_t mod T of its
  tasks, with their durations, must not overlap on a circle of length T: the intervals [p_t, p_t + d_t) and
  [p_t + T, p_t + T + d_t) of all its tasks in one no-overlap (a task that wraps past T meets the next period's
  start in the second copy);
* memory: an activation part (bytes a, from its F's start to the end of the B or W that frees it: lifetime L) has at
  most ceil(L / T) copies alive at once, so sum of a x ceil(L / T) over a device's parts, with its parameters, within
  its cap is enough (each part counted at its own peak: the sum can only overstate; bytes counted in units of the
  parts' greatest common divisor, the room rounded down).  This is *soft*: the excess is penalised
  (`PeriodicModelPolicy.excess_weight` per unit) rather than forbidden, because with a hard cap CP-SAT often finds no
  schedule at all at a tight period, where the soft rows lead it to one with no excess.  A schedule with excess is not
  returned;
* objective: excess first, then the span (the unrolled schedule lasts (m - 1) T + span).

Unrolled over all micro-batches, the schedule is valid: every micro-batch's tasks keep their precedences, a
stream's tasks of all micro-batches are its tasks of one period shifted by multiples of T (no two overlap), and at
any time at most ceil(L / T) copies of each part are alive.  Its fill and drain are the steady state's, slower
than they need to be; the search's first replay (`formulations.pipeline_units.Units.replay`: every task as early as
its stream order allows) takes most of that back, and its steps the rest.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from formulations.backends import get_backend
from formulations.model_api import SolveParams, as_expr, cname, interval
from formulations.pipeline import device_of, heads_and_tails
from planner.errors import OpplanError
from planner.pipeline.unroll import AllToAll, TrainingPipeline, Unrolled, UnrolledAction, unroll_actions
from planner.schedule.actions import Action, ActionKind

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class PeriodicModelPolicy:
    """The periodic model's tuning (`solve_periodic`); the pipeline search nests one
    (`planner.search.pipeline.policy.PeriodicPolicy.model`)."""

    # objective weight of one unit of bytes over a cap (the parts' gcd), against one tick of span: large enough that
    # CP-SAT removes the excess before it shortens the span
    excess_weight: int = 1000
    # without a caller's slack, how many periods beyond the critical path one micro-batch's span may reach: more
    # admits more schedules at a larger model (more copies per part)
    slack_periods: int = 10


DEFAULT_PERIODIC_MODEL_POLICY = PeriodicModelPolicy()  # for argument defaults


@dataclass(frozen=True)
class PeriodicSchedule:
    """One micro-batch's offsets (task name of micro-batch 0 -> start tick, the earliest 0) and the period."""

    period_tick: int
    offsets: dict[str, int]
    span_tick: int

    def unrolled(self, pipeline: TrainingPipeline) -> dict[str, int]:
        """Start tick of every task of `pipeline` (all its micro-batches): micro-batch k of a task at its offset +
        k x the period.  `pipeline` must be the one this schedule was solved for, with any number of micro-batches."""
        one = unroll_actions(dataclasses.replace(pipeline, num_microbatches=1)).actions
        return {_named(a, k): self.offsets[str(a)] + k * self.period_tick
                for a in one for k in range(pipeline.num_microbatches)}


def _named(action: UnrolledAction, microbatch: int) -> str:
    """The name of `action`'s task on another micro-batch."""
    if isinstance(action, (Action, AllToAll)):
        return str(dataclasses.replace(action, microbatch=microbatch))
    raise OpplanError(f"a periodic schedule has no overlapped pairs, got {action}")


def _one_microbatch(pipeline: TrainingPipeline) -> tuple[TrainingPipeline, Unrolled, list[int], list[int]]:
    """`pipeline` with one micro-batch per chain, its unrolled tasks, and each task's stream and duration there."""
    one = dataclasses.replace(pipeline, num_microbatches=1)
    tasks = unroll_actions(one)
    dev = device_of(tasks.instance)
    return one, tasks, dev, [int(tasks.instance.duration_tick[t, d]) for t, d in enumerate(dev)]


def period_lower_bound_tick(pipeline: TrainingPipeline) -> int:
    """The work per micro-batch (of every chain) of the busiest stream: no periodic schedule has a shorter period."""
    _, _, dev, dur = _one_microbatch(pipeline)
    work: dict[int, int] = {}
    for d, x in zip(dev, dur, strict=True):
        work[d] = work.get(d, 0) + x
    return max(work.values(), default=0)


def solve_periodic(pipeline: TrainingPipeline, caps: Sequence[int], period_tick: int, *, time_limit_s: float,
                   slack_tick: int | None = None, threads: int = 8, seed: int = 0,
                   backend: str = "cpsat",
                   policy: PeriodicModelPolicy = DEFAULT_PERIODIC_MODEL_POLICY) -> PeriodicSchedule | None:
    """The periodic schedule of `pipeline` at `period_tick` under the caps (per device) that `backend` finds in
    `time_limit_s` (module docstring), or None when it finds none without excess memory.  `slack_tick`: how far
    beyond the critical path one micro-batch's span may reach (default: `policy.slack_periods` periods)."""
    if pipeline.pairs_gain or pipeline.stage_to_device is None:
        raise OpplanError("a periodic schedule needs a placement and no overlapped pairs")
    one, tasks, dev, dur = _one_microbatch(pipeline)
    inst = tasks.instance
    n = inst.num_tasks
    head, tail = heads_and_tails(inst, dev, dur)
    critical = max(head[t] + dur[t] + tail[t] for t in range(n))
    T = int(period_tick)
    span_max = critical + (policy.slack_periods * T if slack_tick is None else int(slack_tick))
    most_copies = span_max // T + 1

    b = get_backend(backend).new_builder()
    o = [b.int_var(head[t], span_max - tail[t] - dur[t], f"o{t}") for t in range(n)]
    # o = whole periods + the position in the period, both solver variables: a linear modulo
    pos = [b.int_var(0, T - 1, f"p{t}") for t in range(n)]
    for t in range(n):
        periods = b.int_var(head[t] // T, (span_max - tail[t] - dur[t]) // T, f"q{t}")
        b.add(o[t] == periods * T + pos[t], cname("modulo", t=t))
        for u, e in inst.predecessors[t]:
            b.add(o[t] >= o[u] + dur[u] + inst.comm(e, dev[u], dev[t]), cname("prec", u=u, v=t))
    on: dict[int, list[int]] = {}
    for t in range(n):
        if dur[t] > 0:
            on.setdefault(dev[t], []).append(t)
    for d, ts in on.items():
        b.no_overlap([interval(pos[t] + shift, dur[t], pos[t] + shift + dur[t], None, f"i{t}_{shift}")
                      for t in ts for shift in (0, T)], cname("stream", d=d))
    parts = [int(c.activation_freed_by_b_bytes) for c in one.stages] + \
        [int(c.activation_bytes) - int(c.activation_freed_by_b_bytes) for c in one.stages]
    unit = math.gcd(*parts) or 1  # bytes: every part is a whole number of units, so the counts stay small and exact
    excess = []
    for d in range(one.num_devices):
        used = []
        for s in one.device_stages(d):
            cost = one.stages[s]
            f = tasks.task(s, ActionKind.F, 0)
            a_b = int(cost.activation_freed_by_b_bytes)
            for demand, until in ((a_b, tasks.task(s, ActionKind.B, 0)),
                                  (int(cost.activation_bytes) - a_b, tasks.task(s, ActionKind.W, 0))):
                if demand > 0:
                    copies = b.int_var(1, most_copies, f"copies_{s}_{until}")
                    b.add(o[until] + dur[until] - o[f] <= copies * T, cname("copies", s=s, until=until))
                    used.append(copies * (demand // unit))
        room = (int(caps[d]) - sum(int(one.stages[s].param_bytes) for s in one.device_stages(d))) // unit
        over = b.int_var(0, max(0, sum(int(one.stages[s].activation_bytes) // unit for s in one.device_stages(d))
                                * most_copies), f"excess{d}")
        b.add(over >= sum(used, as_expr(0)) - room, cname("memory", d=d))
        excess.append(over)
    span = b.int_var(critical, span_max, "span")
    for t in range(n):
        b.add(span >= o[t] + dur[t], cname("span", t=t))
    b.minimize(sum(excess, as_expr(0)) * policy.excess_weight + span)
    result = b.solve(SolveParams(time_limit_s=float(time_limit_s), threads=int(threads), seed=int(seed),
                                 deterministic=False))
    if not result.has_solution:
        log.info("%s: no periodic schedule at period %d ticks in %.0f s", pipeline.name, T, time_limit_s)
        return None
    over_bytes = sum(result.int_value(x) for x in excess) * unit
    if over_bytes > 0:
        log.info("%s: the periodic schedule at period %d ticks holds %d bytes over the caps", pipeline.name, T,
                 over_bytes)
        return None
    start = [result.int_value(x) for x in o]
    base = min(start)
    return PeriodicSchedule(T, {inst.task_names[t]: start[t] - base for t in range(n)},
                            max(start[t] + dur[t] for t in range(n)) - base)
