"""Evaluate single ONNX nodes on constant inputs, with a fallback, so that constant folding never crashes.

`evaluate_node(node, inputs, opsets, ir_version)` tries onnx's reference evaluator first (pure numpy, exact ONNX
semantics for most ops), then onnxruntime's CPU provider on a one-node model (its kernels are the ones
`plan-run --check` compares against).  The reference evaluator is not enough on its own: some of its kernels fail
on valid models (GatherElements with an axis longer than 64 raises a reshape error, because it is built on
`numpy.choose`).  When both fail, `EvaluationError` names the node and both reasons; callers leave the node
unfolded (import) or report it (export).

Which evaluator answered is recorded in `EVALUATED_BY` (node name -> 'reference' or 'onnxruntime'), for reports
and tests.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import NodeProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

__all__ = ["EvaluationError", "evaluate_node", "EVALUATED_BY"]

EVALUATED_BY: dict[str, str] = {}


class EvaluationError(Exception):
    """Neither evaluator could compute the node."""


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:197] + "..."


def _node_model(node: NodeProto, inputs: Sequence[np.ndarray | None], opsets: Mapping[str, int],
                ir_version: int, as_inputs: bool) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A one-node model; its inputs either as initializers (`as_inputs` False) or as graph inputs with feeds."""
    names = [f"in{i}" if v is not None and name else "" for i, (name, v) in enumerate(zip(node.input, inputs))]
    one = NodeProto()
    one.CopyFrom(node)
    del one.input[:]
    one.input.extend(names)
    del one.output[:]
    outs = [f"out{i}" if o else "" for i, o in enumerate(node.output)]
    one.output.extend(outs)
    feeds = {n: np.asarray(v) for n, v in zip(names, inputs) if n}
    if as_inputs:
        vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
               for n, v in feeds.items()]
        inits = []
    else:
        vis, inits = [], [numpy_helper.from_array(v, n) for n, v in feeds.items()]
    graph = helper.make_graph([one], "node", vis, [helper.make_value_info(o, onnx.TypeProto()) for o in outs if o],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()],
                              ir_version=ir_version)
    return model, (feeds if as_inputs else {})


def _expected_count(node: NodeProto) -> int:
    return sum(1 for o in node.output if o)


def evaluate_node(node: NodeProto, inputs: Sequence[np.ndarray | None], opsets: Mapping[str, int],
                  ir_version: int) -> list[np.ndarray]:
    """The node's (non-empty) outputs on the given input values (None for an omitted optional input).

    Raises EvaluationError when neither onnx's reference evaluator nor onnxruntime computes it.  Warnings the
    evaluators raise (numpy's RuntimeWarnings on a division by zero or a log of 0 in a folded constant, onnx's
    deprecations) are silenced: they concern third-party internals, and the folded values are what ONNX says."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _evaluate(node, inputs, opsets, ir_version)


def _evaluate(node: NodeProto, inputs: Sequence[np.ndarray | None], opsets: Mapping[str, int],
              ir_version: int) -> list[np.ndarray]:
    reasons = []
    try:
        model, feeds = _node_model(node, inputs, opsets, ir_version, as_inputs=False)
        values = ReferenceEvaluator(model).run(None, feeds)
        if len(values) == _expected_count(node):
            EVALUATED_BY[node.name] = "reference"
            return [np.asarray(v) for v in values]
        reasons.append("reference evaluator: wrong number of outputs")
    except Exception as exc:  # noqa: BLE001 - any failure of the reference kernels falls back
        reasons.append(f"reference evaluator: {_one_line(exc)}")
    try:
        model, feeds = _node_model(node, inputs, opsets, ir_version, as_inputs=True)
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        opts.intra_op_num_threads = 1
        # no graph optimisation: evaluate this node as written
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        values = sess.run(None, feeds)
        EVALUATED_BY[node.name] = "onnxruntime"
        return [np.asarray(v) for v in values]
    except Exception as exc:  # noqa: BLE001
        reasons.append(f"onnxruntime: {_one_line(exc)}")
    raise EvaluationError(f"node {node.name!r} ({node.op_type}) could not be evaluated: {'; '.join(reasons)}")
