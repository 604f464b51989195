"""Planning costs of the training model's units, and the `TrainingPipeline` of a cut of it: what the planner
schedules when our runtime is to run the plan (`planner.execute.train.model` has the units and cuts).

**Per unit** (`unit_costs`, measured once on micro-batch 0 of the config):

* forward FLOPs: every matrix product of the unit's forward as ``torch.utils.flop_counter.FlopCounterMode``
  counts it (mm, addmm, bmm; 2 FLOPs per multiply-add), of which *weight FLOPs* are the products with a parameter
  matrix (the unit's ``nn.Linear`` layers, counted by forward hooks as 2 x rows x in x out);
* the matrix-product rule for the backward (`planner.pipeline.unroll`): a product Y = X A with a weight A costs one
  product for dX (B) and one for dA (W); a product of two activations (attention's Q K^T and P V) costs two for B
  (both operands) and none for W.  So B = weight + 2 x (forward - weight) FLOPs and W = weight FLOPs;
* not counted (not matrix products): layer norms, softmax, GELU, top-k, gathers and ``index_add`` — so the
  ``combine`` units count 0 FLOPs (the last one its head's product), the ``dispatch`` units only the router;
* parameter bytes (fp32) and activation bytes: the float boundary tensors the unit hands on (a lower estimate of
  what it stashes for backward; only a memory-capped plan would use it).

**Per stage** (`training_pipeline`): a stage runs the units of its chunk of the cut; its F, B and W FLOPs are the
sums, turned into ticks by ``round(flops / flops_per_tick)`` with at least 1 tick for F and B (every unit does some
work the counter does not see) and 0 for W exactly when the stage has no parameter.  A hop from a stage to the next
costs `comm_tick` when the two sit on different devices and 0 when they share one (a local hand-off, no message;
`TrainingPipeline.stage_comm_tick`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from planner.execute.train.model import (
    boundary_slots,
    build_model,
    check_cut,
    make_batches,
    num_units,
    unit_name,
    unit_param_names,
)
from planner.ir.moe_config import MoEConfig
from planner.pipeline.unroll import StageCost, TrainingPipeline

__all__ = ["UnitCost", "unit_costs", "training_pipeline"]


@dataclass(frozen=True)
class UnitCost:
    """One unit's costs for one micro-batch (module docstring)."""

    name: str
    forward_flops: int
    weight_flops: int  # part of forward_flops: products with a parameter matrix
    param_bytes: int
    activation_bytes: int

    @property
    def input_grad_flops(self) -> int:
        return self.weight_flops + 2 * (self.forward_flops - self.weight_flops)

    @property
    def weight_grad_flops(self) -> int:
        return self.weight_flops


def unit_costs(cfg: MoEConfig) -> tuple[UnitCost, ...]:
    """Every unit's costs, in unit order, from one forward of micro-batch 0 (one intra-op thread)."""
    model = build_model(cfg)
    tokens, _ = make_batches(cfg, 1)
    weight_flops = [0]

    def count_linear(mod: nn.Module, args: tuple[torch.Tensor, ...], _out: torch.Tensor) -> None:
        assert isinstance(mod, nn.Linear)
        rows = args[0].numel() // mod.in_features
        weight_flops[0] += 2 * rows * mod.in_features * mod.out_features

    hooks = [m.register_forward_hook(count_linear) for m in model.modules() if isinstance(m, nn.Linear)]
    params = dict(model.named_parameters())
    u_count = num_units(cfg)
    out: list[UnitCost] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        xs: torch.Tensor | tuple[torch.Tensor, ...] = tokens[0]
        with torch.no_grad():
            for u in range(u_count):
                weight_flops[0] = 0
                with FlopCounterMode(display=False) as counter:
                    xs = model.forward_units(u, u + 1, xs)
                names = unit_param_names(model, u, u + 1)
                p_bytes = sum(params[n].numel() * params[n].element_size() for n in names)
                handed = [t for t, s in zip(xs, boundary_slots(cfg, u + 1), strict=True)
                          if s.differentiable] if u + 1 < u_count else []
                a_bytes = sum(t.numel() * t.element_size() for t in handed)
                out.append(UnitCost(unit_name(cfg, u), int(counter.get_total_flops()), int(weight_flops[0]),
                                    int(p_bytes), int(a_bytes)))
    finally:
        torch.set_num_threads(threads)
        for h in hooks:
            h.remove()
    return tuple(out)


def training_pipeline(
    cfg: MoEConfig,
    cut: Sequence[int],
    stage_to_device: Sequence[int],
    num_microbatches: int,
    *,
    chains: tuple[tuple[int, ...], ...] | None = None,
    costs: Sequence[UnitCost] | None = None,
    flops_per_tick: float | None = None,
    comm_tick: int = 1,
    name: str = "train-units",
) -> TrainingPipeline:
    """The pipeline of `cut` placed by `stage_to_device` (module docstring).  `chains` default to one chain over
    every stage; the i-th stage of a chain runs chunk i.  `flops_per_tick` defaults to the largest unit's forward
    FLOPs / 8."""
    cut = check_cut(cfg, tuple(cut))
    costs = tuple(costs) if costs is not None else unit_costs(cfg)
    s_count = len(stage_to_device)
    chains = chains or (tuple(range(s_count)),)
    if any(len(c) != len(cut) - 1 for c in chains):
        raise ValueError(f"every chain of {chains} needs {len(cut) - 1} stages, one per chunk of cut {cut}")
    quantum = float(flops_per_tick) if flops_per_tick else max(c.forward_flops for c in costs) / 8
    stages: list[StageCost | None] = [None] * s_count
    hops = [0] * s_count
    for chain in chains:
        for i, s in enumerate(chain):
            units = costs[cut[i]:cut[i + 1]]
            f = sum(c.forward_flops for c in units)
            b = sum(c.input_grad_flops for c in units)
            w = sum(c.weight_grad_flops for c in units)
            has_params = any(c.param_bytes for c in units)
            stages[s] = StageCost(max(1, round(f / quantum)), max(1, round(b / quantum)),
                                  max(1, round(w / quantum)) if has_params else 0,
                                  activation_bytes=sum(c.activation_bytes for c in units),
                                  param_bytes=sum(c.param_bytes for c in units))
            if i + 1 < len(chain):
                hops[s] = comm_tick if stage_to_device[s] != stage_to_device[chain[i + 1]] else 0
    missing = [s for s, c in enumerate(stages) if c is None]
    if missing:
        raise ValueError(f"stages {missing} are in no chain of {chains}")
    num_devices = max(stage_to_device) + 1
    return TrainingPipeline(tuple(c for c in stages if c is not None), num_microbatches, num_devices,
                            tuple(int(d) for d in stage_to_device), chains, comm_tick, name,
                            stage_comm_tick=tuple(hops))
