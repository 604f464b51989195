"""The corpus's edge models (`experiments.corpus --source edges`): one model for each class that import, cost model
or runtime found hard, each built from models nobody here wrote.

* `hf_efficientnet_pool`: transformers' `EfficientNetModel` (tiny config, seeded random weights), its pooled output
  exported with the legacy exporter: the pooler is ``nn.AvgPool2d(hidden_dim, ceil_mode=True)``, an AveragePool
  whose 320 x 320 window is far larger than its 1 x 1 input (global pooling as exporters write it).
* `hf_bert_quantized`: transformers' `BertModel` (the corpus's `hf_bert`) quantized by onnxruntime's own
  ``quantize_dynamic`` (int8 weights): DynamicQuantizeLinear, MatMulInteger and their casts.
* `hf_resnet_quantized`: transformers' `ResNetModel` (the corpus's `hf_resnet`) quantized the same way, its
  convolutions only: DynamicQuantizeLinear and ConvInteger.
* `hf_resnet_qoperator`: the same ResNet quantized statically by onnxruntime's ``quantize_static`` (QOperator
  format, calibrated on seeded inputs): QLinearConv and the com.microsoft QLinearAdd, which onnx's shape inference
  does not know.
* `torch_lstm_quantized`: torch's ``nn.LSTM`` exported (ONNX LSTM), then ``quantize_dynamic`` on it: a
  com.microsoft DynamicQuantizeLSTM, which onnx's shape inference does not know.
* `onnx_nonzero`: the onnx wheel's own ``test_nonzero_example`` node test (a data-dependent output shape), built
  by its test-case generator (the wheel ships no node-test files here), fed and checked with the test's tensors.

Each builder writes its file and returns an `EdgeModel`; `experiments.corpus` (``--source edges``) turns it into a
corpus entry like the other sources' and evaluates it the same way: it imports, plans and runs matching
onnxruntime, or its row says where and why it was refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["EDGE_MODELS", "EdgeModel"]

SEED = 11


@dataclass
class EdgeModel:
    """One edge model as written: its name, what it is, the exporter (empty: none), the file, its feeds and, where
    its source ships them, the expected outputs."""

    name: str
    kind: str
    exporter: str
    path: Path
    feeds: dict[str, np.ndarray]
    expected: dict[str, np.ndarray] | None = None


def _efficientnet_pool(out: Path) -> EdgeModel:
    from experiments.corpus_models import _init_random
    from experiments.hf_models import HFArchitecture, _built, _normal, export_hf_architecture

    # hidden_dim is the top convolution's width (1280 x width_coefficient, rounded to 8), and the pooler's window
    built = _built("EfficientNetConfig", "EfficientNetModel", image_size=32, width_coefficient=0.25,
                   depth_coefficient=0.25, hidden_dim=320)
    # transformers' own init leaves the last block's output at zero (so the pooled output too, and a check of
    # zeros tests nothing): the corpus's seeded random weights and BatchNorm statistics instead
    arch = HFArchitecture("hf_efficientnet_pool", "CNN, global pooling as AveragePool with ceil_mode "
                          "(transformers EfficientNetModel)",
                          lambda: _init_random(built(), SEED),  # type: ignore[arg-type]  # a torch Module
                          _normal("pixel_values", 1, 3, 32, 32), output="pooler_output", exporter="legacy")
    path, feeds = export_hf_architecture(arch, out / f"{arch.name}_{arch.exporter}.onnx", seed=SEED)
    return EdgeModel(arch.name, arch.kind, arch.exporter, path, feeds)


def _quantized(source: Path, target: Path, op_types: list[str]) -> Path:
    """`source` dynamically quantized by onnxruntime (int8 weights, `op_types` only) into `target`."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, op_types_to_quantize=op_types)
    return target


def _bert_quantized(out: Path) -> EdgeModel:
    from experiments.hf_models import HF_ARCHITECTURES, export_hf_architecture

    bert = next(a for a in HF_ARCHITECTURES if a.name == "hf_bert")
    plain, feeds = export_hf_architecture(bert, out / "hf_bert_float.onnx", seed=SEED)
    return EdgeModel("hf_bert_quantized", "encoder quantized by onnxruntime quantize_dynamic (transformers BertModel; "
                     "MatMulInteger)", bert.exporter,
                     _quantized(plain, out / f"hf_bert_quantized_{bert.exporter}.onnx", ["MatMul"]), feeds)


def _resnet_quantized(out: Path) -> EdgeModel:
    from experiments.hf_models import HF_ARCHITECTURES, export_hf_architecture

    resnet = next(a for a in HF_ARCHITECTURES if a.name == "hf_resnet")
    plain, feeds = export_hf_architecture(resnet, out / "hf_resnet_float.onnx", seed=SEED)
    return EdgeModel("hf_resnet_quantized", "CNN quantized by onnxruntime quantize_dynamic (transformers ResNetModel; "
                     "ConvInteger)", resnet.exporter,
                     _quantized(plain, out / f"hf_resnet_quantized_{resnet.exporter}.onnx", ["Conv"]), feeds)


def _resnet_qoperator(out: Path) -> EdgeModel:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    from experiments.hf_models import HF_ARCHITECTURES, export_hf_architecture

    resnet = next(a for a in HF_ARCHITECTURES if a.name == "hf_resnet")
    plain, feeds = export_hf_architecture(resnet, out / "hf_resnet_float.onnx", seed=SEED)
    rng = np.random.default_rng(SEED)
    batches = [feeds] + [{k: rng.standard_normal(v.shape).astype(np.float32) for k, v in feeds.items()}
                         for _ in range(3)]

    class Calibration(CalibrationDataReader):
        """The example input and three seeded ones, for the activations' ranges."""

        def get_next(self) -> dict | None:
            return batches.pop() if batches else None

    path = out / f"hf_resnet_qoperator_{resnet.exporter}.onnx"
    quantize_static(str(plain), str(path), Calibration(), quant_format=QuantFormat.QOperator)
    return EdgeModel("hf_resnet_qoperator", "CNN quantized by onnxruntime quantize_static, QOperator format "
                     "(transformers ResNetModel; QLinearConv, com.microsoft QLinearAdd)", resnet.exporter, path, feeds)


def _lstm_quantized(out: Path) -> EdgeModel:
    import torch

    torch.manual_seed(SEED)
    lstm = torch.nn.LSTM(16, 24, num_layers=1, batch_first=False).eval()
    x = torch.randn(7, 2, 16)
    plain = out / "torch_lstm_float.onnx"
    torch.onnx.export(lstm, (x,), str(plain), input_names=["x"], output_names=["y", "h", "c"], dynamo=False,
                      opset_version=17)
    return EdgeModel("torch_lstm_quantized", "torch nn.LSTM quantized by onnxruntime quantize_dynamic (com.microsoft "
                     "DynamicQuantizeLSTM, no onnx shape inference)", "legacy",
                     _quantized(plain, out / "torch_lstm_quantized_legacy.onnx", ["LSTM"]), {"x": x.numpy()})


def _nonzero(out: Path) -> EdgeModel:
    import onnx
    from onnx.backend.test.case.node import collect_testcases

    case = next(c for c in collect_testcases("NonZero") if c.name == "test_nonzero_example")
    model, data = case.model, case.data_sets
    assert model is not None and data, "onnx's NonZero test case has no model or data"
    inputs, outputs = data[0]
    path = out / "onnx_nonzero.onnx"
    onnx.save(model, str(path))
    return EdgeModel("onnx_nonzero", "data-dependent output shape (onnx's NonZero node test)", "", path,
                     {i.name: np.asarray(v) for i, v in zip(model.graph.input, inputs, strict=True)},
                     {o.name: np.asarray(v) for o, v in zip(model.graph.output, outputs, strict=True)})


EDGE_MODELS: dict[str, Callable[[Path], EdgeModel]] = {
    "hf_efficientnet_pool": _efficientnet_pool,
    "hf_bert_quantized": _bert_quantized,
    "hf_resnet_quantized": _resnet_quantized,
    "hf_resnet_qoperator": _resnet_qoperator,
    "torch_lstm_quantized": _lstm_quantized,
    "onnx_nonzero": _nonzero,
}

