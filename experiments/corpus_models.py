"""Tiny torch modules that mirror the architectures users export to ONNX, for the real-model corpus
(`experiments/corpus.py`).

`transformers` is not a dependency, so each module re-writes the published architecture at a tiny size with the
same op structure: GPT-2 (causal self-attention with a lower-triangular mask, learned positions, tanh-GELU,
pre-LayerNorm, tied LM head), BERT (word + position + token-type embeddings, an additive attention mask from a 0/1
input, erf-GELU, post-LayerNorm, tanh pooler), a Mixtral decoder layer (RMSNorm, rotary attention, sparse MoE with
softmax -> top-2 -> renormalise and SwiGLU experts), a Qwen2-MoE block (top-4 of 8 without renormalising, plus a
shared expert behind a sigmoid gate), a DBNet-like OCR text detector (strided convs, an FPN with nearest and
bilinear upsampling, a probability map), an LSTM and a GRU sequence model, a voice-activity model whose first op
is a switch on the input sample rate (`If`, nested), and a Conv + BatchNorm + pooling classifier.

Each `CorpusModule` carries its example inputs; every weight is random (seeded), so outputs are not uniform and a
comparison with onnxruntime checks the arithmetic.  Sparse MoE routing is written densely (every expert runs on
every token, weighted by a combine matrix that is zero off the top-k), the form in which MoE models export with
static shapes; the routing (TopK, ScatterElements) is the real one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 (the usual alias)

__all__ = ["CorpusModule", "SwiGLU", "corpus_modules"]


@dataclass
class CorpusModule:
    """A module with its example inputs (positional, named), and the values to bind at import (`--input-value`)."""

    name: str
    kind: str
    make: Callable[[], nn.Module]
    inputs: dict[str, torch.Tensor]
    input_values: dict[str, list[float]] = field(default_factory=dict)
    other_values: dict[str, float] = field(default_factory=dict)  # fed when the input is not bound (If at run time)
    needs_cond: bool = False  # control flow written with torch.cond (the legacy exporter needs a scripted twin)


def _init_random(module: nn.Module, seed: int) -> nn.Module:
    """Seeded random weights; norms get non-trivial scales and shifts and BatchNorm non-trivial running stats."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))
            elif name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=gen))
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=gen))
    return module.eval()


# --- GPT-2 -------------------------------------------------------------------------------------------------------


class _GPT2Block(nn.Module):
    def __init__(self, d: int, heads: int, ctx: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)
        self.register_buffer("bias", torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)).view(1, 1, ctx, ctx))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        att = q @ k.transpose(-1, -2) / math.sqrt(hd)
        causal = self.bias[:, :, :t, :t]
        att = torch.where(causal, att, torch.tensor(torch.finfo(att.dtype).min))
        y = att.softmax(-1) @ v
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    """GPT-2 LM head model: token + learned position embeddings, pre-LN blocks, final LN, LM head tied to wte."""

    def __init__(self, vocab: int = 96, ctx: int = 16, d: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)
        self.h = nn.ModuleList(_GPT2Block(d, heads, ctx) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(input_ids.shape[1]).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


# --- BERT --------------------------------------------------------------------------------------------------------


class _BertLayer(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.attn_out = nn.Linear(d, d)
        self.attn_norm = nn.LayerNorm(d, eps=1e-12)
        self.intermediate = nn.Linear(d, 4 * d)
        self.output = nn.Linear(4 * d, d)
        self.out_norm = nn.LayerNorm(d, eps=1e-12)

    def forward(self, x: torch.Tensor, mask_add: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        hd = d // self.heads

        def split(z: torch.Tensor) -> torch.Tensor:
            return z.view(b, t, self.heads, hd).permute(0, 2, 1, 3)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd) + mask_add
        ctx = torch.matmul(scores.softmax(-1), v).permute(0, 2, 1, 3).reshape(b, t, d)
        x = self.attn_norm(x + self.attn_out(ctx))
        return self.out_norm(x + self.output(F.gelu(self.intermediate(x))))


class Bert(nn.Module):
    """BERT encoder + pooler: outputs the last hidden state and the pooled (tanh) first token."""

    def __init__(self, vocab: int = 96, ctx: int = 16, d: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, d)
        self.position = nn.Embedding(ctx, d)
        self.token_type = nn.Embedding(2, d)
        self.emb_norm = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList(_BertLayer(d, heads) for _ in range(layers))
        self.pooler = nn.Linear(d, d)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(input_ids.shape[1]).unsqueeze(0)
        x = self.emb_norm(self.word(input_ids) + self.position(pos) + self.token_type(token_type_ids))
        mask_add = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, mask_add)
        return x, torch.tanh(self.pooler(x[:, 0]))


# --- sparse MoE (Mixtral, Qwen2-MoE) -----------------------------------------------------------------------------


class SwiGLU(nn.Module):
    """The SwiGLU feed-forward of Mixtral/Qwen2-MoE experts: w2(silu(w1 x) * w3 x), no biases."""

    def __init__(self, d: int, ff: int) -> None:
        super().__init__()
        self.w1, self.w3 = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False)
        self.w2 = nn.Linear(ff, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoE(nn.Module):
    """Top-k routed experts (Mixtral: softmax, top-2, renormalise; Qwen2-MoE: top-k without renormalising, plus a
    shared expert scaled by sigmoid(shared_gate(x)))."""

    def __init__(self, d: int, ff: int, experts: int, top_k: int, renormalise: bool, shared_ff: int = 0) -> None:
        super().__init__()
        self.top_k, self.renormalise = top_k, renormalise
        self.gate = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(d, ff) for _ in range(experts))
        self.shared = SwiGLU(d, shared_ff) if shared_ff else None
        self.shared_gate = nn.Linear(d, 1, bias=False) if shared_ff else None

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        router_logits = self.gate(x)
        probs = router_logits.softmax(-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        if self.renormalise:
            weights = weights / weights.sum(-1, keepdim=True)
        combine = torch.zeros_like(probs).scatter(-1, chosen, weights)
        out = sum(combine[..., e:e + 1] * expert(x) for e, expert in enumerate(self.experts))
        if self.shared is not None and self.shared_gate is not None:
            out = out + torch.sigmoid(self.shared_gate(x)) * self.shared(x)
        return out, router_logits


class _RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class MoEDecoderLayer(nn.Module):
    """One decoder layer of a Mixtral / Qwen2-MoE model: RMSNorm, causal rotary attention with grouped KV heads,
    RMSNorm, sparse MoE; then the final norm.  Outputs the hidden state and the router logits."""

    def __init__(self, moe: SparseMoE, d: int = 32, heads: int = 4, kv_heads: int = 2, ctx: int = 16,
                 qkv_bias: bool = False) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.input_norm, self.post_norm, self.final_norm = _RMSNorm(d), _RMSNorm(d), _RMSNorm(d)
        self.q = nn.Linear(d, d, bias=qkv_bias)
        self.k = nn.Linear(d, kv_heads * self.hd, bias=qkv_bias)
        self.v = nn.Linear(d, kv_heads * self.hd, bias=qkv_bias)
        self.o = nn.Linear(d, d, bias=False)
        self.moe = moe
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        freqs = torch.outer(torch.arange(ctx).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos())
        self.register_buffer("sin", emb.sin())

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, d = x.shape
        h = self.input_norm(x)
        q = self.q(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        cos, sin = self.cos[:t], self.sin[:t]
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        att = q @ k.transpose(-1, -2) / math.sqrt(self.hd)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~causal, float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.o(y)
        moe_out, router_logits = self.moe(self.post_norm(x))
        return self.final_norm(x + moe_out), router_logits


# --- CNNs --------------------------------------------------------------------------------------------------------


def _cbr(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class OCRDetector(nn.Module):
    """A DBNet-like text detector: a strided backbone (1/2, 1/4, 1/8), an FPN whose top-down path upsamples with
    nearest (x2) and bilinear resizes, and a head that upsamples the fused map back to the input size (sigmoid
    probability map)."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.s1, self.s2, self.s3 = _cbr(3, c, 2), _cbr(c, 2 * c, 2), _cbr(2 * c, 4 * c, 2)
        self.l1, self.l2, self.l3 = nn.Conv2d(c, c, 1), nn.Conv2d(2 * c, c, 1), nn.Conv2d(4 * c, c, 1)
        self.head = nn.Sequential(nn.Conv2d(3 * c, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f1 = self.s1(x)
        f2 = self.s2(f1)
        f3 = self.s3(f2)
        p3 = self.l3(f3)
        p2 = self.l2(f2) + F.interpolate(p3, scale_factor=2.0, mode="nearest")
        p1 = self.l1(f1) + F.interpolate(p2, scale_factor=2.0, mode="nearest")
        size = p1.shape[-2:]
        fused = torch.cat([p1, F.interpolate(p2, size=size, mode="bilinear", align_corners=False),
                           F.interpolate(p3, size=size, mode="bilinear", align_corners=False)], dim=1)
        logits = F.interpolate(self.head(fused), scale_factor=2.0, mode="nearest")
        return torch.sigmoid(logits)


class ConvBNClassifier(nn.Module):
    """Conv + BatchNorm + ReLU blocks with max pooling, global average pooling and a linear classifier (logits)."""

    def __init__(self, c: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(_cbr(3, c), nn.MaxPool2d(2), _cbr(c, 2 * c), nn.MaxPool2d(2),
                                      _cbr(2 * c, 4 * c), nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(4 * c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.features(x), 1))


# --- recurrent ---------------------------------------------------------------------------------------------------


class LSTMTagger(nn.Module):
    """Embedding -> 2-layer bidirectional LSTM -> per-step linear logits."""

    def __init__(self, vocab: int = 50, d: int = 16, hidden: int = 12, tags: int = 5) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.rnn = nn.LSTM(d, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.out = nn.Linear(2 * hidden, tags)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(self.emb(tokens))
        return self.out(y)


class GRUEncoder(nn.Module):
    """A feature-sequence encoder: 2-layer GRU over (batch, time, features); outputs per-step states and the last
    hidden state through a linear head."""

    def __init__(self, features: int = 10, hidden: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.rnn = nn.GRU(features, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, h = self.rnn(x)
        return y, self.head(h[-1])


# --- control flow on an input value ------------------------------------------------------------------------------


class _VADBranch(nn.Module):
    """One sample rate's front end: a strided conv 'STFT' (window `window`, hop `HOP`), magnitude features, a conv
    encoder and a per-frame speech probability."""

    HOP = 64

    def __init__(self, window: int, c: int = 8) -> None:
        super().__init__()
        self.stft = nn.Conv1d(1, 2 * c, window, stride=self.HOP, bias=False)
        self.enc = nn.Sequential(nn.Conv1d(c, c, 3, padding=1), nn.ReLU(), nn.Conv1d(c, c, 3, padding=1), nn.ReLU())
        self.c = c
        self.score = nn.Linear(c, 1)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        s = self.stft(audio.unsqueeze(1))
        mag = torch.sqrt(s[:, :self.c] ** 2 + s[:, self.c:] ** 2 + 1e-6)
        h = self.enc(torch.log(mag + 1e-3)).transpose(1, 2)
        return torch.sigmoid(self.score(h)).squeeze(-1)


def _frame_loudness(audio: torch.Tensor, hop: int) -> torch.Tensor:
    """Mean |sample| per frame, (batch, frames, 1): what the 8 kHz branch scores a quiet chunk by."""
    return audio.abs().reshape(audio.shape[0], -1, hop).mean(-1, keepdim=True)


class SampleRateVAD(nn.Module):
    """A voice-activity detector in the style of models shipped with a sample-rate switch: per-frame speech
    probabilities computed by the 16 kHz or the 8 kHz front end depending on the input `sr` (an `If` on an input
    value; the 8 kHz branch nests a second switch on the loudness of the chunk)."""

    def __init__(self) -> None:
        super().__init__()
        self.b16 = _VADBranch(64)
        self.b8 = _VADBranch(32)
        self.quiet = nn.Linear(1, 1)

    def forward(self, audio: torch.Tensor, sr: torch.Tensor) -> torch.Tensor:
        def at_16k(a: torch.Tensor) -> torch.Tensor:
            return self.b16(a)

        def at_8k(a: torch.Tensor) -> torch.Tensor:
            def loud(z: torch.Tensor) -> torch.Tensor:
                return self.b8(z)

            def quiet(z: torch.Tensor) -> torch.Tensor:
                return torch.sigmoid(self.quiet(_frame_loudness(z, _VADBranch.HOP))).squeeze(-1)

            return torch.cond(a.abs().mean() > 0.01, loud, quiet, (a,))

        return torch.cond(sr.reshape(()) == 16000, at_16k, at_8k, (audio,))


class SampleRateVADScripted(nn.Module):
    """The same computation written for TorchScript (the legacy exporter turns scripted `if`s into ONNX `If`)."""

    def __init__(self, twin: SampleRateVAD) -> None:
        super().__init__()
        self.b16, self.b8, self.quiet = twin.b16, twin.b8, twin.quiet
        self.hop = _VADBranch.HOP  # TorchScript reads an int attribute, not a class constant of another class

    def forward(self, audio: torch.Tensor, sr: torch.Tensor) -> torch.Tensor:
        if bool(sr.reshape(()) == 16000):
            return self.b16(audio)
        if bool(audio.abs().mean() > 0.01):
            return self.b8(audio)
        return torch.sigmoid(self.quiet(_frame_loudness(audio, self.hop))).squeeze(-1)


def corpus_modules() -> list[CorpusModule]:
    """The corpus's torch modules, each with seeded random weights and example inputs."""
    gen = torch.Generator().manual_seed(7)
    t = 12
    ids = torch.randint(0, 96, (1, t), generator=gen)
    mask = torch.ones(1, t, dtype=torch.int64)
    mask[0, -3:] = 0
    types = torch.zeros(1, t, dtype=torch.int64)
    types[0, t // 2:] = 1
    return [
        CorpusModule("gpt2", "decoder LM (causal attention, learned positions, GELU)",
                     lambda: _init_random(GPT2(), 1), {"input_ids": ids}),
        CorpusModule("bert", "encoder (token types, attention mask, pooler)",
                     lambda: _init_random(Bert(), 2),
                     {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}),
        CorpusModule("mixtral_moe", "sparse MoE decoder layer (top-2, renormalised, rotary attention)",
                     lambda: _init_random(MoEDecoderLayer(SparseMoE(32, 48, 4, 2, True)), 3),
                     {"hidden_states": torch.randn(1, t, 32, generator=gen)}),
        CorpusModule("qwen2_moe", "sparse MoE decoder layer (top-4 of 8, shared expert, QKV bias)",
                     lambda: _init_random(MoEDecoderLayer(SparseMoE(32, 24, 8, 4, False, shared_ff=48),
                                                          qkv_bias=True), 4),
                     {"hidden_states": torch.randn(1, t, 32, generator=gen)}),
        CorpusModule("ocr_detector", "CNN text detector (FPN, nearest/bilinear Resize)",
                     lambda: _init_random(OCRDetector(), 5), {"x": torch.rand(1, 3, 48, 64, generator=gen)}),
        CorpusModule("lstm_tagger", "sequence tagger (2-layer bidirectional LSTM)",
                     lambda: _init_random(LSTMTagger(), 6), {"tokens": torch.randint(0, 50, (2, 7), generator=gen)}),
        CorpusModule("gru_encoder", "sequence encoder (2-layer GRU)",
                     lambda: _init_random(GRUEncoder(), 7), {"x": torch.randn(2, 9, 10, generator=gen)}),
        CorpusModule("vad_sr_switch", "VAD with If on the input sample rate (nested If)",
                     lambda: _init_random(SampleRateVAD(), 8),
                     {"audio": torch.randn(1, 512, generator=gen), "sr": torch.tensor([16000])},
                     input_values={"sr": [16000]}, other_values={"sr": 8000}, needs_cond=True),
        CorpusModule("cnn_classifier", "Conv + BatchNorm + pooling classifier",
                     lambda: _init_random(ConvBNClassifier(), 9), {"x": torch.rand(2, 3, 32, 32, generator=gen)}),
    ]
