"""Helpers of the constraint-family and mutation-driven tests (`make mutate`): tiny instances written by hand, a
direct solve of a built model (no list-schedule fallback, no warm start), and an independent schedule check.

Kept apart from the other test modules' helpers on purpose: these tests must not share code with what they check.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from formulations.backends import available_backends, get_backend
from formulations.model_api import SolveParams, SolveStatus
from formulations.placement import build_placement_model
from planner.cost.instance import INELIGIBLE, SchedulingInstance

BACKENDS = tuple(available_backends())
UNBOUNDED = 2**50


def instance(name: str, durations, edges=(), *, link_class=None, latency=None, params=None, acts=None,
             internal=None, capacity=UNBOUNDED, edge_bytes=None) -> SchedulingInstance:
    """durations: per task a list of per-device ticks (None = ineligible); edges: (src, dst, fixed ticks).

    link_class: device x device class matrix (default: 0 on the diagonal, 1 elsewhere); latency: ticks per class.
    """
    n, nd = len(durations), len(durations[0])
    dur = np.array([[INELIGIBLE if v is None else v for v in row] for row in durations], dtype=np.int64)
    lc = 1 - np.eye(nd, dtype=np.int64) if link_class is None else np.asarray(link_class, dtype=np.int64)
    n_cls = int(lc.max()) + 1
    caps = capacity if isinstance(capacity, (list, tuple)) else [capacity] * nd
    return SchedulingInstance(
        name=name, task_names=tuple(f"t{i}" for i in range(n)), device_names=tuple(f"d{i}" for i in range(nd)),
        duration_tick=dur, edges=tuple((int(e[0]), int(e[1])) for e in edges),
        edge_tensors=tuple((f"{e[0]}->{e[1]}",) for e in edges),
        tensor_bytes={f"{e[0]}->{e[1]}": (0 if edge_bytes is None else int(edge_bytes[i])) for i, e in
                      enumerate(edges)},
        edge_fixed_tick=np.array([int(e[2]) for e in edges], dtype=np.int64),
        link_class=lc, link_latency_tick=np.zeros(n_cls) if latency is None else np.asarray(latency, float),
        link_bytes_per_tick=np.full(n_cls, np.inf),
        param_bytes=np.array(params or [0] * n, dtype=np.int64),
        activation_bytes=np.array(acts or [0] * n, dtype=np.int64),
        peak_internal_bytes=np.array(internal or [0] * n, dtype=np.int64),
        capacity_bytes=np.array(caps, dtype=np.int64))


@dataclass(frozen=True)
class Solved:
    status: SolveStatus
    makespan: int | None
    device: tuple[int, ...]
    start: tuple[int, ...]
    end: tuple[int, ...]
    objective: float | None = None


def solve_model(inst: SchedulingInstance, backend: str, *, horizon: int = 100, fix=None, **kw) -> Solved:
    """Build the placement model on `backend` and solve it to optimality; read the schedule back.

    `fix(model, builder)` may add constraints before the solve (e.g. pin variables to a hint's values)."""
    builder = get_backend(backend).new_builder()
    m = build_placement_model(inst, builder, horizon=horizon, **kw)
    if fix is not None:
        fix(m, builder)
    res = builder.solve(SolveParams(time_limit_s=20, threads=1, seed=0))
    if not res.has_solution:
        return Solved(res.status, None, (), (), ())
    assert res.status is SolveStatus.OPTIMAL, res.status
    dev = tuple(next(d for d in m.eligible[t] if res.bool_value(m.x[t, d])) for t in range(inst.num_tasks))
    start = tuple(res.int_value(m.start[t]) for t in range(inst.num_tasks))
    end = tuple(start[t] + int(inst.duration_tick[t, dev[t]]) for t in range(inst.num_tasks))
    return Solved(res.status, res.int_value(m.makespan), dev, start, end, res.objective)


def overlaps(sol: Solved) -> list[tuple[int, int]]:
    """Pairs of tasks that run at the same time on one device (by hand, not the project's validator)."""
    out = []
    n = len(sol.device)
    for a in range(n):
        for b in range(a + 1, n):
            if sol.device[a] == sol.device[b] and sol.start[a] < sol.end[b] and sol.start[b] < sol.end[a] \
                    and sol.end[a] > sol.start[a] and sol.end[b] > sol.start[b]:
                out.append((a, b))
    return out
