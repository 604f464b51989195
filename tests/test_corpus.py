"""The real-model corpus (`experiments/corpus.py`): every model imports as written, plans (HEFT) and runs
on 2-4 gloo ranks with the runner's check against onnxruntime.

Tolerance: max relative error <= 1e-4 (an output's max abs error over its max |onnxruntime value|), or max abs
error <= 1e-6 for an output that is all near zero (`experiments.corpus.REL_TOL`, `ATOL`).

The fast part (no marker but `dist`) runs three models: the legacy-exported GPT-2, the sample-rate `If` model
both bound (`--input-value sr=16000`, inlined) and unbound (the If runs at run time on sr = 8000, nested If), and
onnxruntime's shipped IR 3 `mul_1.onnx`; plus the light-model weight rewrite.  The whole corpus (both exporters,
the light CNNs, the package files) is `slow`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from experiments.corpus import (
    ATOL,
    COLUMNS,
    REL_TOL,
    drop_final_softmax,
    evaluate,
    main,
    randomize_weights,
    write_corpus,
)

TORCH_MODELS = ("gpt2", "bert", "mixtral_moe", "qwen2_moe", "ocr_detector", "lstm_tagger", "gru_encoder",
                "vad_sr_switch", "cnn_classifier")
EXPORTERS = ("legacy", "dynamo")
LIGHT = ("light_squeezenet", "light_shufflenet", "light_inception_v1", "light_densenet121")
PACKAGE = ("mul_1", "sigmoid")
# every key the full corpus must run: each torch model with each exporter, the unbound If, the light CNNs, packages
ALL_KEYS = ([f"{m}_{e}" for m in TORCH_MODELS for e in EXPORTERS] + [f"vad_sr_switch_unbound_{e}" for e in EXPORTERS]
            + list(LIGHT) + list(PACKAGE))


def _assert_ran_and_matched(row):
    assert row["import"] == "ok", row["result"]
    assert row["result"] == "ok", row["result"]
    assert 2 <= int(row["ranks"]) <= 4
    if int(row["ops"]) > 1:  # tensors crossed ranks: the check covers the distributed run
        assert int(row["transfers"]) > 0
    assert float(row["max_rel_error"]) <= REL_TOL or float(row["max_abs_error"]) <= ATOL


@pytest.fixture(scope="module")
def fast_corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus_fast")
    entries = write_corpus(out, exporters=("legacy",), only=("gpt2", "vad_sr_switch", "mul_1"),
                           sources=("torch", "package"))
    return out, {e.key: e for e in entries}


@pytest.mark.dist
@pytest.mark.parametrize("key", ["gpt2_legacy", "vad_sr_switch_legacy", "vad_sr_switch_unbound_legacy", "mul_1"])
def test_fast_corpus_models_run_and_match_onnxruntime(fast_corpus, key):
    out, entries = fast_corpus
    row = evaluate(entries[key], out, ranks=2)
    _assert_ran_and_matched(row)
    if key == "vad_sr_switch_legacy":
        assert "If" not in row["op_types"].split()  # sr bound: the If (and its nested If) were inlined
    if key == "vad_sr_switch_unbound_legacy":
        assert "If" in row["op_types"].split()  # not bound: one op, run at run time


def test_light_weights_are_random_and_outputs_not_uniform(light_models_dir, tmp_path):
    shipped = onnx.load(str(light_models_dir / "light_squeezenet.onnx"))
    model = drop_final_softmax(randomize_weights(shipped, seed=1))
    assert not [n for n in model.graph.node if n.op_type in ("ConstantOfShape", "Softmax")]
    assert {n.name for n in model.graph.node} <= {n.name for n in shipped.graph.node}  # the user's names kept
    inits = {t.name for t in model.graph.initializer}
    assert [i.name for i in model.graph.input if i.name not in inits] == ["data_0"]  # dead shape inputs gone
    path = tmp_path / "sq.onnx"
    onnx.save(model, str(path))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    (logits,) = sess.run(None, {"data_0": x})
    assert np.std(logits) > 1e-2 * np.max(np.abs(logits))  # not uniform, not one-hot


@pytest.fixture(scope="module")
def full_corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus_full")
    entries = write_corpus(out)
    return out, {e.key: e for e in entries}


@pytest.mark.slow
@pytest.mark.dist
@pytest.mark.parametrize("key", ALL_KEYS)
def test_corpus_model_imports_plans_runs_and_matches_onnxruntime(full_corpus, key):
    out, entries = full_corpus
    entry = entries[key]
    assert entry.error == "", f"{key}: export failed: {entry.error}"
    _assert_ran_and_matched(evaluate(entry, out))


@pytest.mark.slow
def test_the_corpus_has_at_least_twelve_models_across_the_kinds(full_corpus):
    _out, entries = full_corpus
    assert len(set(ALL_KEYS)) >= 12 and set(ALL_KEYS) <= set(entries)
    kinds = " ".join(e.kind for e in entries.values())
    for word in ("causal", "token types", "MoE", "shared expert", "Resize", "LSTM", "GRU", "If", "BatchNorm"):
        assert word in kinds


@pytest.mark.slow
def test_a_model_with_a_sequence_output_is_refused_with_its_reason(full_corpus):
    # onnxruntime's logreg_iris.onnx ends in ai.onnx.ml ZipMap (a sequence of maps): not a tensor graph
    out, entries = full_corpus
    row = evaluate(entries["logreg_iris"], out, run=False)
    assert row["import"] == "failed" and "are not tensors" in row["result"]


def test_corpus_command_writes_the_table(tmp_path):
    # the command on the cheapest source, planning only (the runs are the tests above)
    assert main(["--out", str(tmp_path), "--source", "package", "--skip-run"]) == 0
    lines = (tmp_path / "corpus.csv").read_text().splitlines()
    assert lines[0].split(",") == list(COLUMNS)
    assert len(lines) == 1 + 3 and os.path.isfile(Path(tmp_path) / "mul_1.heft.plan.json")


@pytest.mark.dist
def test_the_onnx_wheels_model_files_run_or_are_refused_with_the_reason(tmp_path):
    # the `onnx-data` source: 140 small files beside the onnx wheel's node tests (most of them opset 6), each with
    # its shipped inputs.  Every one either runs and matches onnxruntime and its shipped outputs, or is refused by a
    # one-line user error naming the file and the op or shape; the refused ones are exactly those with sequence or
    # string ops, the training domain's Gradient, or a dynamic shape (the opset-6 files hold the legacy broadcasts
    # that `planner.ir.onnx_legacy` upgrades, so they guard that upgrade too)
    entries = write_corpus(tmp_path, sources=("onnx-data",))
    assert len(entries) >= 100 and all(e.path is not None and e.path.exists() for e in entries)
    rows = {e.name: evaluate(e, tmp_path) for e in entries}
    refused = {name: row["result"] for name, row in rows.items() if row["result"] != "ok"}
    for name, result in refused.items():
        # an op the runtime cannot run is named by plan-solve's warning first, then refused by the run
        warned = result.startswith("plan-solve warning: ")
        reason = result[result.find("; run failed: ") + 2:] if warned and "; run failed: " in result else result
        assert reason.startswith(("import failed: InputError: ", "import failed: DynamicShapeError: ",
                                  "run failed: InputError: ")), (name, result)
        assert name.startswith(("test_sequence_model", "test_strnorm_model", "test_gradient_of")), (name, result)
    for name, row in rows.items():
        if row["result"] == "ok":
            assert float(row["max_rel_error"]) <= REL_TOL or float(row["max_abs_error"]) <= ATOL, name
            assert row["max_abs_vs_shipped"] != "", name  # checked against the shipped outputs too
    assert len(rows) - len(refused) >= 120


@pytest.mark.slow
def test_the_edge_models_run_or_are_refused_before_the_run_with_the_reason(tmp_path):
    # `--source edges`: global pooling as an AveragePool with ceil_mode and a dynamically quantized BERT and ResNet
    # run and match onnxruntime; the statically quantized ResNet's com.microsoft QLinearAdd has no shape rule and is
    # refused at import with the fix; DynamicQuantizeLSTM and NonZero, which the runtime cannot run, are named by
    # plan-solve's warning before plan-run refuses them
    entries = {e.name: e for e in write_corpus(tmp_path, sources=("edges",))}
    assert sorted(entries) == ["hf_bert_quantized", "hf_efficientnet_pool", "hf_resnet_qoperator",
                               "hf_resnet_quantized", "onnx_nonzero", "torch_lstm_quantized"]
    rows = {name: evaluate(e, tmp_path) for name, e in entries.items()}
    for name, op in (("hf_efficientnet_pool", "AveragePool"), ("hf_bert_quantized", "MatMulInteger"),
                     ("hf_resnet_quantized", "ConvInteger")):
        assert rows[name]["result"] == "ok", rows[name]
        assert op in rows[name]["op_types"].split(), rows[name]
    refused = rows["hf_resnet_qoperator"]["result"]
    assert refused.startswith("import failed: InputError:") and "QLinearAdd) has no static shape" in refused, refused
    for name, op in (("torch_lstm_quantized", "com.microsoft"), ("onnx_nonzero", "(NonZero)")):
        result = rows[name]["result"]
        assert rows[name]["import"] == "ok" and result.startswith("plan-solve warning: the torch runtime cannot run"), \
            result
        assert op in result.split(";")[0], result
