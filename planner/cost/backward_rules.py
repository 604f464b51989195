"""Training work of one operator by op type: the input-gradient (B) and weight-gradient (W) FLOPs and bytes of
its backward, and the tensors its backward reads (its stash); `planner.cost.training_costs` prices them in ticks
and sums them per stage.

**Which tensors need a gradient** (autograd's rule, read from the graph): a trained parameter does; the graph
cannot say which initializers are trained, so `parameters` decides by the role one plays: a floating point
initializer (of more than one element) that is an operand of a matrix product or convolution, the scale or bias
of a normalisation, a gathered table (an embedding), PRelu's slope, or a 1-D operand of Add/Sub/Mul/Div (a bias,
a per-channel scale); every other initializer is a constant (scalars such as 1/sqrt(d), masks, zero buffers,
index tables).  A graph input needs one only when asked (`inputs_need_grad`, as `x.requires_grad_()` in torch;
a whole model's inputs are token ids or data, so the default is no); an op's floating point output needs one
when some input of the op does.  An op whose inputs need no gradient has no backward at all (autograd does not
record it): B = W = 0 and it stashes nothing.  A gradient towards a parameter is W, towards an activation is B.

**Rules** (per element = per output element unless said otherwise; P = the forward's matrix product, FLOPs without
a bias; "stash" = what F keeps for the backward: held until W ends when W reads it, else freed when B ends):

| op types                               | B (input gradient)              | W (weight gradient)  | stash              |
|----------------------------------------|---------------------------------|----------------------|--------------------|
| MatMul, Gemm, Conv(Transpose), Einsum2 | P per activation operand        | P per param operand  | the other operand  |
|                                        |                                 | (+1 per el. bias)    | (if an activation) |
| Attention (opset 23)                   | 2.5 P + 5 per score             | 0                    | Q, K, V, Y, lse    |
| Softmax / LogSoftmax                   | 4 / T + 3                       | 0                    | output Y           |
| LayerNormalization                     | 8                               | 4 scale + 1 bias     | x, mean, 1/std     |
| RMSNormalization, SimplifiedLayerNorm  | 6                               | 3 scale              | x, 1/rms           |
| Batch/Instance/GroupNormalization      | 8 per input element             | 4 + 1                | x                  |
| Relu, LeakyRelu, ThresholdedRelu, Clip | 1                               | 0                    | 1-byte mask        |
| Sigmoid, Tanh, Exp, Sqrt, Reciprocal   | 3, 3, 1, 2, 2                   | 0                    | output             |
| Gelu, Erf, Log/Abs, other unary        | 2T + 6, T + 3, 1, forward + 1   | 0                    | input              |
| PRelu                                  | 1                               | 2 (slope)            | input              |
| Add, Sub, Neg                          | 0 (negation 1) + broadcast sums | same, param operand  | none               |
| Mul, Div, Pow                          | 1; 1 / 3; T + 2, per operand    | same, param operand  | the other operands |
| Where, Max, Min                        | 1 per input                     | 0                    | condition / inputs |
| ReduceSum, ReduceMean, CumSum          | 1 per input element             | 0                    | none               |
| other reductions (ReduceMax ...)       | forward + 1 per input element   | 0                    | input, output      |
| Gather, GatherElements, GatherND       | 1 (scatter-add of dY)           | same, param table    | indices            |
| ScatterND, ScatterElements, TopK       | bytes of dY and dX only         | 0                    | indices            |
| Expand, Tile                           | 1 (sum over the copies)         | 0                    | none               |
| Concat, Split, Slice, Pad, Cast ...    | bytes of dY and dX only         | 0                    | none               |
| Reshape, Transpose, (Un)Squeeze,       | free: 0 ticks                   | 0                    | none               |
| Flatten, Identity, Dropout             |                                 |                      |                    |
| outputs without gradient (Shape ...)   | none                            | none                 | none               |
| anything else (estimated)              | forward FLOPs and bytes         | again, if it reads a | activation inputs  |
|                                        |                                 | parameter            |                    |

Why, row by row:

* matrix products: dA = dY B^T and dB = A^T dY each cost the forward product; a MatMul of two activations
  (attention scores) has two input gradients and W = 0.  Gemm/Conv's bias gradient sums dY over the rows.
* Attention: the scores are recomputed, never stored: five products (scores, dV, dP, dQ, dK) against the
  forward's two, as FlashAttention runs and torch's counter counts; lse = logsumexp, 4 bytes per query row.
* Softmax: dX = Y (dY - sum(dY Y)) reads only Y (LogSoftmax: dY - exp(Y) sum(dY)).
* normalisations: dX needs x-hat, rebuilt from x and the row statistics (float32, 4 bytes each per row; per
  channel for Batch/Instance/Group: negligible, not counted); W sums dY x-hat (scale) and dY (bias).
* Relu and kin: the derivative is 0 or a constant, chosen by the sign: a bool mask suffices.  Sigmoid, Tanh, Exp,
  Sqrt, Reciprocal: the derivative is a function of the output; Gelu, Erf, Log ...: of the input.  Sign, Ceil,
  Floor, Round have a zero gradient (bytes only).
* Add/Sub pass the gradient through (summed over broadcast dims); Mul's dA = dY B needs B, dB = dY A needs A;
  Div's numerator gradient costs 1, its denominator's -dY A / B^2 3.
* Where/Max/Min route dY by a mask; ReduceSum/Mean/CumSum broadcast dY back; Gather scatter-adds dY to the rows it
  read, Scatter/TopK route dY back by their indices; Expand/Tile sum over the copies; data movement copies back.
* views (Reshape, Transpose ...) are free: no kernel of their own in a training framework.
* the fallback is the matrix-product rule (B ~ W ~ F), the old stage rule applied to one op.

T = `op_workload.TRANSCENDENTAL`.  Bytes moved by B (for the roofline): dY + the stash it reads + dX for every
input gradient; by W: dY + its stash + dW.  Task-graph ops (a given `duration`, no op types) keep the stage rule
of `unroll.StageCost.from_forward`: B = W = F and the op's output is its stash.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from planner.ir.graph import Op, OpGraph
from planner.ir.op_workload import TRANSCENDENTAL as T

__all__ = ["MASK_BYTES_PER_ELEMENT", "RULES", "STAT_BYTES", "OpTrainingCost", "Rule", "is_float_dtype",
           "op_training_cost", "op_training_costs", "parameters", "tensors_needing_grad"]

MASK_BYTES_PER_ELEMENT = 1  # a bool mask (Relu's x > 0, Where's condition)
STAT_BYTES = 4  # one float32 statistic (mean, 1/std, logsumexp) per normalised row

_FLOAT_DTYPES = ("float", "double", "bfloat16")


@dataclass(frozen=True)
class OpTrainingCost:
    """One op's training work.  FLOPs and bytes per micro-batch; the `*_product_flops` are the matrix-product
    share (MatMul/Gemm/Conv/Einsum/Attention), the part torch's FlopCounterMode counts.

    `stash_b` are the tensors only B reads (freed when B ends), `stash_w` those W reads (held until W ends);
    `private_bytes` is stash that is no graph tensor (masks, statistics), freed by B unless `private_until_w`.
    """

    name: str
    op_type: str
    rule: str
    forward_flops: int = 0
    forward_product_flops: int = 0
    input_grad_flops: int = 0
    input_grad_product_flops: int = 0
    input_grad_bytes: int = 0
    weight_grad_flops: int = 0
    weight_grad_product_flops: int = 0
    weight_grad_bytes: int = 0
    stash_b: tuple[str, ...] = ()
    stash_w: tuple[str, ...] = ()
    private_bytes: int = 0
    private_until_w: bool = False
    estimated: bool = False

    @property
    def has_input_grad(self) -> bool:
        return self.input_grad_flops > 0 or self.input_grad_bytes > 0

    @property
    def has_weight_grad(self) -> bool:
        return self.weight_grad_flops > 0 or self.weight_grad_bytes > 0


# --------------------------------------------------------------------------- the per-op context rules read
class _Ctx:
    """What a rule sees of one op: its tensors' shapes and sizes, and which of them need a gradient."""

    def __init__(self, op: Op, graph: OpGraph, needs_grad: set[str]):
        self.op, self.graph, self.needs_grad = op, graph, needs_grad
        # Accumulators a rule fills in.
        self.b_flops = self.b_product = self.b_bytes = 0
        self.w_flops = self.w_product = self.w_bytes = 0
        self.stash_b: list[str] = []
        self.stash_w: list[str] = []
        self.private_bytes = 0
        self.private_until_w = False

    def inp(self, i: int) -> str:
        return self.op.inputs[i] if i < len(self.op.inputs) else ""

    def out(self, i: int = 0) -> str:
        return self.op.outputs[i] if i < len(self.op.outputs) else ""

    def shape(self, t: str) -> tuple[int, ...]:
        info = self.graph.tensors.get(t)
        return info.shape if info else ()

    def numel(self, t: str) -> int:
        info = self.graph.tensors.get(t)
        return math.prod(info.shape) if info else 0

    def size(self, t: str) -> int:
        info = self.graph.tensors.get(t)
        return info.size_bytes if info else 0

    def grad(self, t: str) -> bool:
        return bool(t) and t in self.needs_grad

    def param(self, t: str) -> bool:
        """A trained parameter (`parameters`); other initializers are constants and need no gradient."""
        return t in self.graph.initializers and t in self.needs_grad

    def activation(self, t: str) -> bool:
        return bool(t) and t not in self.graph.initializers

    @property
    def dy_bytes(self) -> int:
        """Bytes of the output gradients (outputs that carry one)."""
        return sum(self.size(t) for t in self.op.outputs if self.grad(t))

    @property
    def out_numel(self) -> int:
        return self.numel(self.out(0))

    def gradient(self, t: str, flops: int, *, needs: Iterable[str] = (), product: int = 0,
                 private_bytes: int = 0) -> None:
        """Book the gradient towards input tensor t (if it needs one): `flops` of which `product` in matrix
        products, reading the tensors `needs` (stashed when they are activations; parameters stay resident) and
        `private_bytes` of private stash.  Towards a parameter it is W, otherwise B."""
        if not self.grad(t):
            return
        needs = [n for n in needs if n]
        nbytes = self.dy_bytes + sum(self.size(n) for n in needs) + private_bytes + self.size(t)
        to_w = self.param(t)
        if to_w:
            self.w_flops += flops
            self.w_product += product
            self.w_bytes += nbytes
            self.stash_w.extend(n for n in needs if self.activation(n))
        else:
            self.b_flops += flops
            self.b_product += product
            self.b_bytes += nbytes
            self.stash_b.extend(n for n in needs if self.activation(n))
        if private_bytes:
            self.private_bytes = max(self.private_bytes, private_bytes)
            self.private_until_w |= to_w

    def broadcast_sum(self, t: str) -> int:
        """FLOPs to sum a gradient over the dims input t was broadcast along (0 when it has the output's size)."""
        return self.out_numel if self.numel(t) < self.out_numel else 0


_PRODUCTS = ("MatMul", "Gemm", "Conv", "ConvTranspose", "FusedMatMul")


def _product_flops(c: _Ctx) -> int:
    """The matrix-product part of the forward: Gemm/Conv without the bias addition, Attention without its
    scale and softmax (6 per score), a two-operand Einsum whole; 0 for every other op."""
    op = c.op
    if op.op_type in ("Gemm", "Conv", "ConvTranspose") and c.inp(2):
        return max(op.flops - c.out_numel, 0)
    if op.op_type in _PRODUCTS or (op.op_type == "Einsum" and len([t for t in op.inputs if t]) == 2):
        return op.flops
    if op.op_type == "Attention":
        qs, vs = c.shape(c.inp(0)), c.shape(c.inp(2))
        if len(qs) == 4 and len(vs) == 4:
            return op.flops * 2 * (qs[3] + vs[3]) // (2 * (qs[3] + vs[3]) + 6)
        return op.flops
    return 0


# --------------------------------------------------------------------------- rules
def _matmul(c: _Ctx) -> None:
    a, b = c.inp(0), c.inp(1)  # Conv: x and the kernel; dX is a transposed convolution of the same size
    p = _product_flops(c)
    c.gradient(a, p, needs=[b], product=p)
    c.gradient(b, p, needs=[a], product=p)
    if c.inp(2) and c.op.op_type in ("Gemm", "Conv", "ConvTranspose"):
        c.gradient(c.inp(2), c.out_numel)  # the bias: sum dY over the rows


def _attention(c: _Ctx) -> None:
    q, k, v = c.inp(0), c.inp(1), c.inp(2)
    qs, ks, vs = c.shape(q), c.shape(k), c.shape(v)
    if len(qs) == 4 and len(ks) == 4 and len(vs) == 4:
        d, dv = qs[3], vs[3]
        scores = c.op.flops // (2 * (d + dv) + 6)
        product = 2 * (d + dv) * scores
        rows = math.prod(qs[:3])
    else:  # 3-D inputs: heads are attributes this view does not keep; the product share is the whole forward
        scores, product, rows = 0, c.op.flops, math.prod(qs[:-1]) if qs else 0
    flops = product * 5 // 2 + 5 * scores
    needs = [q, k, v, c.out(0)]
    lse = STAT_BYTES * rows
    # One fused backward computes dQ, dK and dV together: book it once, towards the first input needing a grad.
    target = next((t for t in (q, k, v) if c.grad(t)), "")
    c.gradient(target, flops, needs=needs, product=product * 5 // 2, private_bytes=lse)


def _softmax(per_element: int):
    def rule(c: _Ctx) -> None:
        c.gradient(c.inp(0), per_element * c.out_numel, needs=[c.out(0)])
    rule.__name__ = f"softmax(B {per_element} per element, stash Y)"
    return rule


def _norm(b_per: int, scale_per: int, bias_per: int, stats_per_row: int):
    """Normalisation over the trailing dims the scale covers: `stats_per_row` float32 statistics kept per row."""

    def rule(c: _Ctx) -> None:
        x = c.inp(0)
        n = c.numel(x)
        row = c.numel(c.inp(1)) if c.inp(1) else (c.shape(x)[-1] if c.shape(x) else 1)
        stats = stats_per_row * STAT_BYTES * (n // max(row, 1))
        c.gradient(x, b_per * n, needs=[x], private_bytes=stats)
        if len(c.op.inputs) > 1:
            c.gradient(c.inp(1), scale_per * n, needs=[x], private_bytes=stats)
        if len(c.op.inputs) > 2 and bias_per:
            c.gradient(c.inp(2), bias_per * n)
    rule.__name__ = f"norm(B {b_per}, W {scale_per}+{bias_per} per element)"
    return rule


def _mask_unary(c: _Ctx) -> None:
    n = c.out_numel
    c.gradient(c.inp(0), n, private_bytes=MASK_BYTES_PER_ELEMENT * n)


def _unary(per_element: int, reads: str):
    def rule(c: _Ctx) -> None:
        needs = [c.out(0)] if reads == "output" else [c.inp(0)] if reads == "input" else []
        c.gradient(c.inp(0), per_element * c.out_numel, needs=needs)
    rule.__name__ = f"unary(B {per_element} per element, stash {reads})"
    return rule


def _unary_default(c: _Ctx) -> None:
    """Unary elementwise without an own rule: the forward's cost + 1 per element (the chain-rule multiply)."""
    n = c.out_numel
    per = (c.op.flops // n if n else 0) + 1
    c.gradient(c.inp(0), per * n, needs=[c.inp(0)])


def _prelu(c: _Ctx) -> None:
    x, slope = c.inp(0), c.inp(1)
    n = c.out_numel
    c.gradient(x, n, needs=[x, slope])
    c.gradient(slope, 2 * n, needs=[x])


def _add_sub(c: _Ctx) -> None:
    n = c.out_numel
    neg = n if c.op.op_type in ("Sub", "Neg") else 0
    c.gradient(c.inp(0), c.broadcast_sum(c.inp(0)) + (neg if c.op.op_type == "Neg" else 0))
    if c.op.op_type != "Neg":
        c.gradient(c.inp(1), neg + c.broadcast_sum(c.inp(1)))


def _mul(c: _Ctx) -> None:
    a, b = c.inp(0), c.inp(1)
    n = c.out_numel
    c.gradient(a, n + c.broadcast_sum(a), needs=[b])
    c.gradient(b, n + c.broadcast_sum(b), needs=[a])


def _div(c: _Ctx) -> None:
    a, b = c.inp(0), c.inp(1)
    n = c.out_numel
    c.gradient(a, n + c.broadcast_sum(a), needs=[b])  # dA = dY / B
    c.gradient(b, 3 * n + c.broadcast_sum(b), needs=[a, b])  # dB = -dY A / B^2


def _pow(c: _Ctx) -> None:
    a, b = c.inp(0), c.inp(1)
    n = c.out_numel
    c.gradient(a, (T + 2) * n + c.broadcast_sum(a), needs=[a, b])  # B A^(B-1) dY
    c.gradient(b, (T + 2) * n + c.broadcast_sum(b), needs=[a, c.out(0)])  # ln(A) Y dY


def _where(c: _Ctx) -> None:
    n = c.out_numel
    for t in (c.inp(1), c.inp(2)):
        c.gradient(t, n + c.broadcast_sum(t), needs=[c.inp(0)])  # the condition (a bool tensor) routes dY


def _variadic_select(c: _Ctx) -> None:
    n = c.out_numel
    for t in c.op.inputs:
        c.gradient(t, n + c.broadcast_sum(t), needs=[*c.op.inputs, c.out(0)])


def _reduce_broadcast(c: _Ctx) -> None:
    c.gradient(c.inp(0), c.numel(c.inp(0)))


def _reduce_default(c: _Ctx) -> None:
    x = c.inp(0)
    n = c.numel(x)
    per = (c.op.flops // n if n else 0) + 1
    c.gradient(x, per * n, needs=[x, c.out(0)])


def _gather(c: _Ctx) -> None:
    c.gradient(c.inp(0), c.out_numel, needs=[c.inp(1)])  # scatter-add dY into the gathered rows


def _scatter(c: _Ctx) -> None:
    data, idx, upd = c.inp(0), c.inp(1), c.inp(2)
    c.gradient(data, 0, needs=[idx])  # dY with the scattered positions zeroed (or passed, reduction=add)
    c.gradient(upd, 0, needs=[idx])  # dY gathered at the indices


def _topk(c: _Ctx) -> None:
    c.gradient(c.inp(0), 0, needs=[c.out(1)])  # dY scattered into zeros at the indices


def _expand(c: _Ctx) -> None:
    c.gradient(c.inp(0), c.out_numel)


def _copy(c: _Ctx) -> None:
    for t in c.op.inputs:
        c.gradient(t, 0)


def _view(c: _Ctx) -> None:
    """A view: the gradient is a view too; no kernel, no ticks."""


def _fallback(c: _Ctx) -> None:
    acts = [t for t in c.op.reads if c.activation(t)]
    op = c.op
    nbytes = op.bytes_read + op.bytes_written
    if any(c.grad(t) for t in acts):
        c.b_flops += op.flops
        c.b_bytes += nbytes
        c.stash_b.extend(acts)
    if any(c.grad(t) for t in op.reads if c.param(t)):
        c.w_flops += op.flops
        c.w_bytes += nbytes
        c.stash_w.extend(acts)


_UNARY_OWN = {
    "Sigmoid": (3, "output"), "Tanh": (3, "output"), "Exp": (1, "output"), "Sqrt": (2, "output"),
    "Reciprocal": (2, "output"), "Gelu": (2 * T + 6, "input"), "Erf": (T + 3, "input"), "Log": (1, "input"),
    "Abs": (1, "input"), "Sign": (0, "none"), "Ceil": (0, "none"), "Floor": (0, "none"), "Round": (0, "none"),
}
_UNARY_DEFAULT = ("Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Softplus Softsign Elu Celu Selu "
                  "HardSigmoid HardSwish Mish Swish").split()
_VIEW = "Reshape Transpose Squeeze Unsqueeze Flatten Identity Dropout".split()
_COPY = ("Concat Split Slice Pad Cast CastLike Resize Upsample DepthToSpace SpaceToDepth ReverseSequence Compress "
         "Trilu").split()

Rule = Callable[[_Ctx], None]
RULES: Mapping[str, Rule] = {
    **dict.fromkeys(("MatMul", "Gemm", "Conv", "ConvTranspose", "FusedMatMul"), _matmul),
    "Attention": _attention,
    "Softmax": _softmax(4),
    "LogSoftmax": _softmax(T + 3),
    "LayerNormalization": _norm(8, 4, 1, 2),
    "RMSNormalization": _norm(6, 3, 0, 1),
    "SimplifiedLayerNormalization": _norm(6, 3, 0, 1),
    **dict.fromkeys(("BatchNormalization", "InstanceNormalization", "GroupNormalization"), _norm(8, 4, 1, 0)),
    **dict.fromkeys(("Relu", "LeakyRelu", "ThresholdedRelu", "Clip"), _mask_unary),
    **{op: _unary(per, reads) for op, (per, reads) in _UNARY_OWN.items()},
    **dict.fromkeys(_UNARY_DEFAULT, _unary_default),
    "PRelu": _prelu,
    **dict.fromkeys(("Add", "Sub", "Neg"), _add_sub),
    "Mul": _mul,
    "Div": _div,
    "Pow": _pow,
    "Where": _where,
    **dict.fromkeys(("Max", "Min"), _variadic_select),
    **dict.fromkeys(("ReduceSum", "ReduceMean", "CumSum"), _reduce_broadcast),
    **dict.fromkeys(("ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
                     "ReduceLogSum", "ReduceLogSumExp"), _reduce_default),
    **dict.fromkeys(("Gather", "GatherElements", "GatherND"), _gather),
    **dict.fromkeys(("ScatterND", "ScatterElements", "Scatter"), _scatter),
    "TopK": _topk,
    **dict.fromkeys(("Expand", "Tile"), _expand),
    **dict.fromkeys(_COPY, _copy),
    **dict.fromkeys(_VIEW, _view),
}
"""op_type -> rule (the module docstring's table).  An Einsum of two operands uses the MatMul rule."""


def is_float_dtype(dtype: str) -> bool:
    return dtype.startswith("float") or dtype in _FLOAT_DTYPES


_PARAM_ROLES: Mapping[str, tuple[int, ...]] = {
    **dict.fromkeys(("MatMul", "Gemm", "Conv", "ConvTranspose", "FusedMatMul", "Einsum"), (0, 1, 2)),
    **dict.fromkeys(("LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization",
                     "BatchNormalization", "InstanceNormalization", "GroupNormalization"), (1, 2)),
    **dict.fromkeys(("Gather", "GatherND", "GatherElements"), (0,)),
    "PRelu": (1,),
}
"""Input positions where a floating point initializer is a trained parameter: operands of matrix products and
convolutions (weights, biases), scale and bias of normalisations, gathered tables (embeddings), PRelu's slope."""
_ELEMENTWISE_PARAM = ("Add", "Sub", "Mul", "Div")  # a 1-D initializer here is a bias or a per-channel scale


def parameters(graph: OpGraph) -> set[str]:
    """The initializers of `graph` that are trained parameters (module docstring), by the role they play: an
    initializer in a weight position (`_PARAM_ROLES`) or a 1-D operand of Add/Sub/Mul/Div (bias, per-channel
    scale).  Other initializers are constants: scalars, masks, zero buffers, index and shape tensors."""
    tensors, inits = graph.tensors, graph.initializers
    out: set[str] = set()

    def is_float_array(t: str) -> bool:
        info = tensors.get(t)
        return info is not None and is_float_dtype(info.dtype) and math.prod(info.shape) > 1

    for op in graph.ops:
        positions = _PARAM_ROLES.get(op.op_type, ())
        for i, t in enumerate(op.inputs):
            if t not in inits or not is_float_array(t):
                continue
            if i in positions or (op.op_type in _ELEMENTWISE_PARAM and len(tensors[t].shape) == 1):
                out.add(t)
    return out


def tensors_needing_grad(graph: OpGraph, *, inputs_need_grad: bool = False) -> set[str]:
    """The tensors of `graph` that carry a gradient (module docstring): its parameters, optionally its floating
    point inputs, and every floating point output of an op reading one of them."""
    tensors = graph.tensors
    out = parameters(graph)
    if inputs_need_grad:
        out.update(t for t in graph.graph_inputs if t in tensors and is_float_dtype(tensors[t].dtype))
    for op in graph.ops:  # topological order
        if any(t in out for t in op.reads):
            out.update(t for t in op.writes if t in tensors and is_float_dtype(tensors[t].dtype))
    return out


def op_training_cost(op: Op, graph: OpGraph, needs_grad: set[str]) -> OpTrainingCost:
    """F, B, W work and stash of one ONNX op (module docstring); `needs_grad` from `tensors_needing_grad`."""
    c = _Ctx(op, graph, needs_grad)
    product_forward = _product_flops(c)
    rule = RULES.get(op.op_type)
    if op.op_type == "Einsum" and product_forward:
        rule = _matmul
    differentiable = any(c.grad(t) for t in op.reads) and any(c.grad(t) for t in op.writes)
    estimated = op.estimated or (differentiable and rule is None)  # an op without a backward needs no rule
    if differentiable:
        (rule or _fallback)(c)
    return OpTrainingCost(
        op.name, op.op_type, (rule or _fallback).__name__.lstrip("_"), op.flops, product_forward,
        c.b_flops, c.b_product, c.b_bytes, c.w_flops, c.w_product, c.w_bytes,
        tuple(dict.fromkeys(c.stash_b)), tuple(dict.fromkeys(c.stash_w)), c.private_bytes, c.private_until_w,
        estimated)


def op_training_costs(graph: OpGraph, *, inputs_need_grad: bool = False) -> tuple[OpTrainingCost, ...]:
    """`op_training_cost` of every op of `graph`, in its order."""
    needs_grad = tensors_needing_grad(graph, inputs_need_grad=inputs_need_grad)
    return tuple(op_training_cost(op, graph, needs_grad) for op in graph.ops)
