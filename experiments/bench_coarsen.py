"""Timing of `coarsen` on random layered DAGs (the `coarsen` section of `make bench`; never a pass/fail test).

`random_layered_instance(n, seed=...)` builds a reproducible instance shaped like a dataflow graph: tasks in layers
of random width, each task reading 1..3 tensors from the previous layer or (skip connections, 20%) from up to four
layers back; heterogeneous devices (per-device speed factors); each task's output is one tensor carried by all its
out-edges; one cross-device link class with latency and bandwidth.
"""

from __future__ import annotations

import time

import numpy as np

from planner.coarsen.pipeline import DEFAULT_TARGET_CLUSTERS, coarsen
from planner.cost.instance import UNBOUNDED_BYTES, SchedulingInstance


def random_layered_instance(n: int, *, seed: int = 0, mean_width: int = 32, num_devices: int = 4,
                            name: str | None = None) -> SchedulingInstance:
    """A random layered DAG of `n` tasks (see module); same seed, same instance."""
    rng = np.random.default_rng(seed)
    widths: list[int] = []
    while sum(widths) < n:
        widths.append(int(rng.integers(1, 2 * mean_width)))
    widths[-1] -= sum(widths) - n
    widths = [w for w in widths if w > 0]
    layer = np.repeat(np.arange(len(widths)), widths)
    first = np.concatenate([[0], np.cumsum(widths)[:-1]])
    width_arr = np.asarray(widths)
    dst_tasks = np.flatnonzero(layer > 0)
    fanin = rng.integers(1, 4, size=len(dst_tasks))
    dst = np.repeat(dst_tasks, fanin)
    back = np.where(rng.random(len(dst)) < 0.2, rng.integers(1, 5, size=len(dst)), 1)
    src_layer = np.maximum(layer[dst] - back, 0)
    src = first[src_layer] + (rng.random(len(dst)) * width_arr[src_layer]).astype(np.int64)
    pairs = np.unique(src * n + dst)
    src, dst = pairs // n, pairs % n
    base = rng.integers(1, 100, size=n)
    speed = rng.uniform(0.5, 2.0, size=num_devices)
    duration = np.maximum(1, np.round(base[:, None] / speed[None, :])).astype(np.int64)
    out_bytes = rng.integers(1_000, 1_000_000, size=n)
    tensor_names = [f"x{i}" for i in range(n)]
    src_list = src.tolist()
    return SchedulingInstance(
        name=name or f"layered{n}_s{seed}",
        task_names=tuple(f"layer{layer[i]}/op{i}" for i in range(n)),
        device_names=tuple(f"d{i}" for i in range(num_devices)),
        duration_tick=duration,
        edges=tuple(zip(src_list, dst.tolist())),
        edge_tensors=tuple((tensor_names[s],) for s in src_list),
        tensor_bytes=dict(zip(tensor_names, out_bytes.tolist())),
        edge_fixed_tick=np.zeros(len(src_list), dtype=np.int64),
        link_class=1 - np.eye(num_devices, dtype=np.int64),
        link_latency_tick=np.array([0.0, 5.0]),
        link_bytes_per_tick=np.array([np.inf, 1e4]),
        param_bytes=rng.integers(0, 1_000_000, size=n),
        activation_bytes=out_bytes.astype(np.int64),
        peak_internal_bytes=np.zeros(n, dtype=np.int64),
        capacity_bytes=np.full(num_devices, UNBOUNDED_BYTES, dtype=np.int64),
    )


def bench_coarsen(sizes: tuple[int, ...] | list[int] = (10_000, 100_000), *, seed: int = 0,
                  target_clusters: int = DEFAULT_TARGET_CLUSTERS) -> list[dict]:
    """One row per size: graph size, build and coarsen seconds, microseconds per task, stage seconds, results."""
    rows = []
    for n in sizes:
        t0 = time.perf_counter()
        inst = random_layered_instance(n, seed=seed)
        t1 = time.perf_counter()
        res = coarsen(inst, target_clusters=target_clusters)
        t2 = time.perf_counter()
        rows.append({
            "n_tasks": n,
            "n_edges": len(inst.edges),
            "build_s": round(t1 - t0, 4),
            "coarsen_s": round(t2 - t1, 4),
            "us_per_task": round(1e6 * (t2 - t1) / max(n, 1), 2),
            **{f"{k}_s": round(v, 4) for k, v in res.seconds.items()},
            "linear_clusters": res.num_linear_clusters,
            "repaired_clusters": res.num_repaired_clusters,
            "clusters": res.num_clusters,
            "critical_path_before_tick": round(res.critical_path_before_tick, 1),
            "critical_path_after_tick": round(res.critical_path_after_tick, 1),
            "cut_bytes": res.cut_bytes,
        })
    return rows


if __name__ == "__main__":  # python -m experiments.bench_coarsen
    for row in bench_coarsen():
        print(row)
