"""Control flow: If, Loop and Scan (opsets 9+), each one op on one rank.

Their bodies (`planner.ir.onnx_values.GraphSpec`) run node by node through the same op table as the main graph,
in an environment that sees the enclosing scope (`OpContext.scope`: the rank's tensors, which hold every
outer-scope tensor the body captures, because the partition sends an op all of its implicit inputs too).
"""

from __future__ import annotations

from collections import ChainMap

import torch

from planner.execute.ops import OPS, OpContext, int_list, register, scalar


def _constant(value) -> torch.Tensor:
    """A body initializer (a numpy array) as a tensor; no numpy import: the generated helper file needs only torch."""
    return torch.from_numpy(value.copy(order="C"))


def run_body(spec, inputs: list, scope, opset: int, constants: dict | None = None) -> list[torch.Tensor]:
    """Run a subgraph on `inputs` (in its input order); returns its outputs in order.  `constants`: its
    initializers already as tensors (callers that run a body many times convert them once)."""
    local: dict[str, torch.Tensor] = dict(constants if constants is not None else
                                          {k: _constant(v) for k, v in spec.constants.items()})
    for name, value in zip(spec.inputs, inputs, strict=False):
        if name and value is not None:
            local[name] = value
    env = ChainMap(local, scope if scope is not None else {})
    for node in spec.nodes:
        if node.domain not in ("", "ai.onnx") or node.op_type not in OPS:
            raise NotImplementedError(f"op {node.op_type} (domain {node.domain or 'ai.onnx'}) in a subgraph")
        ins = [env[t] if t else None for t in node.inputs]
        while ins and ins[-1] is None:
            ins.pop()
        ctx = OpContext(opset=opset, num_outputs=len(node.outputs), output_shapes=(None,) * len(node.outputs),
                        output_dtypes=(None,) * len(node.outputs), name=node.name, scope=env)
        for name, value in zip(node.outputs, OPS[node.op_type](ins, dict(node.attrs), ctx), strict=False):
            if name:
                local[name] = value
    return [env[o] for o in spec.outputs]


@register("If")
def if_(ins, attrs, ctx):
    branch = attrs["then_branch"] if bool(scalar(ins[0])) else attrs["else_branch"]
    return run_body(branch, [], ctx.scope, ctx.opset)


def _stack(values: list[torch.Tensor], axis: int = 0, reverse: bool = False) -> torch.Tensor:
    if reverse:
        values = values[::-1]
    return torch.stack(values, dim=axis)


@register("Loop")
def loop(ins, attrs, ctx):
    body = attrs["body"]
    trips = int(scalar(ins[0])) if len(ins) > 0 and ins[0] is not None else None
    cond = bool(scalar(ins[1])) if len(ins) > 1 and ins[1] is not None else True
    carried = list(ins[2:])
    n_carried = len(carried)
    consts = {k: _constant(v) for k, v in body.constants.items()}
    scans: list[list[torch.Tensor]] = []
    i = 0
    while (trips is None or i < trips) and cond:
        outs = run_body(body, [torch.tensor(i, dtype=torch.int64), torch.tensor(cond), *carried], ctx.scope,
                        ctx.opset, consts)
        cond = bool(scalar(outs[0]))
        carried = outs[1:1 + n_carried]
        for k, v in enumerate(outs[1 + n_carried:]):
            if len(scans) <= k:
                scans.append([])
            scans[k].append(v)
        i += 1
    n_scan = len(body.outputs) - 1 - n_carried
    stacked = [_stack(scans[k]) if k < len(scans) else torch.empty(0) for k in range(n_scan)]
    return [*carried, *stacked]


@register("Scan")
def scan(ins, attrs, ctx):
    if ctx.opset < 9:
        raise NotImplementedError("Scan-8 (batched, with sequence_lens)")
    body = attrs["body"]
    m = int(attrs["num_scan_inputs"])
    n = len(ins) - m
    states, xs = list(ins[:n]), list(ins[n:])
    in_axes = [a % x.dim() for a, x in zip(int_list(attrs.get("scan_input_axes") or [0] * m), xs, strict=True)]
    in_dirs = int_list(attrs.get("scan_input_directions") or [0] * m)
    k = len(body.outputs) - n
    out_axes = int_list(attrs.get("scan_output_axes") or [0] * k)
    out_dirs = int_list(attrs.get("scan_output_directions") or [0] * k)
    steps = xs[0].shape[in_axes[0]] if xs else 0
    consts = {name: _constant(v) for name, v in body.constants.items()}
    collected: list[list[torch.Tensor]] = [[] for _ in range(k)]
    for t in range(steps):
        slices = [x.select(a, steps - 1 - t if d else t) for x, a, d in zip(xs, in_axes, in_dirs, strict=True)]
        outs = run_body(body, [*states, *slices], ctx.scope, ctx.opset, consts)
        states = outs[:n]
        for j, v in enumerate(outs[n:]):
            collected[j].append(v)
    results = []
    for j in range(k):
        rank = collected[j][0].dim() + 1 if collected[j] else 1
        results.append(_stack(collected[j], out_axes[j] % rank, bool(out_dirs[j])) if collected[j]
                       else torch.empty(0))
    return [*states, *results]
