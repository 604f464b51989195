"""The shape of the bundled mixture-of-experts transformer: one `MoEConfig` for every place that builds it.

`planner.ir.moe_model` writes it as ONNX (and computes it in numpy); `planner.execute.train.model` builds it in
torch for the training runtime.  Plain Python (no onnx, no torch), so either side can import it.

Fields: `layers`, `experts` (per MoE layer), `top_k` (experts per token), `hidden` (model width), `ffn` (expert
hidden width), `heads` (attention heads), `seq_len`, `batch` (sequences per forward: the micro-batch size in
training), `vocab`, `capacity_factor` (per-expert buffer of the ONNX graph, `moe_model.expert_capacity`),
`seed` (weights), `opset` (of the ONNX file), `renormalize` (gates = top-k probabilities / their sum).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_OPSET = 20  # Gelu is a default-domain op from opset 20


@dataclass(frozen=True)
class MoEConfig:
    """Shape of the MoE transformer; `capacity_factor` sets the per-expert buffer (see `expert_capacity`)."""

    layers: int = 2
    experts: int = 4
    top_k: int = 2
    hidden: int = 64
    ffn: int = 128
    heads: int = 4
    seq_len: int = 32
    batch: int = 1
    vocab: int = 256
    capacity_factor: float = 1.25
    seed: int = 0
    opset: int = DEFAULT_OPSET
    renormalize: bool = True  # gates = top-k probabilities / their sum (Mixtral style); False keeps raw probs

    def __post_init__(self) -> None:
        positive = ("layers", "experts", "top_k", "hidden", "ffn", "heads", "seq_len", "batch", "vocab")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"MoEConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.top_k > self.experts:
            raise ValueError(f"MoEConfig.top_k={self.top_k} exceeds experts={self.experts}")
        if self.hidden % self.heads:
            raise ValueError(f"MoEConfig.hidden={self.hidden} is not divisible by heads={self.heads}")
        if not self.capacity_factor > 0:
            raise ValueError(f"MoEConfig.capacity_factor must be > 0, got {self.capacity_factor}")
        if self.opset < DEFAULT_OPSET:
            raise ValueError(f"MoEConfig.opset must be >= {DEFAULT_OPSET} (Gelu), got {self.opset}")

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_len

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def residual_shape(self) -> tuple[int, int, int]:
        """Shape of the residual stream (batch, seq_len, hidden): what flows between layers, and so between the
        pipeline chunks of the training runtime."""
        return (self.batch, self.seq_len, self.hidden)
