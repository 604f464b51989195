"""`plan-codegen`: a folder of plain PyTorch that runs a plan with torch alone (no opplan, no ONNX file).

What `write_code(plan, out_dir)` writes:

* ``rank_<r>.py`` per rank (one rank per device the plan places work on, unless ``nproc`` says otherwise; a
  planned device left empty gets no rank): one function ``run(inputs, W, timeout)``, straight-line code in plan
  order.  Each op is one line with its direct torch call (``torch.matmul``, ``F.conv2d``, ``torch.cat`` ...;
  `codegen_ops`), every attribute written out, tensors as local variables named after the ONNX tensors, weights
  as ``W["name"]``.  An explicit ``recv(src, tag, shape, dtype, timeout)`` comes before the op that first reads
  a tensor made on another rank, an explicit ``send(tensor, dst, tag)`` right after the op that makes one another
  rank reads.
* ``rank_<r>.weights.pt``: that rank's weights and folded constants (``torch.save`` of name -> tensor; safetensors
  is not a dependency of this project).
* ``p2p.py`` (send / receive) and, only when an op has no direct torch translation, ``onnx_ops.py``
  (`codegen_support`).
* ``inputs.pt``: the deterministic inputs plan-run uses; ``launch.py``: ``torchrun --standalone
  --nproc-per-node N launch.py`` runs every rank on them and rank 0 saves the outputs to ``outputs.pt``;
  ``launch.py --repeat N`` also times N steps (rank 0 prints the median and writes ``timing.json``).

Every path in the folder is relative to the folder (found through ``__file__``), so it can be moved or copied to
another machine that has torch.
"""

from __future__ import annotations

import builtins
import keyword
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from planner.execute.codegen_ops import EmitContext, dtype_source, emit
from planner.execute.codegen_support import onnx_ops_source, p2p_source
from planner.execute.partition import Partition, partition_plan, used_devices_only
from planner.execute.program import default_feeds, to_tensor
from planner.execute.runner import load_checked_plan
from planner.ir.graph import OpGraph
from planner.ir.onnx_values import model_program

__all__ = ["write_code"]

# Names the generated function uses itself; a tensor never takes one of them.
_RESERVED = frozenset({"torch", "F", "W", "inputs", "timeout", "sent", "send", "recv", "onnx_op", "work", "run",
                       "t"}) | frozenset(dir(builtins))


class _Names:
    """ONNX tensor names -> distinct Python identifiers (``/layer0/attn/MatMul_output_0`` ->
    ``layer0_attn_MatMul_output_0``)."""

    def __init__(self) -> None:
        self._of: dict[str, str] = {}
        self._used: set[str] = set()

    def __call__(self, tensor: str) -> str:
        if tensor not in self._of:
            base = re.sub(r"\W+", "_", tensor).strip("_") or "t"
            if base[0].isdigit() or keyword.iskeyword(base) or base in _RESERVED:
                base = f"t_{base}"
            name, n = base, 1
            while name in self._used:
                n += 1
                name = f"{base}_{n}"
            self._used.add(name)
            self._of[tensor] = name
        return self._of[tensor]


def _rank_source(rank: int, plan_name: str, part: Partition, graph: OpGraph, program) -> tuple[str, bool]:
    """The text of rank_<rank>.py and whether it calls onnx_ops."""
    constants = program.constants if program else {}
    nodes = {n.name: n for n in program.nodes} if program else {}
    opset = int(program.opsets.get("", 1)) if program else 1
    names = _Names()

    def expr(t: str) -> str:
        return f"W[{t!r}]" if t in constants else names(t)

    cx = EmitContext(expr=expr, const=constants.get, shape=lambda t: tuple(graph.tensors[t].shape),
                     dtype=lambda t: graph.tensors[t].dtype, opset=opset)
    sends = part.sends_after(rank)
    incoming = part.incoming(rank)
    where = {t.tensor: t for lst in incoming.values() for t in lst}
    received_upto = {src: 0 for src in incoming}
    ops = part.rank_ops[rank]
    body: list[str] = []
    have: set[str] = set()
    uses_helper = False

    def receive(tensor: str) -> None:
        # Receive, in order, everything the source rank sent us up to this tensor (the matching order of NCCL).
        t = where[tensor]
        lst = incoming[t.src]
        while received_upto[t.src] <= t.seq:
            tr = lst[received_upto[t.src]]
            body.append(f"{names(tr.tensor)} = recv({tr.src}, {tr.tag}, {list(tr.shape)}, "
                        f"{dtype_source(tr.dtype)}, timeout)  # from rank {tr.src}, made by {tr.producer!r}")
            have.add(tr.tensor)
            received_upto[t.src] += 1

    for t in graph.graph_inputs:
        if any(t in graph.op(name).reads for name in ops):
            body.append(f"{names(t)} = inputs[{t!r}]")
            have.add(t)
    for name in ops:
        node = nodes[name]
        for t in node.inputs:
            if t and t in where and t not in have:
                receive(t)
        outs = [names(o) if o else "_" for o in node.outputs]
        lines, helper = emit(node, cx, outs)
        uses_helper |= helper
        lines[-1] += f"  # {name} ({node.op_type})"
        body += lines
        have.update(o for o in node.outputs if o)
        for tr in sends.get(name, ()):
            body.append(f"sent.append(send({names(tr.tensor)}, {tr.dst}, {tr.tag}))  # to rank {tr.dst}")
    results = []
    if rank == 0:
        for out in part.outputs:
            if out in where and out not in have:
                receive(out)
            results.append(out)
    header = [
        f'"""Rank {rank} of {part.world_size}: {len(ops)} ops of the plan {plan_name}, in plan order.',
        "",
        "Written by plan-codegen: plain PyTorch, one line per ONNX op (the op's name and type in the comment),",
        "receives before the first op that reads a tensor from another rank, sends right after the op that makes",
        'it.  Run all ranks with launch.py under torchrun."""',
        "",
        "import torch",
        "import torch.nn.functional as F",
        "",
        "from p2p import recv, send",
    ]
    if uses_helper:
        header.append("from onnx_ops import onnx_op")
    header += [
        "",
        "",
        "def run(inputs, W, timeout):",
        f'    """inputs: graph input name -> tensor; W: weight name -> tensor (rank_{rank}.weights.pt).',
        '    Returns the graph outputs (rank 0) or an empty dict."""',
        "    sent = []",
    ]
    ret = "{" + ", ".join(f"{o!r}: {names(o)}" for o in results) + "}"
    footer = ["    for work in sent:", "        work.wait(timeout)", f"    return {ret}", ""]
    return "\n".join(header + ["    " + line for line in body] + footer), uses_helper


_LAUNCH = '''"""Launcher: torchrun --standalone --nproc-per-node {world} launch.py [--repeat N]

Every rank runs its rank_<r>.py on the inputs in inputs.pt (the deterministic inputs plan-run uses) with its
weights from rank_<r>.weights.pt; rank 0 saves the graph outputs to outputs.pt.  With --repeat N the ranks run two
warm-up steps and then N timed steps, each started together after a barrier; rank 0 prints the median step time
and writes every step's seconds to timing.json.  Needs only torch."""

import argparse
import importlib.util
import json
import os
import statistics
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

HERE = Path(__file__).resolve().parent


def main():
    parser = argparse.ArgumentParser(description="run the plan's ranks (under torchrun)")
    parser.add_argument("--repeat", type=int, default=0, help="timed steps after two warm-up steps (default 0)")
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    assert world == {world}, "this plan needs {world} ranks"
    torch.set_num_threads(1)
    timeout = timedelta(seconds=60)
    dist.init_process_group("gloo", init_method="env://", timeout=timeout)
    spec = importlib.util.spec_from_file_location(f"rank_{{rank}}", HERE / f"rank_{{rank}}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    inputs = torch.load(HERE / "inputs.pt")
    weights = torch.load(HERE / f"rank_{{rank}}.weights.pt")
    steps_s = []
    with torch.inference_mode():
        outputs = module.run(inputs, weights, timeout)
        for step in range(args.repeat + 2 if args.repeat > 0 else 0):
            dist.barrier()
            start = time.perf_counter()
            outputs = module.run(inputs, weights, timeout)
            dist.barrier()
            if step >= 2:
                steps_s.append(time.perf_counter() - start)
    if rank == 0:
        torch.save({{k: v.contiguous() for k, v in outputs.items()}}, HERE / "outputs.pt")
        if steps_s:
            print(f"median step {{statistics.median(steps_s) * 1e3:.3f}} ms over {{len(steps_s)}} steps", flush=True)
            (HERE / "timing.json").write_text(json.dumps({{"steps_s": steps_s}}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


def _tensors(values: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Tensors that own their memory (a view of a larger buffer would be saved with all of it)."""
    return {k: to_tensor(v).clone() for k, v in values.items()}


def write_code(plan_path: str | Path, out_dir: str | Path, *, nproc: int | None = None,
               input_shapes: Mapping[str, Sequence[int]] | None = None) -> list[Path]:
    """Write the folder described in the module docstring into `out_dir`; return the paths written."""
    plan, graph = load_checked_plan(plan_path, input_shapes)
    part = partition_plan(plan if nproc is not None else used_devices_only(plan), graph, nproc, str(plan_path))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    needs_helper = False
    for r in range(part.world_size):
        ops = part.rank_ops[r]
        program = model_program(graph, plan.model_path, ops) if ops else None
        source, helper = _rank_source(r, Path(plan_path).name, part, graph, program)
        needs_helper |= helper
        path = out / f"rank_{r}.py"
        path.write_text(source)
        weights = out / f"rank_{r}.weights.pt"
        torch.save(_tensors(program.constants) if program else {}, weights)
        written += [path, weights]
    support = {"p2p.py": p2p_source(), "launch.py": _LAUNCH.format(world=part.world_size)}
    if needs_helper:
        support["onnx_ops.py"] = onnx_ops_source()
    for name, text in support.items():
        (out / name).write_text(text)
        written.append(out / name)
    torch.save(_tensors(default_feeds(graph)), out / "inputs.pt")
    return [*written, out / "inputs.pt"]
