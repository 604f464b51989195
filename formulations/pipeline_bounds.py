"""The pipeline formulation's data and bounds (`formulations.pipeline`, "Data", "Bound" and the set P): the one
stream each task runs on (`device_of`), the check that parameters and one micro-batch fit every device
(`check_fits`), the device bound (earliest head + work + shortest tail per device, `device_bound_tick`,
`device_bound_parts`, `pipeline_device_bound`), the bound with overlapped pairs (`pair_bound`), and the candidate
pairs P (`pair_candidates`).  Each is a lower bound or a data set of every schedule of the pipeline, so the
searches that work without a full solve (the memory bound, the periodic schedule, the cut search) use them too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from formulations.placement import descendants
from planner.cost.instance import SchedulingInstance
from planner.errors import InfeasibleError, OpplanError
from planner.pipeline.unroll import TrainingPipeline, Unrolled, UnrolledAction, unroll_actions
from planner.schedule.actions import Action, ActionKind, OverlapAction

__all__ = ["PairCandidate", "check_fits", "device_bound_parts", "device_bound_tick", "device_of", "heads_and_tails",
           "pair_bound", "pair_candidates", "pipeline_device_bound"]

F, B, W, BW = ActionKind.F, ActionKind.B, ActionKind.W, ActionKind.BW


@dataclass(frozen=True)
class PairCandidate:
    """A candidate overlapped pair: forward task f, input-gradient task b, and w (b's weight gradient) when the
    pair runs the full backward; `tick` its duration D_q; `action` the pair (``F&B`` or ``F&BW``)."""

    f: int
    b: int
    w: int | None
    tick: int
    action: OverlapAction

    @property
    def name(self) -> str:
        return str(self.action)

    @property
    def tasks(self) -> tuple[int, ...]:
        return (self.f, self.b) if self.w is None else (self.f, self.b, self.w)



def device_of(inst: SchedulingInstance) -> list[int]:
    """The one device (stream) each task of a pipeline's unrolled instance may run on."""
    out = []
    for t in range(inst.num_tasks):
        ok = [d for d in range(inst.num_devices) if inst.eligible(t, d)]
        if len(ok) != 1:
            raise OpplanError(f"the pipeline formulation needs every stage placed on one device; task "
                              f"{inst.task_names[t]} may run on {len(ok)} devices",
                              fix="use a fixed or V-shape placement")
        out.append(ok[0])
    return out



def check_fits(pipeline: TrainingPipeline, cap: Sequence[int]) -> None:
    for d in range(pipeline.num_devices):
        stages = pipeline.device_stages(d)
        params = sum(int(pipeline.stages[s].param_bytes) for s in stages)
        one = max((int(pipeline.stages[s].activation_bytes) for s in stages), default=0)
        if params + one > cap[d]:
            raise InfeasibleError(f"device {d}: parameters ({params}) plus one micro-batch's activation ({one}) "
                                  f"need {params + one}, {params + one - cap[d]} more than its memory cap {cap[d]}")



def device_bound_tick(inst: SchedulingInstance, device: Sequence[int], *, dur: Sequence[int] | None = None,
                      work: Sequence[int] | None = None) -> int:
    """max over devices of (earliest head + work + shortest tail) of its tasks, with communication where the
    ends of an edge sit on different devices (the placement is fixed).  `dur` overrides the durations of heads
    and tails, `work` the work per device (lower bounds, when pairs may shorten tasks)."""
    return max(device_bound_parts(inst, device, dur=dur, work=work), default=0)



def heads_and_tails(inst: SchedulingInstance, device: Sequence[int], dur: Sequence[int]) -> tuple[list[int], list[int]]:
    """Per task, its head (longest path into it from the sources: durations `dur` and, where an edge's ends sit on
    different devices of `device`, its communication) and its tail (the same, out of it to the sinks)."""
    head = [0] * inst.num_tasks
    for t in inst.topological_order:
        for u, e in inst.predecessors[t]:
            head[t] = max(head[t], head[u] + dur[u] + inst.comm(e, device[u], device[t]))
    tail = [0] * inst.num_tasks
    for t in reversed(inst.topological_order):
        for v, e in inst.successors[t]:
            tail[t] = max(tail[t], tail[v] + dur[v] + inst.comm(e, device[t], device[v]))
    return head, tail



def device_bound_parts(inst: SchedulingInstance, device: Sequence[int], *, dur: Sequence[int] | None = None,
                       work: Sequence[int] | None = None) -> list[int]:
    """Per device (instance device, so communication streams too), earliest head + work + shortest tail of its
    tasks (0 for a device without tasks): the terms `device_bound_tick` takes the largest of (same arguments)."""
    if dur is None:
        dur = [int(inst.duration_tick[t, device[t]]) for t in range(inst.num_tasks)]
    head, tail = heads_and_tails(inst, device, dur)
    parts = [0] * inst.num_devices
    for d in range(inst.num_devices):
        on = [t for t in range(inst.num_tasks) if device[t] == d]
        if on:
            w = sum(dur[t] for t in on) if work is None else int(work[d])
            parts[d] = min(head[t] for t in on) + w + min(tail[t] for t in on)
    return parts



def pipeline_device_bound(pipeline: TrainingPipeline) -> tuple[int, tuple[int, ...]]:
    """The bound `prepare_pipeline` gives `pipeline` when it has no overlapped pairs (the larger of the instance's
    trivial bound and the device bound), and the device bound's term (head + work + tail) per pipeline device,
    its compute stream: a lower bound on every schedule of this pipeline, without preparing a solve.  A pipeline
    whose pairs gain (`TrainingPipeline.pairs_gain`) has a lower bound (a pair is shorter than its halves): an
    `OpplanError` says so."""
    if pipeline.pairs_gain:
        raise OpplanError("the bound without pairs does not hold for a pipeline whose overlapped pairs gain",
                          fix="use prepare_pipeline(...).trivial_tick")
    inst = unroll_actions(pipeline).instance
    parts = device_bound_parts(inst, device_of(inst))
    return max(inst.trivial_lower_bound_tick(), max(parts, default=0)), tuple(parts[:pipeline.num_devices])



def pair_bound(inst: SchedulingInstance, device: Sequence[int], pairs: Sequence[PairCandidate]) -> int:
    """The module docstring's bound with pairs (durations min(d_t, D_q), work less the best savings)."""
    full = [int(inst.duration_tick[t, device[t]]) for t in range(inst.num_tasks)]
    dmin = list(full)
    best_f: dict[int, int] = {}
    best_b: dict[int, int] = {}
    for q in pairs:
        saving = sum(full[t] for t in q.tasks) - q.tick
        for t in q.tasks:
            dmin[t] = min(dmin[t], q.tick)
        best_f[q.f] = max(best_f.get(q.f, 0), saving)
        best_b[q.b] = max(best_b.get(q.b, 0), saving)
    work = [0] * inst.num_devices
    save_f = [0] * inst.num_devices
    save_b = [0] * inst.num_devices
    for t in range(inst.num_tasks):
        work[device[t]] += full[t]
    for t, v in best_f.items():
        save_f[device[t]] += v
    for t, v in best_b.items():
        save_b[device[t]] += v
    work = [w - min(a, b) for w, a, b in zip(work, save_f, save_b, strict=True)]
    crit = [0] * inst.num_tasks
    for t in inst.topological_order:
        crit[t] = max((crit[u] + dmin[u] + inst.comm(e, device[u], device[t]) for u, e in inst.predecessors[t]),
                      default=0)
    critical = max(crit[t] + dmin[t] for t in range(inst.num_tasks))
    p = max(device) + 1 if device else 1
    return max(critical, device_bound_tick(inst, device, dur=dmin, work=work), -(-sum(work) // p))



def pair_candidates(pipeline: TrainingPipeline, tasks: Unrolled, device: Sequence[int],
                    warm_start: Mapping[UnrolledAction, int] | None = None,
                    pair_window: int | None = 2) -> list[PairCandidate]:
    """The candidate pairs P of the module docstring (empty unless `pipeline.pairs_gain`); `warm_start` keyed by
    action (`warm_by_action`)."""
    if not pipeline.pairs_gain or pipeline.stage_to_device is None:
        return []
    inst, task = tasks.instance, tasks.task
    desc = descendants(inst)
    warm_pairs: set[tuple[int, int, bool]] = set()
    if warm_start is not None:
        for a in warm_start:
            if isinstance(a, OverlapAction):
                half = a.backward
                warm_pairs.add((tasks.index[a.forward], task(half.stage, B, half.microbatch), half.kind is BW))
    nmb = pipeline.num_microbatches
    out: list[PairCandidate] = []
    seen: set[tuple[int, int, bool]] = set()
    for d in range(pipeline.num_devices):
        stages = pipeline.device_stages(d)
        for s in stages:
            for mb in range(nmb):
                f = task(s, F, mb)
                for s2 in stages:
                    ks = range(nmb)
                    if warm_start is not None and pair_window is not None:
                        tf = warm_start[Action(s, F, mb)]
                        near = min(range(nmb), key=lambda k: (abs(warm_start[Action(s2, B, k)] - tf), k))
                        ks = range(max(0, near - pair_window), min(nmb, near + pair_window + 1))
                    for k in ks:
                        b = task(s2, B, k)
                        if (desc[f] >> b) & 1 or (desc[b] >> f) & 1:
                            continue
                        for full in (False, True):
                            seen.add((f, b, full))
    for key in sorted(seen | warm_pairs):
        f, b, full = key
        fa, ba = tasks.actions[f], tasks.actions[b]
        assert isinstance(fa, Action) and isinstance(ba, Action)  # f and b index F and B tasks
        tick = pipeline.pair_tick(fa.stage, ba.stage, full)
        if tick is None:
            continue
        w = task(ba.stage, W, ba.microbatch) if full else None
        back = Action(ba.stage, BW if full else B, ba.microbatch)
        halves = int(inst.duration_tick[f, device[f]]) + int(inst.duration_tick[b, device[b]]) + \
            (int(inst.duration_tick[w, device[w]]) if w is not None else 0)
        if tick >= halves and key not in warm_pairs:
            continue  # no gain over running the halves
        out.append(PairCandidate(f, b, w, tick, OverlapAction(fa, back)))
    return out
