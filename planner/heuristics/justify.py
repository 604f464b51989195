"""Forward-backward improvement (double justification) of a plan, with the assignment search's decoder.

Classic in project scheduling (Valls, Ballestin and Quintanilla 2005, "justification"): a plan's idle time in the
middle of the schedule often comes from tasks placed as early as possible that block a device for a task that
matters more.  Shifting every task as far right as it goes, then as far left again, in the order the right-shifted
plan gives, packs the tasks into the gaps the first order left.

    backward: the *reversed* graph (the same tasks, devices and transfer delays, every edge reversed) decoded by
              `Decoder` with the plan's devices, tasks taken latest end first (priority = end tick): each task as
              late as its successors allow (in the mirrored time), with insertion into the mirrored gaps.  R: the
              right-justified plan, read back in forward time (start = R's makespan - mirrored end).
    forward:  the graph decoded with R's devices, tasks taken in R's start order: each task as early as its
              inputs allow, with insertion.

Each pass decodes a plan in its own order on its own devices, so (the assignment search's induction, run once in
mirrored time) neither pass is longer than the plan it starts from: where memory does not bind, `justify` never
returns a longer plan (where it binds, the tracker may delay a task, so the caller compares).
`reassign=True` lets every task of the backward pass choose its device again (earliest finish in mirrored time);
that gives up the guarantee, so the caller compares.  Memory: the backward pass ignores it (it only yields an
order); the forward pass is the decoder's, which follows `list_schedule`'s tracker where memory can bind, so a
returned plan respects memory, and an order the tracker finds no slot for returns None.

Deterministic (no randomness); cost: two decodes.

Why the planner does not run it as a phase: on plans the iterated list scheduler and the assignment search have
already improved, a pass finds little or nothing, and with `reassign` it makes them longer.  The mirror as a search
space of its own pays instead (`planner.heuristics.bidirectional`), whose plans come back to the graph by the
forward pass alone (`forward_of_mirrored`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from planner.cost.instance import UNBOUNDED_BYTES, SchedulingInstance
from planner.heuristics.assignment_search import Decoded, Decoder
from planner.heuristics.list_schedule import heuristic_plan
from planner.schedule.plan import Plan

__all__ = ["Justifier", "mirrored", "mirrored_plan"]


def mirrored(instance: SchedulingInstance) -> SchedulingInstance:
    """The instance with every edge reversed (and each link used the other way round, so an edge's delay between
    two devices is the same as in `instance`), without memory limits: a plan of it read backwards in time is a
    plan of `instance` (memory aside)."""
    return dataclasses.replace(
        instance, name=f"{instance.name} (mirrored)", edges=tuple((b, a) for a, b in instance.edges),
        link_class=np.ascontiguousarray(instance.link_class.T),
        capacity_bytes=np.full(instance.num_devices, UNBOUNDED_BYTES, dtype=np.int64))


def mirrored_plan(mirror: SchedulingInstance, plan: Plan) -> Plan:
    """`plan` read backwards in time, as a plan of `mirror` (the mirrored instance, `mirrored`): a task that ends
    at e in `plan` starts at makespan - e, on the same device."""
    m = plan.makespan_tick
    by = plan.by_task()
    places = [by[name] for name in mirror.task_names]
    return heuristic_plan(mirror, [int(p.device) for p in places], [m - p.end_tick for p in places],
                          [m - p.start_tick for p in places], str(plan.method), plan.solve_time_s)


def _own_order(start: list[int], end: list[int], makespan_tick: int) -> np.ndarray:
    """Priority = a plan's start order (earlier first; among equal starts the earlier end first), the assignment
    search's `start_order_priority`."""
    s = np.asarray(start, dtype=np.float64)
    e = np.asarray(end, dtype=np.float64)
    return -s - e / (2.0 * (makespan_tick + 1))


class Justifier:
    """`justify(state)`: the forward-backward pass of the module docstring for one instance (both decoders built
    once).  `decoder`: the forward one (memory as configured there)."""

    def __init__(self, decoder: Decoder, mirror: SchedulingInstance | None = None) -> None:
        self.decoder = decoder
        self.backward = Decoder(mirror if mirror is not None else mirrored(decoder.instance), respect_memory=False,
                                max_gap_scan=decoder.max_gap_scan)

    def right_justified(self, state: Decoded, *, reassign: bool = False) -> Decoded:
        """The backward pass: the plan in mirrored time (start/end ticks of the mirrored plan)."""
        m = state.makespan_tick
        mirrored_start = [m - e for e in state.end]
        mirrored_end = [m - s for s in state.start]
        dev = [-1] * len(state.dev) if reassign else list(state.dev)
        back = self.backward.decode(dev, _own_order(mirrored_start, mirrored_end, m))
        assert back is not None  # the mirrored instance has no memory limits, so every state decodes
        return back

    def forward_of_mirrored(self, back: Decoded) -> Decoded | None:
        """A plan of the mirror (ticks in mirrored time) as a plan of the instance: read backwards, decoded in its
        own start order on its own devices (the forward pass; no longer than `back`), or None when the forward
        decode finds no slot in memory."""
        m = back.makespan_tick
        forward_start = [m - e for e in back.end]
        forward_end = [m - s for s in back.start]
        return self.decoder.decode(list(back.dev), _own_order(forward_start, forward_end, m))

    def justify(self, state: Decoded, *, reassign: bool = False) -> Decoded | None:
        """Backward, then forward (module docstring); None when the forward decode finds no slot in memory."""
        return self.forward_of_mirrored(self.right_justified(state, reassign=reassign))
