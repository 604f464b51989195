"""One entry point for every model format: ONNX (`.onnx`), task-graph JSON (`.json`), STG (`.stg`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from planner.errors import InputError
from planner.ir.graph import OpGraph
from planner.ir.onnx_import import load_onnx
from planner.ir.taskgraph import load_stg, load_taskgraph


def load_model(path: str | Path, input_shapes: Mapping[str, Sequence[int]] | None = None,
               input_values: Mapping[str, Sequence[float]] | None = None) -> OpGraph:
    """Load a model file by its extension; `input_shapes` fixes dynamic ONNX input dimensions, `input_values`
    binds ONNX inputs to values (constants from then on)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        return load_onnx(path, input_shapes, input_values)
    if input_shapes or input_values:
        raise InputError("--input-shape and --input-value apply to ONNX models only", path=str(path))
    if suffix == ".json":
        return load_taskgraph(path)
    if suffix == ".stg":
        return load_stg(path)
    raise InputError(f"unknown model format {suffix or '(no extension)'!r}", path=str(path),
                     fix="use an .onnx model, a task-graph .json or an .stg file")


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """'NAME=1x3x224x224' -> ('NAME', (1, 3, 224, 224)); a bad spec raises InputError."""
    name, sep, dims = text.rpartition("=")
    try:
        shape = tuple(int(d) for d in dims.lower().split("x"))
    except ValueError:
        shape = ()
    if not sep or not name or not shape or any(d <= 0 for d in shape):
        raise InputError(f"--input-shape {text!r}: expected NAME=DIMxDIMx..., e.g. input=1x3x224x224")
    return name, shape


def parse_input_value(text: str) -> tuple[str, tuple[float, ...]]:
    """'NAME=16000' -> ('NAME', (16000.0,)); 'NAME=1,0,2' a small 1-D value; true/false are 1/0.  InputError for a
    bad spec.  The input's own dtype and shape are applied at import (`onnx_constants.bind_input_values`)."""
    name, sep, raw = text.partition("=")
    values: list[float] = []
    try:
        for item in raw.split(","):
            item = item.strip().lower()
            values.append(1.0 if item == "true" else 0.0 if item == "false" else float(item))
    except ValueError:
        values = []
    if not sep or not name or not values:
        raise InputError(f"--input-value {text!r}: expected NAME=VALUE or NAME=V1,V2,..., e.g. sample_rate=16000")
    return name, tuple(values)
