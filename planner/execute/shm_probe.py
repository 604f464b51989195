"""What a transfer through shared memory costs on this host, measured as the fast executor transfers.

`shm_link_figures(sizes_bytes, repeats)` forks two processes that ping-pong float32 tensors through a
`ShmTransport` (a send copies into the peer's slot and wakes it; a receive waits and views the slot): per size, the
one-way time is half the median round trip.  The latency is the one-way time of the smallest size; the bandwidth is
the largest size's bytes over its one-way time less that latency.  `plan-calibrate --transport shm` writes them as
the profile's intra-host link, so that plans for the fast executor price its transfers.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path

import torch

from planner.execute.partition import Transfer
from planner.execute.procs import run_forked
from planner.execute.shm_transport import ShmTransport
from planner.ir.graph import OpGraph
from planner.schedule.plan import Plan, PlanStatus, TaskPlacement

__all__ = ["ShmLink", "shm_link_figures", "crossing_s", "segment_overhead_s"]


class ShmLink:
    """One-way seconds per size, and the latency and bandwidth read from them (module docstring)."""

    def __init__(self, one_way_s: dict[int, float]) -> None:
        self.one_way_s = one_way_s
        small, large = min(one_way_s), max(one_way_s)
        self.latency_s = one_way_s[small]
        self.bandwidth_bytes_per_s = large / max(one_way_s[large] - self.latency_s, 1e-9)


def _transfers(size_bytes: int, repeats: int) -> list[Transfer]:
    n = max(1, size_bytes // 4)
    out = []
    for k in range(repeats):
        out.append(Transfer(f"ping{k}", 0, 1, k, 2 * k, (n,), "float", "", n * 4))
        out.append(Transfer(f"pong{k}", 1, 0, k, 2 * k + 1, (n,), "float", "", n * 4))
    return out


def _ping_pong(rank: int, transport: ShmTransport, transfers: list[Transfer]) -> list[float]:
    torch.set_num_threads(1)
    payload = torch.ones(transfers[0].shape)
    transport.barrier()
    rounds = []
    for k in range(0, len(transfers), 2):
        ping, pong = transfers[k], transfers[k + 1]
        t = time.perf_counter()
        if rank == 0:
            transport.send(ping, payload)
            transport.receive(pong)
        else:
            transport.send(pong, transport.receive(ping).clone())
        rounds.append(time.perf_counter() - t)
    transport.barrier()
    return rounds


def shm_link_figures(sizes_bytes: Sequence[int] = (64, 1 << 20), repeats: int = 50,
                     timeout_s: float = 120.0) -> ShmLink:
    """Measure the shared-memory link with two forked processes (module docstring); a size gets fewer round trips
    where `repeats` of them would hold more than 64 MiB of slots."""
    one_way: dict[int, float] = {}
    for size in sizes_bytes:
        transfers = _transfers(size, max(5, min(repeats, (64 << 20) // (2 * size))))
        transport = ShmTransport(transfers, 2, timeout_s)
        rounds = run_forked(2, partial(_ping_pong, transport=transport, transfers=transfers), timeout_s=timeout_s,
                            what="the shared-memory ping-pong", error=RuntimeError)[0]
        one_way[size] = statistics.median(rounds[len(rounds) // 5:]) / 2  # the first rounds warm the pages
    return ShmLink(one_way)


def _alternating_plan(graph: OpGraph, model_path: str | Path, chunk_ops: int, ranks: int) -> Plan:
    """A plan of `graph` on two devices: its ops in topological order, `chunk_ops` at a time, alternately on the
    `ranks` first devices (one rank: every op on the first)."""
    placements = tuple(TaskPlacement(op.name, (i // chunk_ops) % ranks, i, i + 1) for i, op in enumerate(graph.ops))
    return Plan("probe", placements, ("d0", "d1"), len(placements), 0, PlanStatus.HEURISTIC, "probe", tick_s=1.0,
                model_path=str(model_path))


def crossing_s(model_path: str | Path, crossings: int, repeat: int = 20) -> float:
    """What one crossing between ranks costs the fast executor end to end, in seconds: a chain of `crossings` + 1
    tiny ops (`onnx_segment.chain_model`, written to `model_path`) run on two ranks that alternate at every op,
    less the same chain on one rank, over `crossings`.  Beside the transfer itself (a copy, a semaphore) it holds
    what a ping-pong does not: the segment that ends and the one that starts (one engine call each), the
    receiver's wake-up and the rank loop's own work per segment.  The planner prices it on every transfer."""
    from planner.execute.fast_choice import RunConfig, run_config
    from planner.execute.program import default_feeds, prepared_graph
    from planner.ir.onnx_segment import chain_model

    Path(model_path).write_bytes(chain_model(crossings + 1))
    graph = prepared_graph(model_path)
    medians = []
    for ranks in (1, 2):
        trial, _ = run_config(_alternating_plan(graph, model_path, 1, ranks), graph, default_feeds(graph),
                              RunConfig(ranks, 1, "onnxruntime"), repeat=repeat, warmup=3)
        medians.append(trial.median_s)
    return max(0.0, (medians[1] - medians[0]) / crossings)


def segment_overhead_s(model_path: str | Path, op_s: Mapping[str, float], *, chunk_ops: int = 4,
                       repeat: int = 10) -> float:
    """What one segment of this model costs the fast executor beyond its ops' times, in seconds: the model's ops
    in topological order, `chunk_ops` at a time, alternately on two ranks (a transfer between every two chunks),
    run as plan-run runs them; the mean over segments of each segment's median time less the sum of its ops'
    `op_s`.  It holds the engine call with the segment's real inputs and outputs, the fusion a cut loses, and two
    ranks computing at once; never negative."""
    from planner.execute.fast_choice import RunConfig, run_config
    from planner.execute.partition import partition_plan
    from planner.execute.program import default_feeds, prepared_graph
    from planner.execute.segments import rank_segments

    graph = prepared_graph(model_path)
    plan = _alternating_plan(graph, model_path, chunk_ops, 2)
    _, run = run_config(plan, graph, default_feeds(graph), RunConfig(2, 1), repeat=repeat, warmup=3)
    part = partition_plan(plan, graph, 2, "the segment probe")
    extra = [seconds - sum(op_s.get(op, 0.0) for op in seg.ops)
             for rank in run.ranks for seg, seconds in zip(rank_segments(part, graph, rank.rank), rank.segment_s,
                                                           strict=True)]
    return max(0.0, statistics.fmean(extra)) if extra else 0.0
