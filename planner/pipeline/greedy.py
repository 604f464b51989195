"""A constructive schedule of the split model (F, B, W as separate tasks) by list scheduling: a warm start for the
pipeline formulation that any placement gets, two-direction included (`formulations.pipeline`).

Rule (event-driven; a device that is free at tick t picks among its tasks that are ready at t, taking on each
stage the micro-batches in order, as the formulation's ``fifo`` family does):

1. the ready B whose chain position is latest (nearest the loss), ties to the lower micro-batch;
2. else the ready F, the stage with the fewest forwards started first (balances the two directions of DualPipe's
   placement), if its activation fits under the device's cap *and* fewer than `max_in_flight` micro-batches
   (F started, W not ended) are on the device;
3. else the oldest ready W;
4. else the device waits for the next event.

Applies to pipelines without communication streams (`stream_greedy` schedules those: `best_greedy` hands them
over); edge delays are respected.  `best_greedy` tries a few `max_in_flight` values and returns the shortest schedule
that fits the cap.  Memory follows `metrics.pipeline_memory` (allocated at F's start, A^B freed at B's end, the rest
at W's end).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence

from planner.pipeline.stream_greedy import best_stream_list
from planner.pipeline.unroll import TrainingPipeline, unroll


def _candidate_picker(pipeline: TrainingPipeline, cap: Sequence[int], max_in_flight: int, idx: Mapping[str, int],
                      pos: Mapping[int, int], nxt: dict[tuple[int, str], int], done_pred: list[bool],
                      ready_at: list[int], mem: list[int], in_flight: list[int]) -> Callable[[int, int], str | None]:
    """candidates(d, now): the task device d starts at `now` under the module's rule (B, then F, then W), or None.
    The lists and dicts are the loop's own state, read as it changes."""
    nmb = pipeline.num_microbatches

    def candidates(d: int, now: int) -> str | None:
        best_b = best_f = best_w = None
        for s in pipeline.device_stages(d):
            for k in "FBW":
                m = nxt[(s, k)]
                if m >= nmb:
                    continue
                name = f"{s}{k}{m}"
                t = idx[name]
                if not done_pred[t] or ready_at[t] > now:
                    continue
                if k == "B":
                    key = (-pos[s], m)
                    if best_b is None or key < best_b[0]:
                        best_b = (key, name)
                elif k == "F":
                    a = int(pipeline.stages[s].activation_bytes)
                    if mem[d] + a > cap[d] or in_flight[d] >= max_in_flight:
                        continue
                    key = (nxt[(s, "F")], -pos[s])
                    if best_f is None or key < best_f[0]:
                        best_f = (key, name)
                else:
                    key = (m, -pos[s])
                    if best_w is None or key < best_w[0]:
                        best_w = (key, name)
        for c in (best_b, best_f, best_w):
            if c is not None:
                return c[1]
        return None

    return candidates


def _dispatcher(pipeline: TrainingPipeline, candidates: Callable[[int, int], str | None], idx: Mapping[str, int],
                dur: Mapping[str, int], nxt: dict[tuple[int, str], int], busy: list[bool], mem: list[int],
                in_flight: list[int], out: dict[str, int], ends: list[tuple[int, int, int]]) -> Callable[[int], int]:
    """dispatch(now): start a task on every idle device that has one, in device order; returns how many started."""
    p = pipeline.num_devices

    def dispatch(now: int) -> int:
        started = 0
        for d in range(p):
            if busy[d]:
                continue
            name = candidates(d, now)
            if name is None:
                continue
            s, k = _stage(name), _kind(name)
            nxt[(s, k)] += 1
            out[name] = now
            started += 1
            busy[d] = True
            if k == "F":
                mem[d] += int(pipeline.stages[s].activation_bytes)
                in_flight[d] += 1
            heapq.heappush(ends, (now + dur[name], d, idx[name]))
        return started

    return dispatch


def greedy_times(pipeline: TrainingPipeline, cap: Sequence[int], max_in_flight: int) -> dict[str, int] | None:
    """Start tick of every split task under the module's rule, or None when it gets stuck (the cap or
    `max_in_flight` admits no progress) or the pipeline has communication streams."""
    if pipeline.streams_on or pipeline.stage_to_device is None:
        return None
    inst = unroll(pipeline)
    std = pipeline.stage_to_device
    p = pipeline.num_devices
    idx = inst.task_index
    pos = {s: i for c in pipeline.chains for i, s in enumerate(c)}
    dur = {n: int(inst.duration_tick[t, std[_stage(n)]]) for t, n in enumerate(inst.task_names)}
    pending = [len(inst.predecessors[t]) for t in range(inst.num_tasks)]
    ready_at = [0] * inst.num_tasks
    done_pred = [False] * inst.num_tasks  # all predecessors ended
    for t in range(inst.num_tasks):
        done_pred[t] = pending[t] == 0
    nxt = {(s, k): 0 for s in range(pipeline.num_stages) for k in "FBW"}
    mem = [sum(int(pipeline.stages[s].param_bytes) for s in pipeline.device_stages(d)) for d in range(p)]
    in_flight = [0] * p
    started = 0
    total = inst.num_tasks
    out: dict[str, int] = {}
    busy = [False] * p
    ends: list[tuple[int, int, int]] = []  # (end tick, device, task)
    times: list[int] = [0]  # ticks at which something may become ready
    candidates = _candidate_picker(pipeline, cap, max_in_flight, idx, pos, nxt, done_pred, ready_at, mem, in_flight)
    dispatch = _dispatcher(pipeline, candidates, idx, dur, nxt, busy, mem, in_flight, out, ends)
    while times or ends:
        now = min(times[0] if times else ends[0][0], ends[0][0] if ends else times[0])
        while times and times[0] <= now:
            heapq.heappop(times)
        while ends and ends[0][0] <= now:
            _, d, t = heapq.heappop(ends)
            name = inst.task_names[t]
            stage, kind = _stage(name), _kind(name)
            busy[d] = False
            cost = pipeline.stages[stage]
            if kind == "B":
                mem[d] -= int(cost.activation_freed_by_b_bytes)
            elif kind == "W":
                mem[d] -= int(cost.activation_bytes) - int(cost.activation_freed_by_b_bytes)
                in_flight[d] -= 1
            for v, e in inst.successors[t]:
                pending[v] -= 1
                ready_at[v] = max(ready_at[v], now + inst.comm(e, std[stage], std[_stage(inst.task_names[v])]))
                if pending[v] == 0:
                    done_pred[v] = True
                    heapq.heappush(times, ready_at[v])
        started += dispatch(now)
    return out if started == total else None


def _kind(name: str) -> str:
    return name[len(name) - len(name.lstrip("0123456789"))]


def _stage(name: str) -> int:
    return int(name[:len(name) - len(name.lstrip("0123456789"))])


def best_greedy(pipeline: TrainingPipeline, cap: Sequence[int]) -> tuple[dict[str, int], int] | None:
    """(times, makespan) of the shortest `greedy_times` over max_in_flight in 1..min(2 * micro-batches, what the
    cap can hold), or None; on a pipeline with communication streams, `stream_greedy.best_stream_list`'s."""
    if pipeline.streams_on:
        return best_stream_list(pipeline, cap)
    inst = unroll(pipeline)
    best = None
    std = pipeline.stage_to_device
    if std is None:
        return None
    p = pipeline.num_devices
    acts = [int(c.activation_bytes) for c in pipeline.stages if int(c.activation_bytes) > 0]
    limit = 2 * pipeline.num_microbatches
    if acts:
        room = max(int(cap[d]) - sum(int(pipeline.stages[s].param_bytes) for s in pipeline.device_stages(d))
                   for d in range(p))
        limit = max(1, min(limit, room // min(acts)))
    for k in range(1, limit + 1):
        times = greedy_times(pipeline, cap, k)
        if times is None:
            continue
        span = max(times[n] + int(inst.duration_tick[t, std[_stage(n)]]) for t, n in enumerate(inst.task_names))
        if best is None or span < best[1]:
            best = (times, span)
    return best
