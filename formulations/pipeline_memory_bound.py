"""A lower bound on a pipeline's makespan under a memory cap, from one device at a time: where a planned schedule
does not reach a target (half of DualPipe's bubble), a proven bound shows that no schedule under that memory can.

The device bound (`formulations.pipeline.device_bound_parts`: per device, the earliest head + its work + the
shortest tail) sees no memory, and the full model's bound (`formulations.pipeline`) stays near it.  Yet where the
cap binds, a device cannot start the forwards that would keep it busy while its first backwards are still on the
way back, and idles.  This module proves that idle time by relaxing the whole pipeline to one device d:

* d's compute tasks (F, B and W of every stage d hosts, every micro-batch) run on one machine, never two at once,
  and so do the tasks of d's communication stream (its sends and MoE all-to-alls, where the pipeline has streams:
  the second machine is what bounds a communication-bound pipeline such as the preset at p = 16);
* every other stream (the other devices' compute and communication) has unlimited capacity, so what it does
  becomes a delay: a task starts no earlier than its *head* (the longest path into it from the sources: durations
  and the instance's transfer times), the makespan is at least its end plus its *tail* (the longest path out of
  it), and two tasks of d of one micro-batch lie at least the longest path between them apart (from F to B of a
  stage: the round trip through the later stages);
* one exception to "unlimited": an earlier stage u of a chain runs its forwards one at a time on its device, so
  the k-th forward (k = 0, 1, ...) to start on the first stage s of that chain on d waits for k + 1 forwards of u:
  it starts no earlier than head(F_u) + (k + 1) x F_u + the longest path from F_u's end to F_s's start (one of
  the terms of `_StageMemoryLimits.first`, below, which every relaxed task's release reads);
* **micro-batch order**: the copies of each task (F, B, W of a stage, a send, an all-to-all) start in micro-batch
  order.  This loses no schedule.  The micro-batches are identical (the same tasks, durations, heads, tails and
  lags, and no edge joins two of them: checked), so from any schedule, give micro-batch k of every task the k-th
  smallest start among that task's copies.  A machine then runs the same intervals.  Memory sees the same events:
  every copy of a task takes or frees the same bytes.  A lag x_j >= y_j + l holding for every j holds for the
  sorted lists too (the k-th smallest x >= the k-th smallest y + l).  The ranked releases above hold for any list
  sorted this way.  It cuts the m! namings of each relaxed schedule down to one, which turns probes that stay
  undecided within their time into proofs or schedules within seconds;
* d's memory exactly as the pipeline formulation counts it (family 3): activations taken at F's start, the part
  B frees at B's end and the rest at W's end, beside d's parameters, within the cap.

**Memory upstream and downstream.**  The other devices' streams are unlimited, but their memory still paces the
micro-batches the relaxed device sees.  In an in-order schedule within the caps, stage v holds a micro-batch's
whole activation a_v from F's start to B's end, so at most A_v = floor(room / a_v) micro-batches (room: its
device's cap less the parameters of every stage there) are between those two events; with B's in order, F(v, k)
starts no earlier than B(v, k - A_v) ends, which is at least F(v, k - A_v)'s start + L_v (one micro-batch's path
from F(v)'s start to B(v)'s end).  With F's in order on v's stream and the paths between stages, this gives a
lower bound on every F(v, k)'s start (`_StageMemoryLimits.first`), and the same argument in reverse time a lower
bound on the time from F(v, k)'s start, and from B(v, k)'s end, to the makespan; each relaxed task takes the
largest release and tail these imply through the paths to and from it.  At p = 16 on the preset the first stage
holds 21 micro-batches and one round trip is 1825 ms, so dir 1's micro-batch 21 cannot start before 1.83 s.
These releases and tails raise the single-device bound where a device waits for round trips (exported models cut
into 8 stages); where the device's own work binds they change nothing.

Every schedule of the pipeline within the cap is a schedule of each device's relaxation with the same makespan.
So when CP-SAT proves that a device's relaxation has no schedule ending by C, no schedule of the pipeline ends by
C: the bound is C + 1.  No micro-batch order is assumed (the bound holds for out-of-order schedules too).

**Pairs.**  The same relaxation of two devices at once (`neighbour_pairs`: devices that run consecutive stages of
a chain): both devices' streams are machines, each device has its own memory, the lags join any two of the
pair's tasks of one micro-batch, and the ranked releases apply to each chain's first stage on the pair (the stages
before it run elsewhere).  It sees what one device cannot: in the single relaxation the neighbour runs the round
trip at once, in the pair it is busy with its own stages and its own memory.  Every schedule is still a schedule
of it, so the argument above holds.  Where every device alone fits by the target makespan, two neighbours
together can still be proven not to (a pipeline whose round trips and memory bind across a pair).

Search. Single devices, then the pairs (`pairs=False`: none); within each, those holding more of the caller's
`first_devices` first (where memory binds in the caller's schedule), then in decreasing order of their device-bound
term (the larger of their streams'); a relaxation that is the same problem as one searched is skipped (DualPipe's
mirrored devices and mirrored pairs). First
`first_ticks` (makespans the caller wants decided, e.g. the one at which the bubble is half DualPipe's), largest
first, each asked of every relaxation in turn until one proves it (`first_probe_s` per probe, longer than a search
probe, because such a proof can take about a minute on one device); asked inside each device's binary search
instead, the answer of a later device would wait for the whole search of a device that fits by then.
Then per relaxation, a binary search for the largest infeasible C between the best
bound so far and `upper_tick` (the makespan of a known schedule, where every relaxation is feasible) or the first
tick the device was found feasible at; a device whose relaxation is feasible at the bound so far cannot raise it and
costs one probe. A probe that CP-SAT neither proves nor solves within its time ends that device's search, and the
time limit ends the whole search (`MemoryBound.complete` False): the bound keeps what was proven.

Not for pipelines whose overlapped F&B pairs gain (a pair is shorter than its halves, so the work on d is not
the sum of its tasks): `OpplanError`, as `pipeline_device_bound`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from formulations.backends import get_backend
from formulations.model_api import DEFAULT_SOLVE_POLICY, SolveParams, SolvePolicy, SolveStatus, interval
from formulations.pipeline import device_bound_parts, device_of, heads_and_tails
from planner.errors import OpplanError
from planner.pipeline.unroll import AllToAll, TrainingPipeline, Unrolled, unroll_actions
from planner.schedule.actions import Action, ActionKind

__all__ = ["DEFAULT_MEMORY_BOUND_POLICY", "DeviceRelaxation", "MemoryBound", "MemoryBoundPolicy", "Probe",
           "device_relaxations", "memory_bound", "neighbour_pairs"]

F, B, W = ActionKind.F, ActionKind.B, ActionKind.W


@dataclass(frozen=True)
class MemoryBoundPolicy:
    """The bound search's tuning (`memory_bound`): each probe's time and where a binary search stops."""

    probe_s: float = 60.0  # CP-SAT's time for one probe of a device's binary search (most proofs take well under it)
    # CP-SAT's time for a probe at one of the caller's first ticks (the question the bound is asked for): a proof at
    # the half-bubble makespan can take about a minute on one device and several on a pair of devices, more than a
    # search probe's time
    first_probe_s: float = 300.0
    # a device's binary search stops when its interval is within this share of the bound: finer costs a probe per
    # halving for a bound no reader tells apart
    resolution: float = 0.001
    # the probes' solver knobs: the relaxations' memory is a reservoir, which CP-SAT expands up to a size
    solve: SolvePolicy = dataclasses.field(default_factory=SolvePolicy)


DEFAULT_MEMORY_BOUND_POLICY = MemoryBoundPolicy()  # for argument defaults


@dataclass(frozen=True)
class Probe:
    """One question to one device's relaxation: is there a schedule ending by `makespan_tick`?  `status`:
    ``infeasible`` (proven: every schedule of the pipeline ends later), ``feasible`` or ``unknown`` (CP-SAT ran out
    of time)."""

    device: int
    makespan_tick: int
    status: str
    seconds: float
    devices: tuple[int, ...] = ()  # every device of the relaxation (`device` is the first): two for a pair

    @property
    def label(self) -> str:
        """``d3``, or ``d3+d4`` for a pair's relaxation."""
        return "+".join(f"d{d}" for d in (self.devices or (self.device,)))


@dataclass(frozen=True)
class MemoryBound:
    """Result of `memory_bound`: `bound_tick`, no schedule of the pipeline within the cap ends earlier (at least
    `device_bound_tick`, the device bound without memory); `device`, the device whose relaxation raised it (None:
    none did); every probe; `complete`, every device searched to the policy's resolution before the time ran out."""

    bound_tick: int
    device_bound_tick: int
    device: int | None
    probes: tuple[Probe, ...]
    complete: bool
    seconds: float
    devices: tuple[int, ...] = ()  # every device of the relaxation that raised it (two for a pair)


@dataclass(frozen=True)
class _Task:
    """One task of the relaxed device: its duration, earliest start, tail, what it does (micro-batch included)
    and whether it runs on the communication stream."""

    action: Action | AllToAll  # never an overlapped pair: pipelines with pairs that gain are refused
    duration: int
    release: int
    tail: int
    on_comm: bool
    device: int = 0  # the pipeline device whose compute or communication stream runs it


class DeviceRelaxation:
    """One device's relaxation (module docstring), built once, probed at several makespans."""

    def __init__(self, pipeline: TrainingPipeline, devices: tuple[int, ...], caps: Sequence[int], tasks: list[_Task],
                 lags: list[tuple[int, int, int]], ranked: list[list[int]]) -> None:
        self.pipeline, self.devices, self.caps = pipeline, devices, [int(caps[d]) for d in devices]
        self.device = devices[0]
        self.tasks = tasks  # every task of the device's two streams, every micro-batch
        self.lags = lags  # (i, j, lag): task j starts at least `lag` after task i ends
        self.ranked = ranked  # task lists whose starts are ordered: each task's copies, by micro-batch

    def signature(self) -> tuple:
        """Equal for two relaxations that are the same problem up to naming (DualPipe's mirrored devices, and its
        mirrored pairs, whose devices come in the other order: the smaller of the two namings is the signature)."""
        return min(self._signature(order) for order in (self.devices, self.devices[::-1]))

    def _signature(self, order: tuple[int, ...]) -> tuple:
        """The signature with the relaxation's devices named by their position in `order`."""
        key = {i: (t.duration, t.release, t.tail, t.on_comm, order.index(t.device))
               for i, t in enumerate(self.tasks)}
        return (tuple(self.caps[self.devices.index(d)] for d in order), tuple(sorted(key.values())),
                tuple(sorted((key[i], key[j], lag) for i, j, lag in self.lags)),
                tuple(sorted(tuple(key[i] for i in r) for r in self.ranked)),
                tuple(sorted((key[i], self._memory_change(t)) for i, t in enumerate(self.tasks))))

    def _memory_change(self, t: _Task) -> int:
        """Bytes the task takes (> 0, at its start: F) or frees (< 0, at its end: B, W) on the device."""
        if not isinstance(t.action, Action) or t.action.kind not in (F, B, W):
            return 0  # a send or an all-to-all
        cost = self.pipeline.stages[t.action.stage]
        freed_by_b = int(cost.activation_freed_by_b_bytes)
        return {F: int(cost.activation_bytes), B: -freed_by_b,
                W: freed_by_b - int(cost.activation_bytes)}[t.action.kind]

    def probe(self, makespan_tick: int, time_s: float, threads: int,
              policy: SolvePolicy = DEFAULT_SOLVE_POLICY) -> str:
        """``infeasible``, ``feasible`` or ``unknown``: is there a relaxed schedule ending by `makespan_tick`?
        `policy`: the solver's knobs (`SolvePolicy`)."""
        be = get_backend("cpsat")
        bld = be.new_builder()
        start = []
        for i, t in enumerate(self.tasks):
            latest = makespan_tick - t.tail - t.duration
            if latest < t.release:
                return "infeasible"  # the task alone cannot fit: no solver needed
            start.append(bld.int_var(t.release, latest, f"S[i={i}]"))
        for d in self.devices:
            for on_comm, stream in ((False, "compute"), (True, "comm")):
                bld.no_overlap([interval(start[i], t.duration, start[i] + t.duration, None, f"run[i={i}]")
                                for i, t in enumerate(self.tasks) if t.on_comm is on_comm and t.device == d],
                               f"{stream}[d={d}]")
        for i, j, lag in self.lags:
            bld.add(start[j] >= start[i] + self.tasks[i].duration + lag, f"lag[i={i},j={j}]")
        for r in self.ranked:
            for a, b in zip(r, r[1:], strict=False):
                bld.add(start[b] >= start[a], f"rank[i={a},j={b}]")
        # memory as the pipeline formulation counts it (activation taken at F's start, B's part freed at B's end, the
        # rest at W's end) as a reservoir: the same level at every moment, and CP-SAT proves far more with it than
        # with a cumulative of variable-length intervals (the preset at p = 8: infeasible in 45 s against unknown
        # after 90 s)
        for d, cap in zip(self.devices, self.caps, strict=True):
            times, changes = [], []
            for i, t in enumerate(self.tasks):
                change = self._memory_change(t) if t.device == d else 0
                if change:
                    times.append(start[i] if t.action.kind is F else start[i] + t.duration)
                    changes.append(change)
            params = sum(int(self.pipeline.stages[s].param_bytes) for s in self.pipeline.device_stages(d))
            bld.reservoir(times, changes, cap - params, f"memory[d={d}]")
        got = bld.solve(SolveParams(time_limit_s=time_s, threads=threads, deterministic=False, policy=policy))
        if got.status is SolveStatus.INFEASIBLE:
            return "infeasible"
        return "feasible" if got.has_solution else "unknown"


def neighbour_pairs(pipeline: TrainingPipeline) -> list[tuple[int, int]]:
    """The pairs of devices that run two consecutive stages of some chain (the pairs `memory_bound` relaxes
    together), in increasing order."""
    std = pipeline.stage_to_device or ()
    return sorted({(min(std[s], std[t]), max(std[s], std[t])) for chain in pipeline.chains
                   for s, t in zip(chain, chain[1:], strict=False) if std[s] != std[t]})


class _StageMemoryLimits:
    """Every stage's memory, seen from another device (module docstring, "Memory upstream and downstream"): per
    stage v and micro-batch k, `first[v][k]` <= the start of F(v, k), `after_f[v][k]` <= the makespan less that
    start and `after_b[v][k]` <= the makespan less the end of B(v, k), in every in-order schedule within the caps."""

    def __init__(self, pipeline: TrainingPipeline, un: Unrolled, dur: Sequence[int], head: Sequence[int],
                 tail: Sequence[int], caps: Sequence[int], longest_from: Callable[[int], dict[int, int]],
                 rank: dict[int, int]) -> None:
        m, n_st = pipeline.num_microbatches, pipeline.num_stages
        self.longest_from, self.dur = longest_from, dur
        self._into: dict[int, list[tuple[int, int]]] = {}  # task -> (stage, lag from F(stage)'s start)
        self._out: dict[int, tuple[list[tuple[int, int]], list[tuple[int, int]]]] = {}
        self.f = [un.task(s, F, 0) for s in range(n_st)]
        # stage -> its B of micro-batch 0 (absent: a fused backward, no B alone)
        self.b = {s: un.index[Action(s, B, 0)] for s in range(n_st) if Action(s, B, 0) in un.index}
        held: list[int | None] = []  # A_v: micro-batches of stage v that fit between F's start and B's end
        trip: list[int] = []  # L_v: one micro-batch's path from F(v)'s start to B(v)'s end
        for s in range(n_st):
            d = pipeline.stage_to_device[s] if pipeline.stage_to_device else 0
            room = int(caps[d]) - sum(int(pipeline.stages[x].param_bytes) for x in pipeline.device_stages(d))
            act = int(pipeline.stages[s].activation_bytes)
            b = self.b.get(s, -1)
            ok = act > 0 and b in longest_from(self.f[s])
            held.append(max(1, room // act) if ok else None)
            trip.append(dur[self.f[s]] + longest_from(self.f[s])[b] + dur[b] if ok else 0)
        by_f = sorted(range(n_st), key=lambda s: rank[self.f[s]])
        # the paths between stages, once: into F(v) from each earlier F(u) (u's duration included), from B(w) to
        # each later B, from F(v)'s start to each later F's start and to each B's end
        f_into = {v: [(u, dur[self.f[u]] + longest_from(self.f[u])[self.f[v]]) for u in by_f
                      if u != v and self.f[v] in longest_from(self.f[u])] for v in range(n_st)}
        b_onto = {w: [(w2, longest_from(bw)[b2] + dur[b2]) for w2, b2 in self.b.items()
                      if w2 != w and b2 in longest_from(bw)] for w, bw in self.b.items()}
        f_onto_f = {v: [(v2, dur[self.f[v]] + longest_from(self.f[v])[self.f[v2]]) for v2 in range(n_st)
                        if v2 != v and self.f[v2] in longest_from(self.f[v])] for v in range(n_st)}
        f_onto_b = {v: [(w, dur[self.f[v]] + longest_from(self.f[v])[bw] + dur[bw]) for w, bw in self.b.items()
                        if bw in longest_from(self.f[v])] for v in range(n_st)}
        self.first = [[0] * m for _ in range(n_st)]
        for k in range(m):
            for v in by_f:
                x = head[self.f[v]]
                if k > 0:  # the stage's forwards, in order on one stream
                    x = max(x, self.first[v][k - 1] + dur[self.f[v]])
                a = held[v]
                if a is not None and k >= a:  # F(v, k) waits for B(v, k - A_v) to free its activation
                    x = max(x, self.first[v][k - a] + trip[v])
                self.first[v][k] = max([x, *(self.first[u][k] + lag for u, lag in f_into[v])])
        # the same in reverse time
        self.after_f = [[0] * m for _ in range(n_st)]
        self.after_b = [[0] * m for _ in range(n_st)]
        with_b = sorted(self.b, key=lambda s: -rank[self.b[s]])
        for k in range(m - 1, -1, -1):
            for w in with_b:
                bw = self.b[w]
                x = tail[bw]
                if k + 1 < m:  # the stage's B's, in order on one stream
                    x = max(x, self.after_b[w][k + 1] + dur[bw])
                a = held[w]
                if a is not None and k + a < m:  # B(w, k) ends by F(w, k + A_w)'s start
                    x = max(x, self.after_f[w][k + a])
                self.after_b[w][k] = max([x, *(self.after_b[w2][k] + lag for w2, lag in b_onto[w])])
            for v in reversed(by_f):
                fv = self.f[v]
                x = dur[fv] + tail[fv]
                if k + 1 < m:
                    x = max(x, self.after_f[v][k + 1] + dur[fv])
                self.after_f[v][k] = max([x, *(self.after_f[v2][k] + lag for v2, lag in f_onto_f[v]),
                                          *(self.after_b[w][k] + lag for w, lag in f_onto_b[v])])

    def release(self, t: int, k: int) -> int:
        """A lower bound on the start of micro-batch k's copy of task t (a micro-batch-0 task)."""
        if t not in self._into:
            self._into[t] = [(v, 0 if t == fv else self.dur[fv] + self.longest_from(fv)[t])
                             for v, fv in enumerate(self.f) if t == fv or t in self.longest_from(fv)]
        return max((self.first[v][k] + lag for v, lag in self._into[t]), default=0)

    def tail(self, t: int, k: int) -> int:
        """A lower bound on the makespan less the end of micro-batch k's copy of task t."""
        if t not in self._out:
            reach = self.longest_from(t)
            via_f = [(v, -self.dur[t] if t == fv else reach[fv]) for v, fv in enumerate(self.f)
                     if t == fv or fv in reach]
            via_b = [(v, 0 if t == bv else reach[bv] + self.dur[bv]) for v, bv in self.b.items()
                     if t == bv or bv in reach]
            self._out[t] = (via_f, via_b)
        via_f, via_b = self._out[t]
        return max(max((self.after_f[v][k] + lag for v, lag in via_f), default=0),
                   max((self.after_b[v][k] + lag for v, lag in via_b), default=0))


def device_relaxations(pipeline: TrainingPipeline, caps: Sequence[int],
                       sets: Sequence[tuple[int, ...]] | None = None) -> tuple[list[DeviceRelaxation], list[int]]:
    """The relaxation (module docstring) of every device set in `sets` (default: each device alone) and the
    device bound's term per device."""
    un = unroll_actions(pipeline)
    inst = un.instance
    dev = device_of(inst)
    dur = [int(inst.duration_tick[t, dev[t]]) for t in range(inst.num_tasks)]
    for t in range(inst.num_tasks):
        mb = getattr(un.actions[t], "microbatch", None)
        if any(getattr(un.actions[u], "microbatch", None) != mb for u, _ in inst.predecessors[t]):
            raise OpplanError(f"task {inst.task_names[t]} depends on another micro-batch's task: the relaxation "
                              "needs identical, independent micro-batches")
    head, tail = heads_and_tails(inst, dev, dur)
    p = pipeline.num_devices
    streams = {d: (d, p + d) if pipeline.streams_on else (d,) for d in range(p)}
    by_stream = device_bound_parts(inst, dev, dur=dur)
    parts = [max(by_stream[x] for x in streams[d]) for d in range(p)]
    first_mb = [t for t in range(inst.num_tasks) if getattr(un.actions[t], "microbatch", None) == 0]
    order = inst.topological_order
    rank = {t: i for i, t in enumerate(order)}

    paths: dict[int, dict[int, int]] = {}

    def longest_from(src: int) -> dict[int, int]:
        """Longest path from `src`'s end to the start of each task it reaches (micro-batch 0's tasks only)."""
        if src not in paths:
            paths[src] = _longest_from(src)
        return paths[src]

    def _longest_from(src: int) -> dict[int, int]:
        dist: dict[int, int] = {}
        for v, e in inst.successors[src]:
            dist[v] = max(dist.get(v, 0), inst.comm(e, dev[src], dev[v]))
        for t in order[rank[src] + 1:]:
            if t not in dist:
                continue
            for v, e in inst.successors[t]:
                dist[v] = max(dist.get(v, 0), dist[t] + dur[t] + inst.comm(e, dev[t], dev[v]))
        return dist

    out = []
    nmb = pipeline.num_microbatches
    limits = _StageMemoryLimits(pipeline, un, dur, head, tail, caps, longest_from, rank)
    for group in (sets if sets is not None else [(d,) for d in range(p)]):
        on = {x for d in group for x in streams[d]}  # the group's streams
        ones: list[Action | AllToAll] = []  # micro-batch 0's tasks on the group's streams
        for t in first_mb:
            a = un.actions[t]
            if dev[t] in on:
                assert isinstance(a, (Action, AllToAll)), "unrolled without pairs"
                ones.append(a)
        tasks: list[_Task] = []
        at: dict[tuple[Action | AllToAll, int], int] = {}
        for a in ones:
            t = un.index[a]
            for k in range(nmb):
                at[(a, k)] = len(tasks)
                r = max(head[t], limits.release(t, k))
                tasks.append(_Task(dataclasses.replace(a, microbatch=k), dur[t], r, max(tail[t], limits.tail(t, k)),
                                   dev[t] >= p, dev[t] % p))
        lags = []
        for a in ones:
            dist = longest_from(un.index[a])
            for b in ones:
                if un.index[b] in dist:
                    lags += [(at[(a, k)], at[(b, k)], dist[un.index[b]]) for k in range(nmb)]
        # every task's copies in micro-batch order (module docstring): the ranked releases of the chains' first
        # forwards assume it too
        ranked = [[at[(a, k)] for k in range(nmb)] for a in ones]
        out.append(DeviceRelaxation(pipeline, tuple(group), caps, tasks, lags, ranked))
    return out, parts


def _distinct_relaxations(relaxations: Sequence[DeviceRelaxation], parts: Sequence[int],
                          first_devices: Sequence[int]) -> list[DeviceRelaxation]:
    """One relaxation per problem (DualPipe's mirrored devices once), in the order they are asked."""
    distinct: list[DeviceRelaxation] = []
    seen: set[tuple] = set()
    # single devices first (each is quick), then pairs; each by how many of `first_devices` it holds (a relaxation
    # can rise above the device bound only where memory binds: on GPT-2's export at p = 8 the pair at the cap is
    # proven in 226 s, while a pair away from it stayed unknown after 300 s), then by its largest device-bound term
    binding = set(first_devices)
    for r in sorted(relaxations, key=lambda x: (len(x.devices), -len(binding.intersection(x.devices)),
                                                -max(parts[d] for d in x.devices))):
        sig = r.signature()
        if sig not in seen:
            seen.add(sig)
            distinct.append(r)
    return distinct


@dataclass
class _BoundSearch:
    """The probes asked so far within one time budget, and the bound they prove."""

    t0: float
    time_limit_s: float
    threads: int
    progress: Callable[[str], None] | None
    bound: int
    raised_by: int | None = None
    raised_devices: tuple[int, ...] = ()
    solve: SolvePolicy = DEFAULT_SOLVE_POLICY  # each probe's solver knobs
    probes: list[Probe] = dataclasses.field(default_factory=list)
    # devices -> a makespan their relaxation has a schedule by
    feasible_at: dict[tuple[int, ...], int] = dataclasses.field(default_factory=dict)

    def out_of_time(self) -> bool:
        """True once the budget is spent."""
        return time.monotonic() - self.t0 >= self.time_limit_s

    def ask(self, r: DeviceRelaxation, tick: int, seconds: float) -> str:
        """Probe `r` at `tick` for at most `seconds` (and the budget left); records the probe, returns its status."""
        left = self.time_limit_s - (time.monotonic() - self.t0)
        began = time.monotonic()
        status = r.probe(tick, min(seconds, left), self.threads, self.solve)
        self.probes.append(Probe(r.device, tick, status, time.monotonic() - began, r.devices))
        if self.progress is not None:
            who = f"devices {r.devices[0]} and {r.devices[1]}" if len(r.devices) > 1 else f"device {r.device}"
            self.progress(f"memory bound: {who}, a schedule ending by {tick} ticks? {status} "
                          f"({self.probes[-1].seconds:.1f} s)")
        return status

    def first_questions(self, distinct: list[DeviceRelaxation], first_ticks: Sequence[int], upper_tick: int,
                        first_probe_s: float) -> None:
        """The caller's questions, on every device before any binary search: one device proving a first tick
        settles it, and a search on the first device must not spend the time another device needs for that proof."""
        for tick in sorted(first_ticks, reverse=True):
            for r in distinct:
                if not self.bound <= tick < min(upper_tick, self.feasible_at.get(r.devices, upper_tick)):
                    continue
                if self.out_of_time():
                    break
                status = self.ask(r, tick, first_probe_s)
                if status == "infeasible":
                    self.bound, self.raised_by, self.raised_devices = tick + 1, r.device, r.devices
                    break
                if status == "feasible":
                    self.feasible_at[r.devices] = tick

    def binary_search(self, distinct: list[DeviceRelaxation], upper_tick: int, probe_s: float,
                      resolution: float) -> bool:
        """Raise the bound by a binary search on each relaxation in turn, each down to an interval of `resolution`
        x the bound; True when every search finished."""
        complete = True
        for r in distinct:
            if self.out_of_time():
                complete = False
                break
            # proven: nothing ends before lo; r fits by hi
            lo, hi = self.bound, self.feasible_at.get(r.devices, upper_tick)
            questions = [lo]  # a relaxation with a schedule by the bound so far cannot raise it: one probe
            while hi - lo > max(0, int(resolution * lo)):
                if self.out_of_time():
                    complete = False
                    break
                tick = questions.pop() if questions else (lo + hi) // 2
                status = self.ask(r, tick, probe_s)
                if status == "infeasible":
                    lo = tick + 1
                elif status == "feasible":
                    hi = tick
                else:
                    complete = False
                    break
            if lo > self.bound:
                self.bound, self.raised_by, self.raised_devices = lo, r.device, r.devices
        return complete

    def result(self, plain: int, complete: bool) -> MemoryBound:
        """The `MemoryBound` of the probes so far."""
        return MemoryBound(self.bound, plain, self.raised_by, tuple(self.probes), complete,
                           time.monotonic() - self.t0, self.raised_devices)


def memory_bound(pipeline: TrainingPipeline, cap_bytes: int | Sequence[int], *, upper_tick: int,
                 time_limit_s: float, first_ticks: Sequence[int] = (),
                 policy: MemoryBoundPolicy = DEFAULT_MEMORY_BOUND_POLICY, threads: int = 8,
                 progress: Callable[[str], None] | None = None, pairs: bool = True,
                 first_devices: Sequence[int] = (), search: bool = True) -> MemoryBound:
    """The bound of the module docstring for `pipeline` under `cap_bytes` (per device, or one for all), searched
    within `time_limit_s`; `upper_tick`: the makespan of a schedule of the pipeline within the cap; `first_ticks`:
    makespans probed first, on every device before any binary search, `policy.first_probe_s` each
    (`policy.probe_s` for the search's probes, down to `policy.resolution`); `progress` gets a line per probe;
    `pairs`: after the single devices, the neighbour pairs (`neighbour_pairs`) too, in every step of the search;
    `first_devices`: devices where memory is known to bind (plan-compare passes the devices its schedule holds at the
    cap): among single devices, and among pairs, the relaxations holding more of them are asked first; `search` False:
    only the `first_ticks` are asked, no binary search follows (`complete` False), for a caller that wants one question
    answered on many pipelines."""
    if pipeline.pairs_gain:
        raise OpplanError("the memory bound does not hold for a pipeline whose overlapped pairs gain",
                          fix="compare without --fb-overlap, or read the solver's bound")
    t0 = time.monotonic()
    caps = [int(cap_bytes)] * pipeline.num_devices if isinstance(cap_bytes, int) else [int(c) for c in cap_bytes]
    # one build for single devices and pairs: the unrolling, heads and tails are shared
    sets = [(d,) for d in range(pipeline.num_devices)] + (list(neighbour_pairs(pipeline)) if pairs else [])
    relaxations, parts = device_relaxations(pipeline, caps, sets)
    plain = max(parts, default=0)
    searched = _BoundSearch(t0, time_limit_s, threads, progress, plain, solve=policy.solve)
    distinct = _distinct_relaxations(relaxations, parts, first_devices)
    searched.first_questions(distinct, first_ticks, upper_tick, policy.first_probe_s)
    if not search:
        return searched.result(plain, False)
    return searched.result(plain, searched.binary_search(distinct, upper_tick, policy.probe_s, policy.resolution))
