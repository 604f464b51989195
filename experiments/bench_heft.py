"""Random layered task graphs and HEFT timings (`bench_heft`: the `heft` section of `make bench`; never a
pass/fail test)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable, Sequence

import numpy as np

from planner.cost.instance import UNBOUNDED_BYTES, SchedulingInstance
from planner.heuristics.list_schedule import heft
from planner.heuristics.memory import smallest_feasible_capacity_bytes


def random_layered_instance(
    num_tasks: int,
    num_devices: int = 8,
    *,
    seed: int = 0,
    width: int | None = None,
    fan_in: int = 3,
    heterogeneous: bool = True,
    capacity_bytes: int = UNBOUNDED_BYTES,
) -> SchedulingInstance:
    """A layered DAG: `width` tasks per layer (default ~sqrt(n)), each with 1..fan_in inputs from the layer above.

    Durations 1..100 ticks scaled per device (speeds 1x..2x when `heterogeneous`); each task's output 1 KiB..1 MiB,
    sent over two link classes (fast: 10 ticks + 1 GB/tick-ish; slow: 50 ticks + 10x less bandwidth), devices
    grouped in two islands of the fast class.
    """
    rng = np.random.default_rng(seed)
    n, d = int(num_tasks), int(num_devices)
    width = width or max(1, int(np.sqrt(n)))
    base = rng.integers(1, 101, size=n)
    speed = rng.uniform(1.0, 2.0, size=d) if heterogeneous else np.ones(d)
    duration = np.maximum(1, np.rint(base[:, None] / speed[None, :])).astype(np.int64)
    layer = np.arange(n) // width
    src_list, dst_list = [], []
    for t in range(width, n):
        lo = (layer[t] - 1) * width
        k = int(rng.integers(1, fan_in + 1))
        srcs = np.unique(rng.integers(lo, lo + width, size=k))
        src_list.append(srcs)
        dst_list.append(np.full(len(srcs), t))
    src = np.concatenate(src_list) if src_list else np.zeros(0, dtype=np.int64)
    dst = np.concatenate(dst_list) if dst_list else np.zeros(0, dtype=np.int64)
    edges = tuple(zip(src.tolist(), dst.tolist(), strict=True))
    act = rng.integers(1 << 10, 1 << 20, size=n).astype(np.int64)
    island = np.arange(d) % 2
    link = np.where(island[:, None] == island[None, :], 1, 2).astype(np.int64)
    np.fill_diagonal(link, 0)
    return SchedulingInstance(
        name=f"layered-{n}x{d}-s{seed}",
        task_names=tuple(f"t{i}" for i in range(n)),
        device_names=tuple(f"dev{i}" for i in range(d)),
        duration_tick=duration,
        edges=edges,
        edge_tensors=tuple((f"x{s}",) for s, _ in edges),
        tensor_bytes={f"x{i}": int(act[i]) for i in range(n)},
        edge_fixed_tick=np.zeros(len(edges), dtype=np.int64),
        link_class=link,
        link_latency_tick=np.array([0.0, 2.0, 10.0]),
        link_bytes_per_tick=np.array([np.inf, 2.0**17, 2.0**14]),
        param_bytes=rng.integers(0, 1 << 20, size=n).astype(np.int64),
        activation_bytes=act,
        peak_internal_bytes=np.zeros(n, dtype=np.int64),
        capacity_bytes=np.full(d, capacity_bytes, dtype=np.int64),
    )


def bench_heft(sizes: Iterable[int] = (1_000, 10_000, 100_000), *, num_devices: int = 8, seed: int = 0,
               insertion: Iterable[bool] = (True, False), memory_limited: bool = False) -> list[dict]:
    """HEFT wall time per instance size (one row per size and insertion setting).

    `memory_limited` gives every device 1.5x the smallest capacity rule (so the memory tracker runs).
    """
    rows = []
    for n in sizes:
        inst = random_layered_instance(n, num_devices, seed=seed)
        if memory_limited:
            total = int(inst.param_bytes.sum() + inst.activation_bytes.sum())
            cap = max(int(1.5 * smallest_feasible_capacity_bytes(inst)), total // num_devices * 2)
            inst = random_layered_instance(n, num_devices, seed=seed, capacity_bytes=cap)
        for ins in insertion:
            t0 = time.perf_counter()
            plan = heft(inst, insertion=ins)
            wall = time.perf_counter() - t0
            rows.append({
                "method": plan.method,
                "num_tasks": n,
                "num_edges": len(inst.edges),
                "num_devices": num_devices,
                "insertion": ins,
                "memory_limited": memory_limited,
                "wall_s": round(wall, 4),
                "solve_time_s": round(plan.solve_time_s, 4),
                "makespan_tick": plan.makespan_tick,
                "lower_bound_tick": plan.lower_bound_tick,
                "gap": round(plan.gap, 4),
            })
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m experiments.bench_heft`: no options; `--help` prints what it measures, an unknown flag is an error
    (exit 2), before anything runs."""
    about = (__doc__ or "").split("\n\n")[0]
    argparse.ArgumentParser(prog="python -m experiments.bench_heft", description=about).parse_args(argv)
    for row in bench_heft((1_000, 10_000)):
        print(row)


if __name__ == "__main__":
    main()
