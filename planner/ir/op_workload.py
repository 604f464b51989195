"""Per-op-type workload rules: how many floating point operations an ONNX node performs.

Conventions (one number per node, from static shapes; bytes moved are counted by the importer, not here):

* **FLOPs = 2 x multiply-accumulates** for Conv, ConvTranspose, Gemm, MatMul (batched and broadcast too), Einsum
  and the quantized variants; bias additions are counted (one per output element).  Gemm's alpha/beta scalings
  are not counted.
* **Elementwise** ops cost a small constant per *output* element: 1 for simple arithmetic, comparisons, logic and
  piecewise-linear activations (Add, Sub, Mul, Div, Neg, Abs, Relu, LeakyRelu, PRelu, Sqrt, Reciprocal...; sqrt
  and division are single hardware instructions, so they count 1); `TRANSCENDENTAL` = 4 for functions evaluated
  by a polynomial/table (Exp, Log, Tanh, Sigmoid, Erf, Sin, Pow...); composites add their parts (Gelu = erf + 4,
  HardSigmoid = 4, Clip = 2 ...; see `_ELEMENTWISE`).  Variadic Sum/Max/Min: (inputs - 1) per output element,
  Mean: inputs per element.
* **Reductions** (ReduceSum/Mean/Max/Min/Prod/L1, ArgMax/ArgMin): 1 per *input* element (ReduceMean adds 1 per
  output element for the division; ReduceL2/ReduceSumSquare 2, ReduceLogSumExp 2 + TRANSCENDENTAL per input
  element).  CumSum: 1 per element.
* **Softmax / LogSoftmax**: 5 per element (max, subtract, exp, sum, divide/log; inside this fused kernel exp is
  counted as one step).  Hardmax: 1 per element.
* **Normalization**: BatchNormalization (inference, folded into scale and shift) 2 per element;
  LayerNormalization 5 per element (mean, subtract, square, accumulate, multiply by 1/std) + 1 each for scale and
  bias when present; InstanceNormalization and GroupNormalization 7; RMSNormalization 3 + 1 for scale;
  MeanVarianceNormalization 5; LpNormalization 3.  LRN: 2 x size + 4 per element (squares and sums over the
  window, then scale, bias, power, divide).
* **Pooling**: MaxPool/AveragePool: prod(kernel_shape) per output element, each extent clipped to the padded
  input (as onnxruntime reads a window larger than its input; Conv's window likewise); LpPool twice that;
  GlobalAveragePool / GlobalMaxPool: 1 per input element; GlobalLpPool 2.
* **TopK**: n x max(1, ceil(log2 k)) compares per slice of length n along the axis (a heap of size k).
  **Unique**: n x ceil(log2 n) (a sort), estimated.  **NonZero**: 1 compare per input element, estimated (its
  output size is data-dependent).
* **Quantization**: QuantizeLinear 3 per element, DequantizeLinear 2, DynamicQuantizeLinear 5 per input
  element.  RotaryEmbedding 3 per element.
* **Recurrent** (RNN/GRU/LSTM): per direction, time step and batch row, 2 x gates x H x (I + H) for the two
  matrix products, + 2 x gates x H when a bias is given, + an elementwise term (RNN 4, GRU 17, LSTM 24 per hidden
  unit: the gate activations at TRANSCENDENTAL each plus the state updates).
* **Attention** (opset 23): 2 x (D + Dv) per score for the two products + 6 per score (scale + softmax).
* **Data movement** (Concat, Split, Slice, Gather*, Scatter*, Where, Cast, Expand, Tile, Pad, Resize, OneHot,
  DepthToSpace...) and **shape-only** ops (Reshape, Transpose, Squeeze, Unsqueeze, Flatten, Identity, Dropout at
  inference, Shape, Size, Constant, ConstantOfShape, Range...): 0 FLOPs; they still move bytes, which the cost
  model sees through the op's bytes_read / bytes_written.

An op type without a rule (or whose shapes a rule needs are unknown) gets 0 FLOPs and `estimated=True`: the cost
model then times it by the bytes it moves, and reports list it.  Rules are keyed by (domain, op_type); the
standard domain is ''.  This module does not import onnx: the importer hands each node over as `NodeShapes`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import SupportsIndex, SupportsInt

Shape = tuple[int, ...]

TRANSCENDENTAL = 4
"""FLOPs charged for one evaluation of exp, log, tanh, sigmoid, erf, sin, pow... (a documented constant)."""


@dataclass(frozen=True, slots=True)
class NodeShapes:
    """What a rule sees of one node: positional input/output shapes (None: omitted or unknown) and attributes.

    Attribute values are plain Python values (int, float, str, list of those); graph attributes are None.
    """

    op_type: str
    domain: str = ""
    inputs: tuple[Shape | None, ...] = ()
    outputs: tuple[Shape | None, ...] = ()
    attrs: Mapping[str, object] = field(default_factory=dict)

    def inp(self, i: int) -> Shape:
        """Shape of input i; raises MissingShapeError when it is omitted or unknown."""
        if i < len(self.inputs) and self.inputs[i] is not None:
            return self.inputs[i]  # type: ignore[return-value]
        raise MissingShapeError(f"input {i} of {self.op_type}")

    def out(self, i: int = 0) -> Shape:
        if i < len(self.outputs) and self.outputs[i] is not None:
            return self.outputs[i]  # type: ignore[return-value]
        raise MissingShapeError(f"output {i} of {self.op_type}")

    def has_input(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def attr(self, name: str, default: object = None) -> object:
        return self.attrs.get(name, default)


class MissingShapeError(Exception):
    """A rule needed a shape that is not known (internal; turned into estimated=True)."""


Rule = Callable[[NodeShapes], int]


def numel(shape: Shape) -> int:
    return math.prod(shape)


def _int(value: object) -> int:
    """`int(value)` for an attribute value (typed `object`): TypeError, as int() itself raises, when the value is
    neither a number nor a string; op_flops turns that into estimated=True."""
    if type(value) is int:  # the common case, before the protocol checks (slow isinstance on large graphs)
        return value
    if isinstance(value, (str, bytes, SupportsInt, SupportsIndex)):
        return int(value)
    raise TypeError(f"int() argument must be a number or a string, not {type(value).__name__!r}")


def _ints(value: object) -> tuple[int, ...]:
    """An ints attribute as a tuple (TypeError, as iterating would raise, when it is not iterable)."""
    if not isinstance(value, Iterable):
        raise TypeError(f"{type(value).__name__!r} object is not iterable")
    return tuple(_int(v) for v in value)


def _axis(axis: object, rank: int) -> int:
    a = _int(axis)
    return a + rank if a < 0 else a


# --------------------------------------------------------------------------- rule factories
def per_output_element(k: int) -> Rule:
    """k FLOPs per element of output 0."""

    def rule(n: NodeShapes) -> int:
        return k * numel(n.out(0))

    rule.__doc__ = f"{k} FLOP(s) per output element."
    return rule


def per_input_element(k: int, extra_per_output: int = 0) -> Rule:
    """k FLOPs per element of input 0 (+ extra_per_output per element of output 0)."""

    def rule(n: NodeShapes) -> int:
        total = k * numel(n.inp(0))
        if extra_per_output:
            total += extra_per_output * numel(n.out(0))
        return total

    rule.__doc__ = f"{k} FLOP(s) per input element" + (f" + {extra_per_output} per output element." if
                                                       extra_per_output else ".")
    return rule


def zero(n: NodeShapes) -> int:
    """Data movement or shape bookkeeping only: 0 FLOPs (bytes are counted by the importer)."""
    return 0


# --------------------------------------------------------------------------- dense linear algebra
def _conv_like(x_index: int, w_index: int, bias_index: int | None, transpose: bool = False) -> Rule:
    def rule(n: NodeShapes) -> int:
        w = n.inp(w_index)
        window = w[2:] if transpose or x_index != 0 else clipped_window(n, w[2:])
        per = w[1] * numel(window)  # (C/group) x prod(kernel) for Conv; (M/group) x prod(kernel) for transposed
        # Conv: every output element is C/group x prod(k) MACs.  ConvTranspose: every *input* element scatters
        # into M/group x prod(k) outputs.
        macs = (numel(n.inp(x_index)) if transpose else numel(n.out(0))) * per
        bias = numel(n.out(0)) if bias_index is not None and n.has_input(bias_index) else 0
        return 2 * macs + bias

    rule.__doc__ = ("2 x MACs (" + ("input elements" if transpose else "output elements") +
                    " x W.shape[1] x prod(kernel)) + 1 per output element for the bias.")
    return rule


conv = _conv_like(0, 1, 2)
conv_transpose = _conv_like(0, 1, 2, transpose=True)
conv_integer = _conv_like(0, 1, None)
qlinear_conv = _conv_like(0, 3, 8)


def gemm(n: NodeShapes) -> int:
    """Y = alpha A' B' + beta C: 2 x M x N x K, + M x N for adding C when given (alpha/beta scalings not counted)."""
    a = n.inp(0)
    k = a[0] if n.attr("transA", 0) else a[1]
    mn = numel(n.out(0))
    return 2 * mn * k + (mn if n.has_input(2) else 0)


def _matmul_like(a_index: int) -> Rule:
    def rule(n: NodeShapes) -> int:
        # Y has the broadcast batch dims and M x N (1-D operands drop theirs); every element is K MACs.
        return 2 * numel(n.out(0)) * n.inp(a_index)[-1]

    rule.__doc__ = "2 x numel(Y) x K, K = last dim of A (batched and broadcast MatMul included)."
    return rule


matmul = _matmul_like(0)
qlinear_matmul = _matmul_like(0)


def einsum(n: NodeShapes) -> int:
    """Naive evaluation: P = product of the sizes of all distinct indices; (inputs - 1) x P multiplies, plus P adds
    when some index is summed out (so a two-operand contraction is 2 x MACs, like MatMul); a pure permutation or
    diagonal is 0."""
    eq = str(n.attr("equation", "")).replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    sizes: dict[str, int] = {}
    ell: Shape = ()
    for i, term in enumerate(terms):
        shape = n.inp(i)
        if "..." in term:
            head, tail = term.split("...")
            n_ell = len(shape) - len(head) - len(tail)
            ell_dims = shape[len(head):len(head) + n_ell]
            # broadcast the ellipsis dims across operands (right-aligned)
            width = max(len(ell), len(ell_dims))
            a = (1,) * (width - len(ell)) + ell
            b = (1,) * (width - len(ell_dims)) + ell_dims
            ell = tuple(max(x, y) for x, y in zip(a, b, strict=True))
            letters = head + tail
            dims = shape[:len(head)] + shape[len(head) + n_ell:]
        else:
            letters, dims = term, shape
        for c, d in zip(letters, dims, strict=True):
            sizes[c] = max(sizes.get(c, 1), d)
    if "->" in eq:
        out_letters = set(rhs.replace("...", ""))
    else:  # implicit output: indices that appear exactly once, in alphabetical order
        counts: dict[str, int] = {}
        for c in lhs.replace(",", "").replace("...", ""):
            counts[c] = counts.get(c, 0) + 1
        out_letters = {c for c, k in counts.items() if k == 1}
    total = numel(tuple(sizes.values())) * numel(ell)
    summed = any(c not in out_letters for c in sizes)
    return (len(terms) - 1) * total + (total if summed else 0)


# --------------------------------------------------------------------------- elementwise
def variadic(extra: int) -> Rule:
    """(inputs - 1 + extra) FLOPs per output element (Sum/Max/Min: extra 0; Mean: extra 1 for the division)."""

    def rule(n: NodeShapes) -> int:
        k = len([s for s in n.inputs if s is not None]) - 1
        return (k + extra) * numel(n.out(0)) if k > 0 else 0

    rule.__doc__ = variadic.__doc__
    return rule


T = TRANSCENDENTAL
_ELEMENTWISE: dict[str, int] = {
    # simple arithmetic, comparison, logic, rounding, piecewise-linear activations: 1
    **dict.fromkeys(
        "Add Sub Mul Div Neg Abs Relu LeakyRelu PRelu ThresholdedRelu Sign Ceil Floor Round Reciprocal Sqrt Mod "
        "Equal Less Greater LessOrEqual GreaterOrEqual Not And Or Xor BitShift BitwiseAnd BitwiseOr BitwiseXor "
        "BitwiseNot IsNaN IsInf Shrink".split(), 1),
    "Clip": 2,  # max then min
    "HardSigmoid": 4,  # multiply, add, max, min
    "HardSwish": 5,  # HardSigmoid + multiply
    "Softsign": 3,  # abs, add, divide
    **dict.fromkeys("Exp Log Tanh Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Erf Pow".split(), T),
    "Sigmoid": T,  # 1 / (1 + exp(-x)) evaluated as one function
    "Softplus": 2 * T + 1,  # log(exp(x) + 1)
    "Elu": T + 2,
    "Celu": T + 3,
    "Selu": T + 3,
    "Gelu": T + 4,  # 0.5 x (1 + erf(x / sqrt 2)): erf + 4 arithmetic (tanh approximation costs about the same)
    "Mish": 3 * T + 2,  # x tanh(softplus(x))
    "Swish": T + 1,  # x sigmoid(beta x) (opset 24)
}


# --------------------------------------------------------------------------- reductions, normalization, pooling
def layer_norm(n: NodeShapes) -> int:
    """5 per element (mean, subtract, square, accumulate, multiply by 1/std) + 1 each for scale and bias."""
    return (5 + int(n.has_input(1)) + int(n.has_input(2))) * numel(n.inp(0))


def rms_norm(n: NodeShapes) -> int:
    """3 per element (square, accumulate, multiply by 1/rms) + 1 for the scale."""
    return (3 + int(n.has_input(1))) * numel(n.inp(0))


def skip_layer_norm(n: NodeShapes) -> int:
    """com.microsoft SkipLayerNormalization: the skip (and bias) add, then LayerNormalization with scale (+ beta)."""
    e = numel(n.inp(0))
    return (1 + int(n.has_input(4)) + 6 + int(n.has_input(3))) * e


def lrn(n: NodeShapes) -> int:
    """2 x size + 4 per element: squares and sums over the window, then scale, bias, power and divide."""
    size = _int(n.attr("size", 1))
    return (2 * size + 4) * numel(n.out(0))


def clipped_window(n: NodeShapes, kernel: Shape) -> Shape:
    """The window a kernel really reads: each extent clipped to the padded input (explicit pads; auto_pad SAME
    never makes a window larger than its padded input).  Exporters write global pooling as a ceil_mode pool whose
    kernel exceeds the feature map; onnxruntime visits only the cells inside, so the cost does too.  Unknown input
    shape: the kernel as given."""
    if not n.has_input(0) or len(n.inp(0)) != len(kernel) + 2:
        return kernel
    spatial = n.inp(0)[2:]
    pads = _ints(n.attr("pads") or (0,) * (2 * len(kernel)))
    if len(pads) != 2 * len(kernel):
        return kernel
    return tuple(min(k, d + pads[i] + pads[i + len(kernel)]) for i, (k, d) in enumerate(zip(kernel, spatial,
                                                                                         strict=True)))


def pool(factor: int) -> Rule:
    def rule(n: NodeShapes) -> int:
        kernel = n.attr("kernel_shape")
        if not kernel:
            raise MissingShapeError("kernel_shape")
        return factor * numel(n.out(0)) * numel(clipped_window(n, _ints(kernel)))

    rule.__doc__ = f"{factor} x prod(kernel_shape, clipped to the padded input) per output element."
    return rule


def topk(n: NodeShapes) -> int:
    """n x max(1, ceil(log2 k)) compares per slice (heap selection); n = input dim along axis, k = output dim."""
    x = n.inp(0)
    ax = _axis(n.attr("axis", -1), len(x))
    length, k = x[ax], n.out(0)[ax]
    slices = numel(x) // length if length else 0
    return slices * length * max(1, math.ceil(math.log2(max(k, 1))))


def unique(n: NodeShapes) -> int:
    """A sort: m x ceil(log2 m) compares, m = number of input elements (data-dependent output: estimated)."""
    m = numel(n.inp(0))
    return m * max(1, math.ceil(math.log2(max(m, 2))))


# --------------------------------------------------------------------------- recurrent, attention
_RNN_GATES = {"RNN": (1, 4), "GRU": (3, 17), "LSTM": (4, 24)}  # (gates, elementwise FLOPs per hidden unit)


def recurrent(n: NodeShapes) -> int:
    """Per direction x step x batch row: 2 x G x H x (I + H) + 2 x G x H (bias, if given) + E x H (elementwise)."""
    gates, elem = _RNN_GATES[n.op_type]
    x, w, r = n.inp(0), n.inp(1), n.inp(2)
    seq, batch = (x[1], x[0]) if n.attr("layout", 0) else (x[0], x[1])
    dirs, inp, hidden = w[0], w[2], r[2]
    per = 2 * gates * hidden * (inp + hidden) + (2 * gates * hidden if n.has_input(3) else 0) + elem * hidden
    return dirs * seq * batch * per


def attention(n: NodeShapes) -> int:
    """Scores = B x Hq x S x L: 2 x (D + Dv) per score (Q K^T and P V) + 6 per score (scale, softmax)."""
    q, k, v = n.inp(0), n.inp(1), n.inp(2)
    if len(q) == 4:
        b, hq, s, d = q
        length, dv = k[2], v[3]
    else:
        hq = _int(n.attr("q_num_heads", 0) or 0)
        hkv = _int(n.attr("kv_num_heads", 0) or 0)
        if not hq or not hkv:
            raise MissingShapeError("q_num_heads / kv_num_heads")
        b, s, d = q[0], q[1], q[2] // hq
        length, dv = k[1], v[2] // hkv
    if n.has_input(4):  # past_key: (B, Hkv, P, D)
        length += n.inp(4)[2]
    scores = b * hq * s * length
    return scores * (2 * (d + dv) + 6)


# --------------------------------------------------------------------------- the table
_ZERO_OPS = (
    # data movement: 0 FLOPs, bytes moved
    "Concat Split SplitToSequence Slice Gather GatherElements GatherND ScatterND ScatterElements Scatter Where "
    "Cast CastLike Expand Tile Pad Resize Upsample DepthToSpace SpaceToDepth ReverseSequence Compress OneHot "
    "Trilu MaxUnpool EyeLike Col2Im CenterCropPad BitCast TensorScatter "
    # shape-only / bookkeeping
    "Reshape Transpose Squeeze Unsqueeze Flatten Identity Dropout Shape Size Constant ConstantOfShape Range "
    "Optional OptionalGetElement OptionalHasElement SequenceAt SequenceConstruct SequenceEmpty SequenceErase "
    "SequenceInsert SequenceLength ConcatFromSequence"
).split()

DATA_DEPENDENT: frozenset[str] = frozenset({"NonZero", "Unique", "Compress", "NonMaxSuppression"})
"""Standard op types whose output size depends on the data: always estimated (the importer bounds the shape)."""

PER_ELEMENT_OP_TYPES: frozenset[str] = frozenset({
    *_ELEMENTWISE, "Sum", "Max", "Min", "Mean", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool",
    "GlobalMaxPool", "GlobalLpPool", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceMean", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp", "ArgMax", "ArgMin", "CumSum", "CumProd",
    "Softmax", "LogSoftmax", "Hardmax", "BatchNormalization", "LayerNormalization", "RMSNormalization",
    "InstanceNormalization", "GroupNormalization", "MeanVarianceNormalization", "LpNormalization", "LRN",
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})
"""Standard op types whose work is a bounded number of FLOPs per element read or written (a sanity check flags
any costed far above that)."""

RULES: dict[tuple[str, str], Rule] = {
    **{("", op): zero for op in _ZERO_OPS},
    **{("", op): per_output_element(k) for op, k in _ELEMENTWISE.items()},
    ("", "Sum"): variadic(0),
    ("", "Max"): variadic(0),
    ("", "Min"): variadic(0),
    ("", "Mean"): variadic(1),
    ("", "Conv"): conv,
    ("", "ConvTranspose"): conv_transpose,
    ("", "ConvInteger"): conv_integer,
    ("", "QLinearConv"): qlinear_conv,
    ("", "Gemm"): gemm,
    ("", "MatMul"): matmul,
    ("", "MatMulInteger"): matmul,
    ("", "QLinearMatMul"): qlinear_matmul,
    ("", "Einsum"): einsum,
    **{("", op): per_input_element(1) for op in
       "ReduceSum ReduceMax ReduceMin ReduceProd ReduceL1 ArgMax ArgMin CumSum".split()},
    ("", "CumProd"): per_input_element(1),
    ("", "ReduceMean"): per_input_element(1, extra_per_output=1),
    ("", "ReduceL2"): per_input_element(2),
    ("", "ReduceSumSquare"): per_input_element(2),
    ("", "ReduceLogSum"): per_input_element(1, extra_per_output=T),
    ("", "ReduceLogSumExp"): per_input_element(2 + T, extra_per_output=T),
    ("", "Softmax"): per_output_element(5),
    ("", "LogSoftmax"): per_output_element(5),
    ("", "Hardmax"): per_output_element(1),
    ("", "BatchNormalization"): per_input_element(2),
    ("", "LayerNormalization"): layer_norm,
    ("", "RMSNormalization"): rms_norm,
    ("", "InstanceNormalization"): per_input_element(7),
    ("", "GroupNormalization"): per_input_element(7),
    ("", "MeanVarianceNormalization"): per_input_element(5),
    ("", "LpNormalization"): per_input_element(3),
    ("", "LRN"): lrn,
    ("", "MaxPool"): pool(1),
    ("", "AveragePool"): pool(1),
    ("", "LpPool"): pool(2),
    ("", "GlobalAveragePool"): per_input_element(1),
    ("", "GlobalMaxPool"): per_input_element(1),
    ("", "GlobalLpPool"): per_input_element(2),
    ("", "TopK"): topk,
    ("", "Unique"): unique,
    ("", "NonZero"): per_input_element(1),
    ("", "QuantizeLinear"): per_output_element(3),  # divide by scale, round, add zero point (+ saturate)
    ("", "DequantizeLinear"): per_output_element(2),  # subtract zero point, multiply by scale
    ("", "DynamicQuantizeLinear"): per_input_element(5),  # min and max over the input, then quantize
    ("", "RotaryEmbedding"): per_output_element(3),  # x cos + rotate(x) sin
    ("", "RNN"): recurrent,
    ("", "GRU"): recurrent,
    ("", "LSTM"): recurrent,
    ("", "Attention"): attention,
    # com.microsoft contrib ops that onnxruntime's optimizers emit most often; other contrib ops are estimated.
    ("com.microsoft", "FusedMatMul"): matmul,
    ("com.microsoft", "MatMulNBits"): matmul,
    ("com.microsoft", "Gelu"): per_output_element(T + 4),
    ("com.microsoft", "FastGelu"): per_output_element(T + 6),
    ("com.microsoft", "BiasGelu"): per_output_element(T + 5),
    ("com.microsoft", "QuickGelu"): per_output_element(T + 2),
    ("com.microsoft", "SkipLayerNormalization"): skip_layer_norm,
    ("com.microsoft", "SimplifiedLayerNormalization"): rms_norm,
}
"""(domain, op_type) -> rule; 'ai.onnx' is looked up as ''."""

_CANON_DOMAIN = {"ai.onnx": ""}


def has_flop_rule(op_type: str, domain: str = "") -> bool:
    """Whether a FLOP rule exists for the op type (an estimated op with one had shapes its rule could not read, or
    shapes bounded rather than known)."""
    return (_CANON_DOMAIN.get(domain, domain), op_type) in RULES


def op_flops(node: NodeShapes) -> tuple[int, bool]:
    """(FLOPs, estimated) of one node.  estimated is True when no rule applies, a needed shape is unknown, or the
    op's output size is data-dependent."""
    domain = _CANON_DOMAIN.get(node.domain, node.domain)
    rule = RULES.get((domain, node.op_type))
    if rule is None:
        return 0, True
    try:
        flops = int(rule(node))
    except (MissingShapeError, IndexError, ValueError, ZeroDivisionError, TypeError):
        return 0, True
    return max(flops, 0), domain == "" and node.op_type in DATA_DEPENDENT

