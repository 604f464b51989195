"""ONNX nodes and tensors as plain Python and numpy values, for runtimes that must not import onnx.

`planner/execute/` (torch) runs an `OpGraph` after passes; it needs each op's attributes and the values of the
constants the ops read (weights, and the outputs of folded ops).  This module is the one place that turns ONNX
protobufs into those plain values, so the layering rule (onnx only in `planner/ir/`) holds:

* `model_program(graph, model_path, ops=None)`: the ops (all, or the named subset) as `NodeSpec`s with plain
  attributes (int, float, str, lists of them, numpy arrays for tensor attributes, None for subgraphs), the values
  of every constant they read (folded ones computed by `export_onnx`), and the model's opsets.
* `run_onnxruntime(model_path, feeds)`: a model's outputs on onnxruntime; `reference_outputs(...)`: the reference
  that `plan-run --check` compares against (the file, or below opset 7 the model as the importer upgraded it).

Subgraph attributes (If's branches, Loop's and Scan's body) become `GraphSpec`s: their nodes as `NodeSpec`s (nested
subgraphs in turn), their initializers as numpy arrays, and their input and output names, so a runtime can run a
body with the same op table as the main graph.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import AttributeProto, helper, numpy_helper

from planner.ir.graph import OpGraph
from planner.ir.onnx_constants import UPGRADE_OPSET, bind_input_values
from planner.ir.onnx_export import export_onnx
from planner.ir.onnx_import import normalized_model
from planner.ir.onnx_legacy import LEGACY_OPSET, default_opset

__all__ = ["GraphSpec", "NodeSpec", "ModelProgram", "model_program", "run_onnxruntime", "reference_outputs",
           "plain_attributes", "graph_spec", "bound_input_feeds"]


@dataclass(frozen=True)
class NodeSpec:
    """One op as a runtime sees it: ONNX type and domain, argument lists ('' = omitted), plain attributes."""

    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GraphSpec:
    """A subgraph (If branch, Loop or Scan body): nodes in order, its constants, input and output names.  Names it
    reads but neither defines nor receives as inputs come from the enclosing scope."""

    nodes: tuple[NodeSpec, ...]
    constants: Mapping[str, np.ndarray]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def graph_spec(graph: Any) -> GraphSpec:
    """A GraphProto as a `GraphSpec` (recursively)."""
    nodes = tuple(NodeSpec(n.name, n.op_type, n.domain if n.domain != "ai.onnx" else "", tuple(n.input),
                           tuple(n.output), plain_attributes(n)) for n in graph.node)
    consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    return GraphSpec(nodes, consts, tuple(i.name for i in graph.input), tuple(o.name for o in graph.output))


@dataclass(frozen=True)
class ModelProgram:
    """Ops in graph order, the constants they read, and opset versions by domain ('' = ai.onnx)."""

    nodes: tuple[NodeSpec, ...]
    constants: Mapping[str, np.ndarray]
    opsets: Mapping[str, int]


def plain_attributes(node: Any) -> dict[str, Any]:
    """A NodeProto's attributes as plain values (tensors as numpy arrays, strings decoded, subgraphs as
    `GraphSpec`s)."""
    out: dict[str, Any] = {}
    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            out[a.name] = graph_spec(a.g)
        elif a.type == AttributeProto.GRAPHS:
            out[a.name] = [graph_spec(g) for g in a.graphs]
        elif a.type == AttributeProto.TENSOR:
            out[a.name] = numpy_helper.to_array(a.t)
        elif a.type == AttributeProto.TENSORS:
            out[a.name] = [numpy_helper.to_array(t) for t in a.tensors]
        else:
            v = helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode("utf-8", "replace")
            elif isinstance(v, list):
                v = [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
            out[a.name] = v
    return out


def model_program(graph: OpGraph, model_path: str | Path, ops: Iterable[str] | None = None) -> ModelProgram:
    """The ops of `graph` (or only those named in `ops`) with attributes and constant values, from `model_path`."""
    sub = graph if ops is None else graph.subgraph(ops)
    model = export_onnx(sub, model_path)
    nodes = tuple(NodeSpec(n.name, n.op_type, n.domain if n.domain != "ai.onnx" else "", tuple(n.input),
                           tuple(n.output), plain_attributes(n)) for n in model.graph.node)
    constants = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    opsets = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in model.opset_import}
    return ModelProgram(nodes, constants, opsets)


def run_onnxruntime(model_path: str | Path | bytes, feeds: Mapping[str, np.ndarray],
                    outputs: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """Run a model (a file, or a serialized model) on onnxruntime's CPU provider (sequential, all graph
    optimizations)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    source = model_path if isinstance(model_path, bytes) else str(model_path)
    session = ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
    names = list(outputs) if outputs is not None else [o.name for o in session.get_outputs()]
    values = session.run(names, dict(feeds))
    return dict(zip(names, (np.asarray(v) for v in values), strict=True))


REFERENCE_FILE = "the model file"
REFERENCE_UPGRADED = (f"the model upgraded to opset {UPGRADE_OPSET} as opplan planned it (onnxruntime runs no op "
                      f"version below opset {LEGACY_OPSET}; planner.ir.onnx_legacy)")
REFERENCE_REBATCHED = ("the model with the batch opplan planned (the file fixes another; its batch-carrying "
                       "Reshapes follow: onnx_checks.rebatch_reshapes)")


def _changes_fixed_dims(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]]) -> bool:
    """True when a given input shape differs from a dimension the file fixes (a static batch changed)."""
    for vi in model.graph.input:
        given = input_shapes.get(vi.name)
        if given is None or not vi.type.HasField("tensor_type"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if any(d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != int(g) for d, g in zip(dims, given)):
            return True
    return False


def reference_outputs(model_path: str | Path, feeds: Mapping[str, np.ndarray], outputs: Iterable[str] | None,
                      input_shapes: Mapping[str, Sequence[int]], input_values: Mapping[str, Sequence[float]]
                      ) -> tuple[dict[str, np.ndarray], str]:
    """onnxruntime's outputs for `--check`, and which model gave them (`REFERENCE_FILE`, `REFERENCE_UPGRADED` or
    `REFERENCE_REBATCHED`): the original file, except below opset 7, whose old op versions onnxruntime refuses, and
    where the plan changed a batch the file fixes (the file would refuse the inputs); there the model exactly as
    the importer upgraded it (`onnx_import.normalized_model`, the one the ranks ran), with the inputs it bound as
    initializers left out of `feeds`.  That still checks the run against an independent runtime, not the
    upgrade itself (`planner.ir.onnx_legacy` says what the upgrade changes)."""
    model = onnx.load(str(model_path), load_external_data=False)
    rebatched = _changes_fixed_dims(model, input_shapes)
    if (default_opset(model) or LEGACY_OPSET) >= LEGACY_OPSET and not rebatched:
        return run_onnxruntime(model_path, feeds, outputs), REFERENCE_FILE
    upgraded = normalized_model(model_path, input_shapes, input_values)
    bound = {t.name for t in upgraded.graph.initializer}
    return (run_onnxruntime(upgraded.SerializeToString(), {k: v for k, v in feeds.items() if k not in bound}, outputs),
            REFERENCE_REBATCHED if rebatched else REFERENCE_UPGRADED)


def bound_input_feeds(model_path: str | Path, input_values: Mapping[str, Iterable[float]]) -> dict[str, np.ndarray]:
    """The arrays `--input-value` bound at import (the input's own dtype and shape), to feed the original model
    to onnxruntime for `--check`."""
    if not input_values:
        return {}
    model = onnx.load(str(model_path), load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    shell = helper.make_model(helper.make_graph([], "inputs", [vi for vi in model.graph.input if vi.name not in inits],
                                                []), ir_version=max(model.ir_version, 4))
    bind_input_values(shell, {k: tuple(v) for k, v in input_values.items()}, str(model_path))
    return {t.name: numpy_helper.to_array(t) for t in shell.graph.initializer}
