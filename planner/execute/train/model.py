"""A small mixture-of-experts transformer in torch, cut into pipeline chunks, and its training data.

The model (decoder-only, pre-norm):

    tokens (b, t) int64 -> embedding (vocab, d) -> L x [ x + Attn(LN(x));  x + MoE(LN(x)) ] -> LN -> head (d, vocab)

* ``Attn``: causal multi-head self-attention written with plain matmuls (one fused qkv projection, one output
  projection).
* ``MoE``: a router (linear d -> E, softmax) picks the top-k of E experts per token; the k gate weights are
  renormalised to sum to 1 (unless ``MoEConfig.renormalize`` is off); expert e (d -> d_ff -> d, GELU) runs on the
  tokens routed to it, and its output, times the gate weight, is added back with ``index_add``.  An expert that
  receives no token in a micro-batch gets no gradient from it (its gradient is zero, see `named_grads`).
* loss: cross-entropy of the logits against random target tokens, mean over the micro-batch's tokens, divided by
  the number of micro-batches, so that the gradients summed over micro-batches are those of the mean loss.

**Shape.**  `planner.ir.moe_config.MoEConfig`, the one config of the bundled MoE (the ONNX model is written from
it too): d = ``hidden``, d_ff = ``ffn``, E = ``experts``, L = ``layers``, a micro-batch is ``batch`` sequences of
``seq_len`` tokens over ``vocab`` token ids.  Every routed token runs (no expert capacity here), so
``capacity_factor`` and ``opset``, which describe the ONNX graph, do not apply.  `TRAIN_CONFIG` is the small
default the tests and the launcher use.

**Chunks.**  `num_chunks` contiguous pieces: chunk c holds layers ``[c*L // C, (c+1)*L // C)``; chunk 0 also the
embedding, chunk C-1 also the final norm and the head.  The activation crossing every chunk boundary is the
residual stream, shape ``(batch, seq_len, hidden)`` float32 (`MoEConfig.residual_shape`), so a receiver always
knows what it gets.  Parameters keep the whole model's names (``layers.3.moe.experts.1.fc1.weight``), so
gradients from any split compare name by name.

**Determinism.**  `build_model` seeds a private generator from `MoEConfig.seed` and initialises every parameter
from it in a fixed order, so every process builds bit-identical weights without communicating; `make_batches`
draws tokens and targets from ``seed + 1`` the same way.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from planner.ir.moe_config import MoEConfig

__all__ = ["TRAIN_CONFIG", "MoETransformer", "build_model", "chunk_layers", "chunk_param_names", "make_batches",
           "microbatch_loss"]


TRAIN_CONFIG = MoEConfig(layers=4, experts=4, top_k=2, hidden=32, ffn=48, heads=4, seq_len=8, batch=2, vocab=64)
"""The training runtime's default shape: 4 layers, 4 experts top-2, width 32, micro-batches of 2 x 8 tokens."""


class Attention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h, dh = self.heads, d // self.heads
        q, k, v = self.qkv(x).reshape(b, t, 3, h, dh).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = scores.masked_fill(causal, float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, d))


class Expert(nn.Module):
    def __init__(self, d: int, d_ff: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, d_ff)
        self.fc2 = nn.Linear(d_ff, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class MoE(nn.Module):
    def __init__(self, d: int, d_ff: int, n_experts: int, top_k: int, renormalize: bool) -> None:
        super().__init__()
        self.top_k = top_k
        self.renormalize = renormalize
        self.router = nn.Linear(d, n_experts, bias=False)
        self.experts = nn.ModuleList(Expert(d, d_ff) for _ in range(n_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        tokens = x.reshape(b * t, d)
        gate, chosen = self.router(tokens).softmax(dim=-1).topk(self.top_k, dim=-1)  # (n, k) each
        if self.renormalize:
            gate = gate / gate.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            rows, slot = (chosen == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            out = out.index_add(0, rows, expert(tokens[rows]) * gate[rows, slot].unsqueeze(-1))
        return out.reshape(b, t, d)


class Block(nn.Module):
    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.hidden)
        self.attn = Attention(cfg.hidden, cfg.heads)
        self.ln2 = nn.LayerNorm(cfg.hidden)
        self.moe = MoE(cfg.hidden, cfg.ffn, cfg.experts, cfg.top_k, cfg.renormalize)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.moe(self.ln2(x))


class MoETransformer(nn.Module):
    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.hidden)
        self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)

    def forward_chunk(self, chunk: int, num_chunks: int, x: torch.Tensor) -> torch.Tensor:
        """Chunk `chunk` of `num_chunks`: token ids (chunk 0) or the residual stream in; the residual stream or
        the logits (last chunk) out."""
        if chunk == 0:
            x = self.embed(x)
        lo, hi = chunk_layers(self.cfg, chunk, num_chunks)
        for layer in self.layers[lo:hi]:
            x = layer(x)
        if chunk == num_chunks - 1:
            x = self.head(self.norm(x))
        return x

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.forward_chunk(0, 1, tokens)


def chunk_layers(cfg: MoEConfig, chunk: int, num_chunks: int) -> tuple[int, int]:
    """The layer range ``[lo, hi)`` of chunk `chunk`; every chunk of a split needs at least one layer."""
    if not 1 <= num_chunks <= cfg.layers:
        raise ValueError(f"cannot cut {cfg.layers} layers into {num_chunks} chunks (each needs a layer); "
                         f"raise MoEConfig.layers to at least {num_chunks}")
    if not 0 <= chunk < num_chunks:
        raise ValueError(f"chunk {chunk} is not in 0..{num_chunks - 1}")
    return chunk * cfg.layers // num_chunks, (chunk + 1) * cfg.layers // num_chunks


def chunk_param_names(model: MoETransformer, chunk: int, num_chunks: int) -> list[str]:
    """Names of the parameters chunk `chunk` uses, in `named_parameters` order."""
    lo, hi = chunk_layers(model.cfg, chunk, num_chunks)
    prefixes = tuple(f"layers.{i}." for i in range(lo, hi))
    if chunk == 0:
        prefixes += ("embed.",)
    if chunk == num_chunks - 1:
        prefixes += ("norm.", "head.")
    return [n for n, _ in model.named_parameters() if n.startswith(prefixes)]


def build_model(cfg: MoEConfig) -> MoETransformer:
    """The model with deterministic weights: normal(0, 0.02) matrices and embeddings (GPT-2 style), router
    matrices normal(0, 1/sqrt(d)), small random biases and layer-norm affine terms near (1, 0) (so that their
    gradients are not trivial), all drawn from one seeded generator in `named_parameters` order."""
    model = MoETransformer(cfg)
    gen = torch.Generator().manual_seed(cfg.seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
            elif ".ln" in name or name.startswith("norm."):
                p.copy_(1.0 + torch.randn(p.shape, generator=gen) * 0.02)
            elif ".router." in name:  # larger, so that routing is decided by clear margins
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(cfg.hidden))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    return model


def make_batches(cfg: MoEConfig, num_microbatches: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens and target tokens, each ``(num_microbatches, batch, seq_len)`` int64, from ``seed + 1``."""
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    shape = (num_microbatches, cfg.batch, cfg.seq_len)
    tokens = torch.randint(cfg.vocab, shape, generator=gen)
    targets = torch.randint(cfg.vocab, shape, generator=gen)
    return tokens, targets


def microbatch_loss(logits: torch.Tensor, targets: torch.Tensor, num_microbatches: int) -> torch.Tensor:
    """Mean token cross-entropy of one micro-batch divided by the number of micro-batches."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)) / num_microbatches
