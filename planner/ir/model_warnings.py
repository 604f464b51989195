"""What a user should hear about a model before a plan is made for it, one line each: ops the torch runtime
cannot run (planning still works, `plan-run` would refuse), and ops costed far above what their tensors justify
(a cost rule misreading an exporter's attributes would otherwise steer the whole plan without a word).

Torch-free on purpose: planning commands must not import the runtime.  `RUNTIME_OP_TYPES` and
`RUNTIME_DTYPES` are therefore kept here as data; a test checks them against the runtime's op registry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.ir.graph import OpGraph
from planner.ir.op_workload import PER_ELEMENT_OP_TYPES

RUNTIME_OP_TYPES: frozenset[str] = frozenset("""
Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool BatchNormalization BitShift BitwiseAnd
BitwiseNot BitwiseOr BitwiseXor Cast CastLike Ceil Celu Clip Concat Constant ConstantOfShape Conv ConvInteger
ConvTranspose Cos Cosh CumSum DepthToSpace DequantizeLinear Div Dropout DynamicQuantizeLinear Einsum Elu Equal
Erf Exp Expand EyeLike Flatten Floor GRU Gather GatherElements GatherND Gelu Gemm GlobalAveragePool
GlobalMaxPool Greater GreaterOrEqual HardSigmoid HardSwish Hardmax Identity If InstanceNormalization IsInf IsNaN
LRN LSTM LayerNormalization LeakyRelu Less LessOrEqual Log LogSoftmax Loop MatMul MatMulInteger Max MaxPool Mean
Min Mish Mod Mul Neg Not OneHot Or PRelu Pad Pow QLinearConv QLinearMatMul QuantizeLinear RNN Range Reciprocal
ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum
ReduceSumSquare Relu Reshape Resize Round Scan Scatter ScatterElements ScatterND Selu Shape Shrink Sigmoid Sign
Sin Sinh Size Slice Softmax Softplus Softsign SpaceToDepth Split Sqrt Squeeze Sub Sum Tan Tanh ThresholdedRelu
Tile TopK Transpose Trilu Unsqueeze Upsample Where Xor
""".split())
"""ONNX op types (default domain) the torch runtime runs (`planner.execute.ops.supported_op_types()`)."""

RUNTIME_DTYPES: frozenset[str] = frozenset(
    "float double float16 bfloat16 int8 uint8 int16 int32 int64 bool uint16 uint32 uint64".split())
"""ONNX element type names the torch runtime holds (strings, complex and float8 are not)."""


@dataclass(frozen=True)
class CostSanity:
    """When an op's FLOPs are implausible: more than `flops_per_element` per element it reads or writes, for op
    types whose work is a bounded amount per element (elementwise, pooling, reductions, normalizations)."""

    flops_per_element: float = 1e4


def runtime_gaps(graph: OpGraph) -> list[str]:
    """'name (why)' of every op the runtime cannot run, in graph order (the same test as the runtime's
    `unsupported_ops`: a non-default domain, an op type it lacks, or a tensor of a type torch cannot hold)."""
    bad = []
    for op in graph.ops:
        why = None
        if op.domain not in ("", "ai.onnx"):
            why = f"domain {op.domain}"
        elif op.op_type not in RUNTIME_OP_TYPES:
            why = op.op_type
        else:
            for t in (*op.reads, *op.writes):
                info = graph.tensors.get(t)
                if info is None or info.dtype not in RUNTIME_DTYPES:
                    why = f"{op.op_type}, tensor {t!r} of type {info.dtype if info else 'unknown'}"
                    break
        if why is not None:
            bad.append(f"{op.name} ({why})")
    return bad


def implausible_costs(graph: OpGraph, sanity: CostSanity = CostSanity()) -> list[str]:
    """'name (op_type: F FLOPs for E elements)' of every per-element op costed above the sanity limit."""
    found = []
    for op in graph.ops:
        if op.op_type not in PER_ELEMENT_OP_TYPES or op.domain not in ("", "ai.onnx") or not op.flops:
            continue
        elements = sum(math.prod(graph.tensors[t].shape) for t in (*op.reads, *op.writes) if t in graph.tensors)
        if op.flops > sanity.flops_per_element * max(elements, 1):
            found.append(f"{op.name} ({op.op_type}: {op.flops:.3g} FLOPs for {elements} tensor elements)")
    return found


def _listed(items: list[str], most: int = 5) -> str:
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


def model_warnings(graph: OpGraph, sanity: CostSanity = CostSanity()) -> list[str]:
    """One line per concern, each naming the ops (the first few, then a count); empty when there is none, and for
    task graphs (no ONNX ops to run or cost)."""
    if graph.source is not None and graph.source.kind != "onnx":
        return []
    lines = []
    gaps = runtime_gaps(graph)
    if gaps:
        lines.append(f"the torch runtime cannot run {len(gaps)} op(s) of this model: {_listed(gaps)}; the plan is "
                     f"still written, but plan-run will refuse it")
    costly = implausible_costs(graph, sanity)
    if costly:
        lines.append(f"{len(costly)} op(s) are costed far above what their tensors justify, so the plan may rest "
                     f"on them: {_listed(costly)}")
    return lines
