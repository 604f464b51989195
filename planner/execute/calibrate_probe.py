"""`plan-calibrate`'s runtime probe: what our rank loop pays per op and per transfer, measured through that loop.

The cost model prices an op by its roofline plus `launch_overhead` (one op through `run_node`, timed in a block of
calls of one op) and a transfer by the link (latency + bytes / bandwidth, from a ping-pong whose ranks do nothing
else).  A real run pays more: the rank loop around each op (checking reads, the trace's bookkeeping, releasing
tensors), ops called among different ops, and on both sides of every transfer the runtime's own work — packing
and posting the send on the sender, posting the receive on the receiver — taken from the time of the ranks' ops.

The probe is a plan that is nothing but that overhead: `nproc` chains of `ops_per_rank` tiny ops (16 floats; Relu,
and every `every`-th op an Add that also reads the previous rank's chain at the same step, so that every rank
sends and receives once per `every` ops), one chain per rank, run by the real runtime (`dist.launch_local`,
`repeat` measured repetitions after a warm-up) with the ranks' usual trace.  From each rank's time breakdown
(`run_breakdown`) of each repetition:

* `runtime_loop` seconds per op that the rank loop spends outside the ops, the transfers and the tail (its
                 `other_s` / ops: checking reads, the trace's bookkeeping, releasing tensors): the profile's
                 `op_overhead`.  Measured in the same run as the ops, so it needs no subtraction of a figure
                 measured at another moment (on a loaded machine the launch overhead measured minutes earlier
                 was larger than the probe's whole time per op, and a difference came out below zero);
* `runtime_send` seconds per send event (pack + isend + reaping): the profile's links' `send_overhead`;
* `runtime_post` seconds per posted receive (`irecv`): the links' `recv_overhead`.

No ONNX file: the probe's graph and program are built here (`RunSpec.programs`), so the probe needs torch only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.execute.dist import RankResult, RunSpec, launch_local
from planner.execute.partition import partition_plan
from planner.execute.program import Program
from planner.execute.run_breakdown import time_breakdown
from planner.ir.graph import Edge, Op, OpGraph, TensorInfo
from planner.ir.onnx_values import NodeSpec
from planner.schedule.plan import Plan, PlanStatus, TaskPlacement

__all__ = ["ProbeSpec", "probe_plan", "probe_samples", "run_probe"]

ELEMS = 16  # floats per probe tensor: a tiny op, whose roofline is negligible beside its overhead
OPSET = 17


@dataclass(frozen=True)
class ProbeSpec:
    nproc: int = 1
    ops_per_rank: int = 120
    every: int = 4  # an Add reading the previous rank's chain every `every` ops (with nproc > 1)
    repeat: int = 5
    threads: int = 1
    timeout_s: float = 300.0


def _tensor(name: str) -> TensorInfo:
    return TensorInfo(name, (ELEMS,), "float", 4 * ELEMS)


def probe_plan(spec: ProbeSpec) -> tuple[Plan, OpGraph, Program]:
    """The probe's plan (chain r on device r, step i in ticks [i, i + 1)), its graph and its program."""
    ops: list[Op] = []
    edges: list[Edge] = []
    nodes: dict[str, NodeSpec] = {}
    tensors: dict[str, TensorInfo] = {}
    placements: list[TaskPlacement] = []
    inputs = [f"x{r}" for r in range(spec.nproc)]
    for name in inputs:
        tensors[name] = _tensor(name)
    last = list(inputs)
    producer: dict[str, str] = {}
    for i in range(spec.ops_per_rank):
        made = []
        for r in range(spec.nproc):
            name, out = f"r{r}_op{i}", f"r{r}_t{i}"
            cross = spec.nproc > 1 and i % spec.every == spec.every - 1
            reads = (last[r], last[(r - 1) % spec.nproc]) if cross else (last[r],)
            op_type = "Add" if cross else "Relu"
            ops.append(Op(name, op_type, reads, (out,), bytes_read=4 * ELEMS * len(reads), bytes_written=4 * ELEMS,
                          output_bytes=4 * ELEMS))
            nodes[name] = NodeSpec(name, op_type, "", reads, (out,))
            tensors[out] = _tensor(out)
            edges.extend(Edge(producer[t], name, t, 4 * ELEMS) for t in reads if t in producer)
            placements.append(TaskPlacement(name, r, i, i + 1))
            made.append((out, name))
        for r, (out, name) in enumerate(made):
            producer[out] = name
            last[r] = out
    graph = OpGraph.build("runtime-probe", ops, edges, tensors=tensors, graph_inputs=inputs, graph_outputs=last)
    plan = Plan("runtime-probe", tuple(placements), tuple(f"cpu{r}" for r in range(spec.nproc)),
                spec.ops_per_rank, spec.ops_per_rank, PlanStatus.HEURISTIC, "probe", tick_s=1e-6, time_unit="s")
    return plan, graph, Program(nodes, {}, OPSET, graph)


def probe_samples(plan: Plan, graph: OpGraph, results: list[RankResult]) -> dict[str, list[float]]:
    """`runtime_loop`, `runtime_send`, `runtime_post` -> one sample per rank and repetition (module docstring)."""
    partition = partition_plan(plan, graph, len(plan.device_names))
    out: dict[str, list[float]] = {"runtime_loop": [], "runtime_send": [], "runtime_post": []}
    for i in range(len(results[0].runs)):
        for row in time_breakdown(plan, partition, results, i, graph):
            if row["ops"]:
                out["runtime_loop"].append(max(0.0, row["other_s"]) / row["ops"])
            if row["per_send_s"] is not None:
                out["runtime_send"].append(row["per_send_s"])
            if row["per_post_s"] is not None:
                out["runtime_post"].append(row["per_post_s"])
    return {k: v for k, v in out.items() if v}


def run_probe(spec: ProbeSpec) -> dict[str, list[float]]:
    """Run the probe on `spec.nproc` forked gloo ranks; its samples (`probe_samples`)."""
    plan, graph, program = probe_plan(spec)
    partition = partition_plan(plan, graph, spec.nproc)
    rng = np.random.default_rng(0)
    feeds = {name: rng.standard_normal(ELEMS).astype(np.float32) for name in graph.graph_inputs}
    run = RunSpec("", graph, partition, feeds, repeat=spec.repeat, warmup=1, run_timeout_s=spec.timeout_s,
                  threads=spec.threads, programs=tuple(program for _ in range(spec.nproc)))
    results = launch_local(run)
    return probe_samples(plan, graph, results)
