"""Real-size decoder-only transformers (dense and mixture-of-experts) written as ONNX whose weights take no disk.

Presets (`PRESETS`, `preset(name, **overrides)`): ``mixtral-8x7b`` (32 layers, hidden 4096, 8 experts, top-2),
``llama-8b`` and ``llama-70b`` (dense, grouped-query attention), ``deepseek-v3-slice`` (multi-head latent attention
and 256 routed + 1 shared expert, top-8; a slice of 2 of the 61 layers).  Every field can be overridden, so tests
build the same graphs with 1-2 layers and small widths.

**How the weights take no disk.**  Every weight is an ONNX initializer stored as *external data*
(``data_location = EXTERNAL``, with ``location`` / ``offset`` / ``length``, the ONNX format's own way to keep large
tensors outside the protobuf) in one file next to the model, ``<model>.weights``.  That file is created with
``os.truncate`` at its full length and never written: on any filesystem with sparse files (ext4, xfs, btrfs, tmpfs,
APFS) it occupies no blocks, so a 93 GB Mixtral costs a few hundred kilobytes of disk.  Reading it returns zeros.
The importer (`planner.ir.onnx_import`) checks that each external tensor fits inside its file, reads only tensors of
at most 64 KiB (norm scales), and counts every initializer's bytes in its consumers' ``param_bytes`` — so
``plan-inspect`` reports the true parameter bytes, and the weights really are parameters in the cost model and in
every memory check.  The alternative, weights as typed graph inputs with static shapes, would make them inputs of
the step (activations that arrive from outside, counted nowhere as held parameters), so it was not chosen.
Copying the weights file with a tool that does not keep holes (``cp --sparse=never``, some archivers) fills it.

The computation per layer, for T = batch x seq_len tokens, written with default-domain ops at opset 23::

    x = embed[token_ids]                                              embed/gather          [B, S, H]
    attention (pre-norm, causal, `Attention` op with is_causal=1)     layer{i}/attn/...
      gqa: q, k, v = h Wq, h Wk, h Wv   (heads x head_dim, kv_heads x head_dim)
      mla: q = RMS(h Wqa) Wqb;  [c, k_pe] = h Wkva;  k = [RMS(c) Wuk | k_pe broadcast to every head];
           v = RMS(c) Wuv                                             (DeepSeek-V2/V3 multi-head latent attention)
      x = x + attention(q, k, v) Wo
    feed-forward (pre-norm)                                           layer{i}/mlp/... or layer{i}/moe/...
      dense: SwiGLU  (silu(h Wg) * (h Wu)) Wd
      moe:   router probabilities (softmax, or sigmoid for DeepSeek), top-k, gates renormalized over the k;
             per expert e (layer{i}/expert{e}/...): the first C tokens routed to e are gathered (static capacity
             C = ceil(capacity_factor x T x top_k / experts), clipped to [1, T]), run through e's SwiGLU and scaled
             by their gate; shared experts (layer{i}/shared{j}/...) run on every token; one ScatterND(add) puts
             every expert's rows back into the residual stream (layer{i}/moe/combine)
    logits = RMS(x) Wout                                              head/...              [B, S, vocab]

Rotary position embedding is left out (elementwise, well under 0.1 % of the FLOPs; its sin/cos tables are not
weights).  The routing arithmetic runs in float32, as routers do in practice; everything else in `dtype`.
The graphs are for planning: they pass the ONNX checker and the importer's shape inference, but with zero weights
they compute nothing useful.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 23  # Attention (with is_causal and grouped-query heads) and RMSNormalization are default-domain from 23
NORM_EPSILON = 1e-5
_ALIGN_BYTES = 64  # offset alignment of each weight inside the weights file

_DTYPES = {"bfloat16": (TensorProto.BFLOAT16, 2), "float16": (TensorProto.FLOAT16, 2),
           "float32": (TensorProto.FLOAT, 4)}


@dataclass(frozen=True)
class LLMConfig:
    """Shape of a decoder-only transformer; `experts == 0` is a dense model.

    `layers` of which the first `dense_layers` use the dense SwiGLU of width `ffn` and the rest (when `experts` >
    0) the MoE block: `experts` routed experts of width `expert_ffn`, `top_k` per token, plus `shared_experts`
    always-on experts of the same width.  `attention` is "gqa" (`heads` query heads, `kv_heads` key/value heads of
    `head_dim`) or "mla" (`q_lora`, `kv_lora`, per-head `nope_dim` + `rope_dim` for queries/keys, `v_dim` for
    values).  `router` is "softmax" or "sigmoid".  `dtype` of weights and activations: bfloat16, float16, float32.
    """

    name: str = "custom"
    layers: int = 2
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    ffn: int = 128
    experts: int = 0
    top_k: int = 2
    expert_ffn: int = 128
    shared_experts: int = 0
    dense_layers: int = 0
    router: str = "softmax"
    attention: str = "gqa"
    q_lora: int = 0
    kv_lora: int = 0
    nope_dim: int = 0
    rope_dim: int = 0
    v_dim: int = 0
    vocab: int = 256
    batch: int = 1
    seq_len: int = 16
    capacity_factor: float = 1.25
    dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        positive = ("layers", "hidden", "heads", "vocab", "batch", "seq_len")
        for field in positive:
            if getattr(self, field) < 1:
                raise ValueError(f"LLMConfig.{field} must be >= 1, got {getattr(self, field)}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"LLMConfig.dtype {self.dtype!r}: one of {', '.join(_DTYPES)}")
        if self.attention == "gqa":
            if self.kv_heads < 1 or self.heads % self.kv_heads or self.head_dim < 1:
                raise ValueError(f"LLMConfig: heads={self.heads} must be a multiple of kv_heads={self.kv_heads}"
                                 f" >= 1, head_dim={self.head_dim} >= 1")
        elif self.attention == "mla":
            dims = ("q_lora", "kv_lora", "nope_dim", "rope_dim", "v_dim")
            if any(getattr(self, d) < 1 for d in dims):
                raise ValueError(f"LLMConfig: attention 'mla' needs {', '.join(dims)} >= 1")
        else:
            raise ValueError(f"LLMConfig.attention {self.attention!r}: 'gqa' or 'mla'")
        if self.experts:
            if not 1 <= self.top_k <= self.experts or self.expert_ffn < 1:
                raise ValueError(f"LLMConfig: need 1 <= top_k={self.top_k} <= experts={self.experts}, expert_ffn >= 1")
            if self.router not in ("softmax", "sigmoid"):
                raise ValueError(f"LLMConfig.router {self.router!r}: 'softmax' or 'sigmoid'")
            if not self.capacity_factor > 0:
                raise ValueError(f"LLMConfig.capacity_factor must be > 0, got {self.capacity_factor}")
        if not 0 <= self.dense_layers <= self.layers:
            raise ValueError(f"LLMConfig.dense_layers={self.dense_layers} not in [0, layers={self.layers}]")
        if (self.dense_layers or not self.experts) and self.ffn < 1:
            raise ValueError("LLMConfig.ffn must be >= 1 when some layer is dense")

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_len

    @property
    def dtype_bytes(self) -> int:
        return _DTYPES[self.dtype][1]

    def is_moe_layer(self, i: int) -> bool:
        return self.experts > 0 and i >= self.dense_layers


PRESETS: dict[str, LLMConfig] = {
    # Mixtral-8x7B (Mistral AI, 2024): 46.7 B parameters
    "mixtral-8x7b": LLMConfig(name="mixtral-8x7b", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128,
                              ffn=14336, experts=8, top_k=2, expert_ffn=14336, vocab=32000, batch=4, seq_len=4096),
    # Llama-3-8B and -70B (Meta, 2024): 8.0 B and 70.6 B parameters
    "llama-8b": LLMConfig(name="llama-8b", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336,
                          vocab=128256, batch=4, seq_len=4096),
    "llama-70b": LLMConfig(name="llama-70b", layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128, ffn=28672,
                           vocab=128256, batch=4, seq_len=4096),
    # DeepSeek-V3 (2024), 2 of its 61 layers (both MoE): MLA, 256 routed experts + 1 shared, top-8, sigmoid router
    "deepseek-v3-slice": LLMConfig(name="deepseek-v3-slice", layers=2, hidden=7168, heads=128, attention="mla",
                                   q_lora=1536, kv_lora=512, nope_dim=128, rope_dim=64, v_dim=128, ffn=18432,
                                   experts=256, top_k=8, expert_ffn=2048, shared_experts=1, router="sigmoid",
                                   vocab=129280, batch=4, seq_len=4096),
}


def preset(name: str, **overrides: object) -> LLMConfig:
    """The preset `name` with some fields replaced (e.g. ``layers=1`` for a test)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    return dataclasses.replace(PRESETS[name], **overrides)  # type: ignore[arg-type]


def expert_capacity(config: LLMConfig) -> int:
    """Token slots per routed expert: ceil(capacity_factor x tokens x top_k / experts), clipped to [1, tokens]."""
    raw = config.capacity_factor * config.tokens * config.top_k / max(config.experts, 1)
    return max(1, min(config.tokens, math.ceil(raw - 1e-9)))  # slack: 1.1 * 10 must not round up to 12


def weight_shapes(config: LLMConfig) -> dict[str, tuple[int, ...]]:
    """Every weight's name and shape, in the order they are written (the weights file's layout)."""
    c = config
    H = c.hidden
    w: dict[str, tuple[int, ...]] = {"embed/table": (c.vocab, H)}
    for i in range(c.layers):
        a = f"layer{i}/attn"
        w[f"{a}/norm"] = (H,)
        if c.attention == "gqa":
            w[f"{a}/wq"] = (H, c.heads * c.head_dim)
            w[f"{a}/wk"] = (H, c.kv_heads * c.head_dim)
            w[f"{a}/wv"] = (H, c.kv_heads * c.head_dim)
            w[f"{a}/wo"] = (c.heads * c.head_dim, H)
        else:
            w[f"{a}/wqa"] = (H, c.q_lora)
            w[f"{a}/q_norm"] = (c.q_lora,)
            w[f"{a}/wqb"] = (c.q_lora, c.heads * (c.nope_dim + c.rope_dim))
            w[f"{a}/wkva"] = (H, c.kv_lora + c.rope_dim)
            w[f"{a}/kv_norm"] = (c.kv_lora,)
            w[f"{a}/wuk"] = (c.kv_lora, c.heads * c.nope_dim)
            w[f"{a}/wuv"] = (c.kv_lora, c.heads * c.v_dim)
            w[f"{a}/wo"] = (c.heads * c.v_dim, H)
        if c.is_moe_layer(i):
            w[f"layer{i}/moe/norm"] = (H,)
            w[f"layer{i}/moe/router"] = (H, c.experts)
            experts = [f"layer{i}/expert{e}" for e in range(c.experts)]
            experts += [f"layer{i}/shared{j}" for j in range(c.shared_experts)]
            for p in experts:
                w[f"{p}/wg"], w[f"{p}/wu"], w[f"{p}/wd"] = (H, c.expert_ffn), (H, c.expert_ffn), (c.expert_ffn, H)
        else:
            m = f"layer{i}/mlp"
            w[f"{m}/norm"] = (H,)
            w[f"{m}/wg"], w[f"{m}/wu"], w[f"{m}/wd"] = (H, c.ffn), (H, c.ffn), (c.ffn, H)
    w["head/norm"] = (H,)
    w["head/w"] = (H, c.vocab)
    return w


def parameter_count(config: LLMConfig) -> int:
    """Number of weight elements (all layers, embedding and head)."""
    return sum(math.prod(s) for s in weight_shapes(config).values())


def parameter_bytes(config: LLMConfig) -> int:
    return parameter_count(config) * config.dtype_bytes


# ---------------------------------------------------------------------------------------------- graph builder


class _Builder:
    """Nodes, small inline constants and external weights; node outputs are named ``{node name}:{n}``."""

    def __init__(self, dtype: str, data_location: str) -> None:
        self.elem, self.itemsize = _DTYPES[dtype]
        self.location = data_location
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.data_bytes = 0

    def weight(self, name: str, shape: tuple[int, ...]) -> str:
        """An external-data initializer at the next aligned offset of the weights file."""
        t = TensorProto(name=name, data_type=self.elem, dims=shape, data_location=TensorProto.EXTERNAL)
        length = math.prod(shape) * self.itemsize
        offset = -(-self.data_bytes // _ALIGN_BYTES) * _ALIGN_BYTES
        for key, value in (("location", self.location), ("offset", str(offset)), ("length", str(length))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        self.data_bytes = offset + length
        self.initializers.append(t)
        return name

    def const(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, name: str, inputs: list[str], n_outputs: int = 1, **attrs: object) -> list[str]:
        outputs = [f"{name}:{k}" for k in range(n_outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=name, **attrs))  # type: ignore[arg-type]
        return outputs

    def op1(self, op_type: str, name: str, inputs: list[str], **attrs: object) -> str:
        return self.op(op_type, name, inputs, 1, **attrs)[0]


def _i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


class _Graph:
    """Builds one model from a config and its weight shapes (one method per block)."""

    def __init__(self, config: LLMConfig, data_location: str) -> None:
        self.c = config
        self.b = _Builder(config.dtype, data_location)
        self.w = {name: self.b.weight(name, shape) for name, shape in weight_shapes(config).items()}
        c, b = config, self.b
        self.shape_th = b.const("const/shape_th", _i64(c.tokens, c.hidden))
        self.shape_bsh = b.const("const/shape_bsh", _i64(c.batch, c.seq_len, c.hidden))
        self.axis_last = b.const("const/axes_last", _i64(-1))
        self.axis_1 = b.const("const/axes_1", _i64(1))
        if c.experts:
            cap = expert_capacity(c)
            self.axis0 = b.const("const/axis0", np.array(0, dtype=np.int64))
            self.top_k = b.const("const/top_k", _i64(c.top_k))
            self.capacity = b.const("const/capacity", _i64(cap))
            self.capacity_f = b.const("const/capacity_f", np.array(float(cap), dtype=np.float32))
            self.tokens_f = b.const("const/tokens_f", np.array(float(c.tokens), dtype=np.float32))
            self.one_f = b.const("const/one_f", np.array(1.0, dtype=np.float32))
            self.depth = b.const("const/experts", np.array(c.experts, dtype=np.int64))
            self.onehot_values = b.const("const/onehot_values", np.array([0.0, 1.0], dtype=np.float32))
            # T - t: later tokens score lower, so the kept tokens come out of TopK in token order
            self.rank_desc = b.const("const/rank_desc", np.arange(c.tokens, 0, -1, dtype=np.float32))
        if c.attention == "mla":
            self.shape_nope = b.const("const/shape_k_nope", _i64(c.batch, c.seq_len, c.heads, c.nope_dim))
            self.shape_pe = b.const("const/shape_k_pe", _i64(c.batch, c.seq_len, 1, c.rope_dim))
            self.shape_pe_all = b.const("const/shape_k_pe_heads", _i64(c.batch, c.seq_len, c.heads, c.rope_dim))
            self.shape_k = b.const("const/shape_k", _i64(c.batch, c.seq_len, c.heads * (c.nope_dim + c.rope_dim)))
            self.split_kv = b.const("const/split_kv", _i64(c.kv_lora, c.rope_dim))

    def norm(self, name: str, x: str, scale: str) -> str:
        return self.b.op1("RMSNormalization", name, [x, scale], axis=-1, epsilon=NORM_EPSILON)

    def swiglu(self, p: str, x: str) -> str:
        """(silu(x Wg) * (x Wu)) Wd, for a dense MLP (`p` = layer{i}/mlp) or an expert."""
        b = self.b
        gate = b.op1("MatMul", f"{p}/gate_proj", [x, self.w[f"{p}/wg"]])
        up = b.op1("MatMul", f"{p}/up_proj", [x, self.w[f"{p}/wu"]])
        silu = b.op1("Mul", f"{p}/silu", [gate, b.op1("Sigmoid", f"{p}/sigmoid", [gate])])
        return b.op1("MatMul", f"{p}/down_proj", [b.op1("Mul", f"{p}/gated", [silu, up]), self.w[f"{p}/wd"]])

    def attention(self, i: int, x: str) -> str:
        c, b, a = self.c, self.b, f"layer{i}/attn"
        h = self.norm(f"{a}/norm", x, self.w[f"{a}/norm"])
        if c.attention == "gqa":
            q, k, v = (b.op1("MatMul", f"{a}/{p}_proj", [h, self.w[f"{a}/w{p}"]]) for p in "qkv")
            kv_heads = c.kv_heads
        else:
            qa = self.norm(f"{a}/q_norm", b.op1("MatMul", f"{a}/q_down", [h, self.w[f"{a}/wqa"]]),
                           self.w[f"{a}/q_norm"])
            q = b.op1("MatMul", f"{a}/q_up", [qa, self.w[f"{a}/wqb"]])
            kva = b.op1("MatMul", f"{a}/kv_down", [h, self.w[f"{a}/wkva"]])
            latent, k_pe = b.op("Split", f"{a}/kv_split", [kva, self.split_kv], 2, axis=-1)
            latent = self.norm(f"{a}/kv_norm", latent, self.w[f"{a}/kv_norm"])
            k_nope = b.op1("Reshape", f"{a}/k_nope_heads",
                           [b.op1("MatMul", f"{a}/k_up", [latent, self.w[f"{a}/wuk"]]), self.shape_nope])
            k_pe = b.op1("Expand", f"{a}/k_pe_heads",
                         [b.op1("Reshape", f"{a}/k_pe_split", [k_pe, self.shape_pe]), self.shape_pe_all])
            k = b.op1("Reshape", f"{a}/k_merge",
                      [b.op1("Concat", f"{a}/k_concat", [k_nope, k_pe], axis=-1), self.shape_k])
            v = b.op1("MatMul", f"{a}/v_up", [latent, self.w[f"{a}/wuv"]])
            kv_heads = c.heads
        ctx = b.op1("Attention", f"{a}/attention", [q, k, v], is_causal=1, q_num_heads=c.heads,
                    kv_num_heads=kv_heads)
        return b.op1("Add", f"{a}/residual", [x, b.op1("MatMul", f"{a}/o_proj", [ctx, self.w[f"{a}/wo"]])])

    def mlp(self, i: int, x: str) -> str:
        m = f"layer{i}/mlp"
        return self.b.op1("Add", f"{m}/residual", [x, self.swiglu(m, self.norm(f"{m}/norm", x, self.w[f"{m}/norm"]))])

    def moe(self, i: int, x: str) -> str:
        c, b, r = self.c, self.b, f"layer{i}/moe"
        elem = self.b.elem
        hf = b.op1("Reshape", f"{r}/flatten", [self.norm(f"{r}/norm", x, self.w[f"{r}/norm"]), self.shape_th])
        logits = b.op1("Cast", f"{r}/logits_f32", [b.op1("MatMul", f"{r}/router", [hf, self.w[f"{r}/router"]])],
                       to=TensorProto.FLOAT)
        probs = b.op1("Softmax" if c.router == "softmax" else "Sigmoid", f"{r}/scores", [logits],
                      **({"axis": -1} if c.router == "softmax" else {}))
        vals, idx = b.op("TopK", f"{r}/topk", [probs, self.top_k], 2, axis=-1)
        gates = b.op1("Div", f"{r}/gate_norm", [vals, b.op1("ReduceSum", f"{r}/gate_sum", [vals, self.axis_last])])
        onehot = b.op1("OneHot", f"{r}/onehot", [idx, self.depth, self.onehot_values], axis=-1)  # [T, K, E]
        mask_te = b.op1("ReduceSum", f"{r}/mask", [onehot, self.axis_1], keepdims=0)  # [T, E]
        gate_te = b.op1("ReduceSum", f"{r}/gates",
                        [b.op1("Mul", f"{r}/gate_onehot",
                               [onehot, b.op1("Unsqueeze", f"{r}/gate_unsqueeze", [gates, self.axis_last])]),
                         self.axis_1], keepdims=0)
        rows, slots = [], []
        for e in range(c.experts):
            p = f"layer{i}/expert{e}"
            index = b.const(f"{p}/index", np.array(e, dtype=np.int64))
            m = b.op1("Gather", f"{p}/route_mask", [mask_te, index], axis=1)  # [T]
            gate = b.op1("Gather", f"{p}/route_gate", [gate_te, index], axis=1)
            pos = b.op1("Sub", f"{p}/position", [b.op1("CumSum", f"{p}/cumsum", [m, self.axis0]), self.one_f])
            fits = b.op1("Cast", f"{p}/fits_f", [b.op1("Less", f"{p}/fits", [pos, self.capacity_f])],
                         to=TensorProto.FLOAT)
            keep = b.op1("Mul", f"{p}/keep", [m, fits])
            score = b.op1("Add", f"{p}/score", [b.op1("Mul", f"{p}/score_kept", [keep, self.tokens_f]),
                                                self.rank_desc])
            slot = b.op("TopK", f"{p}/slots", [score, self.capacity], 2, axis=0)[1]  # [C] token ids
            slot_gate = b.op1("Gather", f"{p}/slot_gate",
                              [b.op1("Mul", f"{p}/kept_gate", [gate, keep]), slot], axis=0)
            tokens_in = b.op1("Gather", f"{p}/dispatch", [hf, slot], axis=0)  # [C, H]
            scale = b.op1("Cast", f"{p}/gate_cast",
                          [b.op1("Unsqueeze", f"{p}/gate_unsqueeze", [slot_gate, self.axis_1])], to=elem)
            rows.append(b.op1("Mul", f"{p}/gate_mul", [self.swiglu(p, tokens_in), scale]))
            slots.append(b.op1("Unsqueeze", f"{p}/slot_unsqueeze", [slot, self.axis_1]))  # [C, 1]
        base = b.op1("Reshape", f"{r}/residual_flat", [x, self.shape_th])
        for j in range(c.shared_experts):
            p = f"layer{i}/shared{j}"
            base = b.op1("Add", f"{p}/residual", [base, self.swiglu(p, hf)])
        updates = b.op1("Concat", f"{r}/combine_rows", rows, axis=0)  # [E x C, H]
        indices = b.op1("Concat", f"{r}/combine_slots", slots, axis=0)
        out = b.op1("ScatterND", f"{r}/combine", [base, indices, updates], reduction="add")
        return b.op1("Reshape", f"{r}/unflatten", [out, self.shape_bsh])

    def build(self) -> onnx.ModelProto:
        c, b = self.c, self.b
        x = b.op1("Gather", "embed/gather", [self.w["embed/table"], "token_ids"], axis=0)
        for i in range(c.layers):
            x = self.attention(i, x)
            x = self.moe(i, x) if c.is_moe_layer(i) else self.mlp(i, x)
        hf = self.norm("head/norm", x, self.w["head/norm"])
        b.nodes.append(helper.make_node("MatMul", [hf, self.w["head/w"]], ["logits"], name="head/proj"))
        graph = helper.make_graph(
            b.nodes, c.name.replace("-", "_"),
            inputs=[helper.make_tensor_value_info("token_ids", TensorProto.INT64, [c.batch, c.seq_len])],
            outputs=[helper.make_tensor_value_info("logits", b.elem, [c.batch, c.seq_len, c.vocab])],
            initializer=b.initializers)
        return helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)],
            ir_version=helper.find_min_ir_version_for([helper.make_opsetid("", OPSET)]),
            producer_name="opplan.llm_model", producer_version="1",
            doc_string=f"opplan {c.name}-like model (weights zero, stored sparse); {c}")


def build_llm_model(config: LLMConfig, data_location: str = "model.weights") -> tuple[onnx.ModelProto, int]:
    """The model (weights external, in `data_location` relative to the model) and the weights file's length."""
    g = _Graph(config, data_location)
    return g.build(), g.b.data_bytes


def weights_path(model_path: str | Path) -> Path:
    """Where `write_llm_model` puts the weights of `model_path`: ``<model>.weights`` beside it."""
    p = Path(model_path)
    return p.with_name(p.name + ".weights") if p.suffix != ".onnx" else p.with_suffix(".weights")


def write_llm_model(path: str | Path, config: LLMConfig) -> tuple[Path, Path]:
    """Write the model and its sparse weights file (module docstring); returns (model path, weights path)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = weights_path(path)
    model, data_bytes = build_llm_model(config, data.name)
    path.write_bytes(model.SerializeToString())
    with open(data, "wb") as fh:  # a hole of the full length: no blocks written (see the module docstring)
        os.truncate(fh.fileno(), data_bytes)
    return path, data


def node_count(model_path: str | Path) -> int:
    """Nodes of an ONNX file, read without its external data (which may be tens of gigabytes of zeros)."""
    return len(onnx.load(str(model_path), load_external_data=False).graph.node)
