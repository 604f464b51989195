"""Models nobody here wrote: Hugging Face `transformers` causal LMs with tiny configs, random weights, exported to
ONNX with torch's dynamo exporter (`dynamo=True, external_data=False`) exactly as a user would export them.

Each entry is the library's own model class (`MixtralForCausalLM`, `Qwen2MoeForCausalLM`, `DeepseekV3ForCausalLM`,
`OlmoeForCausalLM`, `Qwen3MoeForCausalLM`, `GraniteMoeForCausalLM`, `Glm4MoeForCausalLM`, `GPT2LMHeadModel`) built
from a config with the published architecture's structure at toy sizes (64 hidden, 2-4 layers, 4-8 experts, top-2),
weights from the library's own seeded random init, one input `input_ids` (batch 2 x 16 tokens) and one output
`logits`.  Nothing of the model is re-written here; only the config is chosen.  Tried and left out (2026-12-04):
`JetMoeForCausalLM` exports, but its experts split the tokens by per-expert counts computed from the routing, so
the file's shapes depend on the input's values (plan-solve refuses it and says so); `DbrxForCausalLM` with a tiny
config fails inside transformers before the export (``'DbrxAttentionConfig' object has no attribute
'rope_theta'``).

**Experts implementation.**  transformers 5 runs MoE experts through a selectable kernel
(`config._experts_implementation`).  Its default on CPU, `grouped_mm`, calls the custom op
``transformers::grouped_mm_fallback``, which the dynamo exporter cannot translate ("Error when translating node
grouped_mm_fallback"); ``eager`` loops over the experts hit by the batch (`for expert_idx in expert_hit`), a
data-dependent shape that `torch.export` refuses (`GuardOnDataDependentSymNode`).  ``batched_mm`` exports: every
(token, slot) pair gathers its expert's weight matrices by the routed index (``gate_up_proj[expert_ids]``, a
`GatherND` of the whole weight table) and runs one batched matrix product.  So an ONNX file of a transformers MoE
model has, per layer, TopK over a softmax (Mixtral, Qwen2-MoE) or over sigmoid scores with group-limited routing
(DeepSeek-V3: three TopKs), tokens repeated k times, weight gathers by expert id, batched products, a multiply by
the routing weights and a sum over the k slots — the pattern `planner.ir.moe_structure` must find.

Measured (transformers 5.24.0, torch 2.13.0 CPU): each export takes 3-17 s here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["HF_MODELS", "HFModel", "export_hf_model"]

VOCAB = 256
BATCH, SEQ = 2, 16
EXPERTS_IMPLEMENTATION = "batched_mm"  # the one that exports (module docstring)


@dataclass(frozen=True)
class HFModel:
    """One transformers model: its name, what it is, and what `moe_structure` must find in its export (MoE
    layers, experts, top-k; 0 layers for a dense model)."""

    name: str
    kind: str
    moe_layers: int
    experts: int
    top_k: int
    make: Callable[[], object]


def _common() -> dict:
    return {"vocab_size": VOCAB, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "max_position_embeddings": 64}


def _mixtral():
    import transformers as tf  # optional: only the transformers corpus source needs it

    cfg = tf.MixtralConfig(**_common(), num_key_value_heads=2, intermediate_size=128, num_local_experts=4,
                           num_experts_per_tok=2)
    return tf.MixtralForCausalLM(cfg)


def _qwen2_moe():
    import transformers as tf  # optional (see _mixtral)

    cfg = tf.Qwen2MoeConfig(**_common(), num_key_value_heads=2, intermediate_size=128, moe_intermediate_size=64,
                            shared_expert_intermediate_size=128, num_experts=4, num_experts_per_tok=2,
                            decoder_sparse_step=1)
    return tf.Qwen2MoeForCausalLM(cfg)


def _deepseek_v3():
    import transformers as tf  # optional (see _mixtral)

    # first layer dense (first_k_dense_replace), second MoE: 8 routed experts in 2 groups, top-2 of the best group,
    # one shared expert; multi-head latent attention with LoRA ranks 32/16
    cfg = tf.DeepseekV3Config(**_common(), num_key_value_heads=4, intermediate_size=128, moe_intermediate_size=32,
                              n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
                              n_group=2, topk_group=1, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8,
                              qk_nope_head_dim=8, v_head_dim=16)
    return tf.DeepseekV3ForCausalLM(cfg)


def _olmoe():
    import transformers as tf  # optional (see _mixtral)

    # q/k normalised over the whole projection, no shared expert
    cfg = tf.OlmoeConfig(**_common(), num_key_value_heads=2, intermediate_size=64, num_experts=4,
                         num_experts_per_tok=2)
    return tf.OlmoeForCausalLM(cfg)


def _qwen3_moe():
    import transformers as tf  # optional (see _mixtral)

    # q/k normalised per head, every layer sparse, no shared expert
    cfg = tf.Qwen3MoeConfig(**_common(), num_key_value_heads=2, head_dim=16, intermediate_size=128,
                            moe_intermediate_size=64, num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1)
    return tf.Qwen3MoeForCausalLM(cfg)


def _granite_moe():
    import transformers as tf  # optional (see _mixtral)

    # Granite's embedding, attention, residual and logits multipliers around the same top-k MoE
    cfg = tf.GraniteMoeConfig(**_common(), num_key_value_heads=2, intermediate_size=64, num_local_experts=4,
                              num_experts_per_tok=2)
    return tf.GraniteMoeForCausalLM(cfg)


def _glm4_moe():
    import transformers as tf  # optional (see _mixtral)

    # first layer dense, second MoE: sigmoid scores with a correction bias, one shared expert
    cfg = tf.Glm4MoeConfig(**_common(), num_key_value_heads=2, head_dim=16, intermediate_size=128,
                           moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
                           first_k_dense_replace=1, n_group=1, topk_group=1)
    return tf.Glm4MoeForCausalLM(cfg)


def _gpt2():
    import transformers as tf  # optional (see _mixtral)

    return tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=4, n_head=4, n_positions=64))


HF_MODELS = (
    HFModel("hf_mixtral", "MoE LM (transformers MixtralForCausalLM)", 2, 4, 2, _mixtral),
    HFModel("hf_qwen2_moe", "MoE LM with shared expert (transformers Qwen2MoeForCausalLM)", 2, 4, 2, _qwen2_moe),
    HFModel("hf_deepseek_v3", "MoE LM, group-limited routing, MLA (transformers DeepseekV3ForCausalLM)", 1, 8, 2,
            _deepseek_v3),
    HFModel("hf_olmoe", "MoE LM, q/k norms (transformers OlmoeForCausalLM)", 2, 4, 2, _olmoe),
    HFModel("hf_qwen3_moe", "MoE LM, per-head q/k norms (transformers Qwen3MoeForCausalLM)", 2, 4, 2, _qwen3_moe),
    HFModel("hf_granite_moe", "MoE LM with Granite's multipliers (transformers GraniteMoeForCausalLM)", 2, 4, 2,
            _granite_moe),
    HFModel("hf_glm4_moe", "MoE LM, sigmoid routing, shared expert (transformers Glm4MoeForCausalLM)", 1, 4, 2,
            _glm4_moe),
    HFModel("hf_gpt2", "dense LM (transformers GPT2LMHeadModel)", 0, 0, 0, _gpt2),
)


def input_ids(seed: int = 0) -> np.ndarray:
    """The example input: BATCH x SEQ token ids below the vocabulary size (int64)."""
    return np.random.default_rng(seed).integers(0, VOCAB, size=(BATCH, SEQ), dtype=np.int64)


def export_hf_model(model: HFModel, path: str | Path, *, seed: int = 0) -> Path:
    """Build `model` with seeded random weights and export it to `path` (dynamo, weights inside the file)."""
    import torch  # optional: planning-only uses of the corpus need no torch

    torch.manual_seed(seed)
    lm = model.make()
    lm.eval()
    lm.config.use_cache = False
    lm.config._experts_implementation = EXPERTS_IMPLEMENTATION

    class Logits(torch.nn.Module):
        """input_ids -> logits, no cache (one forward of a training or prefill step)."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.inner(input_ids=ids, use_cache=False).logits

    path = Path(path)
    torch.onnx.export(Logits(lm).eval(), (torch.from_numpy(input_ids(seed)),), str(path), dynamo=True,
                      external_data=False, input_names=["input_ids"], output_names=["logits"])
    return path
