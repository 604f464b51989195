"""The pipeline bench's rows for the router kinds beyond top-k (`experiments/bench_pipeline.py`): transformers'
PhiMoE (sparse mixer: two ArgMax picks, no TopK) and Switch Transformers' MoE encoder (top-1: one ArgMax), each
exported as `experiments/hf_models.py` exports it, planned as `make bench` plans it (quick sizes: 4 stages, m = 8,
10 s), and every row of each says in `moe_found` the layers, experts and top-k the model's config fixes; and the
corpus prints PhiMoE's finding under its line.

`transformers` is a test dependency (pyproject's `test` extra); the module is skipped where it is not installed.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from experiments.bench_pipeline import ROW_NAMES, bench_pipeline, moe_found  # noqa: E402 - after the skip
from experiments.corpus import main as corpus_main  # noqa: E402
from experiments.hf_models import HF_MODELS  # noqa: E402
from planner.ir.moe_structure import MoEStructure  # noqa: E402

PHIMOE = next(m for m in HF_MODELS if m.name == "hf_phimoe")
# what the configs fix: PhiMoE's from its HFModel record; Switch's encoder has num_sparse_encoder_layers = 2 of 2
# layers, num_experts = 4 and routes each token to one expert
WANT = {"hf_phimoe": f"{PHIMOE.moe_layers} layers, {PHIMOE.experts} experts, top-{PHIMOE.top_k}, sparse mixer routing",
        "hf_switch_encoder": "2 layers, 4 experts, top-1, top-1 routing"}


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return bench_pipeline(quick=True, only=tuple(f"{name}:4" for name in WANT))


@pytest.mark.parametrize("name", sorted(WANT))
def test_each_router_kinds_rows_report_its_experts_and_top_k(rows, name):
    mine = [r for r in rows if r["case"].startswith(f"{name} (transformers, ")]
    # every baseline and the planned row, all at 4 stages
    assert {"dualpipe", "opplan"} <= {r["schedule"] for r in mine} and {r["p"] for r in mine} == {4}
    assert {r["moe_found"] for r in mine} == {WANT[name]}


def test_the_rows_are_bench_rows_at_4_and_8_stages():
    assert {f"{name}:{p}" for name in WANT for p in (4, 8)} <= set(ROW_NAMES)


def test_a_dense_model_is_worded_none():
    assert moe_found(MoEStructure(())) == "none"


def test_the_corpus_prints_phimoes_finding(tmp_path, capsys):
    assert corpus_main(["--out", str(tmp_path), "--source", "transformers", "--only", "hf_phimoe",
                        "--skip-run"]) == 0
    out = capsys.readouterr().out
    assert (f"MoE: {PHIMOE.moe_layers} layers, {PHIMOE.experts} experts, top-k {PHIMOE.top_k}, dispatch " in out
            and out.rstrip().endswith("; routing: sparse mixer"))
    assert "MoE: " in (tmp_path / "corpus.csv").read_text()
