"""The representative ops `plan-calibrate` times per op type, built as the planner and the runtime see them.

Each representative op is a one-node ONNX model written to a scratch folder and read back with the importer
(`prepared_graph`: the same FLOPs and bytes the cost model prices a model's op by) and the runtime's loader
(`load_program`: the same kernels of `planner/execute/ops/` a `plan-run` rank calls).  Its data input is a graph
input (fed with `default_feeds`), so constant folding keeps the node; weights are seeded random initializers.

The suite (`SUITE`; `QUICK_SUITE` is the same op types at toy sizes, for tests) covers the op types the bundled
models spend their time in, at shapes typical of the CNNs (batch 1, 14-112 pixels) and of a small transformer
(128 tokens x 768): Conv (7x7 stride 2 stem, 1x1, 3x3, 5x5 and a depthwise 3x3), MatMul, Gemm, MaxPool,
AveragePool, GlobalAveragePool, LRN, BatchNormalization, Relu, Add, Mul, Sum, Concat, Softmax and
LayerNormalization.  Which shapes is a documented choice, not a search: a factor fitted on them is what
`plan-calibrate` writes for that op type (`planner.execute.calibrate_fit`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from planner.execute.program import Program, default_feeds, load_program, prepared_graph, to_tensor
from planner.ir.graph import Op
from planner.ir.onnx_one_node import write_one_node_model
from planner.ir.onnx_values import NodeSpec

__all__ = ["RepSpec", "RepOp", "SUITE", "QUICK_SUITE", "build_suite"]

OPSET = 17


@dataclass(frozen=True)
class RepSpec:
    """One representative op: its type, a label naming its shape, the shapes of its graph inputs (fed at run
    time), the shapes of its initializers (seeded random weights, after the inputs in the node's argument order)
    and its attributes."""

    op_type: str
    label: str
    inputs: tuple[tuple[int, ...], ...]
    weights: tuple[tuple[int, ...], ...] = ()
    attrs: dict[str, object] = field(default_factory=dict)


def _conv(label: str, cin: int, hw: int, cout: int, k: int, stride: int = 1, group: int = 1) -> RepSpec:
    pad = k // 2
    return RepSpec("Conv", label, ((1, cin, hw, hw),), ((cout, cin // group, k, k), (cout,)),
                   {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [pad] * 4, "group": group})


def _pool(op_type: str, label: str, c: int, hw: int, k: int, stride: int, pad: int) -> RepSpec:
    return RepSpec(op_type, label, ((1, c, hw, hw),), (),
                   {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [pad] * 4})


def _suite(s: int) -> tuple[RepSpec, ...]:
    """The suite with channel counts divided by `s` and spatial sizes by `s` too (s = 1: the documented sizes)."""

    def c(n: int) -> int:
        return max(1, n // s)

    suite = (
        _conv("7x7/2 3->64 @224", 3, c(224), c(64), 7, stride=2),
        _conv("1x1 192->64 @28", c(192), c(28), c(64), 1),
        _conv("3x3 96->128 @28", c(96), c(28), c(128), 3),
        _conv("5x5 16->32 @28", c(16), c(28), c(32), 5),
        _conv("1x1 512->128 @14", c(512), c(14), c(128), 1),
        _conv("depthwise 3x3 64 @56", c(64), c(56), c(64), 3, group=c(64)),
        RepSpec("MatMul", "128x768 @ 768x768", ((c(128), c(768)),), ((c(768), c(768)),)),
        RepSpec("MatMul", "16x64 @ 64x256", ((c(16), c(64)),), ((c(64), c(256)),)),
        RepSpec("Gemm", "1x1024 @ 1024x1000", ((1, c(1024)),), ((c(1000), c(1024)), (c(1000),)), {"transB": 1}),
        RepSpec("Gemm", "32x512 @ 512x512", ((c(32), c(512)),), ((c(512), c(512)), (c(512),)), {"transB": 1}),
        _pool("MaxPool", "3x3/2 64 @112", c(64), c(112), 3, 2, 0),
        _pool("MaxPool", "3x3/1 pad 1 192 @28", c(192), c(28), 3, 1, 1),
        _pool("AveragePool", "7x7/1 1024 @7", c(1024), 7, 7, 1, 0),
        _pool("AveragePool", "3x3/1 pad 1 64 @28", c(64), c(28), 3, 1, 1),
        RepSpec("GlobalAveragePool", "512 @13", ((1, c(512), c(13), c(13)),)),
        RepSpec("LRN", "size 5, 64 @56", ((1, c(64), c(56), c(56)),), (),
                {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}),
        RepSpec("LRN", "size 5, 192 @56", ((1, c(192), c(56), c(56)),), (),
                {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}),
        RepSpec("BatchNormalization", "64 @56", ((1, c(64), c(56), c(56)),), ((c(64),),) * 4, {"epsilon": 1e-5}),
        RepSpec("BatchNormalization", "256 @14", ((1, c(256), c(14), c(14)),), ((c(256),),) * 4, {"epsilon": 1e-5}),
        RepSpec("Relu", "64 @112", ((1, c(64), c(112), c(112)),)),
        RepSpec("Relu", "256 @14", ((1, c(256), c(14), c(14)),)),
        RepSpec("Add", "256 @28 + 256 @28", ((1, c(256), c(28), c(28)),) * 2),
        RepSpec("Add", "128x768 + 768", ((c(128), c(768)), (c(768),))),
        RepSpec("Mul", "256 @28 * 256 @28", ((1, c(256), c(28), c(28)),) * 2),
        RepSpec("Mul", "128x768 * 128x768", ((c(128), c(768)),) * 2),
        RepSpec("Sum", "256 @28 + 256 @28", ((1, c(256), c(28), c(28)),) * 2),
        RepSpec("Concat", "4 x 64 @28", ((1, c(64), c(28), c(28)),) * 4, (), {"axis": 1}),
        RepSpec("Concat", "2 x 256 @14", ((1, c(256), c(14), c(14)),) * 2, (), {"axis": 1}),
        RepSpec("Softmax", "1x1000", ((1, c(1000)),), (), {"axis": -1}),
        RepSpec("Softmax", "8x128x128", ((8, c(128), c(128)),), (), {"axis": -1}),
        RepSpec("LayerNormalization", "128x768", ((c(128), c(768)),), ((c(768),), (c(768),)),
                {"axis": -1, "epsilon": 1e-5}),
        RepSpec("LayerNormalization", "16x64", ((c(16), c(64)),), ((c(64),), (c(64),)),
                {"axis": -1, "epsilon": 1e-5}),
    )
    return suite if s == 1 else tuple(replace(r, label=f"{r.label} (sizes / {s})") for r in suite)


SUITE = _suite(1)
QUICK_SUITE = _suite(8)


@dataclass
class RepOp:
    """A representative op ready to time: the planner's `Op` (FLOPs, bytes), the runtime's node, its program and
    the environment (feeds and weights) it runs on."""

    spec: RepSpec
    op: Op
    node: NodeSpec
    program: Program
    env: dict

    @property
    def key(self) -> str:
        return f"{self.spec.op_type} {self.spec.label}"


def _weights(spec: RepSpec, seed: int) -> list[np.ndarray]:
    """Seeded random weights of the spec's initializer shapes (a positive running variance for BatchNorm, as a
    trained model has)."""
    rng = np.random.default_rng(seed)
    out = [(rng.standard_normal(shape) * 0.1).astype(np.float32) for shape in spec.weights]
    if spec.op_type == "BatchNormalization":
        out[-1] = rng.uniform(0.5, 1.5, spec.weights[-1]).astype(np.float32)
    return out


def build_suite(specs: Sequence[RepSpec], folder: Path) -> list[RepOp]:
    """Each spec as a one-node model in `folder`, imported and loaded as `plan-solve` and `plan-run` would."""
    out = []
    for i, spec in enumerate(specs):
        path = folder / f"rep{i}-{spec.op_type}.onnx"
        write_one_node_model(path, spec.op_type, spec.inputs, _weights(spec, 1000 + i), spec.attrs, OPSET)
        graph = prepared_graph(path)
        (op,) = [o for o in graph.ops if o.op_type == spec.op_type]
        program = load_program(graph, path)
        env = {k: to_tensor(v) for k, v in default_feeds(graph).items()}
        env.update(program.constants)
        out.append(RepOp(spec, op, program.nodes[op.name], program, env))
    return out
