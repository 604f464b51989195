"""Memory for heuristics: lower bounds on the capacity any plan needs, and the conservative tracker of list scheduling.

Memory semantics are those of `SchedulingInstance` (made precise in `planner/schedule/memory.py`): parameters held
all step; a task's output held on its device from its start until its last local consumer ends or its last
outgoing transfer arrives; one received copy per consuming device, from the first arrival until the last consumer
there ends; working memory while the task runs.

**What one task needs alone.**  While task t runs, its device holds at least

    alone[t] = param[t] + peak_internal[t] + activation[t] + sum over predecessors p of activation[p]

(its own output is live from its start; each input is live on t's device, either as the producer's own buffer or as
a received copy, until t ends).  This is a lower bound on the capacity of whatever device runs t.

**Smallest feasible capacity** (one capacity C for every device, `capacity_lower_bound`): no plan exists when

1. C < max over tasks of alone[t] (taken as param[t] alone for a task that may take zero ticks: it may occupy no
   moment, so its buffers need not be live together);
2. C < ceil(total params / devices) + min over tasks of (alone[t] - param[t]): the device holding the largest share
   of the parameters holds at least the average, and while it runs any one of its tasks it also holds that task's
   non-parameter memory (this term is used only when some parameters exist);
3. C < params of the tasks that may run only on device d (pinned there) + the smallest non-parameter need among them;
4. C < the assignment relaxation of `planner/heuristics/memory_bound.py` (proof there): each device holds its
   parameters plus, while any one of its tasks runs, that task's working set (output, inputs, internal memory); in
   a plan the devices' largest working sets m_1 >= ... >= m_D satisfy P(tasks with working set > m_(k+1)) +
   m_1 + ... + m_k <= k C for every k, and the least C admitting such a sequence is a bound.  It contains rules 1-2
   in spirit and is what binds on the real-size models (Mixtral-8x7B-like on 4x A100: 22.16 GiB, where rule 2 gives
   21.75 GiB and a plan exists at 22.161 GiB, `planner/heuristics/memory_pack.py`).

Every rule ignores time beyond "a task's own buffers are live while it runs", so each is a lower bound; the
reported bound is the largest, with the reason of the binding one.

**The tracker** (`MemoryTracker`, used by `list_schedule` when `respect_memory`): an exact check at assignment time
is impossible because consumers (and so the lifetimes of outputs) are decided later.  The tracker keeps, per device,
an *upper bound* of the memory in use at every moment, under the rule:

    an output (own buffer or received copy) is live from its allocation until +infinity while some consumer of its
    producer is still unplaced; once all consumers are placed its true end is known and it is released then.

Placing task t on device d at start s allocates param[t] for all time, working memory on [s, end), its output from
s, and the received copies of inputs not yet on d from their arrival.  Let a0 = the earliest of these allocation
times (s or an arrival).  Then at every moment >= a0 usage is at most

    B = params on d + param[t] + (outputs/copies/working memory on d still live at a0 or unbounded) + new allocations

and at every moment < a0 it is at most H[d] + param[t], where H[d] is the bound kept after the previous placements.
The task may go on d only if max(H[d] + param[t], B) <= capacity[d], and H[d] becomes that maximum.  Bounds only
ever over-estimate (an interval whose end becomes known only shrinks), so a plan built this way never exceeds
capacity in the validator's memory model.  "Live at a0" is a Fenwick-tree sum over interval ends, O(log horizon).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.heuristics.memory_bound import assignment_capacity_bound, working_set_bytes
from planner.ir.units import format_bytes


def show_bytes(n: int) -> str:
    """'1234567 bytes (1.177MiB)': the exact number (for tests and greps) and a readable one."""
    n = int(n)
    return f"{n} bytes ({format_bytes(n)})" if n >= 1024 else f"{n} bytes"


def _edge_array(instance: SchedulingInstance) -> np.ndarray:
    if not instance.edges:
        return np.zeros((0, 2), dtype=np.int64)
    return np.asarray(instance.edges, dtype=np.int64).reshape(-1, 2)


def input_activation_bytes(instance: SchedulingInstance) -> np.ndarray:
    """int64 [n_tasks]: sum of the outputs of each task's predecessors (its inputs)."""
    e = _edge_array(instance)
    out = np.zeros(instance.num_tasks, dtype=np.int64)
    if len(e):
        np.add.at(out, e[:, 1], instance.activation_bytes[e[:, 0]])
    return out


def task_alone_bytes(instance: SchedulingInstance) -> np.ndarray:
    """int64 [n_tasks]: memory a task's device holds at least while it runs (module docstring, `alone`)."""
    return (instance.param_bytes + instance.peak_internal_bytes + instance.activation_bytes
            + input_activation_bytes(instance)).astype(np.int64)


@dataclass(frozen=True, slots=True)
class CapacityBound:
    """Below `capacity_bytes` per device no plan exists; `reason` says which rule binds, in one sentence."""

    capacity_bytes: int
    reason: str


# per instance (instances are immutable; weak keys, so a cached bound never keeps an instance alive): the list
# schedulers put the bound in every memory error, and the search's heuristics may fail many times on one instance
_BOUNDS: weakref.WeakKeyDictionary[SchedulingInstance, CapacityBound] = weakref.WeakKeyDictionary()


def capacity_lower_bound(instance: SchedulingInstance) -> CapacityBound:
    """A per-device capacity below which no plan exists: the largest of the four bounds of the module docstring
    (one capacity C for every device), with the reason of the binding one in a sentence.

    Proofs: rules 1-3 in the module docstring, rule 4 (the assignment relaxation) in
    `planner/heuristics/memory_bound.py`; each is checked against exhaustive search over placements, orders and
    serial schedules on tiny instances (`tests/test_memory_bound.py`).  Cost: O(edges) plus a small dynamic
    program (devices x 48^2 steps per bisection step on bytes)."""
    cached = _BOUNDS.get(instance)
    if cached is None:
        cached = _BOUNDS[instance] = _capacity_lower_bound(instance)
    return cached


def _capacity_lower_bound(instance: SchedulingInstance) -> CapacityBound:
    n, num_dev = instance.num_tasks, instance.num_devices
    if n == 0 or num_dev == 0:
        return CapacityBound(0, "no tasks")
    params = instance.param_bytes.astype(np.int64)
    names = instance.task_names
    # non-parameter need of each task while it runs: `task_alone_bytes` less params, except 0 for a task that may
    # take zero ticks (it may occupy no moment, so it holds nothing at any moment)
    rest = working_set_bytes(instance)
    alone = params + rest

    t = int(np.argmax(alone))
    best = CapacityBound(
        int(alone[t]),
        f"task {names[t]!r} alone needs {show_bytes(alone[t])} while it runs (params {int(params[t])}"
        f" + working {int(instance.peak_internal_bytes[t])} + output {int(instance.activation_bytes[t])}"
        f" + inputs {int(rest[t] - instance.peak_internal_bytes[t] - instance.activation_bytes[t])} bytes)",
    )
    total = int(params.sum())
    if total > 0:
        share = -(-total // num_dev)
        value = share + int(rest.min())
        if value > best.capacity_bytes:
            best = CapacityBound(
                value,
                f"the parameters as placed ({show_bytes(total)} in all) need at least {show_bytes(share)} on one of"
                f" {num_dev} devices, plus {show_bytes(int(rest.min()))} for the smallest task's other memory",
            )
    eligible = instance.duration_tick < INELIGIBLE
    pinned = eligible.sum(axis=1) == 1
    if pinned.any():
        dev_of = np.argmax(eligible, axis=1)
        for d in range(num_dev):
            mask = pinned & (dev_of == d)
            if not mask.any():
                continue
            value = int(params[mask].sum()) + int(rest[mask].min())
            if value > best.capacity_bytes:
                best = CapacityBound(
                    value,
                    f"{int(mask.sum())} tasks may run only on {instance.device_names[d]} and need"
                    f" {show_bytes(value)} there (their params plus the smallest one's other memory)",
                )
    relaxed, per_device = assignment_capacity_bound(instance)
    if relaxed > best.capacity_bytes:
        shown = ", ".join(format_bytes(m) for m in per_device)
        best = CapacityBound(
            relaxed,
            f"each device holds its share of the parameters as placed ({show_bytes(total)} in all) plus, while a"
            " task runs there, that task's output, inputs and working memory; the largest of these per device are"
            f" at least [{shown}] (the largest runs somewhere, and a task cannot go to a device whose largest is"
            f" smaller), which needs {show_bytes(relaxed)} per device (assignment relaxation,"
            " planner/heuristics/memory_bound.py)",
        )
    return best


def smallest_feasible_capacity_bytes(instance: SchedulingInstance) -> int:
    """A per-device capacity below which no plan exists (a lower bound; see `capacity_lower_bound` for why)."""
    return capacity_lower_bound(instance).capacity_bytes


def largest_memory_tasks(instance: SchedulingInstance, k: int = 5) -> list[tuple[str, int]]:
    """The k tasks that need the most memory alone (`task_alone_bytes`), largest first, as (name, bytes)."""
    alone = task_alone_bytes(instance)
    k = max(0, min(int(k), len(alone)))
    if k == 0:
        return []
    top = np.argpartition(-alone, k - 1)[:k]
    idx = sorted(top.tolist(), key=lambda i: (-int(alone[i]), i))
    return [(instance.task_names[i], int(alone[i])) for i in idx]


def memory_never_binds(instance: SchedulingInstance) -> bool:
    """True when even holding every param, every output (once per device) and the largest working memory at once
    fits every device, so no placement can exceed capacity and the tracker can be skipped."""
    if instance.num_tasks == 0:
        return True
    worst = (int(instance.param_bytes.sum()) + int(instance.activation_bytes.sum())
             + int(instance.peak_internal_bytes.max()))
    return worst <= int(instance.capacity_bytes.min())


class _Fenwick:
    """Prefix sums over integer positions 0..size-1, stored sparsely in a dict (positions are ticks)."""

    __slots__ = ("size", "tree")

    def __init__(self, size: int) -> None:
        self.size = size
        self.tree: dict[int, int] = {}

    def add(self, pos: int, value: int) -> None:
        i = pos + 1
        tree, size = self.tree, self.size
        while i <= size:
            tree[i] = tree.get(i, 0) + value
            i += i & -i

    def prefix(self, pos: int) -> int:
        """Sum over positions <= pos."""
        if pos < 0:
            return 0
        i = min(pos + 1, self.size)
        tree, s = self.tree, 0
        while i > 0:
            s += tree.get(i, 0)
            i -= i & -i
        return s


@dataclass(frozen=True, slots=True)
class MemoryCheck:
    """The tracker's verdict for one (task, device, start): bound after placing, and the parts of the task's need."""

    fits: bool
    bound_bytes: int  # the new H[d] if placed
    need_bytes: int  # what this task adds at its start (param + working + output + new input copies)
    free_bytes: int  # capacity minus the bound without this task's additions (at the relevant moment)
    new_copies: tuple[tuple[int, int], ...]  # (pred task, arrival) of input copies this placement allocates
    a0: int


class MemoryTracker:
    """Per-device upper bound of memory over time for a list scheduler (rule in the module docstring).

    Call `check` for a candidate, then `place` with the accepted one.  Tasks must be placed after all their
    predecessors (any topological order; starts may be in any time order).
    """

    def __init__(self, instance: SchedulingInstance, horizon_tick: int) -> None:
        self.inst = instance
        num_dev = instance.num_devices
        size = 1
        while size < horizon_tick + 2:
            size *= 2
        self.fen = [_Fenwick(size) for _ in range(num_dev)]
        self.params = [0] * num_dev
        self.unbounded = [0] * num_dev  # bytes live until a still-unknown end
        self.finite = [0] * num_dev  # bytes of intervals with a known end (in the Fenwick tree at that end)
        self.high = [0] * num_dev  # H[d]
        self.cap = [int(c) for c in instance.capacity_bytes]
        self.act = instance.activation_bytes.tolist()
        self.param = instance.param_bytes.tolist()
        self.internal = instance.peak_internal_bytes.tolist()
        self.remaining = [len(s) for s in instance.successors]
        self.hold: dict[int, int] = {}  # producer -> end of its own buffer so far
        self.copies: dict[int, dict[int, list[int]]] = {}  # producer -> device -> [first arrival, last end, bytes]
        self.dev = [-1] * instance.num_tasks

    def _finite_interval(self, d: int, end: int, size: int) -> None:
        if size:
            self.fen[d].add(end, size)
            self.finite[d] += size

    def check(self, t: int, d: int, start: int, arrivals: list[tuple[int, int, int]]) -> MemoryCheck:
        """Would t fit on d starting at `start`?  `arrivals`: (pred, pred device, arrival on d) per predecessor."""
        a0 = start
        new_copies: list[tuple[int, int]] = []
        copy_bytes = 0
        for p, dp, arr in arrivals:
            if dp == d or not self.act[p]:
                continue
            held = self.copies.get(p, {}).get(d)
            if held is None or arr < held[0]:  # a new copy, or an existing one that now starts earlier
                new_copies.append((p, arr))
                copy_bytes += self.act[p]
                a0 = min(a0, arr)
        live = self.unbounded[d] + self.finite[d] - self.fen[d].prefix(a0)
        base = self.params[d] + live
        need = self.param[t] + self.internal[t] + self.act[t] + copy_bytes
        bound = max(self.high[d] + self.param[t], base + need)
        free = self.cap[d] - max(self.high[d], base)
        return MemoryCheck(bound <= self.cap[d], bound, need, free, tuple(new_copies), a0)

    def place(self, t: int, d: int, start: int, end: int, check: MemoryCheck,
              arrivals: list[tuple[int, int, int]]) -> None:
        """Record t on d over [start, end); `check` is the accepted `check` result for this placement."""
        self.dev[t] = d
        self.high[d] = check.bound_bytes
        self.params[d] += self.param[t]
        if end > start:
            self._finite_interval(d, end, self.internal[t])
        if self.act[t]:
            if self.remaining[t]:
                self.unbounded[d] += self.act[t]
                self.hold[t] = end
            elif end > start:
                self._finite_interval(d, end, self.act[t])
        for p, arr in check.new_copies:
            per_dev = self.copies.setdefault(p, {})
            held = per_dev.get(d)
            if held is None:
                per_dev[d] = [arr, end, self.act[p]]
            else:  # an existing copy now starts earlier: counted again in full (conservative)
                held[0] = arr
                held[2] += self.act[p]
            self.unbounded[d] += self.act[p]
        for p, dp, arr in arrivals:
            if self.act[p]:
                if dp == d:
                    self.hold[p] = max(self.hold[p], end)
                else:
                    self.hold[p] = max(self.hold[p], arr)
                    held = self.copies[p][d]
                    held[1] = max(held[1], end)
            self.remaining[p] -= 1
            if self.remaining[p] == 0 and self.act[p]:
                self._release(p)

    def _release(self, p: int) -> None:
        """All consumers of p are placed: its buffers' ends are known; move them from unbounded to finite."""
        size, dp = self.act[p], self.dev[p]
        self.unbounded[dp] -= size
        self._finite_interval(dp, self.hold.pop(p), size)
        for dv, (_, last, counted) in self.copies.pop(p, {}).items():
            self.unbounded[dv] -= counted
            self._finite_interval(dv, last, counted)
