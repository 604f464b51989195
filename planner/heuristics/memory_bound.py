"""A lower bound on the least per-device capacity any plan needs: each device holds its parameters plus, while any
one of its tasks runs, that task's own working set; the devices' task sets partition the graph.

Memory model: `planner/schedule/memory.py` (read, not changed).  Notation: one capacity C for every device; P_d is
the parameter bytes of the tasks on device d; P = sum of all parameters.

**A task's working set** `working_set_bytes(instance)[t]` (w_t): while t runs on device d (a nonempty interval
[start, end) when its duration there is positive), d holds

* t's internal memory (held on [start, end)),
* t's output (held from t's start until at least t's end),
* one buffer per distinct producer p of an input of t: p's own buffer when p is on d (held from p's start <= t's
  start until at least t's end, the end of a local consumer), else the copy received on d (held from its first
  arrival there, which is <= t's start, until the last consumer on d ends, >= t's end).

These buffers are distinct, so usage on d at any moment of t's run is at least P_d + w_t (parameters are held all
step, and t's run lies inside the step).  A task that may take zero ticks on some device it may run on may occupy
no moment at all: its w_t is taken as 0 (sound, since any smaller value only weakens the bound).

**The assignment relaxation** (`assignment_capacity_bound`).  In any plan let m_d = max of w_t over the tasks on
device d (0 when d runs nothing), and number the devices so that m_1 >= m_2 >= ... >= m_D.  Then

    (a) m_1 = max_t w_t                      (the task with the largest working set runs somewhere),
    (b) P_d + m_d <= C for every d           (d's peak is at least P_d + m_d),
    (c) a task with w_t > m_{k+1} runs on one of the devices 1..k (every other device has m <= m_{k+1}).

Summing (b) over devices 1..k and using (c):  P(w > m_{k+1}) + m_1 + ... + m_k <= k C  for k = 1..D, where
P(w > x) is the parameters of the tasks with w_t > x and m_{D+1} = -1 (so k = D reads P + sum m_d <= D C).  So
every feasible C admits a non-increasing sequence m, with values among {0} and the w_t, satisfying these D
inequalities; the least C that admits one is a lower bound.  For a given C, a sequence exists iff a dynamic program
over (k, m_k) keeping the least prefix sum m_1 + ... + m_k finds a path (each inequality only gets harder with a
larger prefix sum, and the next one depends on the prefix only through its sum and m_{k+1}); C is found by
bisection on bytes.  The relaxation forgets time (when the working sets occur), eligibility (which device may run
what) and that a task's parameters cannot be split, so it never exceeds the least feasible capacity.

It contains the simpler rules: k = 1 gives C >= max_t w_t + params of the tasks with that working set; k = D gives
C >= (P + sum_d m_d) / D >= (P + max_t w_t) / D.  On the Mixtral-8x7B-like model it is what binds: the head's
projection (w = 1128 MiB) runs on some device, every other device must run some experts (w = 180 MiB each, since
the non-expert parameters are far less than a device's share), so 4 C >= P + 1128 MiB + 3 x 180 MiB.

To keep the program small, the distinct working sets are rounded *down* to at most `max_levels` values (rounding
down only weakens each task's constraint, so the bound stays sound); D x levels^2 steps per bisection step.
"""

from __future__ import annotations

import numpy as np

from planner.cost.instance import INELIGIBLE, SchedulingInstance


def working_set_bytes(instance: SchedulingInstance) -> np.ndarray:
    """int64 [n_tasks]: memory besides parameters that t's device holds while t runs (module docstring, w_t);
    0 for a task that may take zero ticks on a device it may run on."""
    n = instance.num_tasks
    act = instance.activation_bytes.astype(np.int64)
    inputs = np.zeros(n, dtype=np.int64)
    for t in range(n):
        producers = {p for p, _ in instance.predecessors[t]}  # one buffer per producer, whatever the edge count
        inputs[t] = int(sum(int(act[p]) for p in producers))
    w = instance.peak_internal_bytes.astype(np.int64) + act + inputs
    dur = instance.duration_tick
    may_be_instant = ((dur == 0) & (dur < INELIGIBLE)).any(axis=1)
    return np.where(may_be_instant, 0, w).astype(np.int64)


def _levels(values: np.ndarray, max_levels: int) -> np.ndarray:
    """Each value rounded down to one of at most `max_levels` levels (the levels are values themselves, 0 among
    them), so that the dynamic program stays small."""
    distinct = np.unique(np.concatenate([values, [0]]))
    if len(distinct) <= max_levels:
        return values.copy()
    # keep the largest values exactly (they decide m_1 and the binding constraints), then quantiles below
    idx = np.unique(np.linspace(0, len(distinct) - 1, max_levels).round().astype(np.int64))
    keep = distinct[idx]
    return keep[np.searchsorted(keep, values, side="right") - 1]


class _Relaxation:
    """The dynamic program of the module docstring for one instance (levels and parameter sums precomputed)."""

    def __init__(self, instance: SchedulingInstance, max_levels: int) -> None:
        w = _levels(working_set_bytes(instance), max_levels)
        params = instance.param_bytes.astype(np.int64)
        self.devices = instance.num_devices
        self.total_params = int(params.sum())
        # levels, largest first; params_above[i] = parameters of the tasks whose w exceeds levels[i]
        self.levels = sorted({0, *w.tolist()}, reverse=True)
        self.params_above = [int(params[w > v].sum()) for v in self.levels]
        self.max_w = self.levels[0]

    def sequence(self, capacity: int) -> list[int] | None:
        """A non-increasing m_1..m_D meeting the D inequalities at `capacity`, or None when there is none."""
        num_dev, levels, above = self.devices, self.levels, self.params_above
        # state: index i of m_k in levels -> (least prefix sum m_1..m_k, the sequence)
        states: dict[int, tuple[int, list[int]]] = {0: (levels[0], [levels[0]])}
        for k in range(1, num_dev + 1):
            nxt: dict[int, tuple[int, list[int]]] = {}
            for i, (prefix, seq) in states.items():
                if k == num_dev:
                    if self.total_params + prefix <= k * capacity:
                        return seq
                    continue
                for j in range(i, len(levels)):  # m_{k+1} = levels[j] <= m_k
                    if above[j] + prefix > k * capacity:
                        break  # a later j (smaller m_{k+1}) leaves more parameters above it: worse still
                    total = prefix + levels[j]
                    if j not in nxt or nxt[j][0] > total:
                        nxt[j] = (total, [*seq, levels[j]])
            states = nxt
            if not states:
                return None
        return None

    def least_capacity(self) -> tuple[int, list[int]]:
        """The least C (bytes) at which a sequence exists, and that sequence."""
        lo = self.max_w - 1  # C >= m_1 = max w: below it nothing fits
        hi = self.total_params + self.max_w * self.devices  # every constraint holds here
        best = self.sequence(hi)
        assert best is not None
        while hi - lo > 1:
            mid = (lo + hi) // 2
            seq = self.sequence(mid)
            if seq is None:
                lo = mid
            else:
                hi, best = mid, seq
        return hi, best


def assignment_capacity_bound(instance: SchedulingInstance, *, max_levels: int = 48) -> tuple[int, list[int]]:
    """(C, m): no plan exists with less than C bytes on every device (module docstring), and a sequence of
    per-device working sets m_1 >= ... >= m_D that attains it (what a plan at C would have to look like).
    (0, []) for an instance without tasks or devices."""
    if instance.num_tasks == 0 or instance.num_devices == 0:
        return 0, []
    return _Relaxation(instance, max_levels).least_capacity()
