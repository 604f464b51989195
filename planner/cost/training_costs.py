"""Training costs per operator: forward (F), input-gradient (B) and weight-gradient (W) work of every op, and the
activation memory each op stashes for its backward.

One op of the prepared op graph (`planner.prepare`) keeps its forward FLOPs from `planner.ir.op_workload` (the
importer's `Op.flops`); `planner.cost.backward_rules` adds, by op type, the FLOPs and bytes of the two halves of its
backward and the tensors its backward reads (and decides which tensors need a gradient); this module prices B and W
with the forward's roofline (`planner.cost.compute`) and sums them over stages.

Ticks: B and W of an op on a device are `compute_time_s` of that work (roofline + one launch overhead) in the
instance's tick, rounded up; 0 when the op has no such work.  F is the instance's own `duration_tick` (so a
measured forward stays measured).

**Stage sums** (`TrainingCosts.stage_*`): F, B, W of a set of ops are the sums of theirs; their activation memory
is the bytes of the *union* of their stashed tensors (a tensor read by three backward ops is held once) plus the
ops' private stash (masks, statistics); the part freed by B is the tensors and private stashes no W of the set
reads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from planner.cost.backward_rules import OpTrainingCost, op_training_cost, tensors_needing_grad
from planner.cost.compute import compute_time_s, devices_by_spec
from planner.cost.instance import SchedulingInstance
from planner.errors import InputError
from planner.ir.graph import Op, OpGraph
from planner.ir.topology import Topology

__all__ = ["TrainingCosts", "training_costs"]


# --------------------------------------------------------------------------- ticks and stage sums
def _ticks(flops: int, nbytes: int, dtype: str, device, tick_s: float) -> int:
    """Ticks of one backward kernel: the forward's roofline on that work (+ one launch); 0 for no work."""
    if flops <= 0 and nbytes <= 0:
        return 0
    seconds = compute_time_s(Op("backward", "Backward", flops=flops, bytes_read=nbytes, dtype=dtype), device)
    return max(1, math.ceil(seconds / tick_s - 1e-9))


@dataclass(frozen=True, eq=False)
class TrainingCosts:
    """Per task of an op-level instance (aligned with `instance.task_names`): F, B, W ticks per device and the
    stash of every op.  `ops[t]` is None for a task-graph task (the stage rule B = W = F, stash = its output)."""

    ops: tuple[OpTrainingCost | None, ...]
    forward_tick: np.ndarray  # int64 [n_tasks, n_devices]: the instance's duration_tick
    input_grad_tick: np.ndarray  # int64 [n_tasks, n_devices]
    weight_grad_tick: np.ndarray  # int64 [n_tasks, n_devices]
    tensor_bytes: Mapping[str, int]
    output_bytes: np.ndarray  # int64 [n_tasks]: the old rule's stash (every output)

    def stage_ticks(self, tasks: Sequence[int], device: int) -> tuple[int, int, int]:
        """(F, B, W) ticks of `tasks` run on `device`: sums over the tasks."""
        idx = list(tasks)
        return (int(self.forward_tick[idx, device].sum()), int(self.input_grad_tick[idx, device].sum()),
                int(self.weight_grad_tick[idx, device].sum()))

    def stage_activation_bytes(self, tasks: Iterable[int]) -> tuple[int, int]:
        """(activation bytes, the part freed when B ends) of one micro-batch of `tasks`: the union of their
        stashed tensors + their private stash (module docstring)."""
        until_w: set[str] = set()
        until_b: set[str] = set()
        private = private_b = 0
        for t in tasks:
            op = self.ops[t]
            if op is None:  # task graph: its output, held until W
                private += int(self.output_bytes[t])
                continue
            until_w.update(op.stash_w)
            until_b.update(op.stash_b)
            private += op.private_bytes
            if not op.private_until_w:
                private_b += op.private_bytes
        only_b = until_b - until_w
        total = sum(self.tensor_bytes.get(x, 0) for x in until_w | until_b) + private
        freed = sum(self.tensor_bytes.get(x, 0) for x in only_b) + private_b
        return total, freed

    @cached_property
    def totals(self) -> dict[str, int]:
        """Sums of FLOPs over all ops (products and all), for reports and the FLOP-counter check."""
        ops = [o for o in self.ops if o is not None]
        return {
            "forward": sum(o.forward_flops for o in ops),
            "forward_product": sum(o.forward_product_flops for o in ops),
            "input_grad": sum(o.input_grad_flops for o in ops),
            "input_grad_product": sum(o.input_grad_product_flops for o in ops),
            "weight_grad": sum(o.weight_grad_flops for o in ops),
            "weight_grad_product": sum(o.weight_grad_product_flops for o in ops),
        }


def training_costs(graph: OpGraph, topology: Topology, instance: SchedulingInstance, *,
                   inputs_need_grad: bool = False) -> TrainingCosts:
    """Training costs of every task of `instance` (built from `graph` on `topology` by `planner.prepare`)."""
    by_name = {op.name: op for op in graph.ops}
    missing = [name for name in instance.task_names if name not in by_name]
    if missing:
        raise InputError(f"training costs need the op-level instance of the graph; {len(missing)} tasks are no op "
                         f"of it, e.g. {missing[:3]}", fix="pass the instance `planner.prepare` built from the graph")
    needs_grad = tensors_needing_grad(graph, inputs_need_grad=inputs_need_grad)
    n, nd = instance.num_tasks, instance.num_devices
    f = instance.duration_tick.copy()
    b = np.zeros((n, nd), dtype=np.int64)
    w = np.zeros((n, nd), dtype=np.int64)
    ops: list[OpTrainingCost | None] = []
    tick_s = instance.tick_s or 1.0
    groups = devices_by_spec(topology)  # devices priced alike share one computation
    for t, name in enumerate(instance.task_names):
        op = by_name[name]
        if op.duration is not None:  # task graph: the stage rule
            ops.append(None)
            b[t], w[t] = f[t], f[t]
            continue
        cost = op_training_cost(op, graph, needs_grad)
        ops.append(cost)
        for devices in groups:
            dev = topology.devices[devices[0]]
            b[t, devices] = _ticks(cost.input_grad_flops, cost.input_grad_bytes, op.dtype, dev, tick_s)
            w[t, devices] = _ticks(cost.weight_grad_flops, cost.weight_grad_bytes, op.dtype, dev, tick_s)
    sizes = {k: v.size_bytes for k, v in graph.tensors.items()}
    out_bytes = np.array([by_name[name].output_bytes for name in instance.task_names], dtype=np.int64)
    return TrainingCosts(tuple(ops), f, b, w, sizes, out_bytes)
