"""Run ops of an `OpGraph` (after passes) with the torch op registry: the single-process executor and the
building block every rank uses.

`prepared_graph(model_path)` is the graph plan-solve plans (import, constant folding, dead-code elimination).
`load_program(graph, model_path, ops)` reads the named ops' attributes and the constants they read (weights, and
the values of folded ops, computed in `planner.ir.onnx_values`) into torch tensors.  `run_ops` runs ops in a given
order on an environment of named tensors.  `execute(...)` does it all in one process and returns the outputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from planner.errors import InputError
from planner.execute.ops import OPS, OpContext, torch_dtype, unsupported_ops
from planner.ir.graph import OpGraph
from planner.ir.load import load_model
from planner.ir.onnx_values import NodeSpec, model_program
from planner.prepare import run_passes

__all__ = ["Program", "prepared_graph", "load_program", "run_ops", "execute", "default_feeds", "to_tensor",
           "check_supported"]


def prepared_graph(model_path: str | Path, input_shapes: Mapping[str, Sequence[int]] | None = None,
                   input_values: Mapping[str, Sequence[float]] | None = None) -> OpGraph:
    """The graph plan-solve plans: the model after constant folding and dead-code elimination."""
    return run_passes(load_model(model_path, input_shapes, input_values))


def check_supported(graph: OpGraph, where: str = "") -> None:
    """InputError listing the ops the runtime lacks (before anything runs)."""
    bad = unsupported_ops(graph)
    if bad:
        more = f" and {len(bad) - 8} more" if len(bad) > 8 else ""
        raise InputError(f"the runtime cannot run {len(bad)} op(s): {', '.join(bad[:8])}{more}", path=where or None,
                         fix="replace them by supported ONNX ops and re-export")


def to_tensor(value: np.ndarray) -> torch.Tensor:
    arr = np.asarray(value)
    if not arr.flags.c_contiguous or not arr.flags.writeable:
        arr = np.array(arr, copy=True, order="C")
    return torch.from_numpy(arr)


@dataclass
class Program:
    """Ops ready to run: nodes by op name, constants as tensors, the default-domain opset, the graph's tensors."""

    nodes: dict[str, NodeSpec]
    constants: dict[str, torch.Tensor]
    opset: int
    graph: OpGraph


def load_program(graph: OpGraph, model_path: str | Path, ops: Iterable[str] | None = None) -> Program:
    """The named ops (default: all) of `graph` with their attributes and the constants they read."""
    mp = model_program(graph, model_path, ops)
    consts = {k: to_tensor(v) for k, v in mp.constants.items()}
    return Program({n.name: n for n in mp.nodes}, consts, int(mp.opsets.get("", 1)), graph)


def run_node(node: NodeSpec, env: dict[str, torch.Tensor], program: Program) -> None:
    """Run one op on `env` (inputs read from it, outputs written to it)."""
    ins = [env[t] if t else None for t in node.inputs]
    while ins and ins[-1] is None:
        ins.pop()
    tensors = program.graph.tensors
    outs = node.outputs
    infos = [tensors.get(o) for o in outs]
    ctx = OpContext(opset=program.opset, num_outputs=len(outs),
                    output_shapes=tuple(i.shape if i else None for i in infos),
                    output_dtypes=tuple(i.dtype if i else None for i in infos), name=node.name, scope=env)
    results = OPS[node.op_type](ins, dict(node.attrs), ctx)
    for name, value in zip(outs, results, strict=False):
        if name:
            env[name] = value


def run_ops(order: Sequence[str], env: dict[str, torch.Tensor], program: Program) -> None:
    for name in order:
        run_node(program.nodes[name], env, program)


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """numpy's dtype for a torch dtype; the probe tensor is made on the CPU, since a calibrating rank's default
    device is its GPU (`--device cuda`) and a GPU tensor has no numpy view."""
    return torch.empty(0, dtype=dtype, device="cpu").numpy().dtype


def default_feeds(graph: OpGraph, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic inputs: floats are arange(n) / n (what the onnx backend tests feed the light models, so their
    shipped reference outputs apply); integers are seeded random values below the size of the axis they index
    (for Gather), else 0/1; booleans alternate."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name in graph.graph_inputs:
        info = graph.tensors[name]
        n = int(np.prod(info.shape, dtype=np.int64))
        dtype = torch_dtype(info.dtype)
        if dtype.is_floating_point:
            arr = (np.arange(n).reshape(info.shape) / max(n, 1)).astype(_numpy_dtype(dtype))
        elif dtype == torch.bool:
            arr = (np.arange(n) % 2 == 1).reshape(info.shape)
        else:
            bound = 2
            for op in graph.ops:
                if op.op_type == "Gather" and len(op.inputs) > 1 and op.inputs[1] == name:
                    data = graph.tensors.get(op.inputs[0])
                    if data is not None:
                        bound = data.shape[0]
            arr = rng.integers(0, bound, size=info.shape).astype(_numpy_dtype(dtype))
        feeds[name] = arr
    return feeds


def execute(graph: OpGraph, model_path: str | Path, feeds: Mapping[str, np.ndarray],
            order: Sequence[str] | None = None, keep: Iterable[str] = ()) -> dict[str, np.ndarray]:
    """Run the whole graph in one process (in `order`, default the graph's topological order).

    Returns the graph outputs and the tensors named in `keep`, as numpy arrays."""
    check_supported(graph, str(model_path))
    program = load_program(graph, model_path)
    env: dict[str, torch.Tensor] = {k: to_tensor(v) for k, v in feeds.items()}
    env.update(program.constants)
    with torch.inference_mode():
        run_ops(order if order is not None else [op.name for op in graph.ops], env, program)
    wanted = list(dict.fromkeys([*graph.graph_outputs, *keep]))
    return {k: env[k].contiguous().cpu().numpy() for k in wanted}
