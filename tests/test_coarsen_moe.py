"""Coarsening the bundled MoE keeps the parallelism the planner must see and collapses the serial chains."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planner.coarsen import coarsen
from planner.ir.hardware import load_topology
from planner.prepare import prepare

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def moe_clusters():
    data = REPO / "planner" / "data"
    prepared = prepare(data / "models" / "moe.onnx", load_topology(REPO / "hardware_profiles" / "h100-8-nvlink.yaml"))
    result = coarsen(prepared.instance)  # the default granularity
    names = prepared.instance.task_names
    return [[names[i] for i in c] for c in result.clusters], result


def test_experts_of_one_layer_stay_in_separate_clusters(moe_clusters):
    clusters, _ = moe_clusters
    for members in clusters:
        experts = {m.group(1) + "/" + m.group(2) for name in members
                   if (m := re.match(r"(layer\d+)/(expert\d+)/", name))}
        layers = {e.split("/")[0] for e in experts}
        assert len(experts) == len(layers), f"a cluster mixes experts of one layer: {sorted(experts)}"


def test_each_attention_chain_collapses(moe_clusters):
    clusters, _ = moe_clusters
    where = {name: k for k, members in enumerate(clusters) for name in members}
    for layer in (0, 1):
        chain = [f"layer{layer}/attn/{op}" for op in ("scores", "scale", "causal_mask", "softmax", "context",
                                                      "ctx_transpose", "merge", "o_proj", "o_proj_bias", "residual")]
        assert len({where[name] for name in chain}) == 1, "the serial attention chain is one cluster"
        attention = {k for name, k in where.items() if name.startswith(f"layer{layer}/attn/")}
        # the chain, plus the three projection branches (LN + Q, K, V) that feed it in parallel
        assert len(attention) <= 4


def test_clustering_report_figures(moe_clusters):
    _, result = moe_clusters
    members = [i for c in result.clusters for i in c]
    assert sorted(members) == list(range(result.fine.num_tasks))
    assert result.num_clusters < result.fine.num_tasks / 4
    assert 0 < result.cut_bytes < int(result.fine.edge_bytes.sum())
