"""Large-neighbourhood search over a pipeline schedule (issue 11, "Scale"): CP-SAT stalls on the full pipeline
formulation of large pipelines (the DeepSeek-V3-like preset at p = 16, m = 64 has ~17,700 tasks on the V
placement, and 120 s of the full solve do not improve its warm start); re-solving a small part of the incumbent at a
time, with the rest kept in its order, moves it.

The schedule as an order.  The search keeps the incumbent's chosen pairs (each one unit, named by its forward; the
full solve chooses pairs) and works on the order of the units on every stream (`Units`).  An order is timed by
replaying it (`Units.replay`: every unit as early as its predecessors, with their delays, and the unit before it on
its stream allow), which also gives each unit's tail (longest path from its start to the end).  Memory follows from
the order alone: on a device, the activations in flight at any moment are those whose F has started and whose B or
W has not ended, all on that device's compute stream, so every timing of an order has the same peak memory.

One step.  A neighbourhood N of units is freed; with first / last the earliest start / latest end of N, every
stream's order splits into a prefix (the leading units outside N that end by `first`: fixed), a middle (modelled)
and a suffix (the trailing units outside N that start at `last` or later: replayed).  The compact model (CP-SAT,
`_step_model`) has a start for each middle unit only: precedence between middle units, releases from the prefix,
no overlap per stream above the prefix's end, the incumbent's order between consecutive middle units outside N
(``keep[...]``: only N is reordered), family 3 of `formulations.pipeline` over the middle (an activation allocated in
the prefix holds from its fixed start, one freed in the suffix to the horizon, one held across the middle lowers the
capacity), family 5 between middle units (`fifo_inside` False: not for N's units, so micro-batches may run out of
order inside N where memory allows), and a makespan C >= every middle unit's end plus the tail of each suffix unit
it feeds (an edge, or its stream's first suffix unit) and >= what the prefix alone implies.  The objective puts C
first and the sum of N's ends second, so that a step that cannot shorten the makespan still moves N earlier and
leaves slack for the next; the incumbent is the hint.  The step's order (prefix, middle by the new starts, suffix)
is replayed, and replaces the incumbent when the replay's makespan is no longer (ties accepted: they move the
search).  With `fix_untouched`, a stream that holds no unit of N keeps its middle at the incumbent's times (region
"f": no variables, no no-overlap; a modelled unit feeding one of them must end by its start less the delay,
``deadline[...]``, one it feeds is released by its end, ``release[...]``, and its suffix's tail bounds C as a
constant; a device whose compute stream is fixed needs no memory row: its activations all live on that stream).
This is a further restriction of the same step, so everything above still holds; it makes a step the size of the
streams N touches (two devices' for ``devices``, the chain's streams for ``critical``) instead of every stream's, so
steps are smaller and more of them fit the time.  Every accepted schedule is a replay of an order whose middle
satisfied the memory rows, so it fits the caps; it is validated at the end (`finish_pipeline`).  The model is the
size of the middle, not of the pipeline: a step on the 17,664 tasks of the preset at p = 16, m = 64 takes 2-4 s on
the shared 2-vCPU machine, where the full formulation with the outside order kept as constraints took ~8 s a step to
build and presolve and did not move in 60 s.

Neighbourhoods (`KINDS`), about `size` tasks each, around a point drawn by a seeded `random.Random`:
``window`` the tasks starting nearest a random tick, on every stream; ``microbatches`` the tasks of `MICROBATCHES`
consecutive micro-batches from a random one that start nearest the start of a random one of them; ``devices`` the
tasks of two adjacent devices (compute and communication streams) starting nearest a random tick; ``critical`` a
stretch of the incumbent's critical chain (tight predecessors, in the graph or on the stream, back from the last
end) and the tasks starting nearest its middle on the streams it crosses.  Besides them, drawn never but run as
steps of their own (`ENDS_KINDS`, `_two_phases`): ``head`` the `ENDS_SHARE` of the tasks that start first (the
fill), ``tail`` the share that start last (the drain), hundreds of tasks where the drawn kinds free 64-300.

Adaptation.  The size grows by `GROW` after a step that proved its neighbourhood's makespan optimal (too easy; a
step stops at that proof, the secondary term within half a makespan tick's weight) and shrinks by `SHRINK` after one
cut by its time limit (`step_s`) without a gain; a kind's weight grows by one with each gain and decays by `DECAY`
with each step without one.

The bound.  Never from a step (a restricted model bounds nothing): the caller's, the full solve's.  Without
candidate pairs it holds for every order (`formulations.pipeline`, family 5), and a schedule the search leaves out
of micro-batch order is renamed into order (`renamed_in_order`: the same schedule).  With pairs, the full solve's
bound holds only while the schedule stays in micro-batch order per stage, else the setup's trivial bound (device
bound, critical path, work / devices: no order assumed).

Deterministic for a seed as far as CP-SAT is: the draws are seeded, and each step's CP-SAT solve runs with seed
`seed + step`, in the driver's deterministic mode by default (`deterministic`); a step cut by its wall-clock limit
can still differ.  The search on a mirror half (`_two_phases`) runs its steps in CP-SAT's default portfolio instead
(`HALF_DETERMINISTIC`): on one worker that is one seeded search, repeatable when not cut by its limit; on several
workers (`HALF_THREADS`, the caller's `threads`) it is not repeatable, and it found more per step (constants'
comments).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from formulations.backends import get_backend
from formulations.driver import solve_formulation
from formulations.model_api import (
    LinExpr,
    ModelBuilder,
    ProgressCallback,
    SolveParams,
    SolveStatus,
    Var,
    as_expr,
    cname,
    interval,
)
from formulations.pipeline import (
    PipelineSetup,
    PipelineSolution,
    PipelineTimes,
    finish_pipeline,
    prepare_pipeline,
)
from formulations.pipeline_periodic import period_lower_bound_tick, solve_periodic
from planner.pipeline.mirror import Fold, fold
from planner.pipeline.unroll import AllToAll, TrainingPipeline
from planner.schedule.actions import Action, ActionKind, OverlapAction
from planner.schedule.plan import PlanStatus

KINDS = ("window", "microbatches", "devices", "critical")
GROW = 1.25  # size factor after a step proven optimal within its time
SHRINK = 0.8  # size factor after a step cut by its time limit without a gain
DECAY = 0.9  # weight factor of a kind after a step without a gain
MIN_SIZE = 8  # tasks
MICROBATCHES = 4  # consecutive micro-batches a ``microbatches`` neighbourhood draws from
INITIAL_SIZE = 64  # tasks
STEP_S = 4.0  # solver time of one step, besides its build
# On a mirror half (`improve_folded`) the steps are shorter and CP-SAT runs one worker: more, smaller steps.  The
# preset at p = 16, 300 s from its list schedule (7175 ms), one run each, 2 shared vCPUs (README, "The step limit
# on the half"): 8 workers: 1 s 6855, 2 s 6859-6893, 4 s 6910-6952, 8 s 7008 ms; 4 workers, 2 s: 6911; 2 workers,
# 0.5 s: 6833; 1 worker, 0.5 s: 6775 and 6776 (seeds 0 and 1, 690-720 steps against ~180).  On the whole pipeline
# 2 s had been worse than 4 s (7047 against 7000, 2026-12-03).
# 600 s from there, one run each: 8 workers, 2 s: 6693 ms (6867 at 300 s); 1 worker, 0.5 s: 6728 (6798 at 300 s):
# short steps gain sooner, long steps later.  Both in turn, half the time each (`HALF_FIRST_SHARE`): 6673 ms
# (7015 at 60 s, 6796 at 300 s).  So the half is searched in short steps first, then in half the step limit.
# Rerun side by side (`experiments.bench_half`, 600 s): long steps 6737 / 6792 (seeds 0 / 1), both in turn
# 6770 / 6709, short steps 6808 ms.  A setting moves ~100 ms from run to run; both in turn stays, ahead at 60-300 s
# in every pair and at 600 s in two pairs of three (README, "The half's settings as a command").
# Workers of the first phase, once the steps ran in the default portfolio (`HALF_DETERMINISTIC`): the same 54 steps
# from one incumbent (`experiments.bench_steps`; README, "Four workers in the first phase") proved 19 / 31 / 31 and
# gained 97 / 161 / 159 ms in 18 / 17 / 31 s on 1 worker at 0.5 s / 4 at 0.5 s / 8 at 1 s; end to end (600 s,
# `experiments.bench_half`, seed 0) 4 workers gave 6498 ms (6856 at 60 s) against 6554 (6995) on 1.
HALF_STEP_S = 0.5
HALF_THREADS = 4  # at most; a caller's smaller `threads` stays
HALF_FIRST_SHARE = 0.5  # of the search's time, in short steps
HALF_STEP_SHARE = 0.5  # of the step limit, the steps of the rest of the time
HALF_SECOND_THREADS: int | None = None  # workers of the second phase's steps, at most (None: the caller's `threads`)
# The ends of the schedule as neighbourhoods (`ENDS_KINDS`, `_two_phases`): the `ENDS_SHARE` of the tasks that start
# first (``head``: the fill) or last (``tail``: the drain), one step each of at most `ENDS_STEP_S` on every worker.
# Measured on the preset at p = 16's half (4,544 tasks; README, "The ends as neighbourhoods"): from the search's
# 6793 ms after 400 s, the last ~16 % of the tasks (720) re-solved in 9 s to 6650 ms, proven optimal for the
# step, then the first ~18 % (814) in 47 s to 6613, proven; windows of the same size in the middle gained 0-7 ms
# in 60 s each, unproven.  The search's own steps (64-300 tasks) never grow that large.  A single round between
# the two phases had gained 3.5 ms on the drain (seed 1, final 6727 ms), one at the end 100 ms (final 6656): a
# drain the search has just built leaves the most to repack, hence the rounds (`ENDS_ROUNDS`) each come after
# second-phase steps.
HALF_ENDS = True  # the ends' steps in the second phase (False: the two phases alone, as before 2026-12-04)
ENDS_KINDS = ("head", "tail")
ENDS_SHARE = 0.17
ENDS_STEP_S = 60.0
ENDS_TIME_SHARE = 0.1  # of the search's time, at most, for each end's step (a short search keeps time for the rest)
# Rounds of the two ends' steps, the second phase's time split evenly before them.  Measured side by side
# (`experiments.bench_half`, 600 s, seeds 0 / 1; README, "The ends in rounds"): one round (at the end) 6688 / 6656 ms,
# two rounds 6576 / 6529, three 6584 (seed 0): a drain repacked halfway is built on by the steps after it.
ENDS_ROUNDS = 2
# CP-SAT's deterministic mode in the half's steps (True: as before 2026-12-05).  It interleaves every strategy
# in batches and stops at a deterministic-time limit, which on this machine came 0.3-0.7 s into a 0.5-1 s step; the
# default portfolio found gains of 14-56 ms in steps where it found none (README, "CP-SAT's deterministic mode")
HALF_DETERMINISTIC = False
MIN_STEP_S = 1.0  # no step starts with less time left than this
STALL_STEPS = 40  # steps in a row without a gain after which the search hands its time back to the full model
MIN_RESOLVE_S = 2.0  # the full model is solved again only with at least this much time left
# Above this many tasks the search starts at once from the warm start, without the first full solve: on the preset
# at p = 16, m = 64 (17,664 tasks) the full model's 60 s (of 120) ended past its limit with the warm start unchanged
# and its bound equal to the setup's trivial bound (5660 ms), leaving the search no step; at 600 s its 300 s changed
# nothing either (2026-12-02); on DualPipe's placement there (9,088 tasks) its 30 s of a 120 s run left the list
# schedule unchanged too.  The pipelines it improves (8 stages, ~1,400-2,800 tasks) stay far below.
FULL_SOLVE_MAX_TASKS = 5_000
# A mirror half's search starts from a periodic schedule of the half (`formulations.pipeline_periodic`) where its
# replay ends before the caller's warm start's: `PERIODIC_MARGINS` above the busiest stream's work per micro-batch,
# each solved in `PERIODIC_SHARE` / len(margins) of the search's time.  On the preset at p = 16 (2026-12-05; README,
# "A periodic start"): 1 / 1.7 / 2.5 / 3.5 % above 153.38 ms replayed to 6596-6619 / 6610 / 6567-6627 / 6798 ms in
# 30-60 s against the list schedule's 7175 (1.7 % found nothing in 20 s); the bench row went from 6503-6514 ms to
# 6297-6299 (two runs each).  On the preset's measured H200 times it replays longer and is not taken.
PERIODIC_MARGINS = (0.01, 0.025)
PERIODIC_SHARE = 0.15


@dataclass(frozen=True)
class LnsStep:
    """One step: the neighbourhood's kind and size (tasks freed), the incumbent's makespan before and after,
    seconds since the search started, and whether CP-SAT proved the neighbourhood optimal.  Kind ``periodic``: a
    periodic start (`periodic_start`) found before the search, replayed, against the best start before it; its
    seconds count from `solve_pipeline_lns`'s call."""

    step: int
    kind: str
    size: int
    before_tick: int
    after_tick: int
    wall_s: float
    proven: bool
    period_tick: int | None = None  # kind "periodic": the start found by `periodic_start`, before the search's steps

    @property
    def gained(self) -> bool:
        return self.after_tick < self.before_tick


@dataclass(frozen=True)
class LnsResult:
    """The search's answer: the best schedule, its makespan, the start's and its order's replayed (`Units.replay`:
    slack the start left, gained before any step), every step, whether the schedule keeps micro-batch order on every
    stage, and when (seconds since the search started) the best was found."""

    times: PipelineTimes
    start_tick: int
    best_tick: int
    steps: tuple[LnsStep, ...]
    in_order: bool
    time_to_best_s: float
    replayed_tick: int = 0
    resolve: tuple[float, int] | None = None  # the full model solved again after a stall: (seconds, makespan tick)
    after_full_solve: bool = True  # False: started from the warm start (`FULL_SOLVE_MAX_TASKS`)
    folded: bool = False  # True: searched on the mirror half (`improve_folded`), the schedule unfolded
    periodic: tuple[int, int] | None = None  # started from a periodic schedule: (its period, its replay's makespan)

    @property
    def gains(self) -> int:
        return sum(s.gained for s in self.steps)


class Units:
    """The schedule's units, fixed for the whole search: every task alone, or a chosen pair of the incumbent as one
    unit named by its forward (the search never changes which pairs run).  `rep[t]` the unit of task t, `dur[r]`
    its duration, `stream[r]` its stream, `succ[r]` / `pred[r]` (other unit, delay) along the instance's edges."""

    def __init__(self, setup: PipelineSetup, pairs: Sequence[int]) -> None:
        inst, dev = setup.tasks.instance, setup.device
        n = inst.num_tasks
        self.setup, self.pairs = setup, tuple(pairs)
        self.rep = list(range(n))
        self.dur = [int(inst.duration_tick[t, dev[t]]) for t in range(n)]
        for i in pairs:
            q = setup.pairs[i]
            for t in q.tasks:
                self.rep[t] = q.f
            self.dur[q.f] = q.tick
        self.reps = [t for t in range(n) if self.rep[t] == t]
        self.stream = list(dev)
        delay: dict[tuple[int, int], int] = {}
        for e, (u, v) in enumerate(inst.edges):
            a, b = self.rep[u], self.rep[v]
            if a != b:
                delay[a, b] = max(delay.get((a, b), 0), inst.comm(e, dev[u], dev[v]))
        self.succ: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        self.pred: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        for (a, b), d in sorted(delay.items()):
            self.succ[a].append((b, d))
            self.pred[b].append((a, d))

    @functools.cached_property
    def on_stream(self) -> dict[int, list[int]]:
        """Units per stream, by index."""
        out: dict[int, list[int]] = {}
        for r in self.reps:
            out.setdefault(self.stream[r], []).append(r)
        return out

    @functools.cached_property
    def fifo_links(self) -> tuple[tuple[int, int, str], ...]:
        """(unit, next unit, row name) of family 5: each stage's F, B and W of micro-batch k before k + 1's, where
        the two are different units."""
        pl, task, rep = self.setup.pipeline, self.setup.tasks.task, self.rep
        return tuple((rep[task(s, kind, k)], rep[task(s, kind, k + 1)], cname("fifo", s=s, k=kind.value, m=k))
                     for s in range(pl.num_stages) for kind in (ActionKind.F, ActionKind.B, ActionKind.W)
                     for k in range(pl.num_microbatches - 1) if rep[task(s, kind, k)] != rep[task(s, kind, k + 1)])

    @functools.cached_property
    def activations(self) -> tuple[tuple[int, tuple[tuple[int, int, int, str], ...]], ...]:
        """Per device: (its cap less its stages' parameters, (the F that allocates, the unit that frees, bytes,
        name) of every activation part it holds: the part B frees and the part W frees, each of every micro-batch
        of each of its stages, those of zero bytes left out)."""
        setup, rep = self.setup, self.rep
        pl, task = setup.pipeline, setup.tasks.task
        out = []
        for d in range(pl.num_devices):
            parts = []
            for s in pl.device_stages(d):
                a_b = int(pl.stages[s].activation_freed_by_b_bytes)
                a_w = int(pl.stages[s].activation_bytes) - a_b
                for k in range(pl.num_microbatches):
                    f = rep[task(s, ActionKind.F, k)]
                    for demand, until in ((a_w, rep[task(s, ActionKind.W, k)]), (a_b, rep[task(s, ActionKind.B, k)])):
                        if demand > 0:
                            parts.append((f, until, demand, f"act_{s}_{k}_{until}"))
            room = int(setup.cap[d]) - sum(int(pl.stages[s].param_bytes) for s in pl.device_stages(d))
            out.append((room, tuple(parts)))
        return tuple(out)

    def order(self, start: Sequence[int]) -> dict[int, list[int]]:
        """Units per stream in the order of `start` (ties: shorter first, then by index)."""
        out: dict[int, list[int]] = {}
        for r in sorted(self.reps, key=lambda r: (start[r], start[r] + self.dur[r], r)):
            out.setdefault(self.stream[r], []).append(r)
        return out

    def replay(self, order: Mapping[int, Sequence[int]]) -> tuple[list[int], list[int]] | None:
        """Every unit as early as its predecessors and the unit before it on its stream allow, in `order`: (start per
        task, longest path from each unit's start to the end, its own duration included); None when `order`
        contradicts the edges (a cycle).  Memory needs no check: on each device the activations in flight follow
        from its compute stream's order alone (an F allocates at its start, its B and W free at their ends, all on
        that stream), so any timing of an order that fit the caps fits them."""
        n = len(self.rep)
        nxt: dict[int, int] = {}
        indeg = [0] * n
        for on in order.values():
            for a, b in zip(on, on[1:]):
                nxt[a] = b
                indeg[b] += 1
        for r in self.reps:
            indeg[r] += len(self.pred[r])
        ready = [r for r in self.reps if indeg[r] == 0]
        start = [0] * n
        topo: list[int] = []
        while ready:
            r = ready.pop()
            topo.append(r)
            end = start[r] + self.dur[r]
            outs = [*self.succ[r], *(((nxt[r], 0),) if r in nxt else ())]
            for v, d in outs:
                start[v] = max(start[v], end + d)
                indeg[v] -= 1
                if indeg[v] == 0:
                    ready.append(v)
        if len(topo) != len(self.reps):
            return None
        tail = [0] * n
        for r in reversed(topo):
            outs = [*self.succ[r], *(((nxt[r], 0),) if r in nxt else ())]
            tail[r] = self.dur[r] + max((d + tail[v] for v, d in outs), default=0)
        for t in range(n):
            start[t] = start[self.rep[t]]
        return start, tail

    def times(self, start: Sequence[int]) -> PipelineTimes:
        return PipelineTimes(tuple(start), self.pairs)


@dataclass
class _Step:
    """One step's compact model over the middle units (module docstring, "One step")."""

    region: dict[int, str]  # unit -> "p" (prefix: fixed), "m" (middle: in the model) or "s" (suffix: replayed)
    start: dict[int, Var]
    makespan: Var


def _step_model(units: Units, builder: ModelBuilder, start: Sequence[int], tail: Sequence[int],
                order: Mapping[int, Sequence[int]], free: frozenset[int], fifo_inside: bool,
                fix_untouched: bool = False) -> _Step | None:
    """The compact model of one step (module docstring), or None when the incumbent's order does not split into
    prefix, middle and suffix on some stream (zero-length units at the boundary: the step is skipped).  With
    `fix_untouched`, the middle of every stream that holds no unit of `free` is fixed at the incumbent's times
    (region "f": releases and deadlines for the modelled units, no variables)."""
    setup, dur = units.setup, units.dur
    first = min(start[r] for r in free)
    last = max(start[r] + dur[r] for r in free)
    region: dict[int, str] = {}
    for on in order.values():
        i, j = 0, len(on)
        while i < j and on[i] not in free and start[on[i]] + dur[on[i]] <= first:
            i += 1
        while j > i and on[j - 1] not in free and start[on[j - 1]] >= last:
            j -= 1
        region.update({r: "p" for r in on[:i]})
        inner = "f" if fix_untouched and not any(r in free for r in on) else "m"
        region.update({r: inner for r in on[i:j]})
        region.update({r: "s" for r in on[j:]})
    middle = [r for r in units.reps if region[r] == "m"]
    horizon = max(start[r] + tail[r] for r in units.reps)
    floor: dict[int, int] = {}  # unit -> end of the last prefix unit on its stream: no middle unit starts before it
    for on in order.values():
        pre = [r for r in on if region[r] == "p"]
        floor.update((r, start[pre[-1]] + dur[pre[-1]] if pre else 0) for r in on)
    svar = {r: builder.int_var(floor[r], horizon - dur[r], f"S_{r}") for r in middle}
    c = builder.int_var(0, horizon, "C")

    def end(r: int) -> LinExpr:
        return svar[r] + dur[r]

    const_c = 0
    for r in units.reps:
        outs = list(units.succ[r])
        if region[r] == "s":
            if any(region[v] != "s" for v, _ in outs):
                return None  # a suffix unit feeding the middle: only at zero-length boundaries
            continue
        if region[r] in ("p", "f"):  # fixed at the incumbent's times (a fixed unit's modelled predecessors
            # get their deadline in the middle branch below)
            for v, d in outs:
                if region[v] == "s":
                    const_c = max(const_c, start[r] + dur[r] + d + tail[v])
                elif region[v] == "m":
                    builder.add(svar[v] >= start[r] + dur[r] + d, cname("release", u=r, v=v))
            if not outs:
                const_c = max(const_c, start[r] + dur[r])
            continue
        for v, d in outs:
            if region[v] == "m":
                builder.add(svar[v] >= end(r) + d, cname("prec", u=r, v=v))
            elif region[v] == "s":
                builder.add(c >= end(r) + d + tail[v], cname("tail", u=r, v=v))
            else:
                builder.add(end(r) + d <= start[v], cname("deadline", u=r, v=v))
        if not outs:
            builder.add(c >= end(r), cname("sink", u=r))
    for d, on in order.items():
        pre = [r for r in on if region[r] == "p"]
        mid = [r for r in on if region[r] == "m"]
        suf = [r for r in on if region[r] == "s"]
        kept = [r for r in mid if r not in free]
        fixed = [r for r in on if region[r] == "f"]
        for r in mid:
            if suf:
                builder.add(c >= end(r) + tail[suf[0]], cname("before", u=r))
        if pre and suf and not mid and not fixed:  # the stream's prefix runs straight into its suffix
            const_c = max(const_c, start[pre[-1]] + dur[pre[-1]] + tail[suf[0]])
        if fixed and suf:
            const_c = max(const_c, start[fixed[-1]] + dur[fixed[-1]] + tail[suf[0]])
        for a, b in zip(kept, kept[1:]):
            builder.add(svar[b] >= end(a), cname("keep", u=a, v=b))
        builder.no_overlap([interval(svar[r], dur[r], end(r), None, f"iv_{r}") for r in mid], cname("stream", d=d))
    builder.add(c >= const_c, "rest")
    _memory_rows(units, builder, start, region, svar, horizon)
    if setup.fifo:
        for a, b, name in units.fifo_links:
            if region[a] != "m" or region[b] != "m" or (not fifo_inside and (a in free or b in free)):
                continue
            builder.add(svar[b] >= end(a), name)
    weight = len(free) * horizon + 1  # one makespan tick outweighs every secondary tick
    builder.minimize(c * weight + sum((end(r) for r in sorted(free)), as_expr(0)))
    for r in middle:
        builder.hint(svar[r], start[r])
    builder.hint(c, max(const_c, max((start[r] + tail[r] for r in middle), default=0)))
    return _Step(region, svar, c)


def solve_step(units: Units, backend: str, order: Mapping[int, Sequence[int]], start: Sequence[int],
               tail: Sequence[int], free: frozenset[int], *, time_limit_s: float, threads: int, seed: int,
               deterministic: bool, fifo_inside: bool = True, fix_untouched: bool = False,
               ) -> tuple[bool, tuple[dict[int, list[int]], tuple[list[int], list[int]]] | None]:
    """One step (module docstring, "One step") on the units `free` of the order `order` (timed as `start`, with
    `tail`): whether its model was proven optimal, and every stream's new order (prefix and fixed units as they
    were, the middle by the solved starts, the suffix as it was) with its replay, or None when the step was
    skipped, found no solution or its order does not replay.  The caller decides whether to keep it."""
    builder = get_backend(backend).new_builder()
    step = _step_model(units, builder, start, tail, order, free, fifo_inside, fix_untouched)
    if step is None:
        return False, None
    # a relative gap below 1 / (2 H) is under half a makespan tick's weight: the step stops once its makespan is
    # proven optimal, without proving the secondary term to the last tick
    horizon = max(start[r] + tail[r] for r in units.reps)
    result = builder.solve(SolveParams(time_limit_s=time_limit_s, rel_gap=0.5 / max(1, horizon), threads=threads,
                                       seed=seed, deterministic=deterministic))
    proven = result.status is SolveStatus.OPTIMAL
    if not result.has_solution:
        return proven, None
    moved = {r: result.int_value(v) for r, v in step.start.items()}
    new_order = {d: [r for r in on if step.region[r] in ("p", "f")]
                 + sorted((r for r in on if step.region[r] == "m"),
                          key=lambda r: (moved[r], moved[r] + units.dur[r], r))
                 + [r for r in on if step.region[r] == "s"] for d, on in order.items()}
    again = units.replay(new_order)
    return proven, None if again is None else (new_order, again)


def _memory_rows(units: Units, builder: ModelBuilder, start: Sequence[int], region: Mapping[int, str],
                 svar: Mapping[int, Var], horizon: int) -> None:
    """Family 3 over the middle: an activation allocated before it holds from its (fixed) start, one freed after
    it holds to the horizon, one held across it lowers the capacity; one wholly before or after it is not there."""
    for d, (room, held_for) in enumerate(units.activations):
        if any(region[r] == "f" for r in units.on_stream.get(d, ())):
            continue  # the device's compute stream is fixed (its activations all live there): memory as before
        held, ivs, dem = 0, [], []
        for f, until, demand, name in held_for:
            if region[f] == "s" or region[until] == "p":
                continue
            if region[f] == "p" and region[until] == "s":
                held += demand
                continue
            lo = svar[f] if region[f] == "m" else as_expr(start[f])
            hi = svar[until] + units.dur[until] if region[until] == "m" else as_expr(horizon)
            ivs.append(interval(lo, hi - lo, hi, None, name))
            dem.append(demand)
        if ivs:
            builder.cumulative(ivs, dem, room - held, cname("memory", d=d))


def in_order(setup: PipelineSetup, times: PipelineTimes) -> bool:
    """Whether `times` runs every stage's F's, B's and W's in micro-batch order (family 5 holds)."""
    ends, task, pl = setup.ends(times), setup.tasks.task, setup.pipeline
    return all(times.start[task(s, kind, k + 1)] >= ends[task(s, kind, k)]
               for s in range(pl.num_stages) for kind in (ActionKind.F, ActionKind.B, ActionKind.W)
               for k in range(pl.num_microbatches - 1))


def renamed_in_order(setup: PipelineSetup, times: PipelineTimes) -> PipelineTimes:
    """`times` with its micro-batches renamed so that every task's copies start in micro-batch order (`in_order`
    holds): micro-batch k of a task (F, B, W of a stage, a send, an all-to-all) gets the k-th smallest start among
    that task's copies.  The same schedule under other names, for a pipeline without candidate pairs
    (`formulations.pipeline`, family 5: why it is still a schedule, with the same makespan and memory); with pairs
    (a pair joins two micro-batches) `times` comes back unchanged."""
    if setup.pairs:
        return times
    copies: dict[Action | AllToAll, list[tuple[int, int]]] = {}  # task of micro-batch 0 -> (micro-batch, task)
    for t, action in enumerate(setup.tasks.actions):
        assert not isinstance(action, OverlapAction), "the split instance has no pairs"
        copies.setdefault(dataclasses.replace(action, microbatch=0), []).append((action.microbatch, t))
    start = list(times.start)
    for listed in copies.values():
        ticks = sorted(times.start[t] for _, t in listed)
        for (_, t), tick in zip(sorted(listed), ticks, strict=True):
            start[t] = tick
    return PipelineTimes(tuple(start), times.pairs)


def _nearest(pool: Sequence[int], start: Sequence[int], tick: int, size: int) -> set[int]:
    return set(sorted(pool, key=lambda t: (abs(start[t] - tick), t))[:size])


def critical_chain(setup: PipelineSetup, times: PipelineTimes) -> list[int]:
    """Tasks of `times` from a first one to the last end, each starting when the one before it ends (plus the
    edge's delay): a predecessor in the graph or the task before it on its stream."""
    inst, dev, start = setup.tasks.instance, setup.device, times.start
    ends = setup.ends(times)
    prev: dict[int, int] = {}
    by_stream: dict[int, list[tuple[int, int, int]]] = {}
    for t in range(inst.num_tasks):
        by_stream.setdefault(dev[t], []).append((start[t], ends[t], t))
    for on in by_stream.values():
        on.sort()
        prev.update((b[2], a[2]) for a, b in zip(on, on[1:]))
    t = max(range(inst.num_tasks), key=lambda x: (ends[x], -x))
    chain, seen = [t], {t}
    while True:
        tight = [u for u, e in inst.predecessors[t] if ends[u] + inst.comm(e, dev[u], dev[t]) == start[t]]
        if t in prev and ends[prev[t]] == start[t]:
            tight.append(prev[t])
        nxt = next((u for u in sorted(tight) if u not in seen), None)
        if nxt is None:
            return chain[::-1]
        t = nxt
        chain.append(t)
        seen.add(t)


def neighbourhood(kind: str, setup: PipelineSetup, times: PipelineTimes, size: int,
                  rng: random.Random) -> frozenset[int]:
    """About `size` tasks of kind `kind` (module docstring), closed under `times`' chosen pairs."""
    start = times.start
    n = len(start)
    span = max(setup.ends(times), default=1)
    p = setup.pipeline.num_devices
    if kind == "window":
        free = _nearest(range(n), start, rng.randrange(span), size)
    elif kind == "microbatches":
        nmb = setup.pipeline.num_microbatches
        first = rng.randrange(nmb)
        acts = setup.tasks.actions
        pool = [t for t in range(n) if (acts[t].microbatch - first) % nmb < MICROBATCHES]  # type: ignore[union-attr]
        free = _nearest(pool, start, start[rng.choice(pool)], size)
    elif kind == "devices":
        d = rng.randrange(p)
        pair = {d, (d + 1) % p}
        free = _nearest([t for t in range(n) if setup.device[t] % p in pair], start, rng.randrange(span), size)
    elif kind == "critical":
        chain = critical_chain(setup, times)
        length = max(1, min(len(chain), size // 4))
        at = rng.randrange(max(1, len(chain) - length + 1))
        stretch = chain[at:at + length]
        streams = {setup.device[t] for t in stretch}
        middle = start[stretch[len(stretch) // 2]]
        free = set(stretch) | _nearest([t for t in range(n) if setup.device[t] in streams], start, middle,
                                       max(0, size - len(stretch)))
    elif kind in ENDS_KINDS:
        ranked = sorted(range(n), key=lambda t: (start[t], t))
        count = max(size, math.ceil(ENDS_SHARE * n))
        free = set(ranked[:count] if kind == "head" else ranked[-count:])
    else:
        raise ValueError(f"unknown neighbourhood kind {kind!r} (one of {KINDS + ENDS_KINDS})")
    for i in times.pairs:  # a chosen pair is freed whole or kept whole
        q = setup.pairs[i]
        if any(t in free for t in q.tasks):
            free.update(q.tasks)
    return frozenset(free)


def improve_pipeline(setup: PipelineSetup, incumbent: PipelineTimes, *, time_limit_s: float,
                     bound_tick: int = 0, backend: str = "cpsat", step_s: float = STEP_S, fifo_inside: bool = True,
                     threads: int = 8, seed: int = 0, progress: Callable[[LnsStep], None] | None = None,
                     kinds: Sequence[str] = KINDS, max_steps: int | None = None,
                     stall_steps: int | None = None, fix_untouched: bool = False,
                     deterministic: bool = True) -> LnsResult:
    """Run the search (module docstring) from `incumbent`, a valid schedule of `setup`, for `time_limit_s` (or
    `max_steps` steps, or until `stall_steps` steps in a row gained nothing), or until its makespan meets
    `bound_tick`.  Never returns a longer schedule than `incumbent`; `progress` is called after every step."""
    t0 = time.monotonic()
    get_backend(backend)  # an unknown name fails here, before any step
    rng = random.Random(seed)
    start_tick = setup.makespan_tick(incumbent)
    units = Units(setup, incumbent.pairs)
    order = units.order(incumbent.start)
    timed = units.replay(order)
    if timed is None:  # zero-length ties ordered against an edge: nothing to search from
        return LnsResult(incumbent, start_tick, start_tick, (), in_order(setup, incumbent), 0.0, start_tick)
    start, tail = timed
    best = units.times(start)
    best_tick = replayed = min(start_tick, setup.makespan_tick(best))  # the replay is never longer
    to_best = 0.0
    size = min(len(units.reps), INITIAL_SIZE)
    weight = {k: 1.0 for k in kinds}
    steps: list[LnsStep] = []
    since_gain = 0
    while best_tick > bound_tick and (max_steps is None or len(steps) < max_steps) and \
            (stall_steps is None or since_gain < stall_steps):
        left = time_limit_s - (time.monotonic() - t0)
        if left < MIN_STEP_S:
            break
        kind = rng.choices(list(kinds), weights=[weight[k] for k in kinds])[0]
        free = frozenset(units.rep[t] for t in neighbourhood(kind, setup, best, max(MIN_SIZE, size), rng))
        after = best_tick
        proven, stepped = solve_step(units, backend, order, start, tail, free, time_limit_s=min(left, step_s),
                                     threads=threads, seed=seed + len(steps), deterministic=deterministic,
                                     fifo_inside=fifo_inside, fix_untouched=fix_untouched)
        if stepped is not None and setup.makespan_tick(units.times(stepped[1][0])) <= best_tick:
            order, (start, tail) = stepped
            best = units.times(start)
            after = setup.makespan_tick(best)
        record = LnsStep(len(steps), kind, len(free), best_tick, after, time.monotonic() - t0, proven)
        steps.append(record)
        since_gain = 0 if record.gained else since_gain + 1
        if record.gained:
            to_best = record.wall_s
            weight[kind] += 1.0
        else:
            weight[kind] = max(0.05, weight[kind] * DECAY)
        best_tick = after
        if proven:
            size = min(len(units.reps), math.ceil(size * GROW))
        elif not record.gained:
            size = max(MIN_SIZE, int(size * SHRINK))
        if progress is not None:
            progress(record)
    return LnsResult(best, start_tick, best_tick, tuple(steps), in_order(setup, best), to_best, replayed)


def improve_folded(setup: PipelineSetup, fold: Fold, incumbent: PipelineTimes,
                   search: Callable[[PipelineSetup, PipelineTimes], LnsResult]) -> LnsResult | None:
    """`search` (`improve_pipeline` with its limits bound) on the mirror half of `setup`'s pipeline
    (`planner.pipeline.mirror`: `fold` is its `Fold` under `setup.cap`), from `incumbent` folded, with the best
    schedule unfolded: a schedule of `setup` within its caps (the fold is exact), symmetric, never longer than
    `incumbent`.  None when `incumbent` is not symmetric (it has no half to start from)."""
    names = setup.tasks.instance.task_names
    folded = fold.fold_times(dict(zip(names, incumbent.start, strict=True)))
    if folded is None:
        return None
    half = prepare_pipeline(fold.half, fold.half_caps(setup.cap), warm_start=folded, fifo=setup.fifo,
                            pair_window=None, constructive=False)
    if half.known is None:  # the half's caps refused the folded schedule: cannot happen for an exact fold
        return None
    found = search(half, half.known)
    unfolded = fold.unfold_times(dict(zip(half.tasks.instance.task_names, found.times.start, strict=True)))
    times = PipelineTimes(tuple(unfolded[n] for n in names))
    return dataclasses.replace(found, times=times, best_tick=setup.makespan_tick(times),
                               in_order=in_order(setup, times), folded=True)


def replayed_tick(setup: PipelineSetup, times: PipelineTimes) -> int | None:
    """The makespan of `times`' stream orders replayed (`Units.replay`: every task as early as its predecessors and
    its stream's order allow), where the search starts; None when the order has a cycle of zero-length ties."""
    units = Units(setup, times.pairs)
    timed = units.replay(units.order(times.start))
    return None if timed is None else setup.makespan_tick(units.times(timed[0]))


def periodic_start(setup: PipelineSetup, mirror: Fold, times: PipelineTimes, *, time_limit_s: float, threads: int,
                   seed: int, progress: Callable[[int, int, int], None] | None = None,
                   ) -> tuple[PipelineTimes, tuple[int, int] | None]:
    """`times`, or the periodic schedule of the mirror half (`formulations.pipeline_periodic`, at each of
    `PERIODIC_MARGINS` above its period bound, `time_limit_s` shared among them) unfolded, whichever replays shorter;
    with (period, replayed makespan) when the periodic one wins.  Symmetric, within the caps (checked).  `progress`
    gets (the best replayed makespan before, the period, its replayed makespan) after each periodic schedule found."""
    half, half_caps = mirror.half, mirror.half_caps(setup.cap)
    names = setup.tasks.instance.task_names
    best, best_tick, chosen = times, replayed_tick(setup, times), None
    lower = period_lower_bound_tick(half)
    for margin in PERIODIC_MARGINS:
        found = solve_periodic(half, half_caps, math.ceil(lower * (1.0 + margin)),
                               time_limit_s=time_limit_s / len(PERIODIC_MARGINS), threads=threads, seed=seed)
        if found is None:
            continue
        unfolded = mirror.unfold_times(found.unrolled(half))
        candidate = PipelineTimes(tuple(unfolded[n] for n in names))
        if setup.over_cap(candidate) is not None:  # the model's memory count is an upper bound: cannot happen
            continue
        tick = replayed_tick(setup, candidate)
        if tick is not None and progress is not None and best_tick is not None:
            progress(best_tick, found.period_tick, tick)
        if tick is not None and (best_tick is None or tick < best_tick):
            best, best_tick, chosen = candidate, tick, (found.period_tick, tick)
    return best, chosen


def _two_phases(search: Callable[..., LnsResult], time_limit_s: float, step_s: float, threads: int,
                progress: Callable[[LnsStep], None] | None) -> Callable[[PipelineSetup, PipelineTimes], LnsResult]:
    """The search on a mirror half (for `improve_folded`), in two phases and the ends: `HALF_FIRST_SHARE` of
    the time in `HALF_STEP_S` steps on at most `HALF_THREADS` workers, the rest in steps of `HALF_STEP_SHARE` x
    `step_s` on `threads` (constants' comment), split evenly into `ENDS_ROUNDS` parts, each followed by one step on
    each end of the schedule (``head``, then ``tail``: `ENDS_KINDS`, each within `ENDS_STEP_S` and `ENDS_TIME_SHARE`
    of `time_limit_s`, kept back from the phases; with `HALF_ENDS`), then more of the second phase's steps in
    whatever time the ends left.  No phase has a stall limit: the full model it would hand the time back to is the
    whole pipeline, too large to gain anything in that time (`FULL_SOLVE_MAX_TASKS`), and with short steps a streak
    of gainless steps is likely while the search still gains.  One `LnsResult` for all: its steps numbered and
    timed from the first phase's start, as `progress` sees them."""

    def run(half: PipelineSetup, incumbent: PipelineTimes) -> LnsResult:
        t0 = time.monotonic()
        parts: list[LnsResult] = []
        ends_s = min(ENDS_STEP_S, ENDS_TIME_SHARE * time_limit_s) if HALF_ENDS else 0.0
        rounds = ENDS_ROUNDS if HALF_ENDS else 0
        kept_s = ends_s * len(ENDS_KINDS) * rounds
        second = {"step_s": step_s * HALF_STEP_SHARE,
                  "threads": threads if HALF_SECOND_THREADS is None else min(threads, HALF_SECOND_THREADS)}

        def left_s(keep_s: float = 0.0) -> float:
            return max(0.0, time_limit_s - keep_s - (time.monotonic() - t0))

        def part(**limits) -> None:
            offset_s, offset_steps = time.monotonic() - t0, sum(len(r.steps) for r in parts)

            def shifted(s: LnsStep) -> LnsStep:
                return dataclasses.replace(s, step=s.step + offset_steps, wall_s=s.wall_s + offset_s)

            found = search(half, parts[-1].times if parts else incumbent, stall_steps=None,
                           deterministic=HALF_DETERMINISTIC,
                           progress=None if progress is None else (lambda s: progress(shifted(s))), **limits)
            parts.append(dataclasses.replace(found, steps=tuple(shifted(s) for s in found.steps),
                                             time_to_best_s=offset_s + found.time_to_best_s))

        part(time_limit_s=(time_limit_s - kept_s) * HALF_FIRST_SHARE, step_s=min(step_s, HALF_STEP_S),
             threads=min(threads, HALF_THREADS))
        for r in range(rounds):
            still_kept_s = ends_s * len(ENDS_KINDS) * (rounds - r)
            part(time_limit_s=left_s(still_kept_s) / (rounds - r), **second)
            for kind in ENDS_KINDS:
                part(time_limit_s=min(ends_s, left_s(still_kept_s - ends_s * (1 + ENDS_KINDS.index(kind)))),
                     step_s=ends_s, threads=threads, kinds=(kind,), max_steps=1)
        part(time_limit_s=left_s(), **second)
        to_best = next((r.time_to_best_s for r in parts if r.gains and r.best_tick == parts[-1].best_tick), 0.0)
        return dataclasses.replace(parts[-1], start_tick=parts[0].start_tick, replayed_tick=parts[0].replayed_tick,
                                   steps=tuple(s for r in parts for s in r.steps), time_to_best_s=to_best)

    return run


def solve_pipeline_lns(
    pipeline: TrainingPipeline,
    memory_cap_bytes: int | Sequence[int] | None = None,
    *,
    warm_start: dict[str, int] | None = None,
    time_limit_s: float = 60.0,
    lns_share: float = 0.5,
    backend: str = "cpsat",
    fifo: bool = True,
    fifo_inside: bool = True,
    fix_untouched: bool = False,
    threads: int = 8,
    seed: int = 0,
    pair_window: int | None = 2,
    step_s: float = STEP_S,
    progress: Callable[[LnsStep], None] | None = None,
    full_progress: ProgressCallback | None = None,
) -> tuple[PipelineSolution, LnsResult | None]:
    """`formulations.pipeline.solve_pipeline` (same arguments), then the search on its schedule: the full solve gets (1
    - `lns_share`) of `time_limit_s`, the search the rest (none when the full solve proved its schedule optimal, or
    `lns_share` is 0); above `FULL_SOLVE_MAX_TASKS` tasks with a warm start, the search starts at once from it with
    all the time, and the bound is the setup's trivial bound (and a pipeline that is its own mirror image is searched
    on its half, `improve_folded`, in `HALF_STEP_S` steps). Below that size, a search that stalls (`STALL_STEPS`
    steps in a row without a gain: small pipelines, where the full model was close) hands the time left back to the
    full model, solved again warm-started from the search's schedule, so that the split costs no proof the full
    budget would have given (the unit pipeline with pairs and all-to-alls at p = 4: optimal in the full 60 s, not in
    30 s); a schedule the search left out of micro-batch order is first renamed into order (`renamed_in_order`), and
    the second solve is skipped only where that cannot be done (pairs). The bound is the larger of the full
    solves' (module docstring, "The bound"; the trivial bound when no full solve ran); the `LnsResult` (None when
    the search did not run) says what the search and the second solve gained.  `progress` gets every step of the
    search, `full_progress` the full solves' solver progress (incumbent and bound in ticks, as they improve)."""
    t0 = time.monotonic()
    setup = prepare_pipeline(pipeline, memory_cap_bytes, warm_start=warm_start, fifo=fifo, pair_window=pair_window)

    def solve_full(limit_s: float, known: PipelineTimes | None, bound_tick: int, run_seed: int, started_s: float):
        return solve_formulation(setup.formulation(), backend=get_backend(backend), time_limit_s=limit_s,
                                 threads=threads, seed=run_seed, known=known, lower_bound_tick=bound_tick,
                                 started_s=started_s, progress=full_progress)

    skip_full = lns_share > 0 and setup.known is not None and setup.tasks.instance.num_tasks > FULL_SOLVE_MAX_TASKS
    if skip_full:
        assert setup.known is not None
        be = get_backend(backend)
        times, bound, to_best, lns = setup.known, setup.trivial_tick, 0.0, None
        solver, solver_version, optimal = be.name, be.version, False
    else:
        full = solve_full(time_limit_s * (1.0 - lns_share), setup.known, setup.trivial_tick, seed, t0)
        times, bound, to_best, lns = full.solution, full.lower_bound_tick, full.time_to_best_s, None
        solver, solver_version = full.solver, full.solver_version
        optimal = full.status is PlanStatus.OPTIMAL
    left = time_limit_s - (time.monotonic() - t0)
    if lns_share > 0 and not optimal and left >= MIN_STEP_S:
        # a pipeline too large for the full model that is its own mirror image is searched on its half (half the
        # tasks: the neighbourhoods cover the schedule twice as often); the symmetric schedules are a subset, so
        # only where no full solve would prove anything anyway
        mirror = fold(pipeline, setup.cap) if skip_full else None
        periodic = None
        if mirror is not None and PERIODIC_SHARE > 0 and mirror.fold_times(dict(zip(
                setup.tasks.instance.task_names, times.start, strict=True))) is not None:
            def periodic_progress(before: int, period: int, after: int) -> None:
                # a step of its own kind, before the search's first (step 0), timed from this call's start
                if progress is not None:
                    progress(LnsStep(0, "periodic", 0, before, after, time.monotonic() - t0, False, period))

            times, periodic = periodic_start(setup, mirror, times, time_limit_s=PERIODIC_SHARE * left,
                                             threads=threads, seed=seed, progress=periodic_progress)
            if periodic is not None:
                to_best = time.monotonic() - t0
            left = time_limit_s - (time.monotonic() - t0)
        began = time.monotonic() - t0
        search = functools.partial(improve_pipeline, time_limit_s=left, bound_tick=bound, backend=backend,
                                   step_s=step_s, fifo_inside=fifo_inside, threads=threads, seed=seed,
                                   progress=progress, stall_steps=STALL_STEPS, fix_untouched=fix_untouched)
        lns = None
        if mirror is not None:
            lns = improve_folded(setup, mirror, times, _two_phases(search, left, step_s, threads, progress))
        if lns is None:
            lns = search(setup, times)
        if skip_full:
            lns = dataclasses.replace(lns, after_full_solve=False, periodic=periodic)
        if lns.best_tick < setup.makespan_tick(times):
            to_best = began + lns.time_to_best_s
        times = lns.times
        if fifo and not lns.in_order and not setup.pairs:
            # the same schedule with micro-batches renamed: in order, so the full solve's bound holds for it and the
            # second solve below can start from it (family 5 loses no schedule without pairs)
            times = renamed_in_order(setup, times)
            lns = dataclasses.replace(lns, times=times, in_order=True)
        if fifo and not lns.in_order:
            bound = setup.trivial_tick  # with pairs, the full solve's bound holds for in-order schedules only
        left = time_limit_s - (time.monotonic() - t0)
        if left >= MIN_RESOLVE_S and lns.best_tick > bound and (lns.in_order or not fifo):
            again_t0 = time.monotonic()
            again = solve_full(left, times, bound, seed + 1, again_t0)
            if setup.makespan_tick(again.solution) < setup.makespan_tick(times):
                times, to_best = again.solution, again_t0 - t0 + again.time_to_best_s
            bound = max(bound, again.lower_bound_tick)
            lns = dataclasses.replace(lns, times=times, resolve=(time.monotonic() - again_t0,
                                                                 setup.makespan_tick(times)))
    value = setup.makespan_tick(times)
    bound = min(bound, value)
    status = PlanStatus.OPTIMAL if bound >= value else PlanStatus.FEASIBLE
    sol = finish_pipeline(setup, times, bound, status, solver=solver, solver_version=solver_version,
                          started_s=t0, time_to_best_s=to_best)
    return sol, lns

