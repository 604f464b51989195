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

**Units** (operator clusters).  Every layer is four units in this order, each a function of the tensors crossing
the boundary before it (`boundary_slots`), so a cut may fall between any two:

    ``attention``  x -> x + Attn(LN1(x))                               (layer 0's also embeds the token ids)
    ``dispatch``   x -> x, dispatched, gate, rows, counts                (LN2, router, top-k, tokens gathered by expert)
    ``experts``    x, dispatched, gate, rows, counts -> x, expert_out, gate, rows, counts
    ``combine``    x, expert_out, gate, rows, counts -> x + sum_e gate * expert_out scattered back to its tokens
                                                                         (the last layer's also norm + head)

``dispatched`` (n k, d) holds the n = ``batch * seq_len`` tokens' LN2 rows, each token once per chosen expert,
grouped by expert (expert 0's first, each group in token order); ``gate`` (n k,) its gate weight, ``rows`` (n k,)
int64 its token, ``counts`` (E,) int64 the group sizes — fixed shapes whatever the routing (there is no capacity
limit, every routed token runs), so a receiver always knows what it gets.  x, dispatched, expert_out and gate are
differentiable (a gradient comes back for each), rows and counts are not.  The whole model's forward *is* the
composition of the units, so a run cut anywhere computes the same numbers per micro-batch as the reference.

**Cuts.**  A cut is the tuple of unit boundaries ``(0, b_1, ..., 4L)`` (`check_cut`); chunk c runs units
``[b_c, b_{c+1})``.  `layer_cut` is the layer granularity (chunk c holds layers ``[c*L // C, (c+1)*L // C)``, the
rule of `chunk_layers`, the default of the runtime), `even_cut` spreads units evenly, `balanced_cut` minimises the
largest chunk of given per-unit costs.  Parameters keep the whole model's names
(``layers.3.moe.experts.1.fc1.weight``), so gradients from any split compare name by name.

**Determinism.**  `build_model` seeds a private generator from `MoEConfig.seed` and initialises every parameter
from it in a fixed order, so every process builds bit-identical weights without communicating; `make_batches`
draws tokens and targets from ``seed + 1`` the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from planner.ir.moe_config import MoEConfig

__all__ = ["TRAIN_CONFIG", "UNIT_KINDS", "MoETransformer", "Slot", "balanced_cut", "boundary_slots", "build_model",
           "check_cut", "chunk_layers", "chunk_param_names", "even_cut", "layer_cut", "make_batches", "microbatch_loss",
           "num_units", "unit_name", "unit_param_names"]


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
    """Router and experts; the forward is split into `dispatch`, `run_experts` and `combine` (module docstring)."""

    def __init__(self, d: int, d_ff: int, n_experts: int, top_k: int, renormalize: bool) -> None:
        super().__init__()
        self.top_k = top_k
        self.renormalize = renormalize
        self.router = nn.Linear(d, n_experts, bias=False)
        self.experts = nn.ModuleList(Expert(d, d_ff) for _ in range(n_experts))

    def dispatch(self, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(n, d) normalised tokens -> dispatched (n k, d), gate (n k,), rows (n k,), counts (E,)."""
        gate, chosen = self.router(h).softmax(dim=-1).topk(self.top_k, dim=-1)  # (n, k) each
        if self.renormalize:
            gate = gate / gate.sum(dim=-1, keepdim=True)
        picks = [(chosen == e).nonzero(as_tuple=True) for e in range(len(self.experts))]
        rows = torch.cat([r for r, _ in picks])
        slots = torch.cat([sl for _, sl in picks])
        counts = torch.tensor([r.numel() for r, _ in picks], dtype=torch.int64)
        return h[rows], gate[rows, slots], rows, counts

    def run_experts(self, dispatched: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Expert e on its group of `dispatched` rows; an expert with no token does not run (no gradient)."""
        outs, lo = [], 0
        for expert, count in zip(self.experts, counts.tolist(), strict=True):
            if count:
                outs.append(expert(dispatched[lo:lo + count]))
            lo += count
        return torch.cat(outs)

    @staticmethod
    def combine(expert_out: torch.Tensor, gate: torch.Tensor, rows: torch.Tensor, counts: torch.Tensor,
                num_tokens: int) -> torch.Tensor:
        """Each expert output times its gate, added back to its token: (n, d)."""
        out = expert_out.new_zeros(num_tokens, expert_out.shape[-1])
        lo = 0
        for count in counts.tolist():
            if count:
                seg = slice(lo, lo + count)
                out = out.index_add(0, rows[seg], expert_out[seg] * gate[seg].unsqueeze(-1))
            lo += count
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        dispatched, gate, rows, counts = self.dispatch(x.reshape(b * t, d))
        return self.combine(self.run_experts(dispatched, counts), gate, rows, counts, b * t).reshape(b, t, d)


class Block(nn.Module):
    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.hidden)
        self.attn = Attention(cfg.hidden, cfg.heads)
        self.ln2 = nn.LayerNorm(cfg.hidden)
        self.moe = MoE(cfg.hidden, cfg.ffn, cfg.experts, cfg.top_k, cfg.renormalize)

    # the four units of a layer (module docstring); each takes and returns the tensors of its boundaries
    def attention_unit(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (x + self.attn(self.ln1(x)),)

    def dispatch_unit(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        b, t, d = x.shape
        return (x, *self.moe.dispatch(self.ln2(x).reshape(b * t, d)))

    def experts_unit(self, x: torch.Tensor, dispatched: torch.Tensor, gate: torch.Tensor, rows: torch.Tensor,
                     counts: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x, self.moe.run_experts(dispatched, counts), gate, rows, counts

    def combine_unit(self, x: torch.Tensor, expert_out: torch.Tensor, gate: torch.Tensor, rows: torch.Tensor,
                     counts: torch.Tensor) -> tuple[torch.Tensor, ...]:
        b, t, d = x.shape
        return (x + self.moe.combine(expert_out, gate, rows, counts, b * t).reshape(b, t, d),)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (out,) = self.combine_unit(*self.experts_unit(*self.dispatch_unit(*self.attention_unit(x))))
        return out


UNIT_KINDS = ("attention", "dispatch", "experts", "combine")
"""The units of one layer, in order (module docstring)."""


@dataclass(frozen=True)
class Slot:
    """One tensor crossing a unit boundary: its shape and dtype are known before it is sent; `differentiable`
    ones get a gradient back."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    differentiable: bool


def num_units(cfg: MoEConfig) -> int:
    return len(UNIT_KINDS) * cfg.layers


def unit_name(cfg: MoEConfig, unit: int) -> str:
    """``'layer1.experts'`` for unit 6."""
    if not 0 <= unit < num_units(cfg):
        raise ValueError(f"unit {unit} is not in 0..{num_units(cfg) - 1}")
    return f"layer{unit // len(UNIT_KINDS)}.{UNIT_KINDS[unit % len(UNIT_KINDS)]}"


def boundary_slots(cfg: MoEConfig, unit: int) -> tuple[Slot, ...]:
    """The tensors entering unit `unit` (1 <= unit < `num_units`) from the unit before it."""
    if not 0 < unit < num_units(cfg):
        raise ValueError(f"unit {unit}: a boundary lies before units 1..{num_units(cfg) - 1}")
    f32, i64 = torch.float32, torch.int64
    x = Slot("x", cfg.residual_shape, f32, True)
    kind = UNIT_KINDS[unit % len(UNIT_KINDS)]
    if kind in ("attention", "dispatch"):
        return (x,)
    routed = cfg.batch * cfg.seq_len * cfg.top_k
    carried = "dispatched" if kind == "experts" else "expert_out"
    return (x, Slot(carried, (routed, cfg.hidden), f32, True), Slot("gate", (routed,), f32, True),
            Slot("rows", (routed,), i64, False), Slot("counts", (cfg.experts,), i64, False))


def check_cut(cfg: MoEConfig, cut: tuple[int, ...]) -> tuple[int, ...]:
    """`cut` as a tuple of ints after checking it: from 0 to `num_units`, strictly increasing."""
    cut = tuple(int(b) for b in cut)
    u = num_units(cfg)
    if len(cut) < 2 or cut[0] != 0 or cut[-1] != u or any(a >= b for a, b in zip(cut, cut[1:])):
        raise ValueError(f"cut {cut} must rise strictly from 0 to {u} (the model's units; every chunk needs one)")
    return cut


def layer_cut(cfg: MoEConfig, num_chunks: int) -> tuple[int, ...]:
    """Layer granularity: chunk c holds the layers of `chunk_layers`."""
    per = len(UNIT_KINDS)
    return (0, *(per * chunk_layers(cfg, c, num_chunks)[1] for c in range(num_chunks)))


def even_cut(cfg: MoEConfig, num_chunks: int) -> tuple[int, ...]:
    """Operator granularity: chunk c holds units ``[c*U // C, (c+1)*U // C)`` (U = `num_units`)."""
    u = num_units(cfg)
    if not 1 <= num_chunks <= u:
        raise ValueError(f"cannot cut {u} units into {num_chunks} chunks (each needs a unit)")
    return tuple(c * u // num_chunks for c in range(num_chunks + 1))


def balanced_cut(unit_costs: list[float] | tuple[float, ...], num_chunks: int) -> tuple[int, ...]:
    """The cut into `num_chunks` contiguous chunks whose largest summed cost is smallest (exact, by dynamic
    programming over the prefix sums; ties go to the earliest boundaries)."""
    u = len(unit_costs)
    if not 1 <= num_chunks <= u:
        raise ValueError(f"cannot cut {u} units into {num_chunks} chunks (each needs a unit)")
    prefix = [0.0]
    for c in unit_costs:
        prefix.append(prefix[-1] + float(c))
    inf = float("inf")
    # best[c][j]: smallest largest chunk cutting units [0, j) into c chunks; back[c][j] its last boundary
    best = [[inf] * (u + 1) for _ in range(num_chunks + 1)]
    back = [[0] * (u + 1) for _ in range(num_chunks + 1)]
    best[0][0] = 0.0
    for c in range(1, num_chunks + 1):
        for j in range(c, u - (num_chunks - c) + 1):
            for i in range(c - 1, j):
                v = max(best[c - 1][i], prefix[j] - prefix[i])
                if v < best[c][j]:
                    best[c][j], back[c][j] = v, i
    cut = [u]
    for c in range(num_chunks, 0, -1):
        cut.append(back[c][cut[-1]])
    return tuple(reversed(cut))


class MoETransformer(nn.Module):
    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.hidden)
        self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)

    def forward_units(self, lo: int, hi: int, inputs: torch.Tensor | tuple[torch.Tensor, ...]
                      ) -> tuple[torch.Tensor, ...]:
        """Units ``[lo, hi)``: token ids (lo = 0) or the tensors of `boundary_slots` (lo) in; those of
        `boundary_slots` (hi) out, or the 1-tuple of the logits when hi = `num_units`."""
        u = num_units(self.cfg)
        if not 0 <= lo < hi <= u:
            raise ValueError(f"units [{lo}, {hi}) are not a non-empty range of 0..{u}")
        xs: tuple[torch.Tensor, ...] = (self.embed(inputs),) if lo == 0 else tuple(inputs)  # type: ignore[arg-type]
        per = len(UNIT_KINDS)
        for unit in range(lo, hi):
            block = cast(Block, self.layers[unit // per])  # ModuleList items are typed as Module
            step = (block.attention_unit, block.dispatch_unit, block.experts_unit, block.combine_unit)[unit % per]
            xs = step(*xs)
        if hi == u:
            (x,) = xs
            xs = (self.head(self.norm(x)),)
        return xs

    def forward_chunk(self, chunk: int, num_chunks: int, x: torch.Tensor) -> torch.Tensor:
        """Chunk `chunk` of `num_chunks` at layer granularity (`layer_cut`): token ids (chunk 0) or the residual
        stream in; the residual stream or the logits (last chunk) out."""
        cut = layer_cut(self.cfg, num_chunks)
        if not 0 <= chunk < num_chunks:
            raise ValueError(f"chunk {chunk} is not in 0..{num_chunks - 1}")
        (out,) = self.forward_units(cut[chunk], cut[chunk + 1], x if chunk == 0 else (x,))
        return out

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        (logits,) = self.forward_units(0, num_units(self.cfg), tokens)
        return logits


def chunk_layers(cfg: MoEConfig, chunk: int, num_chunks: int) -> tuple[int, int]:
    """The layer range ``[lo, hi)`` of chunk `chunk`; every chunk of a split needs at least one layer."""
    if not 1 <= num_chunks <= cfg.layers:
        raise ValueError(f"cannot cut {cfg.layers} layers into {num_chunks} chunks (each needs a layer); "
                         f"raise MoEConfig.layers to at least {num_chunks}")
    if not 0 <= chunk < num_chunks:
        raise ValueError(f"chunk {chunk} is not in 0..{num_chunks - 1}")
    return chunk * cfg.layers // num_chunks, (chunk + 1) * cfg.layers // num_chunks


_UNIT_PARAMS = {"attention": ("ln1.", "attn."), "dispatch": ("ln2.", "moe.router."), "experts": ("moe.experts.",),
                "combine": ()}


def unit_param_names(model: MoETransformer, lo: int, hi: int) -> list[str]:
    """Names of the parameters units ``[lo, hi)`` use, in `named_parameters` order (the embedding is unit 0's,
    the final norm and head the last unit's)."""
    u = num_units(model.cfg)
    per = len(UNIT_KINDS)
    prefixes: tuple[str, ...] = tuple(f"layers.{unit // per}.{p}" for unit in range(lo, hi)
                                      for p in _UNIT_PARAMS[UNIT_KINDS[unit % per]])
    if lo == 0:
        prefixes += ("embed.",)
    if hi == u:
        prefixes += ("norm.", "head.")
    return [n for n, _ in model.named_parameters() if n.startswith(prefixes)]


def chunk_param_names(model: MoETransformer, chunk: int, num_chunks: int) -> list[str]:
    """Names of the parameters chunk `chunk` (layer granularity) uses, in `named_parameters` order."""
    chunk_layers(model.cfg, chunk, num_chunks)  # checks the arguments
    cut = layer_cut(model.cfg, num_chunks)
    return unit_param_names(model, cut[chunk], cut[chunk + 1])


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
