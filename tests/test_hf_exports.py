"""Models nobody here wrote: transformers' own Mixtral, Qwen2-MoE, DeepSeek-V3, OLMoE, Qwen3-MoE, GraniteMoE,
GLM-4-MoE, PhiMoE and GPT-2 classes with tiny configs and random weights, dynamo-exported
(`experiments/hf_models.py`), through the corpus (`experiments/corpus.py`).

* The MoE structure (`planner.ir.moe_structure`) is found in each MoE export with the library's layer, expert and
  top-k counts, though the experts run as `batched_mm` (weights gathered per token by the routed expert id, no
  per-expert subgraph) and DeepSeek-V3 routes in groups (three TopKs per layer; the layer's is the one over all
  experts) and PhiMoE picks by two ArgMaxes (its sparse mixer; `tests/test_moe_routers.py` has the other router
  kinds); none in GPT-2.  A detector that looks only for products with constant weights and a single TopK finds
  none of these MoE models.  OLMoE, Qwen3-MoE, GraniteMoE and GLM-4-MoE check that the detector generalises to
  models it was not written for; GLM-4-MoE routes by sigmoid scores with a correction bias and has a shared
  expert.
* Each model imports, plans (HEFT on cpu-4) and runs on 3-4 gloo ranks with outputs matching onnxruntime (the
  corpus's tolerance: max relative error 1e-4).

`transformers` is a test dependency (pyproject's `test` extra); the module is skipped where it is not installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

from experiments.corpus import evaluate, write_corpus  # noqa: E402 - after the skip: needs transformers
from experiments.hf_models import HF_MODELS  # noqa: E402
from planner.ir.hardware import load_topology  # noqa: E402
from planner.ir.moe_structure import find_moe_layers  # noqa: E402
from planner.prepare import prepare  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CPU4 = REPO / "hardware_profiles" / "cpu-4.yaml"
BY_NAME = {m.name: m for m in HF_MODELS}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("hf")
    entries = {e.name: e for e in write_corpus(out, sources=("transformers",), only=sorted(BY_NAME))}  # the MoE LMs
    # and GPT-2; the other architectures are tests/test_hf_architectures.py's
    return out, entries


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_export_succeeds(exported, name):
    _, entries = exported
    assert entries[name].error == "" and entries[name].path is not None and entries[name].path.exists()


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_moe_structure_matches_the_config(exported, name):
    _, entries = exported
    want = BY_NAME[name]
    graph = prepare(entries[name].path, load_topology(CPU4)).graph
    found = find_moe_layers(graph)
    assert len(found.layers) == want.moe_layers
    for layer in found.layers:
        assert (layer.experts, layer.top_k) == (want.experts, want.top_k)
        assert layer.routing == ("sparse mixer" if name == "hf_phimoe" else "top-k") and not layer.noisy
        assert layer.expert_branches, "the batched expert products form a branch"
        branch_types = {graph.op(op).op_type for b in layer.expert_branches for op in b}
        # the expert weights are gathered by expert id inside the branch, not counted as router ops
        assert {"MatMul"} <= branch_types and branch_types & {"Gather", "GatherND", "GatherElements"}
        router_types = {graph.op(op).op_type for op in layer.router_ops}
        # PhiMoE's sparse mixer picks by ArgMax (no TopK)
        assert router_types & {"TopK", "ArgMax"} and not router_types & {"MatMul"}
        # dense experts over tokens x k rows: what a top-k dispatch moves
        assert layer.dispatch_bytes == layer.tokens * layer.top_k * layer.hidden * layer.element_bytes


def test_shared_experts_are_reported_apart(exported):
    _, entries = exported
    for name in ("hf_qwen2_moe", "hf_deepseek_v3", "hf_glm4_moe"):
        graph = prepare(entries[name].path, load_topology(CPU4)).graph
        found = find_moe_layers(graph)
        # one shared expert each (DeepSeek-V3's and GLM-4-MoE's n_shared_experts=1 is one fused MLP)
        assert found.layers and all(layer.shared_ops and layer.shared_experts == 1 for layer in found.layers), name
        assert found.summary_line().endswith("; shared experts per layer: 1")
    for name in sorted(set(BY_NAME) - {"hf_qwen2_moe", "hf_deepseek_v3", "hf_glm4_moe", "hf_gpt2"}):
        layers = find_moe_layers(prepare(entries[name].path, load_topology(CPU4)).graph).layers
        assert layers and not any(layer.shared_experts or layer.shared_ops for layer in layers), name


@pytest.mark.dist
@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_plans_and_runs_matching_onnxruntime(exported, name):
    out, entries = exported
    row = evaluate(entries[name], out)
    assert row["import"] == "ok"
    assert row["result"] == "ok", row["result"]
    assert int(row["transfers"]) > 0  # tensors did cross ranks
