"""Random layered task graphs with a chosen communication-to-computation ratio (the engine bench and the
planner's property test).

`layered_dag(n, devices, seed=..., comm_ratio=...)`: tasks in layers of about `width` (default ~sqrt(n), varied
+-50 % per layer), each task after the first layer reads 1..3 tasks of the layer above and, with probability 0.2,
one of two layers above (a skip edge).  Durations 10..100 ticks on identical devices (or scaled by per-device
speeds 1x..2x when `heterogeneous`); each task's output (one tensor) takes `comm_ratio` x the mean duration x
uniform(0.5, 1.5) ticks to reach another device (bytes over a bandwidth of one byte per tick, no latency), nothing
on its own device.
Memory is unbounded unless `capacity_bytes` is given.  Everything is drawn from `numpy.random.default_rng(seed)`,
so a seed names one graph.
"""

from __future__ import annotations

import numpy as np

from planner.cost.instance import UNBOUNDED_BYTES, SchedulingInstance

MEAN_DURATION_TICK = 55.0


def layered_dag(num_tasks: int, num_devices: int, *, seed: int = 0, comm_ratio: float = 1.0,
                width: int | None = None, heterogeneous: bool = False,
                capacity_bytes: int = UNBOUNDED_BYTES) -> SchedulingInstance:
    """A reproducible layered DAG instance (module docstring)."""
    rng = np.random.default_rng(seed)
    n, d = int(num_tasks), int(num_devices)
    width = width or max(2, int(round(np.sqrt(n))))
    layers: list[list[int]] = []
    t = 0
    while t < n:
        w = max(1, min(n - t, int(round(width * rng.uniform(0.5, 1.5)))))
        layers.append(list(range(t, t + w)))
        t += w
    base = rng.integers(10, 101, size=n)
    speed = rng.uniform(1.0, 2.0, size=d) if heterogeneous else np.ones(d)
    duration = np.maximum(1, np.rint(base[:, None] / speed[None, :])).astype(np.int64)
    edges: list[tuple[int, int]] = []
    for li in range(1, len(layers)):
        above = layers[li - 1]
        for v in layers[li]:
            k = int(rng.integers(1, 4))
            srcs = set(rng.choice(above, size=min(k, len(above)), replace=False).tolist())
            if li >= 2 and rng.random() < 0.2:
                srcs.add(int(rng.choice(layers[li - 2])))
            edges += [(u, v) for u in sorted(srcs)]
    comm = np.maximum(1, np.rint(comm_ratio * MEAN_DURATION_TICK * rng.uniform(0.5, 1.5, size=n)))
    link = np.ones((d, d), dtype=np.int64)
    np.fill_diagonal(link, 0)
    return SchedulingInstance(
        name=f"layered-{n}x{d}-c{comm_ratio:g}-s{seed}",
        task_names=tuple(f"t{i}" for i in range(n)),
        device_names=tuple(f"dev{i}" for i in range(d)),
        duration_tick=duration,
        edges=tuple(edges),
        edge_tensors=tuple((f"x{u}",) for u, _ in edges),
        tensor_bytes={f"x{u}": int(c) for u, c in enumerate(comm)},
        edge_fixed_tick=np.zeros(len(edges), dtype=np.int64),
        link_class=link,
        link_latency_tick=np.array([0.0, 0.0]),
        link_bytes_per_tick=np.array([np.inf, 1.0]),
        param_bytes=np.zeros(n, dtype=np.int64),
        activation_bytes=np.ones(n, dtype=np.int64),
        peak_internal_bytes=np.zeros(n, dtype=np.int64),
        capacity_bytes=np.full(d, capacity_bytes, dtype=np.int64),
    )
