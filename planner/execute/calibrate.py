"""`plan-calibrate`'s measurements: what this machine achieves with `nproc` ranks running at once.

Every rank is a forked process (`planner.execute.procs`) with `torch.set_num_threads(threads)`, as `plan-run`'s
ranks are (one thread each by default), and every measurement runs on all ranks at the same time, so each figure is
what one rank gets while the others work too: the concurrency a plan runs under.  Each figure is measured `repeats`
times; one repeat times a block of calls long enough to be well above the clock's resolution (`block_s`) and
divides by the number of calls.  A figure's value is the median over repeats and ranks; its spread is the
(max - min) / median of those samples.

* **launch overhead**: our runtime's cost of one op (`program.run_node` of Relu, Add, Reshape, Softmax and
  LayerNormalization on one-element tensors: the op table's dispatch, the context, torch's eager calls), the median
  over the five.
* **FLOP/s** (`float`; `double` on matrix products): `torch.matmul` and `torch.nn.functional.conv2d` of a few sizes,
  FLOPs = 2 x multiply-accumulates as the cost model counts them; the rate of one size is its FLOPs / (time per call
  - the overhead of a bare one-element torch call), so that the cost model's `flops / peak + launch overhead` gives
  the op's time through our runtime back (the subtraction at most halves the time: a size too small to time cannot
  report an absurd rate).  The profile's rate is the median over the sizes.
* **memory bandwidth**: `torch.add(a, b, out=c)` on float32 vectors larger than the caches, bytes = two reads and
  one write (the cost model's bytes read + written), net of the bare call's overhead as above.
* **gloo point-to-point**: ranks in pairs (0-1, 2-3, ...; an odd last rank idles), blocking send/recv ping-pong;
  one-way time = round trip / 2 per message size; latency and bandwidth = intercept and 1 / slope of the robust
  (Theil-Sen) line of one-way time over message bytes, so that one size hit by TCP's small-message delays (a few
  hundred bytes can take milliseconds one way where a kilobyte takes tens of microseconds) cannot set every
  transfer's latency (`p2p_samples`; when noise tilts
  the line below zero: the smallest message's time, the largest message's bytes / its time).
* **per-op-type cost factors** (unless `op_factors` is off): each op of a small, documented suite of representative
  ops (`planner.execute.calibrate_ops.SUITE`: Conv of several shapes incl. 1x1 and depthwise, MatMul, Gemm, the
  pools, LRN, BatchNormalization, elementwise ops, Concat, Softmax, LayerNormalization), built by the importer
  and run by `program.run_node` (the kernels a `plan-run` rank calls), one call at a time in sequence as a
  model's ops run (`_rep_ops`); the
  profile's `op_cost_factors` table is fitted per op type against the roofline of the figures above
  (`planner.execute.calibrate_fit`).
* **the runtime probe** (unless `runtime_probe` is off; CPU only): a plan of small ops with memory-bound work
  between its transfers, run by the real runtime on `nproc` ranks after the measurements above
  (`planner.execute.calibrate_probe`): the rank loop's own seconds per op around `run_node` (the profile's
  `op_overhead`), per send (the links' `send_overhead`) and per receive, posting it and waiting for its data after
  the sender's op had ended (`recv_overhead`).
* **host sharing** (`nproc` > 1 on CPUs, unless `sharing` is off): per repeat, one float matmul and one conv of
  the sizes above (`_sharing_ops`; blocks of twice `block_s`) timed on all ranks at once (the concurrency of
  every figure above) and then on each rank alone while the others wait in a barrier (`_sharing`); each rank's
  `nproc` x concurrent / solo rate is a sample of the host's effective parallelism (`planner.cost.sharing`), the
  profile's `hosts[].sharing`.  On a host whose cores share caches and memory bandwidth (or other jobs), ranks
  computing together can each run at half their rate alone, so a rank computing alone (a pipeline's fill, a
  dependency, a transfer) may run up to twice as fast as the figures above say.
* `--device cuda` (for GPU hosts; never needed by the tests): rank r measures GPU r (`torch.set_default_device`),
  the clock is read after `torch.cuda.synchronize()`, the point-to-point figures are NCCL's, and the sizes are
  `GPU_SIZES` (products up to 8192^3, vectors of 1 GiB: the CPU sizes measure a GPU's launches and its L2).
* `--model M`: every rank runs the whole model's ops in topological order (one rank's program of all ops), each op
  timed alone; the op's time is the mean over repeats and ranks (preemption on a loaded machine is part of what a
  plan must budget for; a run report spreads it over a rank's ops instead, `planner.execute.run_report`).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.distributed as dist
import torch.nn.functional as F

from planner.errors import OpplanError
from planner.execute.calibrate_fit import FactorFit, OpSample, fit_op_cost_factors, robust_line, roofline_s
from planner.execute.calibrate_ops import QUICK_SUITE, SUITE, RepOp, RepSpec, build_suite
from planner.execute.calibrate_probe import ProbeSpec, run_probe
from planner.execute.dist import RunFailed
from planner.execute.procs import free_port, run_forked
from planner.execute.program import (
    Program,
    check_supported,
    default_feeds,
    load_program,
    prepared_graph,
    run_node,
    to_tensor,
)
from planner.ir.graph import Op, OpGraph
from planner.ir.onnx_values import NodeSpec
from planner.ir.topology import Device

__all__ = ["CalibrationFailed", "CalibrationSpec", "Figure", "Calibration", "calibrate", "default_sizes", "SIZES",
           "GPU_SIZES", "QUICK_SIZES", "Sizes", "per_call_s", "rate_samples", "tiny_program", "p2p_samples"]


class CalibrationFailed(OpplanError):
    """A measuring rank raised, died or timed out."""

    exit_status = 1


# (m, k, n) of matmul; (channels in, height = width, channels out, kernel) of conv2d (batch 1, stride 1, same
# padding); float32 elements of each vector of the bandwidth test; p2p message bytes.
@dataclass(frozen=True)
class Sizes:
    matmul: tuple[tuple[int, int, int], ...]
    conv: tuple[tuple[int, int, int, int], ...]
    vector_elems: int
    message_bytes: tuple[int, ...]
    block_s: float
    op_suite: tuple[RepSpec, ...] = SUITE
    probe_ops: int = 120  # tiny ops per rank of the runtime probe
    probe_work_rows: int = 8192  # the probe's work between transfers (`ProbeSpec.work_rows`; 0: none)


SIZES = Sizes(matmul=((128, 128, 128), (256, 256, 256), (512, 512, 512), (32, 768, 3072)),
              conv=((64, 56, 64, 3), (128, 28, 128, 3), (256, 14, 256, 1), (96, 28, 16, 1)),
              vector_elems=8 * 2**20, message_bytes=(256, 1024, 16 * 1024, 256 * 1024, 2**20, 4 * 2**20),
              block_s=0.02)
# A GPU's sizes (`--device cuda`): the CPU sizes above are launch-bound on a data-centre GPU (their matmuls reach a
# fraction of its tensor-core rate) and their vectors fit its tens of MB of L2 (reading as faster than its HBM), so
# products big enough to reach the tensor pipes' rate and vectors of 1 GiB.
GPU_SIZES = Sizes(matmul=((2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (8192, 1024, 4096)),
                  conv=((256, 112, 256, 3), (512, 56, 512, 3), (1024, 28, 1024, 1), (256, 56, 64, 1)),
                  vector_elems=2**28, message_bytes=(256, 4096, 2**16, 2**20, 2**24, 2**26), block_s=0.05)
QUICK_SIZES = Sizes(matmul=((32, 32, 32), (64, 64, 64)), conv=((8, 16, 8, 3),), vector_elems=2**16,
                    message_bytes=(256, 4096, 65536), block_s=0.002, op_suite=QUICK_SUITE, probe_ops=24,
                    probe_work_rows=256)


def default_sizes(device: str, quick: bool = False) -> Sizes:
    """The sizes `plan-calibrate` measures with: `QUICK_SIZES` when quick, else `GPU_SIZES` on "cuda", else `SIZES`."""
    return QUICK_SIZES if quick else GPU_SIZES if device == "cuda" else SIZES


@dataclass(frozen=True)
class CalibrationSpec:
    nproc: int = 1
    threads: int = 1
    repeats: int = 5
    sizes: Sizes = SIZES
    model_path: str | None = None
    timeout_s: float = 600.0
    progress: bool = True
    op_factors: bool = True  # time the representative ops and fit the profile's op_cost_factors table
    device: str = "cpu"  # or "cuda": rank r measures GPU r, p2p over NCCL (never needed by the tests)
    runtime_probe: bool = True  # run the runtime probe (CPU): op_overhead, send_overhead, recv_overhead
    sharing: bool = True  # measure solo vs concurrent throughput (nproc > 1, CPU): the host's effective parallelism
    # rounds of the representative-op suite per repeat, the median kept: one round is at the mercy of one preemption
    rep_rounds: int = 3


@dataclass
class Figure:
    """One measured figure: every sample (repeats x ranks), its median and spread; `how` says how."""

    name: str
    unit: str
    samples: list[float]
    how: str

    @property
    def value(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread(self) -> float:
        """(max - min) / median of the samples (0 for one sample)."""
        v = self.value
        return (max(self.samples) - min(self.samples)) / v if v else 0.0


@dataclass
class Calibration:
    """What `calibrate` measured: figures by name (see the module docstring) and, with a model, op -> seconds."""

    spec: CalibrationSpec
    figures: dict[str, Figure]
    op_seconds: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    torch_version: str = ""
    device_memory_bytes: int = 0  # with device "cuda": the smallest GPU's memory; 0 on CPUs
    rep_ops: list[tuple[str, str, Op]] = field(default_factory=list)  # (op type, label, the planner's Op) timed

    # profile figure -> the prefixes of the measured figures it is the median of
    SOURCES: ClassVar[dict[str, tuple[str, ...]]] = {
               "float_flops": ("matmul_float ", "conv_float "), "double_flops": ("matmul_double ",),
               "memory_bandwidth": ("memory_bandwidth",), "launch_overhead": ("launch_overhead",),
               "link_latency": ("p2p_latency",), "link_bandwidth": ("p2p_bandwidth",),
               "op_overhead": ("runtime_loop",), "send_overhead": ("runtime_send",), "recv_overhead": ("runtime_post",),
               "effective_parallelism": ("host_parallelism",)}

    def contributing(self, figure: str) -> list[Figure]:
        """The measured figures a profile figure is the median of."""
        return [fig for k, fig in self.figures.items() if k.startswith(self.SOURCES[figure])]

    def profile_figures(self) -> dict[str, float | None]:
        """The profile's figures (keys of `SOURCES`): each the median of its contributing figures' medians."""
        out: dict[str, float | None] = {}
        for key in self.SOURCES:
            values = [fig.value for fig in self.contributing(key)]
            out[key] = statistics.median(values) if values else None
        return out

    def op_cost_fits(self) -> dict[str, FactorFit]:
        """op type -> its fitted factor (`planner.execute.calibrate_fit`) against the roofline of this
        calibration's own profile figures; empty when no representative op was timed."""
        if not self.rep_ops:
            return {}
        fig = self.profile_figures()
        peak = {"float": float(fig["float_flops"] or 1e9)}
        if fig.get("double_flops"):
            peak["double"] = float(fig["double_flops"] or 0)
        launch_s = float(fig["launch_overhead"] or 0.0)
        device = Device("calibrated", "measured", "host", peak, 1, float(fig["memory_bandwidth"] or 1e9), launch_s)
        samples = [OpSample(op_type, label, roofline_s(op, device), self.figures[f"opcost {op_type} {label}"].value)
                   for op_type, label, op in self.rep_ops if f"opcost {op_type} {label}" in self.figures]
        return fit_op_cost_factors(samples, launch_s)


# ------------------------------------------------------------------------------------------------ timing
def _settle() -> None:
    """Wait for queued GPU work before reading the clock (nothing to wait for on a CPU)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def per_call_s(fn: Callable[[], object], block_s: float) -> float:
    """Seconds per call of `fn`, timed over a block of calls lasting about `block_s` (at least one call)."""
    fn()
    _settle()
    t = time.perf_counter()
    fn()
    _settle()
    once = max(time.perf_counter() - t, 1e-7)
    calls = max(1, min(100_000, int(block_s / once)))
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    _settle()
    return (time.perf_counter() - t) / calls


def rate_samples(work: float, fn: Callable[[], object], call_s: float, block_s: float, repeats: int) -> list[float]:
    """`repeats` samples of `work` (FLOPs or bytes) per second of `fn`, each net of `call_s`, the bare torch call's
    own overhead (the profile's launch overhead adds our runtime's back); the time is at most halved by the
    subtraction, so that a size too small to time cannot report an absurd rate."""
    samples = []
    for _ in range(repeats):
        per_call = per_call_s(fn, block_s)
        samples.append(work / max(per_call - call_s, per_call * 0.5))
    return samples


class _Progress:
    """Rank 0's progress line on stderr: `[i/n] what`."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled, self.total, self.done = enabled, total, 0

    def step(self, what: str) -> None:
        self.done += 1
        if self.enabled:
            print(f"plan-calibrate: [{self.done}/{self.total}] {what}", file=sys.stderr, flush=True)


def tiny_program() -> tuple[Program, list[NodeSpec], dict[str, torch.Tensor]]:
    """Five one-element ops run through our op table, as a rank runs its ops."""
    graph = OpGraph.build("launch-probe", [], [])
    nodes = [NodeSpec("relu", "Relu", "", ("x",), ("r",)), NodeSpec("add", "Add", "", ("x", "x"), ("a",)),
             NodeSpec("reshape", "Reshape", "", ("x", "shape"), ("s",)),
             NodeSpec("softmax", "Softmax", "", ("x",), ("m",), {"axis": -1}),
             NodeSpec("ln", "LayerNormalization", "", ("x", "one", "one"), ("n",), {"axis": -1, "epsilon": 1e-5})]
    program = Program({n.name: n for n in nodes}, {}, 17, graph)
    env = {"x": torch.ones(1, 1), "one": torch.ones(1), "shape": torch.tensor([1, 1], dtype=torch.int64)}
    return program, nodes, env


def _measure(rank: int, spec: CalibrationSpec, init: str, reps: Sequence[RepOp] = ()) -> dict[str, Any]:
    """Everything one rank measures: name -> list of samples (one per repeat), and op -> samples with a model."""
    torch.set_num_threads(spec.threads)
    sizes = spec.sizes
    world = spec.nproc
    timeout = timedelta(seconds=spec.timeout_s)
    memory_bytes = 0
    if spec.device == "cuda":  # every tensor made below lands on this rank's GPU
        torch.cuda.set_device(rank)
        torch.set_default_device(f"cuda:{rank}")
        memory_bytes = int(torch.cuda.get_device_properties(rank).total_memory)
    if world > 1:
        dist.init_process_group("nccl" if spec.device == "cuda" else "gloo", init_method=init, rank=rank,
                                world_size=world, timeout=timeout)

    def sync() -> None:
        if world > 1:
            dist.barrier()

    shares = world > 1 and spec.sharing and spec.device == "cpu"
    steps = 4 + (1 if world > 1 else 0) + (1 if spec.model_path else 0)
    progress = _Progress(spec.progress and rank == 0, steps)
    out: dict[str, list[float]] = {}
    ops_out: dict[str, list[float]] = {}
    try:
        with torch.inference_mode():
            program, nodes, env = tiny_program()
            sync()
            for node in nodes:
                out[f"launch_overhead {node.op_type}"] = [
                    per_call_s(partial(run_node, node, env, program), sizes.block_s) for _ in range(spec.repeats)]
            launch = statistics.median(v for k, vs in out.items() if k.startswith("launch") for v in vs)
            one = torch.ones(1)
            out["torch_call one-element add"] = [per_call_s(lambda: torch.add(one, one), sizes.block_s)
                                                 for _ in range(spec.repeats)]
            call = statistics.median(out["torch_call one-element add"])
            progress.step(f"per-op overhead: {launch * 1e6:.1f} us through our runtime, {call * 1e6:.1f} us of a "
                          "bare torch call")

            def rate(work: float, fn: Callable[[], object]) -> list[float]:
                return rate_samples(work, fn, call, sizes.block_s, spec.repeats)

            for dtype, dname in ((torch.float32, "float"), (torch.float64, "double")):
                for m, k, n in sizes.matmul:
                    a, b = torch.rand(m, k, dtype=dtype), torch.rand(k, n, dtype=dtype)
                    sync()
                    out[f"matmul_{dname} {m}x{k}x{n}"] = rate(2.0 * m * k * n, partial(torch.matmul, a, b))
            progress.step("matrix products (float, double)")
            for cin, hw, cout, kernel in sizes.conv:
                x, w = torch.rand(1, cin, hw, hw), torch.rand(cout, cin, kernel, kernel)
                flops = 2.0 * cout * hw * hw * cin * kernel * kernel
                sync()
                out[f"conv_float {cin}x{hw}x{hw}->{cout} k{kernel}"] = rate(
                    flops, partial(F.conv2d, x, w, padding=kernel // 2))
            shared = ""
            if shares:  # one progress step with the convolutions: both time compute kernels
                out.update(_sharing(rank, world, sizes, spec.repeats, call, sync))
                e = statistics.median(v for k, vs in out.items() if k.startswith("host_parallelism") for v in vs)
                shared = f"; host sharing, each rank alone vs all at once (effective parallelism {e:.2f})"
            progress.step("convolutions (float)" + shared)
            a, b, c = (torch.rand(sizes.vector_elems) for _ in range(3))
            sync()
            out["memory_bandwidth add"] = rate(3.0 * 4 * sizes.vector_elems, lambda: torch.add(a, b, out=c))
            if reps:  # one progress step with the bandwidth: both price the ops by what they move
                out.update(_rep_ops(reps, spec, sync))
            progress.step("memory bandwidth (add of float32 vectors)" + (
                f"; {len(reps)} representative ops of {len({r.spec.op_type for r in reps})} op types" if reps else ""))
            if world > 1:
                out.update(p2p_samples(rank, world, sizes, spec.repeats))
                progress.step("gloo point-to-point latency and bandwidth")
            if spec.model_path:
                ops_out = _model_ops(spec, sync)
                progress.step(f"model ops of {Path(spec.model_path).name}")
        sync()
    finally:
        if world > 1:
            dist.destroy_process_group()
    return {"figures": out, "ops": ops_out, "memory_bytes": memory_bytes}


def _sharing(rank: int, world: int, sizes: Sizes, repeats: int, call_s: float, sync: Callable[[], None]
             ) -> dict[str, list[float]]:
    """Solo vs concurrent throughput (module docstring): per op of `_sharing_ops`, per repeat, this rank's rate
    with all `world` ranks computing at once, then alone (rank by rank; the others wait in the next barrier, which
    blocks on a socket rather than spinning), and `world` x concurrent / solo."""
    out: dict[str, list[float]] = {}
    for what, work, fn in _sharing_ops(sizes):
        concurrent, solo = [], []
        for _ in range(repeats):
            sync()
            concurrent += rate_samples(work, fn, call_s, 2 * sizes.block_s, 1)
            for turn in range(world):
                sync()
                if turn == rank:
                    solo += rate_samples(work, fn, call_s, 2 * sizes.block_s, 1)
        out[f"sharing_concurrent {what}"] = concurrent
        out[f"sharing_solo {what}"] = solo
        out[f"host_parallelism {what}"] = [world * c / s for c, s in zip(concurrent, solo, strict=True)]
    sync()
    return out


def _sharing_ops(sizes: Sizes) -> list[tuple[str, float, Callable[[], object]]]:
    """(label, FLOPs, call) of the ops the sharing measurement times: the middle matmul and the first conv size."""
    m, k, n = sizes.matmul[len(sizes.matmul) // 2]
    a, b = torch.rand(m, k), torch.rand(k, n)
    ops: list[tuple[str, float, Callable[[], object]]] = [
        (f"matmul {m}x{k}x{n}", 2.0 * m * k * n, partial(torch.matmul, a, b))]
    if sizes.conv:
        cin, hw, cout, kernel = sizes.conv[0]
        x, w = torch.rand(1, cin, hw, hw), torch.rand(cout, cin, kernel, kernel)
        ops.append((f"conv {cin}x{hw}x{hw}->{cout} k{kernel}", 2.0 * cout * hw * hw * cin * kernel * kernel,
                    partial(F.conv2d, x, w, padding=kernel // 2)))
    return ops




def _rep_ops(reps: Sequence[RepOp], spec: CalibrationSpec, sync: Callable[[], None]) -> dict[str, list[float]]:
    """`opcost <type> <label>` -> seconds of one call of that representative op through our runtime, per repeat.

    Timed as `_model_ops` times a model's ops (and as a rank runs them): one call at a time, the suite in
    sequence, so that each op meets the caches the ops before it left.  Not a block of calls of one op: the same op
    on the same cache-hot tensors runs several times faster than it does inside a model run.
    Each repeat runs the suite `spec.rep_rounds` times (after a warm-up round) and keeps each op's median."""
    device = torch.get_default_device()
    calls = [(f"opcost {rep.key}", partial(run_node, rep.node, {k: v.to(device) for k, v in rep.env.items()},
                                           rep.program)) for rep in reps]
    out: dict[str, list[float]] = {key: [] for key, _ in calls}
    for _, call in calls:  # warm-up: first calls allocate, and load kernels
        call()
    for _ in range(spec.repeats):
        sync()
        rounds: dict[str, list[float]] = {key: [] for key, _ in calls}
        for _ in range(spec.rep_rounds):
            for key, call in calls:
                t = time.perf_counter()
                call()
                _settle()
                rounds[key].append(time.perf_counter() - t)
        for key, times in rounds.items():
            out[key].append(statistics.median(times))
    return out


def p2p_samples(rank: int, world: int, sizes: Sizes, repeats: int) -> dict[str, list[float]]:
    """One-way seconds per message size, ping-pong between rank pairs (0-1, 2-3, ...; an odd last rank idles):
    blocking send/recv, one-way = round trip / 2, averaged over a block of round trips, the repeats of one size
    after another.  Empty on an idle rank.

    latency and bandwidth per repeat: intercept and 1 / slope of the robust (Theil-Sen) line through (bytes,
    one-way) (`calibrate_fit.robust_line`), not the smallest message's one-way time: one small size hit by TCP's
    small-message delays would price every transfer of a plan milliseconds too high.  One-way sends timed on the
    host's monotonic clock meet the same delays, so they are no way around it."""
    partner = rank + 1 if rank % 2 == 0 else rank - 1
    active = partner < world
    out: dict[str, list[float]] = {}

    def ping_pong(buf: torch.Tensor) -> None:
        if rank % 2 == 0:
            dist.send(buf, dst=partner)
            dist.recv(buf, src=partner)
        else:
            dist.recv(buf, src=partner)
            dist.send(buf, dst=partner)

    bufs = [torch.zeros(max(1, size // 4), dtype=torch.float32) for size in sizes.message_bytes]
    if active:  # gloo connects a pair on its first message: keep that out of the timings
        for buf in bufs:
            ping_pong(buf)
    samples: dict[int, list[float]] = {buf.numel() * 4: [] for buf in bufs}
    # sizes outermost: with repeats outermost (each repeat running every size in turn) every size measured the
    # 256-byte message's 4-5 ms here, as if the small messages' delays carried over to the next sizes
    for buf in bufs:
        size = buf.numel() * 4
        for _ in range(repeats):
            dist.barrier()
            if not active:
                continue
            rounds = max(2, min(200, int(sizes.block_s / (1e-4 + size / 1e9))))
            t = time.perf_counter()
            for _ in range(rounds):
                ping_pong(buf)
            _settle()
            samples[size].append((time.perf_counter() - t) / rounds / 2)
    if not active:
        return out
    out.update({f"p2p_oneway {size}": times for size, times in samples.items()})
    if len(samples) >= 2:
        xs = sorted(samples)
        out["p2p_latency"], out["p2p_bandwidth"] = [], []
        for i in range(repeats):
            ys = [samples[x][i] for x in xs]
            latency_s, s_per_byte = robust_line(xs, ys)
            # a line through noise (tiny sizes, --quick) can tilt below zero at either end: then the smallest
            # message's time as the latency, the largest message's bytes / its time as the bandwidth (a lower bound)
            out["p2p_latency"].append(latency_s if latency_s > 0 else ys[0])
            out["p2p_bandwidth"].append(1.0 / s_per_byte if s_per_byte > 0 else xs[-1] / ys[-1])
    return out


def _model_ops(spec: CalibrationSpec, sync: Callable[[], None]) -> dict[str, list[float]]:
    """op -> seconds per repeat: the whole model in topological order, each op timed alone (our runtime's call)."""
    assert spec.model_path is not None
    graph = prepared_graph(spec.model_path)
    program = load_program(graph, spec.model_path)
    device = torch.get_default_device()
    program.constants.update({k: v.to(device) for k, v in program.constants.items()})
    feeds = {k: to_tensor(v).to(device) for k, v in default_feeds(graph).items()}
    order = [op.name for op in graph.ops]
    samples: dict[str, list[float]] = {name: [] for name in order}
    for rep in range(spec.repeats + 1):  # the first pass warms up
        env = dict(feeds)
        env.update(program.constants)
        sync()
        for name in order:
            t = time.perf_counter()
            run_node(program.nodes[name], env, program)
            _settle()
            if rep:
                samples[name].append(time.perf_counter() - t)
    return samples


# ------------------------------------------------------------------------------------------------ the run
_HOW = {
    "launch_overhead": "our runtime's run_node of a one-element {what}, block of calls / calls",
    "torch_call": "a bare torch.add of one-element tensors, block of calls / calls",
    "matmul_float": "torch.matmul float32 {what}, 2*m*k*n FLOPs / (time per call - bare call)",
    "matmul_double": "torch.matmul float64 {what}, 2*m*k*n FLOPs / (time per call - bare call)",
    "conv_float": "F.conv2d float32 batch 1 {what}, 2*MACs / (time per call - bare call)",
    "memory_bandwidth": "torch.add(a, b, out=c) of float32 vectors, 3 x vector bytes / (time per call - bare call)",
    "p2p_oneway": "gloo send/recv ping-pong of {what} bytes, round trip / 2",
    "p2p_latency": "intercept of the Theil-Sen line of one-way time over message bytes",
    "p2p_bandwidth": "1 / slope of the Theil-Sen line of one-way time over message bytes",
    "opcost": "our runtime's run_node of the representative op {what}, one call timed, the suite in sequence; "
              "median of 3 rounds per repeat",
    "runtime_loop": "the runtime probe (chains of tiny ops run by plan-run's rank loop on all ranks): per rank and "
                    "repetition, the loop's time outside ops, transfers and the tail / ops",
    "runtime_send": "the runtime probe: per rank and repetition, time packing and posting sends / send events",
    "runtime_post": "the runtime probe: per rank and repetition, (time posting receives (irecv) + waiting for their "
                    "data after the sending op had ended) / receives, the ranks computing between transfers",
    "sharing_concurrent": "{what} float32 with every rank computing at once, FLOPs / (time per call - bare call)",
    "sharing_solo": "{what} float32 on one rank while the others wait in a barrier, FLOPs / (time per call - bare "
                    "call)",
    "host_parallelism": "nproc x (rate of {what} with every rank computing) / (its rate alone), per rank and repeat",
}
_UNITS = {"launch_overhead": "s", "torch_call": "s", "matmul_float": "FLOP/s", "matmul_double": "FLOP/s",
          "conv_float": "FLOP/s",
          "memory_bandwidth": "B/s", "p2p_oneway": "s", "p2p_latency": "s", "p2p_bandwidth": "B/s", "opcost": "s",
          "runtime_loop": "s", "runtime_send": "s", "runtime_post": "s", "sharing_concurrent": "FLOP/s",
          "sharing_solo": "FLOP/s", "host_parallelism": "x"}


def calibrate(spec: CalibrationSpec) -> Calibration:
    """Measure with `spec.nproc` ranks at once (module docstring); CalibrationFailed if a rank fails."""
    if spec.model_path:
        check_supported(prepared_graph(spec.model_path), spec.model_path)
    init = f"tcp://127.0.0.1:{free_port()}"
    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="opplan-calibrate-") as scratch:
        # built here, before the fork: every rank inherits the same ops (and the import's cost stays untimed)
        reps = build_suite(spec.sizes.op_suite, Path(scratch)) if spec.op_factors else []
        results = run_forked(spec.nproc, lambda rank: _measure(rank, spec, init, reps), timeout_s=spec.timeout_s,
                             what="calibration", error=CalibrationFailed, name="opplan-calibrate")
    merged: dict[str, list[float]] = {}
    if spec.runtime_probe and spec.device == "cpu":
        if spec.progress:
            print("plan-calibrate: runtime probe (ops through the rank loop, sends, receives between work)",
                  file=sys.stderr, flush=True)
        probe = ProbeSpec(nproc=spec.nproc, ops_per_rank=spec.sizes.probe_ops, repeat=spec.repeats,
                          threads=spec.threads, timeout_s=spec.timeout_s, work_rows=spec.sizes.probe_work_rows)
        try:
            merged.update({f"{k} through the rank loop": v for k, v in run_probe(probe).items()})
        except RunFailed as exc:  # a probe rank failed: reported as the calibration's ranks' failures are
            raise CalibrationFailed(f"the runtime probe failed: {exc}") from None
    wall = time.perf_counter() - t
    ops: dict[str, list[float]] = {}
    for res in results:
        for k, v in res["figures"].items():
            merged.setdefault(k, []).extend(v)
        for k, v in res["ops"].items():
            ops.setdefault(k, []).extend(v)
    figures = {}
    for key, samples in merged.items():
        if not samples:
            continue
        kind, _, what = key.partition(" ")
        figures[key] = Figure(key, _UNITS[kind], samples, _HOW[kind].format(what=what))
    op_seconds = {k: statistics.fmean(v) for k, v in ops.items() if v}
    gpu_memory = min((int(res["memory_bytes"]) for res in results), default=0)
    return Calibration(spec, figures, op_seconds, wall, str(torch.__version__), gpu_memory,
                       [(r.spec.op_type, r.spec.label, r.op) for r in reps])

