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
* `runtime_post` seconds per receive: posting it (`irecv`) and, with `work_rows`, waiting for its data after the
                 sending op had ended (`recv_late_s`): the links' `recv_overhead`.

`work_rows` (the default in `plan-calibrate`): the ranks compute between their transfers, as in a run — each
step that is not an Add is an `Expand` of the 16 floats to `work_rows` x 16 and a `ReduceMean` back (memory-bound
work of about a tenth of a millisecond), so the messages stay 16 floats while both ranks are busy.  Ranks that only
exchange messages between ops of microseconds measure a transfer far cheaper than a run pays, because in a run
gloo's own threads wait for a core the computing ranks hold.  The late wait includes the transport's own latency,
which the link's `latency` (the ping-pong) counts too: a small double count beside what the wait measures.

No ONNX file: the probe's graph and program are built here (`RunSpec.programs`), so the probe needs torch only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

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
    work_rows: int = 0  # > 0: the ranks compute between transfers (module docstring)


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
            if not cross and spec.work_rows > 0:  # compute between transfers: small -> big -> small
                big, wide = f"r{r}_w{i}", (spec.work_rows, ELEMS)
                expand = f"r{r}_expand{i}"
                ops.append(Op(expand, "Expand", (last[r], "work_shape"), (big,), bytes_read=4 * ELEMS,
                              bytes_written=4 * ELEMS * spec.work_rows, output_bytes=4 * ELEMS * spec.work_rows))
                nodes[expand] = NodeSpec(expand, "Expand", "", (last[r], "work_shape"), (big,))
                tensors[big] = TensorInfo(big, wide, "float", 4 * ELEMS * spec.work_rows)
                if last[r] in producer:
                    edges.append(Edge(producer[last[r]], expand, last[r], 4 * ELEMS))
                placements.append(TaskPlacement(expand, r, 2 * i, 2 * i + 1))
                ops.append(Op(name, "ReduceMean", (big,), (out,), bytes_read=4 * ELEMS * spec.work_rows,
                              bytes_written=4 * ELEMS, output_bytes=4 * ELEMS))
                nodes[name] = NodeSpec(name, "ReduceMean", "", (big,), (out,), {"axes": [0], "keepdims": 0})
                tensors[out] = _tensor(out)
                edges.append(Edge(expand, name, big, 4 * ELEMS * spec.work_rows))
                placements.append(TaskPlacement(name, r, 2 * i + 1, 2 * i + 2))
                made.append((out, name))
                continue
            op_type = "Add" if cross else "Relu"
            ops.append(Op(name, op_type, reads, (out,), bytes_read=4 * ELEMS * len(reads), bytes_written=4 * ELEMS,
                          output_bytes=4 * ELEMS))
            nodes[name] = NodeSpec(name, op_type, "", reads, (out,))
            tensors[out] = _tensor(out)
            edges.extend(Edge(producer[t], name, t, 4 * ELEMS) for t in reads if t in producer)
            step = 2 if spec.work_rows > 0 else 1
            placements.append(TaskPlacement(name, r, step * i, step * i + 1))
            made.append((out, name))
        for r, (out, name) in enumerate(made):
            producer[out] = name
            last[r] = out
    constants: dict[str, torch.Tensor] = {}
    initializers: tuple[str, ...] = ()
    if spec.work_rows > 0:
        tensors["work_shape"] = TensorInfo("work_shape", (2,), "int64", 16)
        constants["work_shape"] = torch.tensor([spec.work_rows, ELEMS], dtype=torch.int64)
        initializers = ("work_shape",)
    graph = OpGraph.build("runtime-probe", ops, edges, tensors=tensors, graph_inputs=inputs, graph_outputs=last,
                          initializers=initializers)
    end = max(p.end_tick for p in placements)
    plan = Plan("runtime-probe", tuple(placements), tuple(f"cpu{r}" for r in range(spec.nproc)),
                end, end, PlanStatus.HEURISTIC, "probe", tick_s=1e-6, time_unit="s")
    return plan, graph, Program(nodes, constants, OPSET, graph)


def probe_samples(plan: Plan, graph: OpGraph, results: list[RankResult], work: bool = False
                  ) -> dict[str, list[float]]:
    """`runtime_loop`, `runtime_send`, `runtime_post` -> one sample per rank and repetition (module docstring);
    `work`: the probe computed between transfers, so a receive's late wait counts in `runtime_post`."""
    partition = partition_plan(plan, graph, len(plan.device_names))
    out: dict[str, list[float]] = {"runtime_loop": [], "runtime_send": [], "runtime_post": []}
    for i in range(len(results[0].runs)):
        for row in time_breakdown(plan, partition, results, i, graph):
            if row["ops"]:
                out["runtime_loop"].append(max(0.0, row["other_s"]) / row["ops"])
            if row["per_send_s"] is not None:
                out["runtime_send"].append(row["per_send_s"])
            if row["recvs"]:
                late = row["recv_late_s"] if work else 0.0
                out["runtime_post"].append((row["post_s"] + late) / row["recvs"])
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
    return probe_samples(plan, graph, results, work=spec.work_rows > 0)
