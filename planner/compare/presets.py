"""Pipeline costs of a published architecture without an ONNX file: ``plan-compare --preset deepseek-v3``.

**Architecture figures** (`DeepSeekV3`).  DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437, section
4.2 ("Model Hyper-Parameters"): 61 Transformer layers, hidden dimension 7168; MLA with 128 heads of dimension 128,
KV compression dimension 512, query compression dimension 1536, decoupled RoPE query/key head dimension 64; every
FFN except the first three layers is an MoE layer of 1 shared and 256 routed experts of intermediate dimension 2048,
8 routed experts active per token.  The same figures, and the ones the report's text leaves out, in the released
``config.json`` of the Hugging Face repository deepseek-ai/DeepSeek-V3: ``hidden_size`` 7168, ``num_hidden_layers``
61, ``first_k_dense_replace`` 3, ``intermediate_size`` 18432 (the dense layers' FFN), ``num_attention_heads`` 128,
``q_lora_rank`` 1536, ``kv_lora_rank`` 512, ``qk_nope_head_dim`` 128, ``qk_rope_head_dim`` 64, ``v_head_dim`` 128,
``n_routed_experts`` 256, ``n_shared_experts`` 1, ``num_experts_per_tok`` 8, ``moe_intermediate_size`` 2048,
``vocab_size`` 129280 (checked against several copies of that file and a Megatron-style recipe that writes the
dense/MoE pattern as ``[0]*3 + [1]*58``).  Not modelled: the multi-token-prediction module, the FP8 GEMMs (bf16
here), node-limited routing.

**One micro-batch** is `seqs` sequences of `seq_len` tokens (T = seqs x seq_len tokens; default 1 x 4096, the
report's pre-training sequence length), bf16 (2 bytes per element and per parameter).  Notation: h hidden, H heads,
r_q / r_kv the query / KV compression ranks, d_n, d_r, d_v the no-RoPE, RoPE and value head dimensions, E routed
experts, k active ones, f_e their FFN width, f the dense FFN width, V the vocabulary.  FLOPs count 2 per
multiply-add; norms, RoPE, softmax, SwiGLU's elementwise work and the router's top-k are left out (well under 1 %
of a layer's FLOPs).

**Ops of one layer** (`layer_ops`), forward FLOPs F:

* ``attention``: the MLA projections 2T (h r_q + r_q H (d_n + d_r) + h (r_kv + d_r) + r_kv H (d_n + d_v) + H d_v h)
  plus the causal attention core seqs H seq_len^2 (d_n + d_r + d_v) (QK^T and PV, half of the s x s products
  under the causal mask).
* ``mlp`` (the first three layers): 2T 3 h f (SwiGLU: gate, up and down products).
* MoE layers instead: ``dispatch`` (all-to-all, no compute), ``experts`` = the router's gate 2T h E plus the shared
  and the k routed experts 2T (k + shared) 3 h f_e (balanced routing: every device computes T k routed tokens),
  ``combine`` (all-to-all).
* ``embedding`` before the first layer (a gather: no FLOPs, priced by its bytes) and ``head`` after the last (the
  final norm, the output projection 2T h V and the loss).

**Backward rules.**  A matrix product Y = X A costs one product forward, one for the input gradient dX = dY A^T (B)
and one for the weight gradient dA = X^T dY (W): B = W = F.  The attention core has no weights (W = 0) and its
input gradient is four products where the forward has two (dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q):
B = 2 F.  The embedding has no input gradient (B = 0) and its weight gradient is a scatter of the output gradient
(W priced by its bytes, as F).

**Memory per micro-batch.**  Activation bytes (held from F until W) = 2 bytes x (the input of every matrix product
once, the attention core's Q, K, V and output); the core's Q, K and V are needed by B only and are freed when B ends
(`StageCost.activation_freed_by_b_bytes`).  Per token: attention h + r_q + r_kv + 2 H (d_n + d_r) + 2 H d_v, experts
(k + shared)(h + 3 f_e) + h (the gate's input; the SwiGLU's two inputs and the down product's input per expert),
mlp h + 3 f, head h + V (its input and the logits the loss keeps).  Parameter bytes = 2 x weights of the op (norms
included); an MoE layer holds the gate, the shared expert and ceil(E / EP) routed experts per device.  Gradients and
optimizer states are not counted.

**Time.**  Each pass (F, B, W) of an op is priced by the project's compute rule (`planner.cost.compute`: roofline
max(FLOPs / bf16 peak, bytes / memory bandwidth) + the launch overhead) on the stage's device, with bytes = the op's
parameters + its activations; a pass with no work costs nothing.  A piece's F (B, W) is the sum over its ops.

**Measured op times** (`load_op_times`, ``plan-compare --preset-times CSV``).  Instead of the roofline, F, B and W
of the attention, experts, mlp and head ops can be the milliseconds a GPU measured for them, one micro-batch each:
a CSV with a column ``op`` (``attention``, ``mlp``, ``head``, ``experts``, or ``experts_ep<N>`` for one
expert-parallel degree) and either ``f_ms,b_ms,w_ms`` or the ``measured_f_ms,measured_b_ms,measured_w_ms`` that
``python -m experiments.gpu_preset_costs`` writes.  Ops the file lacks (the embedding, an expert-parallel degree it
did not measure) keep the roofline; the all-to-alls and hops stay priced by the profile's links, and the cut is
balanced on the times actually used.

**All-to-all** (`StageCost.a2a_tick`: one dispatch, or one combine, of every MoE layer of the piece).  A dispatch
sends T k h x 2 bytes; with expert-parallel degree EP (default: the number of stages) the experts of a layer sit on
EP devices (the profile's devices 0..EP-1, then as many beyond it as EP asks, reached over its slowest link) and
the share (EP - 1) / EP of those bytes leaves the device, split evenly over its EP - 1 peers.  Peers reached over
one kind of link share that link's bandwidth (one NVLink port, one NIC per GPU), kinds run side by side: time = max
over link kinds of (latency + bytes to those peers / bandwidth), the slowest device of the group.  The combine
returns as many bytes.  EP = 1: no all-to-all.

**Cut.**  The model is a chain of units: per layer its attention, then its FFN (mlp, or dispatch + experts + combine);
the embedding joins the first unit, the head the last.  p stages (DualPipe's two copies, GPipe, 1F1B, ZB-H1/H2) and
2p chunks (interleaved 1F1B, ZB-V, DualPipeV, the planned V) are each a contiguous cut of those units that minimises
the largest F + B + W of a piece on the first device (an exact dynamic programme); placements, chains and hops are
those of `planner.compare.model_costs.ModelCosts.pipeline`.  A hop between two pieces on different devices carries
the hidden state, T h x 2 bytes, at the link's latency + bytes / bandwidth (the gradient back costs the same).

Units of the comparison: time in milliseconds (the tick is 1, 10, 100 or 1000 us, the finest that keeps one
micro-batch's whole F + B + W within 2 x 10^5 ticks), memory in MiB.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from planner.cost.compute import compute_time_s
from planner.errors import InputError
from planner.ir.graph import Op
from planner.ir.topology import Device, Link, Topology
from planner.pipeline.unroll import StageCost, TrainingPipeline, fixed_placement, v_placement

MIB = 2**20
BF16_BYTES = 2
# ticks per millisecond: 1 us, 10 us, 100 us, 1 ms.  Not a knob: the decimal tick sizes a preset's figures are
# written in; which one a preset takes is `PresetTickPolicy`'s
_TICK_CHOICES_PER_MS = (1000, 100, 10, 1)


@dataclass(frozen=True)
class PresetTickPolicy:
    """How fine a preset's tick is (`preset_costs`): the finest of `_TICK_CHOICES_PER_MS` within the limit."""

    # a micro-batch's work (every unit on the first device) in at most this many ticks: finer ticks round the
    # figures less, but widen the pipeline model's domains past what CP-SAT solves well in plan-compare's budget
    max_microbatch_ticks: int = 2 * 10**5


DEFAULT_PRESET_TICK_POLICY = PresetTickPolicy()  # for argument defaults


@dataclass(frozen=True)
class DeepSeekV3:
    """The published DeepSeek-V3 figures (module docstring: where each comes from)."""

    hidden: int = 7168
    num_layers: int = 61
    num_dense_layers: int = 3  # first_k_dense_replace
    dense_ffn: int = 18432  # intermediate_size
    num_heads: int = 128
    q_lora_rank: int = 1536
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    num_routed_experts: int = 256
    num_shared_experts: int = 1
    top_k: int = 8
    expert_ffn: int = 2048  # moe_intermediate_size
    vocab: int = 129280


PRESETS: dict[str, DeepSeekV3] = {"deepseek-v3": DeepSeekV3()}


@dataclass(frozen=True)
class OpWork:
    """One op of the model for one micro-batch: FLOPs of F, B (input grad), W (weight grad); the bytes its passes
    move (the roofline's memory term); activation bytes (held from F to W, `freed_by_b_bytes` of them released when B
    ends); parameter bytes; the bytes one all-to-all sends (`a2a_bytes`, dispatch and combine ops only)."""

    name: str
    op_type: str
    forward_flops: int = 0
    input_grad_flops: int = 0
    weight_grad_flops: int = 0
    moved_bytes: int = 0
    activation_bytes: int = 0
    freed_by_b_bytes: int = 0
    param_bytes: int = 0
    a2a_bytes: int = 0
    has_input_grad: bool = True  # False: B has no work (the embedding: token ids have no gradient)

    def pass_flops(self) -> tuple[int, int, int]:
        return self.forward_flops, self.input_grad_flops, self.weight_grad_flops


@dataclass(frozen=True)
class MicroBatch:
    """`seqs` sequences of `seq_len` tokens."""

    seq_len: int = 4096
    seqs: int = 1

    @property
    def tokens(self) -> int:
        return self.seq_len * self.seqs


def _matmul(name: str, flops: int, activation_elems: int, param_elems: int, **kw) -> OpWork:
    """An op made of matrix products: B = W = F."""
    act, par = BF16_BYTES * activation_elems, BF16_BYTES * param_elems
    return OpWork(name, "MatMul", flops, flops, flops, par + act, act, param_bytes=par, **kw)


def attention_op(a: DeepSeekV3, mb: MicroBatch, name: str) -> OpWork:
    """MLA: projections (B = W = F) and the causal core (B = 2F, W = 0); module docstring."""
    t, h, heads = mb.tokens, a.hidden, a.num_heads
    qk, v = a.qk_nope_head_dim + a.qk_rope_head_dim, a.v_head_dim
    proj_params = (h * a.q_lora_rank + a.q_lora_rank * heads * qk + h * (a.kv_lora_rank + a.qk_rope_head_dim)
                   + a.kv_lora_rank * heads * (a.qk_nope_head_dim + v) + heads * v * h)
    norm_params = h + a.q_lora_rank + a.kv_lora_rank
    proj_flops = 2 * t * proj_params
    core_flops = mb.seqs * heads * mb.seq_len * mb.seq_len * (qk + v)  # 2 x (s^2 / 2) per product, two products
    qkv_elems = t * heads * (2 * qk + v)  # Q, K, V: needed by the core's B only
    act_elems = t * (h + a.q_lora_rank + a.kv_lora_rank + heads * v) + qkv_elems
    par = BF16_BYTES * (proj_params + norm_params)
    act = BF16_BYTES * act_elems
    return OpWork(name, "Attention", proj_flops + core_flops, proj_flops + 2 * core_flops, proj_flops, par + act,
                  act, BF16_BYTES * qkv_elems, par)


def mlp_op(a: DeepSeekV3, mb: MicroBatch, name: str) -> OpWork:
    """A dense SwiGLU FFN (gate, up, down) with its norm."""
    t, h = mb.tokens, a.hidden
    return _matmul(name, 2 * t * 3 * h * a.dense_ffn, t * (h + 3 * a.dense_ffn), 3 * h * a.dense_ffn + h)


def experts_op(a: DeepSeekV3, mb: MicroBatch, name: str, expert_parallel: int) -> OpWork:
    """The router's gate, the shared expert and the top-k routed experts of every token (balanced routing)."""
    t, h, fe = mb.tokens, a.hidden, a.expert_ffn
    per_token = a.top_k + a.num_shared_experts
    flops = 2 * t * h * a.num_routed_experts + 2 * t * per_token * 3 * h * fe
    experts_here = a.num_shared_experts + math.ceil(a.num_routed_experts / expert_parallel)
    params = a.num_routed_experts * h + experts_here * 3 * h * fe + h
    return _matmul(name, flops, t * (h + per_token * (h + 3 * fe)), params)


def a2a_op(a: DeepSeekV3, mb: MicroBatch, name: str) -> OpWork:
    """Dispatch or combine: T k h bf16 values, no compute (the share that leaves the device: `a2a_s`)."""
    return OpWork(name, "AllToAll", a2a_bytes=mb.tokens * a.top_k * a.hidden * BF16_BYTES)


def layer_ops(a: DeepSeekV3, mb: MicroBatch, layer: int, expert_parallel: int) -> tuple[tuple[OpWork, ...], ...]:
    """Layer `layer` as two units: (attention,) and its FFN, (mlp,) or (dispatch, experts, combine)."""
    pre = f"layer{layer}"
    attn = (attention_op(a, mb, f"{pre}/attention"),)
    if layer < a.num_dense_layers:
        return attn, (mlp_op(a, mb, f"{pre}/mlp"),)
    return attn, (a2a_op(a, mb, f"{pre}/dispatch"), experts_op(a, mb, f"{pre}/experts", expert_parallel),
                  a2a_op(a, mb, f"{pre}/combine"))


def embedding_op(a: DeepSeekV3, mb: MicroBatch) -> OpWork:
    """A gather of T rows: no FLOPs, no input gradient; its weight gradient scatters as many bytes back."""
    moved = 2 * mb.tokens * a.hidden * BF16_BYTES
    return OpWork("embedding", "Gather", moved_bytes=moved, param_bytes=a.vocab * a.hidden * BF16_BYTES,
                  has_input_grad=False)


def head_op(a: DeepSeekV3, mb: MicroBatch) -> OpWork:
    """Final norm, output projection and the loss (which keeps the logits)."""
    t, h = mb.tokens, a.hidden
    return _matmul("head", 2 * t * h * a.vocab, t * (h + a.vocab), a.vocab * h + h)


def model_units(a: DeepSeekV3, mb: MicroBatch, num_layers: int, expert_parallel: int) -> tuple[tuple[OpWork, ...], ...]:
    """The chain of units the cut works on: 2 per layer, the embedding in the first, the head in the last."""
    units = [u for layer in range(num_layers) for u in layer_ops(a, mb, layer, expert_parallel)]
    units[0] = (embedding_op(a, mb), *units[0])
    units[-1] = (*units[-1], head_op(a, mb))
    return tuple(units)


OpTimes = dict[str, tuple[float, float, float]]  # op key (`op_key`) -> F, B, W milliseconds of one micro-batch
_TIME_COLUMNS = (("f_ms", "b_ms", "w_ms"), ("measured_f_ms", "measured_b_ms", "measured_w_ms"))


def op_key(op: OpWork, expert_parallel: int) -> tuple[str, ...]:
    """The keys of `op` in an `OpTimes` table, the most specific first: ``experts_ep<N>`` before ``experts``."""
    kind = op.name.rsplit("/", 1)[-1]
    return (f"experts_ep{expert_parallel}", "experts") if kind == "experts" else (kind,)


def load_op_times(path: Path | str) -> OpTimes:
    """Measured F, B, W milliseconds per op kind from the CSV at `path` (module docstring, "Measured op times").
    Rows repeating an op (one per priced device, as `experiments.gpu_preset_costs` writes) must agree; an unknown
    op, a missing column, a value that is not a number >= 0, or an F of 0 is an `InputError` naming the row."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file", fix="give the CSV that python -m experiments.gpu_preset_costs "
                         "wrote (preset_fbw.csv), or one with columns op,f_ms,b_ms,w_ms")
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        columns = next((c for c in _TIME_COLUMNS if set(c) <= set(header)), None)
        if "op" not in header or columns is None:
            raise InputError(f"{path}: the header {','.join(header) or '(empty)'} lacks the columns op and "
                             f"{' or '.join(','.join(c) for c in _TIME_COLUMNS)}")
        times: OpTimes = {}
        for line, row in enumerate(reader, start=2):
            key = (row["op"] or "").strip()
            if key == "attention_core":  # the core alone, a diagnostic row of the GPU script
                continue
            if key not in ("attention", "mlp", "head", "experts") and not (
                    key.startswith("experts_ep") and key[len("experts_ep"):].isdigit()):
                raise InputError(f"{path}:{line}: unknown op {key!r}",
                                 fix="use attention, mlp, head, experts or experts_ep<N>")
            try:
                values = tuple(float(row[c]) for c in columns)
            except (TypeError, ValueError):
                raise InputError(f"{path}:{line}: {key}: {', '.join(columns)} must be numbers, got "
                                 f"{', '.join(repr(row[c]) for c in columns)}") from None
            if any(not math.isfinite(v) or v < 0 for v in values) or values[0] == 0:
                raise InputError(f"{path}:{line}: {key}: F must be > 0 and B, W >= 0 milliseconds, got {values}",
                                 fix="measure again (a B or W below 0 is a difference of two noisy timings)")
            ms = (values[0], values[1], values[2])
            if times.setdefault(key, ms) != ms:
                raise InputError(f"{path}:{line}: {key} has two different times, {times[key]} and {ms}")
    if not times:
        raise InputError(f"{path}: no op times", fix="one row per op: attention, mlp, head, experts")
    return times


def op_seconds(op: OpWork, device: Device, op_times: OpTimes | None, expert_parallel: int) -> tuple[float, ...]:
    """F, B, W seconds of `op`: from `op_times` where it has the op (`op_key`), else the roofline's
    (`pass_seconds`)."""
    if op_times is not None:
        for key in op_key(op, expert_parallel):
            if key in op_times:
                return tuple(ms * 1e-3 for ms in op_times[key])
    return pass_seconds(op, device)


def pass_seconds(op: OpWork, device: Device) -> tuple[float, float, float]:
    """Seconds of F, B, W of `op` on `device` (`planner.cost.compute` rule, bf16); 0 for a pass without work."""
    moved = (op.moved_bytes, op.moved_bytes if op.has_input_grad else 0, op.moved_bytes)
    out = [compute_time_s(Op(op.name, op.op_type, flops=flops, bytes_read=nbytes, dtype="bfloat16"), device)
           if flops or nbytes else 0.0 for flops, nbytes in zip(op.pass_flops(), moved, strict=True)]
    return out[0], out[1], out[2]


def _peer_links(topology: Topology, device: int, expert_parallel: int) -> list[Link]:
    """The link to each of `device`'s EP - 1 peers: the profile's devices 0..EP-1, then its slowest link."""
    inside = [topology.link(device, d) for d in range(min(expert_parallel, topology.num_devices)) if d != device]
    slowest = max((topology.link(i, j) for i in range(topology.num_devices) for j in range(topology.num_devices)
                   if i != j), key=lambda link: link.transfer_s(2**30), default=None)
    outside = max(0, expert_parallel - topology.num_devices)
    if outside and slowest is None:
        raise InputError("--expert-parallel beyond a one-device profile has no link to reach its peers")
    return inside + [slowest] * outside  # type: ignore[list-item]


def a2a_s(topology: Topology, expert_parallel: int, sent_bytes: int) -> float:
    """Seconds of one all-to-all in which every device of the EP group sends `sent_bytes` (its share for itself
    stays): per device, max over link kinds of latency + bytes to its peers over that kind / bandwidth; the slowest
    device of the group (module docstring)."""
    if expert_parallel <= 1 or sent_bytes <= 0:
        return 0.0
    per_peer = sent_bytes / expert_parallel
    worst = 0.0
    for d in range(min(expert_parallel, topology.num_devices)):
        by_kind: dict[tuple[str, float, float], int] = {}
        for link in _peer_links(topology, d, expert_parallel):
            key = (link.name, link.latency_s, link.bandwidth_bytes_per_s)
            by_kind[key] = by_kind.get(key, 0) + 1
        worst = max(worst, max(lat + n * per_peer / bw for (_, lat, bw), n in by_kind.items()))
    return worst


def balanced_cut(weights: Sequence[int], pieces: int) -> tuple[tuple[int, ...], ...]:
    """Contiguous cut of range(len(weights)) into `pieces` non-empty pieces minimising the largest piece sum
    (dynamic programme over (pieces, prefix); ties: the earliest cut)."""
    n = len(weights)
    if not 1 <= pieces <= n:
        raise InputError(f"cannot cut {n} units into {pieces} pieces")
    prefix = [0]
    for w in weights:
        prefix.append(prefix[-1] + int(w))
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(pieces + 1)]  # best[k][i]: first i units in k pieces
    back = [[0] * (n + 1) for _ in range(pieces + 1)]
    best[0][0] = 0
    for k in range(1, pieces + 1):
        for i in range(k, n - (pieces - k) + 1):
            for j in range(k - 1, i):
                v = max(best[k - 1][j], prefix[i] - prefix[j])
                if v < best[k][i]:
                    best[k][i], back[k][i] = v, j
    bounds, i = [], n
    for k in range(pieces, 0, -1):
        bounds.append((back[k][i], i))
        i = back[k][i]
    return tuple(tuple(range(lo, hi)) for lo, hi in reversed(bounds))


def _layout(name: str, p: int, m: int) -> tuple[int, tuple[int, ...], tuple[tuple[int, ...], ...], int]:
    """(split, stage -> device, chains, micro-batches per chain) of schedule `name`: the same as
    `ModelCosts.pipeline` (split 1: p stages, split 2: 2p chunks; DualPipe: two copies of the p stages)."""
    if name in ("gpipe", "1f1b", "zb-h1", "zb-h2"):
        return 1, fixed_placement(p, p), (tuple(range(p)),), m
    if name == "interleaved-1f1b":
        return 2, fixed_placement(2 * p, p), (tuple(range(2 * p)),), m
    if name in ("zb-v", "dualpipev", "opplan-v"):
        return 2, v_placement(p), (tuple(range(2 * p)),), m
    if name == "dualpipe":
        return 1, v_placement(p), (tuple(range(p)), tuple(range(p, 2 * p))), max(m // 2, 1)
    raise InputError(f"unknown schedule {name!r}")


@dataclass(frozen=True, eq=False)
class PresetCosts:
    """A preset model cut into p stages (`stage_units`) and 2p chunks (`chunk_units`) of `units`, priced on the
    first p devices of `topology`; the same interface `planner.compare.pipelines` uses on `ModelCosts`."""

    preset: str
    units: tuple[tuple[OpWork, ...], ...]
    topology: Topology
    num_devices: int
    microbatch: MicroBatch
    expert_parallel: int
    stage_units: tuple[tuple[int, ...], ...]
    chunk_units: tuple[tuple[int, ...], ...]
    ticks_per_unit: int  # ticks per millisecond
    bytes_per_unit: int = MIB
    time_unit: str = "ms"
    memory_unit: str = "MiB"
    comm_stream: bool = True
    a2a: bool = True
    fb_overlap: float = 1.0
    op_times: OpTimes | None = None  # measured F, B, W ms per op kind (`load_op_times`); None: the roofline

    @property
    def num_layers(self) -> int:
        return len(self.units) // 2  # two units per layer (`model_units`)

    @staticmethod
    def layers_per_piece(cut: Sequence[Sequence[int]]) -> str:
        """The layers of each piece of `cut` (a half for an attention or FFN unit alone), e.g. '4 3.5 ...'."""
        return " ".join(f"{len(piece) / 2:g}" for piece in cut)

    @property
    def tick_s(self) -> float:
        return 1e-3 / self.ticks_per_unit

    def _ticks(self, seconds: float) -> int:
        return math.ceil(seconds / self.tick_s - 1e-9) if seconds > 0 else 0

    @cached_property
    def _a2a_s_by_bytes(self) -> dict[int, float]:
        """Seconds of one all-to-all per distinct dispatch size (every MoE layer sends the same bytes)."""
        sizes = {op.a2a_bytes for u in self.units for op in u if op.a2a_bytes}
        return {n: a2a_s(self.topology, self.expert_parallel, n) for n in sizes}

    def a2a_tick(self, units: Sequence[int]) -> int:
        """One all-to-all (dispatch, or combine) of every MoE layer among `units`, each rounded up."""
        return sum(self._ticks(self._a2a_s_by_bytes[op.a2a_bytes]) for u in units for op in self.units[u]
                   if op.name.endswith("/dispatch"))

    def priced_seconds(self, op: OpWork, device: Device) -> tuple[float, ...]:
        """F, B, W seconds of `op` on `device` as this preset prices it: its measured op times where it has the op,
        else the roofline (`op_seconds`).  Every figure derived from the preset's ops goes through here."""
        return op_seconds(op, device, self.op_times, self.expert_parallel)

    def stage_cost(self, units: Sequence[int], device: int) -> StageCost:
        """F, B, W ticks (each the sum of its ops' seconds, rounded up once), memory and all-to-all of a piece."""
        dev = self.topology.devices[device]
        ops = [op for u in units for op in self.units[u]]
        secs = [self.priced_seconds(op, dev) for op in ops]
        f, b, w = (self._ticks(sum(s[i] for s in secs)) for i in range(3))
        return StageCost(f, b, w, activation_bytes=sum(op.activation_bytes for op in ops),
                         param_bytes=sum(op.param_bytes for op in ops),
                         activation_freed_by_b_bytes=sum(op.freed_by_b_bytes for op in ops),
                         a2a_tick=self.a2a_tick(units) if self.a2a else 0)

    def hop_tick(self, src: int, dst: int) -> int:
        """The hidden state of one micro-batch from device `src` to `dst` (0 on one device)."""
        if src == dst:
            return 0
        hidden_bytes = self.microbatch.tokens * PRESETS[self.preset].hidden * BF16_BYTES
        return self._ticks(self.topology.link(src, dst).transfer_s(hidden_bytes))

    def pipeline(self, name: str, p: int, m: int) -> TrainingPipeline:
        """The pipeline schedule `name` runs on (`_layout`; `ModelCosts.pipeline` is the ONNX twin)."""
        if p != self.num_devices:
            raise InputError(f"the preset was cut for {self.num_devices} devices, not {p}")
        split, std, chains, mb = _layout(name, p, m)
        cut = self.stage_units if split == 1 else self.chunk_units
        pieces = list(cut) + (list(cut) if name == "dualpipe" else [])  # stage p + j: the second copy of stage j
        hops = [0] * len(pieces)
        for chain in chains:
            for a, b in zip(chain, chain[1:], strict=False):
                hops[a] = self.hop_tick(std[a], std[b])
        stages = tuple(self.stage_cost(units, std[s]) for s, units in enumerate(pieces))
        return TrainingPipeline(stages, mb, p, tuple(std), chains, 0, name, None, tuple(hops), self.comm_stream,
                                fb_overlap=self.fb_overlap if self.fb_overlap < 1 else None)


def preset_costs(preset: str, topology: Topology, num_stages: int, *, num_layers: int | None = None,
                 microbatch: MicroBatch | None = None, expert_parallel: int | None = None,
                 comm_stream: bool = True, op_times: OpTimes | None = None,
                 ticks: PresetTickPolicy = DEFAULT_PRESET_TICK_POLICY) -> PresetCosts:
    """Price `preset` with `num_layers` layers (default: the published count) on the first `num_stages` devices of
    `topology` (its ops at `op_times` where given) and cut it into p stages and 2p chunks (module docstring);
    `ticks`: how fine its tick is."""
    if preset not in PRESETS:
        raise InputError(f"unknown preset {preset!r}", fix=f"use one of {', '.join(PRESETS)}")
    arch = PRESETS[preset]
    p = int(num_stages)
    layers = arch.num_layers if num_layers is None else int(num_layers)
    mb = microbatch or MicroBatch()
    ep = p if expert_parallel is None else int(expert_parallel)
    if layers < 1:
        raise InputError(f"--layers must be >= 1, got {layers}")
    if mb.seq_len < 1 or mb.seqs < 1:
        raise InputError(f"a micro-batch needs at least one token (seq_len {mb.seq_len}, seqs {mb.seqs})")
    if ep < 1:
        raise InputError(f"--expert-parallel must be >= 1, got {ep}")
    if p < 1 or p > topology.num_devices:
        raise InputError(f"--stages {p} needs 1..{topology.num_devices} devices of the hardware profile "
                         f"{topology.name}")
    if layers < p:
        raise InputError(f"--layers {layers} is too few for {p} stages: the V-shaped schedules cut the model into "
                         f"{2 * p} chunks, at most two per layer (attention | FFN)", fix=f"use --layers >= {p}")
    units = model_units(arch, mb, layers, ep)
    first = topology.devices[0]
    work_s = [sum(sum(op_seconds(op, first, op_times, ep)) for op in u) for u in units]
    total_s = sum(work_s)
    per_ms = next((k for k in _TICK_CHOICES_PER_MS if total_s * 1e3 * k <= ticks.max_microbatch_ticks),
                  _TICK_CHOICES_PER_MS[-1])
    weights = [math.ceil(s * 1e3 * per_ms) for s in work_s]
    return PresetCosts(preset, units, topology, p, mb, ep, balanced_cut(weights, p), balanced_cut(weights, 2 * p),
                       per_ms, comm_stream=comm_stream, op_times=op_times)
