"""More models nobody here wrote: transformers' dense LMs (Llama, Gemma-2, Phi-3, GPT-NeoX, BLOOM, Falcon), a
state-space model (Mamba), encoders (BERT, DistilBERT, T5's), vision models (ViT, CLIP's vision tower, Swin,
SegFormer, ConvNeXt, ResNet) and audio encoders (Whisper's, wav2vec 2.0), each the library's own class with a tiny
config and its seeded random init (`experiments.hf_models.HF_ARCHITECTURES`), exported as a user would (dynamo; Swin
and T5's encoder with the legacy exporter, which dynamo fails on inside torch).  Each imports, plans (HEFT on cpu-4)
and runs on 2 gloo ranks with outputs matching onnxruntime (the corpus's tolerance).  Swin's export holds a Shape
of a tensor that folding removes (`planner.ir.onnx_export` evaluates it from its inputs).

`transformers` is a test dependency (pyproject's `test` extra); the module is skipped where it is not installed.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from experiments.corpus import ATOL, REL_TOL, evaluate, write_corpus  # noqa: E402 - after the skip
from experiments.hf_models import HF_ARCHITECTURES  # noqa: E402

NAMES = sorted(a.name for a in HF_ARCHITECTURES)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("hf_arch")
    entries = {e.name: e for e in write_corpus(out, sources=("transformers",), only=NAMES)}
    return out, entries


def test_only_the_architectures_were_exported(exported):
    _, entries = exported
    assert sorted(entries) == NAMES


@pytest.mark.dist
@pytest.mark.parametrize("name", NAMES)
def test_exports_plans_runs_and_matches_onnxruntime(exported, name):
    out, entries = exported
    entry = entries[name]
    assert entry.error == "" and entry.path is not None, entry.error
    row = evaluate(entry, out)
    assert row["import"] == "ok" and row["result"] == "ok", row["result"]
    assert int(row["ranks"]) == 2 and int(row["transfers"]) > 0  # tensors crossed ranks: the check covers the run
    assert float(row["max_rel_error"]) <= REL_TOL or float(row["max_abs_error"]) <= ATOL
