"""The neighbourhoods of the pipeline search: which tasks one step frees, around a point drawn by a seeded
`random.Random`, about `size` tasks each.

Drawn kinds (`KINDS`): ``window`` the tasks starting nearest a random tick, on every stream; ``microbatches`` the
tasks of `PipelineLnsPolicy.microbatches` consecutive micro-batches from a random one that start nearest the start
of a random one of them; ``devices`` the tasks of two adjacent devices (compute and communication streams) starting
nearest a random tick; ``critical`` a stretch of the incumbent's critical chain (tight predecessors, in the graph or
on the stream, back from the last end) and the tasks starting nearest its middle on the streams it crosses.

Never drawn, run as steps of their own (`ENDS_KINDS`, `planner.search.pipeline.half`): ``head`` the
`PipelineLnsPolicy.ends_share` of the tasks that start first (the fill), ``tail`` the share that start last (the
drain): hundreds of tasks where the drawn kinds free tens, because the fill and the drain only repack as a whole.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from formulations.pipeline import PipelineSetup, PipelineTimes
from planner.search.pipeline.policy import DEFAULT_LNS_POLICY, PipelineLnsPolicy

KINDS = ("window", "microbatches", "devices", "critical")
ENDS_KINDS = ("head", "tail")


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
                  rng: random.Random, policy: PipelineLnsPolicy = DEFAULT_LNS_POLICY) -> frozenset[int]:
    """About `size` tasks of kind `kind` (module docstring; shaped by `policy`), closed under `times`' chosen
    pairs."""
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
        pool = [t for t in range(n) if (acts[t].microbatch - first) % nmb < policy.microbatches]  # type: ignore[union-attr]
        free = _nearest(pool, start, start[rng.choice(pool)], size)
    elif kind == "devices":
        d = rng.randrange(p)
        pair = {d, (d + 1) % p}
        free = _nearest([t for t in range(n) if setup.device[t] % p in pair], start, rng.randrange(span), size)
    elif kind == "critical":
        chain = critical_chain(setup, times)
        length = max(1, min(len(chain), size // policy.critical_part))
        at = rng.randrange(max(1, len(chain) - length + 1))
        stretch = chain[at:at + length]
        streams = {setup.device[t] for t in stretch}
        middle = start[stretch[len(stretch) // 2]]
        free = set(stretch) | _nearest([t for t in range(n) if setup.device[t] in streams], start, middle,
                                       max(0, size - len(stretch)))
    elif kind in ENDS_KINDS:
        ranked = sorted(range(n), key=lambda t: (start[t], t))
        count = max(size, math.ceil(policy.ends_share * n))
        free = set(ranked[:count] if kind == "head" else ranked[-count:])
    else:
        raise ValueError(f"unknown neighbourhood kind {kind!r} (one of {KINDS + ENDS_KINDS})")
    for i in times.pairs:  # a chosen pair is freed whole or kept whole
        q = setup.pairs[i]
        if any(t in free for t in q.tasks):
            free.update(q.tasks)
    return frozenset(free)

