"""A pipeline schedule as an order of units per stream, and its replay; micro-batch order.

The large-neighbourhood search (`planner.search.pipeline`) keeps the incumbent's chosen pairs (each one unit, named
by its forward; the full solve chooses pairs) and works on the order of the units on every stream (`Units`).  An
order is timed by replaying it (`Units.replay`: every unit as early as its predecessors, with their delays, and the
unit before it on its stream allow), which also gives each unit's tail (longest path from its start to the end).
Memory follows from the order alone: on a device, the activations in flight at any moment are those whose F has
started and whose B or W has not ended, all on that device's compute stream, so every timing of an order has the
same peak memory.

Micro-batch order (`in_order`, `renamed_in_order`): without candidate pairs, family 5 of `formulations.pipeline`
loses no schedule, because a schedule out of micro-batch order is the same schedule as one in order under other
micro-batch names; the search renames what it leaves out of order so that the full solve's bound holds for it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence

from formulations.model_api import cname
from formulations.pipeline import PipelineSetup, PipelineTimes
from planner.pipeline.unroll import AllToAll
from planner.schedule.actions import Action, ActionKind, OverlapAction


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

