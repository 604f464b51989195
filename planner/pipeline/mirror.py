"""The mirror fold: a schedule of DualPipe's placement that is its own mirror image is a schedule of half the
devices (DualPipe's placement is its own mirror image, e.g. the DeepSeek-V3-like preset at p = 16).

DualPipe's placement runs two chains of the same chunks in opposite directions: chunk j of chain 0 on device
d(j), chunk j of chain 1 on device p - 1 - d(j).  When each chunk costs the same in both chains, every hop costs
the same as its mirror hop, and device d's memory cap equals device p - 1 - d's, the pipeline is symmetric
under mu: (device d, chain c) -> (device p - 1 - d, chain 1 - c), micro-batch numbers kept.  The mirror image of
a schedule (task x's start given to mu(x)) is then a schedule with the same makespan and the mirrored peaks.

A *symmetric* schedule gives x and mu(x) the same start.  It is fixed by its tasks on devices 0 .. p/2 - 1, and those
form a pipeline of their own, the **half** (`fold`): one chain of the chunks 0 .. k-1, chunk j on the device of
whichever copy sits on the lower half, min(d(j), p - 1 - d(j)).  Where the real chain crosses from the lower
half to the upper (device p/2 - 1 to p/2 on DualPipe's placement), both copies fold onto one device; the hop
there stays a send on that device's communication stream (`TrainingPipeline.turn_sends`), because in the full
pipeline it is chain 0's send, whose mirror, chain 1's send the other way, runs at the same time.  Why the half
is exact: each device of the lower half holds, in the full pipeline, the copies the half gives it (chain 0's
chunks on it and chain 1's chunks on it), with the same micro-batches at the same times; the tasks of the upper
half are the mirror images, on streams of their own.  So a schedule of the half within the caps, unfolded
(`Fold.unfold_times`), is a schedule of the full pipeline within the caps with the same makespan: each of its
precedences is a precedence of the half or the mirror of one, and each stream runs the half's order or its mirror.

What it costs: the symmetric schedules are a subset.  The best one can be longer than the best schedule, so a
bound found on the half bounds nothing of the full pipeline.  What it buys: half the tasks.  The search
(`planner.search.pipeline`) then covers the whole schedule with neighbourhoods of its usual size twice as
often, which is what lets it shorten large symmetric pipelines within the same time limit
(docs/layers/pipeline.md, "Mirror fold")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from planner.pipeline.unroll import AllToAll, TrainingPipeline, UnrolledAction, unroll_actions
from planner.schedule.actions import Action


@dataclass(frozen=True)
class Fold:
    """The `half` of a symmetric pipeline (module docstring).  `copies[j]`: the two stages of the whole pipeline
    that stage j of `half` stands for (chain 0's first)."""

    half: TrainingPipeline
    copies: tuple[tuple[int, int], ...]

    @cached_property
    def _half_actions(self) -> tuple[UnrolledAction, ...]:
        return unroll_actions(self.half).actions

    def half_caps(self, caps: Sequence[int]) -> list[int]:
        """The caps of the half's devices (the lower half's)."""
        return [int(c) for c in caps[: self.half.num_devices]]

    def unfold_times(self, times: Mapping[str, int]) -> dict[str, int]:
        """Start tick of every task of the whole pipeline from a schedule of `half` (task name -> start tick):
        each task of the half gives its start to both its copies."""
        out: dict[str, int] = {}
        for action in self._half_actions:
            tick = int(times[str(action)])
            for name in _copies_of(action, self.copies):
                out[name] = tick
        return out

    def fold_times(self, times: Mapping[str, int]) -> dict[str, int] | None:
        """The schedule of `half` that a symmetric schedule of the whole pipeline unfolds from, or None when
        `times` is not symmetric (some task and its mirror image start at different ticks)."""
        out: dict[str, int] = {}
        for action in self._half_actions:
            first, second = _copies_of(action, self.copies)
            if times.get(first) is None or times.get(first) != times.get(second):
                return None
            out[str(action)] = int(times[first])
        return out


def _copies_of(action: UnrolledAction, copies: Sequence[tuple[int, int]]) -> tuple[str, str]:
    """The names of the two tasks of the whole pipeline that a task of the half stands for (same kind and
    micro-batch, on the two copies of its stage)."""
    if isinstance(action, Action):
        return (str(Action(copies[action.stage][0], action.kind, action.microbatch)),
                str(Action(copies[action.stage][1], action.kind, action.microbatch)))
    if isinstance(action, AllToAll):
        return (str(AllToAll(copies[action.stage][0], action.kind, action.microbatch)),
                str(AllToAll(copies[action.stage][1], action.kind, action.microbatch)))
    raise TypeError(f"a half has no overlapped pairs, got {action}")


def fold(pipeline: TrainingPipeline, caps: Sequence[int]) -> Fold | None:
    """The `Fold` of `pipeline` under the caps (per device), or None when it is not symmetric (module docstring:
    two chains of equal length on mirrored devices, equal chunk costs, equal hops and caps), has no placement, runs
    overlapped pairs shorter than their halves (the solve's candidate pairs join the two chains), or is a half
    already."""
    std = pipeline.stage_to_device
    p = pipeline.num_devices
    if (std is None or p % 2 or len(pipeline.chains) != 2 or pipeline.turn_sends or pipeline.pairs_gain
            or len(caps) != p):
        return None
    c0, c1 = pipeline.chains
    k = len(c0)
    if len(c1) != k:
        return None
    for j in range(k):
        a, b = c0[j], c1[j]
        if std[b] != p - 1 - std[a] or pipeline.stages[a] != pipeline.stages[b]:
            return None
        if j + 1 < k and (pipeline.hop_tick(a) != pipeline.hop_tick(b)
                          or pipeline.sends_on_stream(a, c0[j + 1]) != pipeline.sends_on_stream(b, c1[j + 1])):
            return None
    if any(int(caps[d]) != int(caps[p - 1 - d]) for d in range(p)):
        return None
    half_p = p // 2
    device = tuple(min(std[c0[j]], p - 1 - std[c0[j]]) for j in range(k))
    turns = tuple(j for j in range(k - 1) if device[j] == device[j + 1] and pipeline.sends_on_stream(c0[j], c0[j + 1]))
    half = TrainingPipeline(
        stages=tuple(pipeline.stages[c0[j]] for j in range(k)),
        num_microbatches=pipeline.num_microbatches,
        num_devices=half_p,
        stage_to_device=device,
        chains=(tuple(range(k)),),
        comm_tick=pipeline.comm_tick,
        name=f"{pipeline.name}-half",
        overlap_tick=pipeline.overlap_tick,
        stage_comm_tick=tuple(pipeline.hop_tick(c0[j]) for j in range(k)),
        comm_stream=pipeline.comm_stream,
        fb_overlap=pipeline.fb_overlap,
        turn_sends=turns,
    )
    return Fold(half, tuple((c0[j], c1[j]) for j in range(k)))
