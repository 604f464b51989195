"""Engines that run one segment (`planner.execute.segments`) of a rank's ops in one call.

* `TorchEngine`: our torch op registry as straight-line code: every node's function, argument names and context
  are resolved once, so a call is a loop over prepared closures with no lookups (the interpreter in
  `program.run_node` rebuilds a context per op).
* `OrtEngine`: onnxruntime's CPU provider on the segment cut out as its own ONNX model
  (`planner.ir.onnx_segment`), with all graph optimizations and `threads` intra-op threads; tensors cross as
  zero-copy numpy views.

Both read their inputs from a rank's environment (a dict of named tensors) and write their outputs into it; an
engine that fails to build raises `EngineUnavailable`, and the rank falls back to the other.  `ENGINES` lists the
names plan-run accepts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import onnxruntime as ort
import torch

from planner.execute.ops import OPS, OpContext
from planner.execute.program import Program
from planner.execute.segments import Segment

__all__ = ["ENGINES", "Engine", "EngineUnavailable", "TorchEngine", "OrtEngine", "ort_session"]

ENGINES = ("torch", "onnxruntime")


class Engine(Protocol):
    """Runs one segment: reads its inputs from the rank's environment, writes its outputs into it."""

    name: str

    def __call__(self, env: dict[str, torch.Tensor]) -> None: ...


class EngineUnavailable(RuntimeError):
    """The engine cannot run this segment (e.g. onnxruntime refuses an op); the caller uses another engine."""


@dataclass(frozen=True)
class _Step:
    fn: Callable
    inputs: tuple[str | None, ...]
    attrs: dict
    ctx: OpContext
    outputs: tuple[str, ...]


class TorchEngine:
    """A segment as prepared torch calls.  `scope` is the rank's environment, the same dict object for the whole
    run (If/Loop/Scan bodies read outer names from it)."""

    name = "torch"

    def __init__(self, segment: Segment, program: Program, scope: dict[str, torch.Tensor]) -> None:
        tensors = program.graph.tensors
        steps = []
        for op in segment.ops:
            node = program.nodes[op]
            ins: list[str | None] = [t or None for t in node.inputs]
            while ins and ins[-1] is None:
                ins.pop()
            infos = [tensors.get(o) for o in node.outputs]
            ctx = OpContext(opset=program.opset, num_outputs=len(node.outputs),
                            output_shapes=tuple(i.shape if i else None for i in infos),
                            output_dtypes=tuple(i.dtype if i else None for i in infos), name=node.name, scope=scope)
            steps.append(_Step(OPS[node.op_type], tuple(ins), dict(node.attrs), ctx, node.outputs))
        self._steps = tuple(steps)

    def __call__(self, env: dict[str, torch.Tensor]) -> None:
        for step in self._steps:
            results = step.fn([env[t] if t is not None else None for t in step.inputs], step.attrs, step.ctx)
            for name, value in zip(step.outputs, results, strict=False):
                if name:
                    env[name] = value


def ort_session(model: bytes, threads: int, spin: bool = False, *, optimized: bool = True,
                profile_prefix: str | None = None) -> ort.InferenceSession:
    """onnxruntime's CPU provider on a serialized model: sequential, `threads` intra-op threads; its idle threads
    spin only with `spin` (a rank alone on the host: a spinning pool would take the core another rank computes
    on).  `optimized=False` turns graph optimizations off (every node keeps its name); `profile_prefix` profiles
    every run into a file with that prefix (`InferenceSession.end_profiling` names it)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    if not optimized:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if profile_prefix is not None:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile_prefix
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def _numpy(value: torch.Tensor) -> np.ndarray:
    return value.contiguous().numpy()


class OrtEngine:
    """A segment as one onnxruntime session (module docstring)."""

    name = "onnxruntime"

    def __init__(self, segment: Segment, model: bytes, threads: int, spin: bool = False) -> None:
        try:
            self._session = ort_session(model, threads, spin)
        except Exception as exc:  # onnxruntime's own error types (unsupported op, invalid graph) share no base
            raise EngineUnavailable(f"onnxruntime cannot run the segment starting at {segment.ops[0]!r}: "
                                    f"{str(exc).splitlines()[0]}") from None
        names = {i.name for i in self._session.get_inputs()}
        self._inputs = tuple(t for t in segment.inputs if t in names)
        self._outputs = list(segment.outputs)

    def __call__(self, env: dict[str, torch.Tensor]) -> None:
        values = self._session.run(self._outputs, {t: _numpy(env[t]) for t in self._inputs})
        for name, value in zip(self._outputs, values, strict=True):
            arr = np.asarray(value)
            env[name] = torch.from_numpy(arr if arr.flags.writeable else arr.copy())
