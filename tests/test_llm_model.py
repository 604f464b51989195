"""The real-size model generator (`planner.ir.llm_model`, `python -m planner.data.make_models`) on tiny configs.

Parameter counts are checked against the published formulas written out by hand below (not against
`weight_shapes`), and the imported graph must count exactly those bytes as parameters.
"""

from __future__ import annotations

import json
import math

import pytest

from planner.data import make_models
from planner.ir.llm_model import LLMConfig, expert_capacity, parameter_bytes, parameter_count, preset, write_llm_model
from planner.ir.load import load_model


def _gqa_attention(c: LLMConfig) -> int:
    # norm + Wq + Wk + Wv + Wo
    return c.hidden + c.hidden * c.heads * c.head_dim * 2 + 2 * c.hidden * c.kv_heads * c.head_dim


def _mla_attention(c: LLMConfig) -> int:
    # norm, Wqa [H, q_lora], q_norm, Wqb [q_lora, heads (nope + rope)], Wkva [H, kv_lora + rope], kv_norm,
    # Wuk [kv_lora, heads nope], Wuv [kv_lora, heads v], Wo [heads v, H]
    H, n = c.hidden, c.heads
    return (H + H * c.q_lora + c.q_lora + c.q_lora * n * (c.nope_dim + c.rope_dim) + H * (c.kv_lora + c.rope_dim)
            + c.kv_lora + c.kv_lora * n * c.nope_dim + c.kv_lora * n * c.v_dim + n * c.v_dim * H)


def _hand_count(c: LLMConfig) -> int:
    H = c.hidden
    attn = _gqa_attention(c) if c.attention == "gqa" else _mla_attention(c)
    dense_ffn = H + 3 * H * c.ffn
    moe_ffn = H + H * c.experts + (c.experts + c.shared_experts) * 3 * H * c.expert_ffn
    moe_layers = c.layers - c.dense_layers if c.experts else 0
    return (c.vocab * H + c.layers * attn + (c.layers - moe_layers) * dense_ffn + moe_layers * moe_ffn
            + H + H * c.vocab)


TINY = {
    "dense": LLMConfig(layers=2, hidden=32, heads=4, kv_heads=2, head_dim=8, ffn=48, vocab=50, batch=2, seq_len=8),
    "moe": LLMConfig(layers=2, hidden=32, heads=4, kv_heads=1, head_dim=8, experts=4, top_k=2, expert_ffn=24,
                     vocab=50, batch=2, seq_len=8, dtype="float16"),
    "mla": preset("deepseek-v3-slice", layers=2, dense_layers=1, hidden=32, heads=4, q_lora=16, kv_lora=8,
                  nope_dim=8, rope_dim=4, v_dim=6, ffn=40, experts=8, top_k=3, expert_ffn=12, vocab=50, batch=1,
                  seq_len=8, dtype="float32"),
}


@pytest.mark.parametrize("name", sorted(TINY))
def test_tiny_model_imports_with_hand_counted_parameters(tmp_path, name: str) -> None:
    c = TINY[name]
    assert parameter_count(c) == _hand_count(c)
    model, weights = write_llm_model(tmp_path / f"{name}.onnx", c)
    assert weights.stat().st_size >= parameter_bytes(c)  # aligned offsets may add a little
    graph = load_model(model)
    weight_bytes = sum(graph.tensors[t].size_bytes for t in graph.initializers if "/" in t and not t.startswith(
        "const/") and not t.endswith("/index"))
    assert weight_bytes == _hand_count(c) * c.dtype_bytes
    assert graph.tensors["logits"].shape == (c.batch, c.seq_len, c.vocab)
    # every weight is read by exactly one op, so the per-op parameter bytes add up to the weights (plus the small
    # inline routing constants of MoE layers)
    assert sum(op.param_bytes for op in graph.ops) >= weight_bytes
    if c.experts:
        cap = expert_capacity(c)
        assert graph.tensors["layer1/expert0/dispatch:0"].shape == (cap, c.hidden)
        expected = math.ceil(c.capacity_factor * c.tokens * c.top_k / c.experts)
        assert cap == min(c.tokens, expected)


def test_dense_layer_shapes(tmp_path) -> None:
    # Attention's output is [B, S, heads * head_dim]; the MLP's gate is [B, S, ffn]
    c = TINY["dense"]
    graph = load_model(write_llm_model(tmp_path / "m.onnx", c)[0])
    assert graph.tensors["layer0/attn/attention:0"].shape == (c.batch, c.seq_len, c.heads * c.head_dim)
    assert graph.tensors["layer1/mlp/gate_proj:0"].shape == (c.batch, c.seq_len, c.ffn)


def test_full_width_layer_has_gigabytes_of_parameters_in_a_small_sparse_file(tmp_path) -> None:
    # One full-width Mixtral-8x7B layer (plus embedding and head): 1.71e9 parameters = 3.43 GB in bfloat16.
    c = preset("mixtral-8x7b", layers=1, batch=1, seq_len=128)
    assert parameter_count(c) == _hand_count(c) == 1_713_418_240
    model, weights = write_llm_model(tmp_path / "mixtral1.onnx", c)
    assert model.stat().st_size < 200_000
    assert weights.stat().st_size >= 3_426_836_480
    assert weights.stat().st_blocks * 512 < 2**20  # a hole: no data blocks written
    graph = load_model(model)
    assert sum(op.param_bytes for op in graph.ops) >= 3_426_836_480


def test_presets_match_published_sizes() -> None:
    # Mixtral-8x7B 46.7 B; Llama-3 8.0 B and 70.6 B (all with untied embeddings); DeepSeek-V3: one MoE layer
    # holds 257 experts x 3 x 7168 x 2048 weights.
    assert round(parameter_count(preset("mixtral-8x7b")) / 1e9, 1) == 46.7
    assert round(parameter_count(preset("llama-8b")) / 1e9, 1) == 8.0
    assert round(parameter_count(preset("llama-70b")) / 1e9, 1) == 70.6
    ds = preset("deepseek-v3-slice")
    one = parameter_count(preset("deepseek-v3-slice", layers=1))
    assert parameter_count(ds) - one > 257 * 3 * 7168 * 2048


def test_invalid_config_is_rejected() -> None:
    with pytest.raises(ValueError, match="kv_heads"):
        LLMConfig(heads=4, kv_heads=3)
    with pytest.raises(ValueError, match="top_k"):
        LLMConfig(experts=2, top_k=3)
    with pytest.raises(ValueError, match="unknown preset"):
        preset("gpt-5")


def test_cli_writes_model_and_prints_summary(tmp_path, capsys) -> None:
    out = tmp_path / "llama.onnx"
    assert make_models.main(["--preset", "llama-8b", "--layers", "1", "--seq-len", "16", "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["layers"] == 1 and summary["nodes"] > 0
    assert summary["parameter_bytes"] == parameter_bytes(preset("llama-8b", layers=1))
    assert out.exists() and (tmp_path / "llama.weights").exists()


def test_cli_bad_flag_is_one_line_error_and_writes_nothing(tmp_path, capsys) -> None:
    out = tmp_path / "m.onnx"
    assert make_models.main(["--preset", "mixtral-8x7b", "--layers", "0", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: make_models: LLMConfig.layers must be >= 1, got 0") and err.count("\n") == 1
    assert not out.exists()
