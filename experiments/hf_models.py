"""Models nobody here wrote: Hugging Face `transformers` causal LMs with tiny configs, random weights, exported to
ONNX with torch's dynamo exporter (`dynamo=True, external_data=False`) exactly as a user would export them.

Each entry is the library's own model class (`MixtralForCausalLM`, `Qwen2MoeForCausalLM`, `DeepseekV3ForCausalLM`,
`OlmoeForCausalLM`, `Qwen3MoeForCausalLM`, `GraniteMoeForCausalLM`, `Glm4MoeForCausalLM`, `PhimoeForCausalLM`,
`GPT2LMHeadModel`) built
from a config with the published architecture's structure at toy sizes (64 hidden, 2-4 layers, 4-8 experts, top-2),
weights from the library's own seeded random init, one input `input_ids` (batch 2 x 16 tokens) and one output
`logits`.  Nothing of the model is re-written here; only the config is chosen.  Left out:
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
(DeepSeek-V3: three TopKs) or two ArgMaxes, the second over the logits with the first pick masked out (PhiMoE's
sparse mixer), tokens repeated k times, weight gathers by expert id, batched products, a multiply by
the routing weights and a sum over the k slots — the pattern `planner.ir.moe_structure` must find.

Measured (transformers 5.24.0, torch 2.13.0 CPU): each export takes 3-17 s here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["HF_ARCHITECTURES", "HF_MODELS", "HF_ROUTER_ARCHITECTURES", "HFArchitecture", "HFModel",
           "export_hf_architecture", "export_hf_model"]

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


def _phimoe():
    import transformers as tf  # optional (see _mixtral)

    # the "sparse mixer" router: no TopK; an ArgMax picks the first expert, a second ArgMax over the logits with
    # that expert masked out (a scatter of -inf) the second
    cfg = tf.PhimoeConfig(**_common(), num_key_value_heads=2, intermediate_size=128, num_local_experts=4,
                          num_experts_per_tok=2)
    return tf.PhimoeForCausalLM(cfg)


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
    HFModel("hf_phimoe", "MoE LM, sparse-mixer routing: ArgMax picks, no TopK (transformers PhimoeForCausalLM)", 2, 4,
            2, _phimoe),
    HFModel("hf_gpt2", "dense LM (transformers GPT2LMHeadModel)", 0, 0, 0, _gpt2),
)


def input_ids(seed: int = 0) -> np.ndarray:
    """The example input: BATCH x SEQ token ids below the vocabulary size (int64)."""
    return np.random.default_rng(seed).integers(0, VOCAB, size=(BATCH, SEQ), dtype=np.int64)


def export_hf_model(model: HFModel, path: str | Path, *, seed: int = 0) -> Path:
    """Build `model` with seeded random weights and export it to `path` (dynamo, weights inside the file)."""
    import torch  # optional: planning-only uses of the corpus need no torch

    torch.manual_seed(seed)
    lm: Any = model.make()  # a transformers model (the builders are typed object: transformers is optional)
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


# --------------------------------------------------------------------------- other architectures
# Dense LMs, encoders, vision and audio models and a state-space model, each the library's own class at toy sizes
# with its seeded random init, exported as a user would (one input, the model's main output).
# Swin and T5's encoder fail inside torch's dynamo exporter ("Failed to decompose the FX graph"), so they are
# exported with the legacy (TorchScript) exporter at opset 17; so is Switch Transformers' encoder, whose router moves
# its classifier to the router's dtype inside the forward (``self.classifier.to(...)``), which torch.export refuses
# ("Couldn't swap Linear.weight"), and whose experts loop over the experts the batch hits (unrolled by the trace).


@dataclass(frozen=True)
class HFArchitecture:
    """One transformers model that is not an MoE LM: its name, what it is, its builder, its example input (name and
    a seeded tensor), the output field taken (``logits`` or ``last_hidden_state``) and the exporter."""

    name: str
    kind: str
    make: Callable[[], object]
    example: Callable[[], tuple[str, object]]
    output: str = "last_hidden_state"
    exporter: str = "dynamo"


def _ids() -> tuple[str, object]:
    import torch

    return "input_ids", torch.from_numpy(input_ids())


def _normal(name: str, *shape: int) -> Callable[[], tuple[str, object]]:
    """The example input `name`: a seeded standard-normal float32 tensor of `shape` (pixels, audio)."""
    def example() -> tuple[str, object]:
        import torch

        return name, torch.from_numpy(np.random.default_rng(0).standard_normal(shape, dtype=np.float32))
    return example


def _built(config: str, model: str, **kw) -> Callable[[], object]:
    """A builder of transformers' class `model` from its `config` class with `kw`."""
    def make() -> object:
        import transformers as tf

        return getattr(tf, model)(getattr(tf, config)(**kw))
    return make


def _lm(config: str, model: str, **kw) -> Callable[[], object]:
    return _built(config, model, vocab_size=VOCAB, **kw)


_PIXELS = _normal("pixel_values", 1, 3, 32, 32)


def _switch_encoder() -> object:
    import torch
    import transformers as tf

    # every encoder layer sparse: top-1 routing (ArgMax of the router's softmax, one-hot, a per-sequence capacity
    # mask), each expert its own module run on the tokens routed to it
    cfg = tf.SwitchTransformersConfig(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                      num_decoder_layers=2, num_heads=4, num_experts=4, expert_capacity=8,
                                      num_sparse_encoder_layers=2, num_sparse_decoder_layers=2)
    encoder = tf.SwitchTransformersEncoderModel(cfg)

    class Unmasked(torch.nn.Module):
        """input_ids -> the encoder's output with an all-ones attention mask (the encoder needs one passed)."""

        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, ids: torch.Tensor) -> object:
            return self.encoder(input_ids=ids, attention_mask=torch.ones_like(ids))

    return Unmasked()


def _whisper_encoder() -> object:
    import transformers as tf

    cfg = tf.WhisperConfig(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16,
                           max_source_positions=8, vocab_size=VOCAB, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                           decoder_start_token_id=1)
    return tf.WhisperModel(cfg).get_encoder()


_SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
HF_ARCHITECTURES = (
    HFArchitecture("hf_llama", "dense LM, GQA, RoPE (LlamaForCausalLM)",
                   _lm("LlamaConfig", "LlamaForCausalLM", **_SMALL, num_key_value_heads=2,
                       max_position_embeddings=64), _ids, "logits"),
    HFArchitecture("hf_gemma2", "dense LM, soft-capping, sliding window (Gemma2ForCausalLM)",
                   _lm("Gemma2Config", "Gemma2ForCausalLM", **_SMALL, num_key_value_heads=2, head_dim=16,
                       max_position_embeddings=64), _ids, "logits"),
    HFArchitecture("hf_phi3", "dense LM, fused qkv (Phi3ForCausalLM)",
                   _lm("Phi3Config", "Phi3ForCausalLM", **_SMALL, num_key_value_heads=2, max_position_embeddings=64,
                       pad_token_id=0), _ids, "logits"),
    HFArchitecture("hf_gpt_neox", "dense LM, partial rotary (GPTNeoXForCausalLM)",
                   _lm("GPTNeoXConfig", "GPTNeoXForCausalLM", **_SMALL, max_position_embeddings=64,
                       rotary_pct=0.25), _ids, "logits"),
    HFArchitecture("hf_bloom", "dense LM, ALiBi (BloomForCausalLM)",
                   _lm("BloomConfig", "BloomForCausalLM", hidden_size=64, n_layer=2, n_head=4), _ids, "logits"),
    HFArchitecture("hf_falcon", "dense LM, parallel attention (FalconForCausalLM)",
                   _lm("FalconConfig", "FalconForCausalLM", hidden_size=64, num_hidden_layers=2,
                       num_attention_heads=4, alibi=False), _ids, "logits"),
    HFArchitecture("hf_mamba", "state-space LM (MambaModel)",
                   _lm("MambaConfig", "MambaModel", hidden_size=64, state_size=8, num_hidden_layers=2), _ids),
    HFArchitecture("hf_bert", "encoder (BertModel)",
                   _lm("BertConfig", "BertModel", **_SMALL, max_position_embeddings=64), _ids),
    HFArchitecture("hf_distilbert", "encoder (DistilBertModel)",
                   _lm("DistilBertConfig", "DistilBertModel", dim=64, hidden_dim=128, n_layers=2, n_heads=4,
                       max_position_embeddings=64), _ids),
    HFArchitecture("hf_t5_encoder", "encoder, relative position buckets (T5EncoderModel)",
                   _lm("T5Config", "T5EncoderModel", d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4),
                   _ids, exporter="legacy"),
    HFArchitecture("hf_vit", "vision transformer (ViTModel)",
                   _built("ViTConfig", "ViTModel", **_SMALL, image_size=32, patch_size=8), _PIXELS),
    HFArchitecture("hf_clip_vision", "vision tower (CLIPVisionModel)",
                   _built("CLIPVisionConfig", "CLIPVisionModel", **_SMALL, image_size=32, patch_size=8), _PIXELS),
    HFArchitecture("hf_swin", "windowed vision transformer (SwinModel)",
                   _built("SwinConfig", "SwinModel", image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                           num_heads=[2, 2], window_size=4), _PIXELS, exporter="legacy"),
    HFArchitecture("hf_segformer", "hierarchical vision encoder (SegformerModel)",
                   _built("SegformerConfig", "SegformerModel", num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                           hidden_sizes=[16, 32], num_attention_heads=[1, 2], decoder_hidden_size=32,
                           patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2]), _PIXELS),
    HFArchitecture("hf_convnext", "CNN (ConvNextModel)",
                   _built("ConvNextConfig", "ConvNextModel", hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                           image_size=64), _normal("pixel_values", 1, 3, 64, 64)),
    HFArchitecture("hf_resnet", "CNN, bottleneck blocks (ResNetModel)",
                   _built("ResNetConfig", "ResNetModel", embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                           layer_type="bottleneck"), _PIXELS),
    HFArchitecture("hf_whisper_encoder", "audio encoder, conv stem (WhisperEncoder)", _whisper_encoder,
                   _normal("input_features", 1, 16, 16)),
    HFArchitecture("hf_wav2vec2", "audio encoder from the waveform (Wav2Vec2Model)",
                   _built("Wav2Vec2Config", "Wav2Vec2Model", **_SMALL, conv_dim=(32, 32), conv_stride=(5, 2),
                           conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4),
                   _normal("input_values", 1, 400)),
)


# MoE models whose routers `planner.ir.moe_structure` finds but that the corpus leaves out: Switch Transformers'
# experts run on the tokens a NonZero picks, which the torch runtime cannot run (plan-run refuses the plan), so the
# corpus's plan-and-run row would fail; planning them (plan-solve, plan-compare) works.
HF_ROUTER_ARCHITECTURES = (
    HFArchitecture("hf_switch_encoder", "MoE encoder, top-1 routing (SwitchTransformersEncoderModel)",
                   _switch_encoder, _ids, exporter="legacy"),
)


def export_hf_architecture(arch: HFArchitecture, path: str | Path, *, seed: int = 0) -> tuple[Path, dict]:
    """Build `arch` with seeded random weights, export it to `path` with its exporter (dynamo: weights inside the
    file; legacy: opset 17) and return the path and its example feed ({input name: array})."""
    import torch

    torch.manual_seed(seed)
    model: Any = arch.make()  # a torch module (see export_hf_model)
    model.eval()
    name, example = arch.example()
    assert isinstance(example, torch.Tensor)  # every example input is a tensor

    class Output(torch.nn.Module):
        """input -> the model's `arch.output` (one forward, no cache)."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return getattr(self.inner(x), arch.output)

    path = Path(path)
    kw = {"dynamo": True, "external_data": False} if arch.exporter == "dynamo" else {"dynamo": False,
                                                                                    "opset_version": 17}
    torch.onnx.export(Output(model).eval(), (example,), str(path), input_names=[name], output_names=[arch.output],
                      **kw)
    return path, {name: example.numpy()}
