"""MoE layers found from the graph's structure (planner/ir/moe_structure.py), never from op names.

Every model is checked with its node and tensor names scrambled (`scrambled`): the bundled MoE; the generated
Mixtral-like and DeepSeek-V3-like (sigmoid router, shared expert) models (`planner.data.make_models`); torch-written
MoE stacks exported with the dynamo exporter (`torch.onnx.export(..., dynamo=True, external_data=False)`), written
here because `transformers` is not installed: a Mixtral-like one (router Linear -> softmax -> top-2 -> renormalise;
per expert `torch.where`, `index_select`, `index_add`, the loop of the transformers implementation), a
Qwen2-MoE-like one (top-4 of 8 without renormalising, experts on masked tokens, a shared expert behind a sigmoid
gate) and a GShard-style layer whose experts are batched matrix products over an experts x capacity buffer.  The
corpus's dense-routed MoE layers (`experiments/corpus_models.py`: every expert on every token, weighted by a
scattered combine matrix) are found too.  Dense models (a GPT-2-like export, the onnx light CNNs) have no MoE
structure.  Byte counts are checked against a hand computation, and plan-compare's all-to-all and its MoE line
against them.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import onnx
import pytest
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 (the usual alias)

from experiments.corpus_models import SwiGLU
from planner.cli import inspect_main
from planner.cli_compare import compare_main
from planner.compare.model_costs import model_costs
from planner.ir.hardware import load_topology
from planner.ir.load import load_model
from planner.ir.moe_structure import NO_MOE_LINE, find_moe_layers
from planner.prepare import prepare, run_passes

REPO = Path(__file__).resolve().parents[1]
MOE = REPO / "planner" / "data" / "models" / "moe.onnx"
HW = REPO / "hardware_profiles" / "h100-8-nvlink.yaml"


def scrambled(src: Path, dst: Path) -> dict[str, str]:
    """Write `src` to `dst` with every node named ``n<i>`` (in a shuffled order) and every tensor but the graph's
    inputs and outputs named ``t<j>``; returns new node name -> old node name (the test's oracle)."""
    model = onnx.load(str(src), load_external_data=False)
    g = model.graph
    keep = {v.name for v in (*g.input, *g.output)}
    tensors: dict[str, str] = {}

    def rename(t: str) -> str:
        if not t or t in keep:
            return t
        return tensors.setdefault(t, f"t{len(tensors)}")

    back = {}
    n = len(g.node)
    for i, node in enumerate(g.node):
        new = f"n{(i * 7919) % n if math.gcd(7919, n) == 1 else i}"
        back[new] = node.name
        node.name = new
        node.input[:] = [rename(t) for t in node.input]
        node.output[:] = [rename(t) for t in node.output]
    for init in g.initializer:
        init.name = rename(init.name)
    for vi in g.value_info:
        vi.name = rename(vi.name)
    # external data (make_models' sparse weights file) keeps its location: write `dst` in the folder of `src`
    onnx.save(model, str(dst))
    return back


def structure(path: Path):
    return find_moe_layers(run_passes(load_model(path)))


# ----- torch-written MoE stacks (the transformers implementations' op structure, tiny sizes) ---------------------


class MixtralLikeMoE(nn.Module):
    """Router Linear -> softmax -> top-k -> renormalise; per expert: the tokens routed to it (`torch.where` over
    the one-hot mask), `index_select`, the expert, times its routing weight, `index_add` into the output."""

    def __init__(self, d: int, ff: int, experts: int, top_k: int) -> None:
        super().__init__()
        self.top_k, self.num_experts = top_k, experts
        self.gate = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(d, ff) for _ in range(experts))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, t, d = h.shape
        x = h.reshape(-1, d)
        probs = F.softmax(self.gate(x), dim=-1)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        mask = F.one_hot(chosen, self.num_experts).permute(2, 1, 0)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            slot, token = torch.where(mask[e])
            y = expert(x.index_select(0, token)) * weights[token, slot, None]
            out = out.index_add(0, token, y)
        return out.reshape(b, t, d)


class QwenLikeMoE(nn.Module):
    """Softmax -> top-k without renormalising; each expert on the tokens masked to it, times its routing weight;
    plus a shared expert scaled by sigmoid(shared_gate(x))."""

    def __init__(self, d: int, ff: int, experts: int, top_k: int, shared_ff: int) -> None:
        super().__init__()
        self.top_k = top_k
        self.gate = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(d, ff) for _ in range(experts))
        self.shared = SwiGLU(d, shared_ff)
        self.shared_gate = nn.Linear(d, 1, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, t, d = h.shape
        x = h.reshape(-1, d)
        probs = F.softmax(self.gate(x), dim=-1)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        dense = torch.zeros_like(probs).scatter(-1, chosen, weights)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            w = dense[:, e:e + 1]
            out = out + expert(x * (w > 0).to(x.dtype)) * w
        out = out + torch.sigmoid(self.shared_gate(x)) * self.shared(x)
        return out.reshape(b, t, d)


class BatchedMoE(nn.Module):
    """GShard-style: one-hot dispatch and combine tensors (tokens x experts x capacity) and the experts as batched
    matrix products whose weights carry the expert dimension."""

    def __init__(self, d: int, ff: int, experts: int, top_k: int, capacity: int) -> None:
        super().__init__()
        self.top_k, self.num_experts, self.capacity = top_k, experts, capacity
        self.gate = nn.Linear(d, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, d, ff) / math.sqrt(d))
        self.w2 = nn.Parameter(torch.randn(experts, ff, d) / math.sqrt(ff))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, t, d = h.shape
        x = h.reshape(-1, d)
        probs = F.softmax(self.gate(x), -1)
        weights, chosen = torch.topk(probs, self.top_k, -1)
        mask = F.one_hot(chosen, self.num_experts).sum(1).float()  # tokens x experts
        slot = (torch.cumsum(mask, 0) - 1) * mask
        keep = mask * (slot < self.capacity).float()
        dispatch = keep.unsqueeze(-1) * F.one_hot(slot.long().clamp(0, self.capacity - 1), self.capacity).float()
        combine = dispatch * torch.zeros_like(probs).scatter(-1, chosen, weights).unsqueeze(-1)
        per_expert = torch.einsum("tec,td->ecd", dispatch, x)  # experts x capacity x hidden
        y = torch.bmm(F.gelu(torch.bmm(per_expert, self.w1)), self.w2)
        return torch.einsum("tec,ecd->td", combine, y).reshape(b, t, d)


class _RMSNorm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class _Block(nn.Module):
    """Pre-norm decoder layer: causal self-attention, then the MoE, each with its residual."""

    def __init__(self, d: int, heads: int, moe: nn.Module) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = _RMSNorm(d), _RMSNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.moe = moe

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in self.qkv(self.norm1(x)).split(d, -1))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        att = att.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
        x = x + self.o((att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.moe(self.norm2(x))


class _Stack(nn.Module):
    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


D, TOKENS = 32, 32  # hidden width; tokens per micro-batch (2 sequences of 16)


def _export(module: nn.Module, path: Path) -> Path:
    torch.manual_seed(0)
    torch.onnx.export(module.eval(), (torch.randn(2, TOKENS // 2, D),), str(path), dynamo=True, external_data=False)
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    """The torch stacks (2 layers each) and the corpus's dense-routed layers, exported, then names scrambled."""
    from experiments.corpus_models import corpus_modules

    out = tmp_path_factory.mktemp("moe_exports")
    torch.manual_seed(0)
    models = {
        "mixtral_like": _Stack([_Block(D, 4, MixtralLikeMoE(D, 64, 4, 2)) for _ in range(2)]),
        "qwen2_moe_like": _Stack([_Block(D, 4, QwenLikeMoE(D, 32, 8, 4, 64)) for _ in range(2)]),
        "batched": BatchedMoE(D, 64, 4, 2, 20),
    }
    paths = {}
    for name, module in models.items():
        raw = _export(module, out / f"{name}.raw.onnx")
        scrambled(raw, out / f"{name}.onnx")
        paths[name] = out / f"{name}.onnx"
    for cm in corpus_modules():
        if cm.name in ("mixtral_moe", "qwen2_moe", "gpt2"):
            raw = out / f"corpus_{cm.name}.raw.onnx"
            torch.onnx.export(cm.make(), tuple(cm.inputs.values()), str(raw), input_names=list(cm.inputs),
                              dynamo=True, external_data=False)
            scrambled(raw, out / f"corpus_{cm.name}.onnx")
            paths[f"corpus_{cm.name}"] = out / f"corpus_{cm.name}.onnx"
    return paths


# ----- the bundled MoE and the generated Mixtral: gathered dispatch, bytes from the graph --------------------------


def test_bundled_moe_is_found_with_names_scrambled(tmp_path):
    back = scrambled(MOE, tmp_path / "moe.onnx")
    found = structure(tmp_path / "moe.onnx")
    assert [(x.experts, x.top_k) for x in found.layers] == [(4, 2), (4, 2)]
    for k, layer in enumerate(found.layers):
        # the oracle: the original names of what was found
        assert back[layer.topk_op] == f"layer{k}/router/topk"
        assert sorted(back[o] for o in layer.dispatch_ops) == [f"layer{k}/expert{e}/dispatch" for e in range(4)]
        assert len(layer.expert_branches) == 4 and not layer.shared_ops
        for e, branch in enumerate(layer.expert_branches):
            assert {back[o].rsplit("/", 1)[0] for o in branch} == {f"layer{k}/expert{e}"}
            assert {back[o].rsplit("/", 1)[1] for o in branch} == {"dispatch", "fc1", "fc1_bias", "gelu", "fc2",
                                                                   "fc2_bias"}
        combine = {back[o] for o in layer.combine_ops}
        assert {f"layer{k}/expert{e}/scatter" for e in range(4)} <= combine
        assert f"layer{k}/combine/add_l1_0" in combine
        assert {f"layer{k}/router/logits", f"layer{k}/router/softmax"} <= {back[o] for o in layer.router_ops}
        # by hand: 32 tokens x 64 hidden float32; each of 4 experts gathers its capacity of
        # ceil(1.25 x 32 x 2 / 4) = 20 tokens: 4 x 20 x 64 x 4 bytes, and the combine returns as many
        assert (layer.tokens, layer.hidden, layer.element_bytes) == (32, 64, 4)
        assert layer.gathered and layer.dispatch_bytes == layer.combine_bytes == 4 * 20 * 64 * 4
        assert sum(layer.anchor_bytes.values()) == layer.dispatch_bytes
    assert found.summary_line() == "MoE: 2 layers, 4 experts, top-k 2, dispatch 0.03906 MiB per micro-batch"


def test_generated_mixtral_is_found_with_names_scrambled(tmp_path):
    from planner.data.make_models import main as make_models

    raw = tmp_path / "mixtral.raw.onnx"
    assert make_models(["--preset", "mixtral-8x7b", "--layers", "2", "--out", str(raw)]) == 0
    back = scrambled(raw, tmp_path / "mixtral.onnx")
    found = structure(tmp_path / "mixtral.onnx")
    assert [(x.experts, x.top_k, len(x.expert_branches)) for x in found.layers] == [(8, 2, 8), (8, 2, 8)]
    for k, layer in enumerate(found.layers):
        assert back[layer.topk_op] == f"layer{k}/moe/topk"
        assert sorted(back[o] for o in layer.dispatch_ops) == [f"layer{k}/expert{e}/dispatch" for e in range(8)]
        assert back[layer.combine_ops[-1]] == f"layer{k}/moe/combine"
        # by hand: 4 x 4096 = 16384 tokens of 4096 bfloat16; capacity ceil(1.25 x 16384 x 2 / 8) = 5120 per expert
        assert (layer.tokens, layer.hidden, layer.element_bytes) == (16384, 4096, 2)
        assert layer.dispatch_bytes == 8 * 5120 * 4096 * 2


def test_generated_deepseek_like_sigmoid_router_and_shared_expert(tmp_path):
    from planner.data.make_models import main as make_models

    raw = tmp_path / "ds.raw.onnx"
    assert make_models(["--preset", "deepseek-v3-slice", "--experts", "16", "--top-k", "4", "--layers", "1",
                        "--out", str(raw)]) == 0
    back = scrambled(raw, tmp_path / "ds.onnx")
    (layer,) = structure(tmp_path / "ds.onnx").layers
    assert (layer.experts, layer.top_k, len(layer.expert_branches)) == (16, 4, 16)
    assert back[layer.topk_op] == "layer0/moe/topk" and "layer0/moe/scores" in {back[o] for o in layer.router_ops}
    # the shared expert joins the combine's ScatterND beside the experts' rows: found, not dispatched
    assert layer.shared_ops and {back[o].split("/")[1] for o in layer.shared_ops} == {"shared0"}
    # by hand: capacity ceil(1.25 x 16384 tokens x 4 / 16) = 5120 rows of 7168 bfloat16 per expert
    assert layer.gathered and layer.dispatch_bytes == 16 * 5120 * 7168 * 2


# ----- torch exports: data-dependent and masked dispatch, dense routing, the shared expert --------------------------


def test_torch_mixtral_like_export_is_found(exported):
    found = structure(exported["mixtral_like"])
    assert [(x.experts, x.top_k, len(x.expert_branches)) for x in found.layers] == [(4, 2, 4), (4, 2, 4)]
    graph = run_passes(load_model(exported["mixtral_like"]))
    for layer in found.layers:
        assert not layer.shared_ops
        assert {graph.op(o).op_type for o in layer.dispatch_ops} == {"Gather"}  # index_select
        assert any(graph.op(o).op_type == "ScatterND" for o in layer.combine_ops)  # index_add
        # each branch: the SwiGLU's three matrix products
        assert all(sum(graph.op(o).op_type in ("MatMul", "Gemm") for o in b) == 3 for b in layer.expert_branches)
        # how many tokens reach each expert depends on the data (torch.where): bytes are the top-k dispatch's,
        # by hand 32 tokens x 2 experts x 32 hidden x 4 bytes
        assert not layer.gathered and layer.dispatch_bytes == layer.combine_bytes == 32 * 2 * 32 * 4


def test_torch_qwen2_moe_like_export_is_found_with_its_shared_expert(exported):
    found = structure(exported["qwen2_moe_like"])
    assert [(x.experts, x.top_k, len(x.expert_branches)) for x in found.layers] == [(8, 4, 8), (8, 4, 8)]
    graph = run_passes(load_model(exported["qwen2_moe_like"]))
    for layer in found.layers:
        # the shared expert (3 matrix products) and its sigmoid gate (1) are found, and not dispatched
        shared_types = [graph.op(o).op_type for o in layer.shared_ops]
        assert sum(t in ("MatMul", "Gemm") for t in shared_types) == 4 and "Sigmoid" in shared_types
        assert not set(layer.shared_ops) & {o for b in layer.expert_branches for o in b}
        assert {graph.op(o).op_type for o in layer.dispatch_ops} == {"Mul"}  # tokens masked per expert
        assert layer.dispatch_bytes == 32 * 4 * 32 * 4  # by hand: tokens x k x hidden x float32


def test_batched_experts_are_one_branch_with_the_capacity_buffer_bytes(exported):
    graph = run_passes(load_model(exported["batched"]))
    (layer,) = structure(exported["batched"]).layers
    assert (layer.experts, layer.top_k, len(layer.expert_branches)) == (4, 2, 1)
    (branch,) = layer.expert_branches
    assert sum(graph.op(o).op_type == "MatMul" for o in branch) == 2  # the two batched matrix products
    assert [graph.op(o).op_type for o in layer.dispatch_ops] == ["Einsum"]
    assert graph.op(layer.combine_ops[-1]).op_type == "Einsum"
    # by hand: an experts x capacity x hidden buffer, 4 x 20 x 32 float32
    assert layer.gathered and layer.dispatch_bytes == layer.combine_bytes == 4 * 20 * 32 * 4


@pytest.mark.parametrize("name, experts, top_k, shared", [("corpus_mixtral_moe", 4, 2, False),
                                                          ("corpus_qwen2_moe", 8, 4, True)])
def test_dense_routed_corpus_layers_are_found(exported, name, experts, top_k, shared):
    found = structure(exported[name])
    (layer,) = found.layers
    assert (layer.experts, layer.top_k, len(layer.expert_branches)) == (experts, top_k, experts)
    assert bool(layer.shared_ops) == shared
    assert not layer.dispatch_ops  # every expert reads every token: the dispatch is implicit
    assert layer.dispatch_bytes == 12 * top_k * 32 * 4  # 12 tokens x k x 32 hidden x float32
    # the bytes are charged to one op of each expert branch
    assert sum(layer.anchor_bytes.values()) == layer.dispatch_bytes
    assert sorted(sum(o in b for o in layer.anchor_bytes) for b in layer.expert_branches) == [1] * experts


# ----- dense models -----------------------------------------------------------------------------------------------


def test_gpt2_like_export_has_no_moe_structure(exported):
    found = structure(exported["corpus_gpt2"])
    assert not found.found and found.summary_line() == NO_MOE_LINE


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet", "inception_v1"])
def test_light_cnns_have_no_moe_structure(light_models_dir, name):
    assert structure(light_models_dir / f"light_{name}.onnx").summary_line() == NO_MOE_LINE


# ----- plan-compare: the all-to-all from the found bytes, --expert-parallel, the MoE line ---------------------------


def test_all_to_all_ticks_by_hand_with_expert_parallel_degrees():
    # h100-8-nvlink: latency 300 ticks, 4500 bytes per tick between any two devices.  The whole model as one
    # piece holds both layers' dispatches: per layer 20480 bytes, of which (N-1)/N leave the device.
    prepared = prepare(MOE, load_topology(HW))
    base = dataclasses.replace(model_costs(prepared.instance, 2, time_limit_s=10),
                               moe=find_moe_layers(prepared.graph))
    everything = list(range(prepared.instance.num_tasks))
    for n, want in ((None, 2 * math.ceil(300 + 20480 / 2 / 4500)), (2, 2 * 303), (4, 2 * 304), (8, 2 * 304),
                    (1, 0)):
        costs = dataclasses.replace(base, expert_parallel=n)
        assert costs.a2a_tick(everything) == want, n
    assert dataclasses.replace(base, moe=None).a2a_tick(everything) == 0


def test_cli_prints_the_moe_line_and_expert_parallel_changes_the_all_to_all(tmp_path, capsys):
    def run(*extra: str) -> tuple[list[str], str]:
        out = tmp_path / "cmp"
        assert compare_main(["--model", str(MOE), "--hw", str(HW), "--stages", "2", "--microbatches", "4",
                             "--schedules", "1f1b", "--no-opplan", "--no-pictures", "--stage-time-limit", "5",
                             "--out", str(out), *extra]) == 0
        lines = capsys.readouterr().out.splitlines()
        return lines, (out / "compare.csv").read_text()

    lines, with_a2a = run()
    assert "MoE: 2 layers, 4 experts, top-k 2, dispatch 0.03906 MiB per micro-batch" in lines
    _, ep1 = run("--expert-parallel", "1")
    _, off = run("--no-a2a")
    assert ep1 == off != with_a2a  # N = 1: every token stays home, no all-to-all


def test_cli_says_when_no_moe_structure_is_found(exported, tmp_path, capsys):
    assert compare_main(["--model", str(exported["corpus_gpt2"]), "--hw", str(HW), "--stages", "2",
                         "--microbatches", "2", "--schedules", "1f1b", "--no-opplan", "--no-pictures",
                         "--stage-time-limit", "5", "--out", str(tmp_path / "cmp")]) == 0
    assert NO_MOE_LINE in capsys.readouterr().out.splitlines()


def test_plan_inspect_prints_the_finding(capsys):
    assert inspect_main(["--model", str(MOE)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("MoE: 2 layers, 4 experts, top-k 2")


def test_expert_parallel_must_be_a_whole_number_of_devices(tmp_path, capsys):
    argv = ["--model", str(MOE), "--hw", str(HW), "--stages", "2", "--microbatches", "4", "--out", str(tmp_path)]
    assert compare_main([*argv, "--expert-parallel", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: plan-compare: --expert-parallel") and len(err.strip().splitlines()) == 1
