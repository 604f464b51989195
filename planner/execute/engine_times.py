"""Each op's seconds as the fast executor's onnxruntime engine runs it, for planning on what a run really costs.

`onnxruntime_op_times(graph, model_path, feeds)` cuts the whole planned graph out as one model (the planner's op
names on its nodes: `planner.ir.onnx_segment`), runs it on onnxruntime's CPU provider with graph optimizations
off (even the basic level fuses a MatMul and its Add into a Gemm of another name, and the op's time would be
lost), profiles `warmup` then `repeat` runs, and returns op -> the median of its kernel seconds over the `repeat`
runs.  The engine itself runs segments fully optimized, so these times lean high where onnxruntime fuses.  An
op onnxruntime never timed gets 0.
`plan-calibrate --model M --engine onnxruntime` writes these times as the CSV `plan-solve --measured` reads.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from planner.cost.measured import ort_kernel_samples
from planner.execute.engines import ort_session
from planner.ir.graph import OpGraph
from planner.ir.onnx_segment import SegmentSpec, segment_models

__all__ = ["onnxruntime_op_times"]


def onnxruntime_op_times(graph: OpGraph, model_path: str | Path, feeds: Mapping[str, np.ndarray], *,
                         threads: int = 1, repeat: int = 10, warmup: int = 2) -> dict[str, float]:
    """op -> median seconds per run on onnxruntime with `threads` intra-op threads (module docstring)."""
    ops = tuple(op.name for op in graph.ops)
    inputs = tuple(t for t in graph.graph_inputs if t not in graph.initializers)
    (model,) = segment_models(graph, model_path, [SegmentSpec(ops, inputs, tuple(graph.graph_outputs))])
    run_feeds = {t: np.ascontiguousarray(feeds[t]) for t in inputs}
    with tempfile.TemporaryDirectory() as tmp:
        session = ort_session(model, threads, optimized=False, profile_prefix=str(Path(tmp) / "ort"))
        for _ in range(warmup + repeat):
            session.run(None, run_feeds)
        samples = ort_kernel_samples(json.loads(Path(session.end_profiling()).read_text()))
    return {name: statistics.median(samples[name][-repeat:]) if samples.get(name) else 0.0 for name in ops}
