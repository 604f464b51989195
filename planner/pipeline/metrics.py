"""Figures of a simulated pipeline schedule, all from a `Timeline` and its `TrainingPipeline`.

* makespan (ticks): last end - first start.
* **bubble** (ticks): idle time summed over devices = sum_d (makespan - busy_d); **bubble ratio** = bubble /
  (devices x makespan) — the definition of docs/architecture.md and compare.csv; devices are the p compute streams (a
  communication stream's idle time is not a bubble).  The published closed forms (1F1B
  (p-1)(F+B), ...) are the idle time of *one* device: on uniform stages every device idles the same amount, so
  they equal `bubble / p` (`per_device_bubble_tick`).
* **pipeline memory** per device over time: the parameters of every stage copy the device hosts (whole step),
  plus for every (stage, micro-batch) on it the activation from F's start to W's end (to BW's end when fused),
  less `activation_freed_by_b_bytes` from B's end.  A pair task ``F&B`` starts its forward's activation at its
  start and releases its backward's at its end.  This is the accounting of the DualPipe and Zero Bubble papers
  ("p+1 activations", "2x parameters"); `unroll`'s docstring says how it differs from the instance's generic
  memory model.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from planner.pipeline.unroll import TrainingPipeline, action_of
from planner.schedule.actions import ActionKind
from planner.schedule.timeline import Timeline


@dataclass(frozen=True)
class PipelineFigures:
    """Per schedule: makespan, bubble (total idle ticks) and its ratio, peak memory and parameters per device."""

    makespan_tick: int
    bubble_tick: int
    bubble_ratio: float
    peak_memory_bytes: tuple[int, ...]
    param_bytes: tuple[int, ...]
    peak_activation_bytes: tuple[int, ...]

    @property
    def per_device_bubble_tick(self) -> float:
        return self.bubble_tick / max(len(self.peak_memory_bytes), 1)

    @property
    def max_peak_memory_bytes(self) -> int:
        return max(self.peak_memory_bytes, default=0)


def device_params(pipeline: TrainingPipeline, device_of_stage: dict[int, int]) -> list[int]:
    out = [0] * pipeline.num_devices
    for s, d in device_of_stage.items():
        out[d] += int(pipeline.stages[s].param_bytes)
    return out


def activation_events(pipeline: TrainingPipeline, timeline: Timeline) -> tuple[dict[int, int],
                                                                               list[tuple[int, int, int]]]:
    """(device of each stage, and (device, tick, +/- bytes) activation events)."""
    stage_dev: dict[int, int] = {}
    events: list[tuple[int, int, int]] = []
    for pl in timeline.placements:
        if pl.device >= pipeline.num_devices:  # a send on a communication stream holds no activation
            continue
        for a in action_of(pl.task):
            stage_dev[a.stage] = pl.device
            cost = pipeline.stages[a.stage]
            if a.kind is ActionKind.F:
                events.append((pl.device, pl.start_tick, int(cost.activation_bytes)))
            elif a.kind is ActionKind.B:
                events.append((pl.device, pl.end_tick, -int(cost.activation_freed_by_b_bytes)))
            elif a.kind is ActionKind.W:
                events.append((pl.device, pl.end_tick,
                               -(int(cost.activation_bytes) - int(cost.activation_freed_by_b_bytes))))
            elif a.kind is ActionKind.BW:
                events.append((pl.device, pl.end_tick, -int(cost.activation_bytes)))
    return stage_dev, events


def pipeline_memory(pipeline: TrainingPipeline, timeline: Timeline) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(peak activation bytes per device, parameter bytes per device) under the pipeline accounting."""
    stage_dev, events = activation_events(pipeline, timeline)
    per_dev: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for d, t, b in events:
        per_dev[d].append((t, b))
    return (tuple(peak_level(per_dev[d]) for d in range(pipeline.num_devices)),
            tuple(device_params(pipeline, stage_dev)))


def peak_level(events: Iterable[tuple[int, int]]) -> int:
    """The highest running sum of (tick, +/- bytes) events, 0 at least.  Frees and allocations at the same tick net
    out before the level is read (an interval [start, end) gives its memory back at its end tick, so a stage that
    frees at t and one that takes at t never hold both).  The one place this rule lives: the simulator's figures
    (`pipeline_memory`) and the formulation's cap check (`formulations.pipeline`) both read peaks through it."""
    per_tick: dict[int, int] = defaultdict(int)
    for tick, change in events:
        per_tick[tick] += change
    level = peak = 0
    for tick in sorted(per_tick):
        level += per_tick[tick]
        peak = max(peak, level)
    return peak


def figures(pipeline: TrainingPipeline, timeline: Timeline) -> PipelineFigures:
    act, par = pipeline_memory(pipeline, timeline)
    p = pipeline.num_devices  # compute streams only (communication streams come after them)
    bubble = sum(timeline.idle_tick[:p])
    span = timeline.makespan_tick
    return PipelineFigures(
        makespan_tick=span,
        bubble_tick=int(bubble),
        bubble_ratio=bubble / (p * span) if span > 0 else 0.0,
        peak_memory_bytes=tuple(a + p for a, p in zip(act, par, strict=True)),
        param_bytes=par,
        peak_activation_bytes=act,
    )


@dataclass(frozen=True)
class IdleParts:
    """Where one device's idle time sits (ticks): `fill` before its first task, `drain` after its last, `mid`
    between them; fill + mid + drain = makespan - busy (an idle device: all of it is fill)."""

    fill_tick: int
    mid_tick: int
    drain_tick: int


def idle_parts(pipeline: TrainingPipeline, timeline: Timeline) -> tuple[IdleParts, ...]:
    """`IdleParts` of every compute stream of `timeline` (the bubble split into fill, mid-schedule waits and
    drain; communication streams are not figures)."""
    p = pipeline.num_devices
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for x in timeline.placements:
        if x.device < p:
            first[x.device] = min(first.get(x.device, x.start_tick), x.start_tick)
            last[x.device] = max(last.get(x.device, x.end_tick), x.end_tick)
    begin, span = timeline.start_tick, timeline.makespan_tick
    out = []
    for d in range(p):
        idle = int(timeline.idle_tick[d])
        if d not in first:
            out.append(IdleParts(idle, 0, 0))
            continue
        fill, drain = first[d] - begin, begin + span - last[d]
        out.append(IdleParts(fill, idle - fill - drain, drain))
    return tuple(out)
