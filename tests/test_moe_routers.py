"""MoE layers found from every kind of router (planner/ir/moe_routers.py), on exports nobody here shaped for the
finder, with node and tensor names scrambled (`tests/test_moe_structure.scrambled`):

* transformers' own classes, tiny configs, seeded random weights (`experiments/hf_models.py`):
  Switch Transformers' encoder (top-1: ArgMax of the router's softmax, one-hot, a capacity mask; per-expert
  modules on the tokens a NonZero picks; legacy exporter), PhiMoE (sparse mixer: two ArgMaxes, the second over the
  logits with the first pick scattered to -inf, no TopK; batched experts), Qwen2-MoE (top-k over softmax beside a
  shared expert behind its own sigmoid gate) and OLMoE (top-k over softmax, the kind found before);
* torch-written layers, dynamo-exported, where transformers has no class that routes that way: expert choice (each
  expert takes its top-C tokens: a TopK over the tokens' axis of the transposed scores), noisy top-k gating (logits
  plus ``randn * softplus(x W_noise)``, scaled by a constant temperature) and a router whose input is jittered
  (X times a uniform draw near 1 that only the router reads);
* a classifier head that takes the ArgMax of its logits: not an MoE layer, and the no-MoE line says what was seen.

Each case states the experts, k, routing kind and shared experts per layer that the model's config fixes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 (the usual alias)

from planner.ir.load import load_model
from planner.ir.moe_structure import NO_MOE_LINE, MoEStructure, find_moe_layers
from planner.prepare import run_passes
from tests.test_moe_structure import scrambled

D = 32  # hidden width of the torch-written layers; 2 sequences of 16 tokens
TOKENS = 32


class ExpertChoiceMoE(nn.Module):
    """Expert choice: the router's softmax over experts, transposed; each expert takes its `capacity` best tokens
    (TopK over the tokens), runs them through its own weights (batched products) and adds them back weighted."""

    def __init__(self, experts: int, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.gate = nn.Linear(D, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, D, 2 * D) / math.sqrt(D))
        self.w2 = nn.Parameter(torch.randn(experts, 2 * D, D) / math.sqrt(2 * D))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, t, d = h.shape
        x = h.reshape(-1, d)
        probs = F.softmax(self.gate(x), -1)
        weights, chosen = torch.topk(probs.t(), self.capacity, dim=-1)  # experts x capacity
        y = torch.bmm(F.gelu(torch.bmm(x[chosen], self.w1)), self.w2) * weights.unsqueeze(-1)
        return torch.zeros_like(x).index_add(0, chosen.reshape(-1), y.reshape(-1, d)).reshape(b, t, d)


class NoisyMoE(nn.Module):
    """Top-k over softmax with noise: `noise` adds ``randn * softplus(x W_noise)`` to the logits (noisy top-k
    gating) and divides them by a constant temperature; `jitter` multiplies the router's input by a uniform draw
    in [1 - jitter, 1 + jitter].  Each expert runs on every token, weighted by its dense routing weight."""

    def __init__(self, experts: int, top_k: int, *, noise: bool, jitter: float) -> None:
        super().__init__()
        self.top_k, self.noise, self.jitter = top_k, noise, jitter
        self.gate = nn.Linear(D, experts, bias=False)
        self.noise_gate = nn.Linear(D, experts, bias=False)
        self.w1 = nn.ModuleList(nn.Linear(D, 2 * D) for _ in range(experts))
        self.w2 = nn.ModuleList(nn.Linear(2 * D, D) for _ in range(experts))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, t, d = h.shape
        x = h.reshape(-1, d)
        xr = x * (1 + self.jitter * (2 * torch.rand_like(x) - 1)) if self.jitter else x
        logits = self.gate(xr)
        if self.noise:
            logits = (logits + torch.randn_like(logits) * F.softplus(self.noise_gate(xr))) / 0.7
        weights, chosen = torch.topk(F.softmax(logits, -1), self.top_k, -1)
        dense = torch.zeros_like(logits).scatter(-1, chosen, weights)
        out = torch.zeros_like(x)
        for e, (w1, w2) in enumerate(zip(self.w1, self.w2, strict=True)):
            out = out + w2(F.gelu(w1(x))) * dense[:, e:e + 1]
        return out.reshape(b, t, d)


class ArgMaxHead(nn.Module):
    """A classifier: a hidden layer, 8 logits per token and their ArgMax (no experts anywhere)."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden, self.out = nn.Linear(D, D), nn.Linear(D, 8)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.out(F.gelu(self.hidden(h))).argmax(-1)


def _torch_export(module: nn.Module, path: Path) -> Path:
    torch.manual_seed(0)
    torch.onnx.export(module.eval(), (torch.randn(2, TOKENS // 2, D),), str(path), dynamo=True, external_data=False)
    return path


def _hf_export(name: str, path: Path) -> Path:
    from experiments.hf_models import HF_MODELS, HF_ROUTER_ARCHITECTURES, export_hf_architecture, export_hf_model

    for model in HF_MODELS:
        if model.name == name:
            return export_hf_model(model, path)
    arch = next(a for a in HF_ROUTER_ARCHITECTURES if a.name == name)
    return export_hf_architecture(arch, path)[0]


@dataclass(frozen=True)
class Case:
    """One export and what its config fixes per MoE layer."""

    layers: int
    experts: int
    top_k: int
    routing: str
    shared: int
    export: Callable[[Path], Path]
    noisy: bool = False
    branches: int | None = None  # expert branches per layer when each expert is its own subgraph


def _torch_case(make: Callable[[], nn.Module]) -> Callable[[Path], Path]:
    def export(path: Path) -> Path:
        torch.manual_seed(0)
        return _torch_export(make(), path)
    return export


def _hf_case(name: str) -> Callable[[Path], Path]:
    return lambda path: _hf_export(name, path)


CASES = {
    "hf_switch_encoder": Case(2, 4, 1, "top-1", 0, _hf_case("hf_switch_encoder"), branches=4),
    "hf_phimoe": Case(2, 4, 2, "sparse mixer", 0, _hf_case("hf_phimoe"), branches=1),
    "hf_qwen2_moe": Case(2, 4, 2, "top-k", 1, _hf_case("hf_qwen2_moe"), branches=1),
    "hf_olmoe": Case(2, 4, 2, "top-k", 0, _hf_case("hf_olmoe"), branches=1),
    # 4 experts x 16 of 32 tokens each: 2 experts per token on average
    "expert_choice": Case(1, 4, 2, "expert choice", 0, _torch_case(lambda: ExpertChoiceMoE(4, 16)), branches=1),
    "noisy_logits": Case(1, 4, 2, "top-k", 0, _torch_case(lambda: NoisyMoE(4, 2, noise=True, jitter=0.0)),
                         noisy=True, branches=4),
    "jittered_input": Case(1, 4, 2, "top-k", 0, _torch_case(lambda: NoisyMoE(4, 2, noise=False, jitter=0.01)),
                           noisy=True, branches=4),
}


@pytest.fixture(scope="module")
def found(tmp_path_factory) -> Callable[[str], tuple[MoEStructure, dict[str, str], object]]:
    """name -> (the MoE structure of its export with names scrambled, scrambled op name -> original, the graph);
    each export made once, on first use."""
    pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("routers")
    cache: dict[str, tuple[MoEStructure, dict[str, str], object]] = {}

    def get(name: str):
        if name not in cache:
            raw = CASES[name].export(out / f"{name}.raw.onnx")
            back = scrambled(raw, out / f"{name}.onnx")
            graph = run_passes(load_model(out / f"{name}.onnx"))
            cache[name] = (find_moe_layers(graph), back, graph)
        return cache[name]
    return get


# Qwen2-MoE's and OLMoE's exports take 10-25 s each; tests/test_hf_exports.py checks them in the default run
SLOW = {"hf_qwen2_moe", "hf_olmoe"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(CASES)])
def test_each_router_kind_is_found_with_its_experts_and_k(found, name):
    want = CASES[name]
    structure, _, graph = found(name)
    assert len(structure.layers) == want.layers, structure.summary_line()
    for layer in structure.layers:
        assert (layer.experts, layer.top_k, layer.routing, layer.shared_experts, layer.noisy) == (
            want.experts, want.top_k, want.routing, want.shared, want.noisy)
        assert bool(layer.shared_ops) == bool(want.shared)
        if want.branches is not None:
            assert len(layer.expert_branches) == want.branches
        # the router's ops and the experts' are apart: no op of an expert among the router's
        assert {graph.op(o).op_type for o in layer.router_ops} & {"TopK", "ArgMax"}
        expert_ops = {o for b in layer.expert_branches for o in b}
        assert not expert_ops & set(layer.router_ops)
        assert sum(layer.anchor_bytes.values()) == layer.dispatch_bytes > 0


def test_the_summary_line_names_the_routing_kinds(found):
    assert found("hf_switch_encoder")[0].summary_line().endswith("; routing: top-1")
    assert found("hf_phimoe")[0].summary_line().endswith("; routing: sparse mixer")
    assert found("expert_choice")[0].summary_line().endswith("; routing: expert choice (capacity 16)")
    assert found("noisy_logits")[0].summary_line().endswith("; routing: top-k with noise")


@pytest.mark.slow
def test_top_k_routers_keep_their_line_and_shared_experts_are_appended(found):
    assert found("hf_qwen2_moe")[0].summary_line().endswith("; shared experts per layer: 1")
    olmoe = found("hf_olmoe")[0].summary_line()
    assert olmoe.startswith("MoE: 2 layers, 4 experts, top-k 2, dispatch ") and olmoe.endswith("per micro-batch")


def test_sparse_mixer_picks_are_both_argmaxes_of_one_router(found):
    structure, _, graph = found("hf_phimoe")
    producer = {t: op for op in graph.ops for t in op.writes}
    seen: set[str] = set()
    for layer in structure.layers:
        picks = [graph.op(o) for o in layer.router_ops if graph.op(o).op_type == "ArgMax"]
        assert len(picks) == 2 and "TopK" not in {graph.op(o).op_type for o in layer.router_ops}
        # the second pick reads the logits with the first pick scattered out
        first, second = sorted(picks, key=lambda op: graph.ops.index(op))
        mask = producer[second.inputs[0]]
        assert mask.op_type == "ScatterElements" and first.outputs[0] in mask.inputs
        seen |= {op.name for op in picks}
    assert seen == {op.name for op in graph.ops if op.op_type == "ArgMax"}  # every pick, each in one layer


def test_expert_choice_bytes_are_the_gathered_capacity(found):
    (layer,) = found("expert_choice")[0].layers
    # by hand: each of 4 experts gathers 16 of the 32 tokens, 32 float32 wide: 4 x 16 x 32 x 4 bytes
    assert (layer.tokens, layer.hidden, layer.capacity) == (TOKENS, D, 16)
    assert layer.gathered and layer.dispatch_bytes == 4 * 16 * D * 4 == layer.topk_bytes


def test_noise_and_jitter_belong_to_the_router(found):
    for name, source in (("noisy_logits", "RandomNormalLike"), ("jittered_input", "RandomUniformLike")):
        structure, _, graph = found(name)
        (layer,) = structure.layers
        assert source in {graph.op(o).op_type for o in layer.router_ops}, name
        # the experts read the tokens from before the jitter: no random draw in any expert branch
        assert not {graph.op(o).op_type for b in layer.expert_branches for o in b} & {source}


def test_switch_experts_each_dispatch_their_tokens(found):
    structure, back, _ = found("hf_switch_encoder")
    for layer in structure.layers:
        # one gather of the routed tokens per expert (the oracle: the original names say which expert's loop step)
        assert len(layer.dispatch_ops) == 4
        assert len({back[o].rsplit("/", 1)[0] for o in layer.dispatch_ops}) == 1  # all in the layer's experts


def test_an_argmax_with_no_experts_after_it_is_named_in_the_no_moe_line(tmp_path):
    path = _torch_export(ArgMaxHead(), tmp_path / "head.raw.onnx")
    scrambled(path, tmp_path / "head.onnx")
    structure = find_moe_layers(run_passes(load_model(tmp_path / "head.onnx")))
    assert not structure.found
    assert structure.summary_line() == ("MoE: no MoE structure found (an ArgMax over 8 logits with no expert "
                                        "dispatch found after it); no all-to-all modelled") != NO_MOE_LINE
