"""One entry point for every model format: ONNX (`.onnx`), task-graph JSON (`.json`), STG (`.stg`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from planner.errors import InputError
from planner.ir.graph import OpGraph
from planner.ir.onnx_import import load_onnx
from planner.ir.taskgraph import load_stg, load_taskgraph


def load_model(path: str | Path, input_shapes: Mapping[str, Sequence[int]] | None = None) -> OpGraph:
    """Load a model file by its extension; `input_shapes` fixes dynamic ONNX input dimensions."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        return load_onnx(path, input_shapes)
    if input_shapes:
        raise InputError("--input-shape applies to ONNX models only", path=str(path))
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
