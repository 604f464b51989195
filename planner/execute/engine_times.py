"""Each op's seconds as the fast executor's onnxruntime engine runs it, for planning on what a run really costs.

`onnxruntime_op_times(graph, model_path, feeds)` cuts the whole planned graph out as one model (the planner's op
names on its nodes: `planner.ir.onnx_segment`), runs it on onnxruntime's CPU provider with graph optimizations
off (even the basic level fuses a MatMul and its Add into a Gemm of another name, and the op's time would be
lost), profiles `warmup` then `repeat` runs, and returns op -> the median of its kernel seconds over the `repeat`
runs.  An op onnxruntime never timed gets 0.

Those kernel times lean high against a real run: the engine runs segments fully optimized (fused), and the
profiler adds its own cost to every node.  `engine_op_times` therefore also times the whole graph as the engine
runs it (one optimized session, as a rank that holds every op runs it) and scales the kernel times so that they
sum to that median: each op keeps its share of the profiled work, and the ops of one rank on one segment sum to
what the engine takes for them.  Measured with `threads` intra-op threads, the same scaling gives the op times of
one rank that uses several cores.

`engine_call_s()` is the fixed cost of one engine call (a one-node session run on a tiny tensor): what a transfer
adds on each side, since a send ends its segment and a receive starts one.

`plan-calibrate --model M --engine onnxruntime` writes these times as the CSV `plan-solve --measured` reads.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.cost.measured import ort_kernel_samples
from planner.execute.engines import ort_session
from planner.ir.graph import OpGraph
from planner.ir.onnx_segment import SegmentSpec, segment_models, trivial_model

__all__ = ["EngineTimes", "onnxruntime_op_times", "engine_op_times", "engine_call_s"]


def _whole_graph(graph: OpGraph, model_path: str | Path, feeds: Mapping[str, np.ndarray]
                 ) -> tuple[bytes, dict[str, np.ndarray]]:
    ops = tuple(op.name for op in graph.ops)
    inputs = tuple(t for t in graph.graph_inputs if t not in graph.initializers)
    (model,) = segment_models(graph, model_path, [SegmentSpec(ops, inputs, tuple(graph.graph_outputs))])
    return model, {t: np.ascontiguousarray(feeds[t]) for t in inputs}


def onnxruntime_op_times(graph: OpGraph, model_path: str | Path, feeds: Mapping[str, np.ndarray], *,
                         threads: int = 1, repeat: int = 10, warmup: int = 2) -> dict[str, float]:
    """op -> median kernel seconds per run on onnxruntime with `threads` intra-op threads, graph optimizations off
    (module docstring)."""
    model, run_feeds = _whole_graph(graph, model_path, feeds)
    return _kernel_times(graph, model, run_feeds, threads, repeat, warmup)


def _kernel_times(graph: OpGraph, model: bytes, run_feeds: Mapping[str, np.ndarray], threads: int, repeat: int,
                  warmup: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        session = ort_session(model, threads, optimized=False, profile_prefix=str(Path(tmp) / "ort"))
        for _ in range(warmup + repeat):
            session.run(None, run_feeds)
        samples = ort_kernel_samples(json.loads(Path(session.end_profiling()).read_text()))
    return {op.name: statistics.median(samples[op.name][-repeat:]) if samples.get(op.name) else 0.0
            for op in graph.ops}


def _median_run_s(session, feeds: Mapping[str, np.ndarray], repeat: int, warmup: int) -> tuple[float, float]:
    """Median and interquartile range of `repeat` timed runs after `warmup`."""
    for _ in range(warmup):
        session.run(None, feeds)
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        session.run(None, feeds)
        runs.append(time.perf_counter() - start)
    if len(runs) < 4:
        return statistics.median(runs), max(runs) - min(runs)
    q1, median, q3 = statistics.quantiles(runs, n=4)
    return median, q3 - q1


@dataclass(frozen=True)
class EngineTimes:
    """A model's op times as the engine runs it with `threads` intra-op threads (module docstring).

    `op_s`: op -> seconds, summing to `whole_s`; `whole_s`: the median of the whole graph in one optimized session;
    `whole_noise_s`: the interquartile range of those runs; `profiled_s`: the sum of the kernel times before
    scaling (`whole_s / profiled_s` is how much fusion and the profiler's absence save)."""

    threads: int
    op_s: Mapping[str, float]
    whole_s: float
    whole_noise_s: float
    profiled_s: float


def engine_op_times(graph: OpGraph, model_path: str | Path, feeds: Mapping[str, np.ndarray], *,
                    threads: int | Sequence[int] = 1, repeat: int = 10, warmup: int = 2) -> list[EngineTimes]:
    """The profiled kernel times scaled to the whole graph's optimized run (module docstring), one `EngineTimes`
    per thread count in `threads` (the graph is cut out once for all of them).  With more than one thread the
    session's idle threads spin, as they do on a rank alone on its host."""
    model, run_feeds = _whole_graph(graph, model_path, feeds)
    out = []
    for k in ([threads] if isinstance(threads, int) else threads):
        kernels = _kernel_times(graph, model, run_feeds, k, repeat, warmup)
        whole_s, noise_s = _median_run_s(ort_session(model, k, spin=k > 1), run_feeds, max(repeat, 5), warmup + 1)
        profiled_s = sum(kernels.values())
        scale = whole_s / profiled_s if profiled_s > 0 else 0.0
        out.append(EngineTimes(k, {op: s * scale for op, s in kernels.items()}, whole_s, noise_s, profiled_s))
    return out


def engine_call_s(repeat: int = 200) -> float:
    """The median seconds of one engine call that does almost nothing (`onnx_segment.trivial_model`)."""
    session = ort_session(trivial_model(16), 1)
    median, _ = _median_run_s(session, {"x": np.zeros(16, np.float32)}, repeat, warmup=20)
    return median
