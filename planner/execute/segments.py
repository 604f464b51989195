"""A rank's share of a plan as straight-line segments: runs of ops between two communication points.

No torch here: plain data computed from a `Partition`.

A rank runs its ops in the partition's order.  A segment ends after an op whose outputs other ranks read (so the
send starts as soon as the tensor exists) and before an op that reads a tensor another rank makes (so the wait
for it comes as late as the order allows); everything between is one run that an engine executes in one call.
Each segment names what it reads from outside (`inputs`: feeds, received tensors or earlier segments' outputs;
never constants), what must survive it (`outputs`: read by a later op of the rank, sent, or a graph output the
rank holds), the tensors to receive right before it (`receive`, in the order the rank first reads them) and the
transfers to start right after it (`send`, in the producers' order).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.execute.partition import Partition, Transfer
from planner.ir.graph import OpGraph

__all__ = ["Segment", "rank_segments"]


@dataclass(frozen=True)
class Segment:
    """One run of ops on a rank (module docstring)."""

    ops: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    receive: tuple[str, ...] = ()
    send: tuple[Transfer, ...] = ()


def _cuts(ops: tuple[str, ...], received: set[str], sends: dict[str, list[Transfer]], graph: OpGraph
          ) -> list[tuple[str, ...]]:
    runs: list[list[str]] = [[]]
    arrived: set[str] = set()
    for name in ops:
        needs = [t for t in graph.op(name).reads if t in received and t not in arrived]
        if needs and runs[-1]:
            runs.append([])
        arrived.update(needs)
        runs[-1].append(name)
        if name in sends:
            runs.append([])
    return [tuple(run) for run in runs if run]


def rank_segments(partition: Partition, graph: OpGraph, rank: int) -> tuple[Segment, ...]:
    """The rank's ops cut into segments (module docstring); an idle rank has none."""
    ops = partition.rank_ops[rank]
    sends = partition.sends_after(rank)
    received = {tr.tensor for lst in partition.incoming(rank).values() for tr in lst}
    constants = set(graph.initializers)
    kept = set(partition.outputs) if rank == 0 else set()
    runs = _cuts(ops, received, sends, graph)
    later_reads: list[set[str]] = [set() for _ in runs]  # tensors read by the runs after run i
    seen: set[str] = set()
    for i in range(len(runs) - 1, -1, -1):
        later_reads[i] = set(seen)
        seen.update(t for name in runs[i] for t in graph.op(name).reads)
    segments = []
    arrived: set[str] = set()
    for i, run in enumerate(runs):
        made: list[str] = []
        reads: list[str] = []
        for name in run:
            op = graph.op(name)
            reads.extend(t for t in op.reads if t not in made and t not in constants)
            made.extend(t for t in op.writes if t)
        inputs = tuple(dict.fromkeys(reads))
        out_sends = tuple(tr for name in run for tr in sends.get(name, ()))
        wanted = later_reads[i] | {tr.tensor for tr in out_sends} | kept
        outputs = tuple(t for t in made if t in wanted)
        receive = tuple(t for t in inputs if t in received and t not in arrived)
        arrived.update(receive)
        segments.append(Segment(run, inputs, outputs, receive, out_sends))
    return tuple(segments)
