"""The fast executor: each rank runs its share of a plan as straight-line segments, each on its fastest engine.

A rank cuts its ops into segments at its communication points (`segments.rank_segments`) and builds, per segment,
every engine it may use (`engines`: torch as prepared calls, onnxruntime on the segment cut out as a model).  With
`engine="auto"` the warm-up repetitions run every engine on every segment, on the same inputs, and time them;
from then on each segment runs on the engine whose median was lowest (the first warm-up is left out: it pays
the engines' first-call allocations).  `engine="torch"` or `"onnxruntime"` fixes the engine (a segment
onnxruntime refuses stays on torch).  Tensors cross ranks through shared memory (`shm_transport`): a send is one
copy into the receiver's slot, a receive is a view of it.  Between repetitions every rank meets at a barrier;
within one, a rank drops each tensor after its last use.

`launch_fast(spec)` forks one process per rank on this host (`procs.run_forked`: a rank that fails or hangs
stops the run with its error).  A rank's `threads` are onnxruntime's intra-op threads; torch's kernels run on one
thread there, since OpenMP's thread pool (torch's) cannot start in a process forked from one that already used it
(the child waits forever on a lock held by a thread it did not inherit).  Every rank
reports, per measured repetition, its start on the host's monotonic clock and its end, so that the run's makespan
is the latest end less the earliest start (`FastRun.makespans_s`).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from planner.errors import OpplanError
from planner.execute.engines import Engine, EngineUnavailable, OrtEngine, TorchEngine
from planner.execute.partition import Partition
from planner.execute.procs import run_forked
from planner.execute.program import Program, load_program, to_tensor
from planner.execute.segments import Segment, rank_segments
from planner.execute.shm_transport import ShmTransport
from planner.ir.graph import OpGraph
from planner.ir.onnx_segment import SegmentSpec, segment_models

__all__ = ["FastSpec", "FastRankResult", "FastRun", "FastRunFailed", "launch_fast", "ENGINE_CHOICES"]

ENGINE_CHOICES = ("auto", "torch", "onnxruntime")


class FastRunFailed(OpplanError):
    """A rank of the fast executor raised, died or timed out; the message names the rank and its error."""

    exit_status = 1


@dataclass(frozen=True)
class FastSpec:
    """What every rank needs: the model, its planned graph, the partition and the inputs, and how to run."""

    model_path: str
    graph: OpGraph
    partition: Partition
    feeds: dict[str, np.ndarray]
    threads: int = 1
    engine: str = "auto"
    repeat: int = 10
    warmup: int = 3
    comm_timeout_s: float = 60.0
    run_timeout_s: float = 600.0


@dataclass
class FastRankResult:
    """One rank: build seconds; per measured repetition its start (host monotonic clock) and seconds to its end,
    and its compute seconds; per segment the engine it ran on and its median seconds; rank 0's outputs."""

    rank: int
    build_s: float
    starts_s: list[float]
    ends_s: list[float]
    busy_s: list[float]
    engines: tuple[str, ...]
    segment_s: tuple[float, ...]
    segment_ops: tuple[int, ...]
    outputs: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class FastRun:
    """Every rank's result of one launch."""

    ranks: tuple[FastRankResult, ...]

    @property
    def makespans_s(self) -> list[float]:
        """Per measured repetition: the latest rank end less the earliest rank start."""
        reps = len(self.ranks[0].ends_s)
        return [max(r.starts_s[i] + r.ends_s[i] for r in self.ranks) - min(r.starts_s[i] for r in self.ranks)
                for i in range(reps)]

    @property
    def makespan_s(self) -> float:
        return statistics.median(self.makespans_s)

    @property
    def outputs(self) -> dict[str, np.ndarray]:
        return self.ranks[0].outputs

    def engine_counts(self) -> dict[str, int]:
        """Engine name -> how many segments ran on it, over all ranks."""
        counts: dict[str, int] = {}
        for r in self.ranks:
            for name in r.engines:
                counts[name] = counts.get(name, 0) + 1
        return counts


def _engines(spec: FastSpec, segments: tuple[Segment, ...], program: Program, env: dict[str, torch.Tensor]
             ) -> list[list[Engine]]:
    """Per segment, the engines it may run on, in the order tried (module docstring)."""
    torch_engines: list[Engine] = [TorchEngine(seg, program, env) for seg in segments]
    if spec.engine == "torch" or not segments:
        return [[e] for e in torch_engines]
    models = segment_models(spec.graph, spec.model_path,
                            [SegmentSpec(s.ops, s.inputs, s.outputs) for s in segments])
    out: list[list[Engine]] = []
    for seg, model, te in zip(segments, models, torch_engines, strict=True):
        try:
            ort_engine = OrtEngine(seg, model, spec.threads, spin=spec.partition.world_size == 1)
        except EngineUnavailable:
            out.append([te])
            continue
        out.append([ort_engine] if spec.engine == "onnxruntime" else [te, ort_engine])
    return out


def _needed_after(segments: tuple[Segment, ...], kept: set[str]) -> list[set[str]]:
    needed: list[set[str]] = []
    later = set(kept)
    for seg in reversed(segments):
        needed.append(set(later))
        later.update(seg.inputs)
    return needed[::-1]


class _Rank:
    """One rank's prepared work: segments, engines, the environment and what to drop when."""

    def __init__(self, rank: int, spec: FastSpec, transport: ShmTransport) -> None:
        torch.set_num_threads(1)  # see the module docstring: a rank's threads are onnxruntime's
        t = time.perf_counter()
        part = spec.partition
        self.rank, self.spec, self.transport = rank, spec, transport
        self.segments = rank_segments(part, spec.graph, rank)
        ops = part.rank_ops[rank]
        program = load_program(spec.graph, spec.model_path, ops) if ops else Program({}, {}, 1, spec.graph)
        self.base = {k: to_tensor(v) for k, v in spec.feeds.items()}
        self.base.update(program.constants)
        self.env: dict[str, torch.Tensor] = {}
        self.choices = _engines(spec, self.segments, program, self.env)
        needed = _needed_after(self.segments, set(part.outputs) if rank == 0 else set())
        # per segment, the tensors no later segment reads: dropped right after it (computed once, not per run)
        self.drops = [tuple(t for t in (*seg.inputs, *(w for op in seg.ops for w in spec.graph.op(op).writes))
                            if t not in needed[i] and t not in self.base) for i, seg in enumerate(self.segments)]
        self.incoming = {tr.tensor: tr for lst in part.incoming(rank).values() for tr in lst}
        read = {t for seg in self.segments for t in seg.receive}
        self.unread = tuple(t for t in self.incoming if t not in read)
        self.times: list[list[list[float]]] = [[[] for _ in c] for c in self.choices]
        self.build_s = time.perf_counter() - t

    def repetition(self, measure_all: bool) -> tuple[float, float, float]:
        """One repetition: (start on the monotonic clock, seconds to the end, compute seconds)."""
        env, transport = self.env, self.transport
        env.clear()
        env.update(self.base)
        transport.barrier()
        t0 = time.perf_counter()
        busy = 0.0
        for i, seg in enumerate(self.segments):
            for t in seg.receive:
                env[t] = transport.receive(self.incoming[t])
            engines = self.choices[i] if measure_all else self.choices[i][:1]
            for k, engine in enumerate(engines):
                s = time.perf_counter()
                engine(env)
                dt = time.perf_counter() - s
                busy += dt
                self.times[i][k].append(dt)
            for tr in seg.send:
                transport.send(tr, env[tr.tensor])
            for t in self.drops[i]:
                env.pop(t, None)
        for t in self.unread:  # graph outputs sent to rank 0
            env[t] = transport.receive(self.incoming[t])
        return t0, time.perf_counter() - t0, busy

    def settle_engines(self) -> None:
        """Keep, per segment, the engine whose warm-up median was lowest (the first call left out)."""
        for i, times in enumerate(self.times):
            medians = [statistics.median(ts[1:] or ts or [0.0]) for ts in times]
            best = min(range(len(medians)), key=medians.__getitem__)
            self.choices[i] = [self.choices[i][best]]
            self.times[i] = [[]]


def fast_rank(rank: int, spec: FastSpec, transport: ShmTransport) -> FastRankResult:
    """Everything one rank does (module docstring)."""
    work = _Rank(rank, spec, transport)
    starts, ends, busy = [], [], []
    with torch.inference_mode():
        for _ in range(spec.warmup):
            work.repetition(measure_all=True)
        work.settle_engines()
        for _ in range(spec.repeat):
            t0, end, b = work.repetition(measure_all=False)
            starts.append(t0)
            ends.append(end)
            busy.append(b)
        outputs = {k: work.env[k].contiguous().numpy().copy() for k in spec.partition.outputs} if rank == 0 else {}
    transport.barrier()
    return FastRankResult(rank, work.build_s, starts, ends, busy, tuple(c[0].name for c in work.choices),
                          tuple(statistics.median(t[0]) if t[0] else 0.0 for t in work.times),
                          tuple(len(s.ops) for s in work.segments), outputs)


def launch_fast(spec: FastSpec) -> FastRun:
    """Fork one process per rank on this host and run (module docstring); `FastRunFailed` names the failing rank."""
    if spec.engine not in ENGINE_CHOICES:
        raise ValueError(f"engine must be one of {ENGINE_CHOICES}, got {spec.engine!r}")
    if spec.repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {spec.repeat}")
    part = spec.partition
    transport = ShmTransport(part.transfers, part.world_size, spec.comm_timeout_s)
    results = run_forked(part.world_size, lambda rank: fast_rank(rank, spec, transport),
                         timeout_s=spec.run_timeout_s, what="the run", error=FastRunFailed)
    return FastRun(tuple(results))
