"""Random DAG instances for the coarsening tests (hypothesis strategies and small builders; no tests here)."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import strategies as st

from planner.cost.instance import INELIGIBLE, SchedulingInstance


@st.composite
def random_dags(draw, max_tasks: int = 24, heterogeneous: bool = True, ineligible: bool = True,
                zero_comm: bool = False) -> SchedulingInstance:
    """A random DAG built with `SchedulingInstance.uniform` (edges i -> j, i < j), then per-device durations."""
    n = draw(st.integers(1, max_tasks))
    devices = draw(st.integers(1, 3))
    durations = draw(st.lists(st.integers(0, 30), min_size=n, max_size=n))
    density = draw(st.floats(0.05, 0.5))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    edges = [(i, j, 0 if zero_comm else int(rng.integers(0, 15)))
             for i in range(n) for j in range(i + 1, n) if rng.random() < density]
    params = rng.integers(0, 100, size=n).tolist()
    acts = rng.integers(0, 100, size=n).tolist()
    inst = SchedulingInstance.uniform("rand", durations, edges, devices, param_bytes=params, activation_bytes=acts)
    if heterogeneous and devices > 1:
        dur = (inst.duration_tick * rng.uniform(0.5, 2.0, size=(n, devices))).round().astype(np.int64)
        if ineligible:
            ban = rng.random((n, devices)) < 0.2
            ban[np.arange(n), rng.integers(0, devices, size=n)] = False  # every task eligible somewhere
            dur[ban] = INELIGIBLE
        inst = dataclasses.replace(inst, duration_tick=dur)
    return inst


def layered_chain(n: int) -> SchedulingInstance:
    return SchedulingInstance.uniform("chain", [5] * n, [(i, i + 1, 3) for i in range(n - 1)], 2)
