"""Run one training step of a pipeline `Schedule` on forked gloo ranks of this host: `run_training_schedule`.

One process per schedule device (``fork`` start, TCP rendezvous on 127.0.0.1, ``torch.set_num_threads(1)``,
gloo with ``comm_timeout_s`` as the process-group timeout).  Each rank builds the same model from the seed, runs
its actions (`runtime.run_rank_actions`) and pipes back its losses, gradients (numpy) and timings.  The launcher
waits on every rank's pipe and process sentinel until ``timeout_s``; the first rank that raises, dies or is late
ends the run: the other ranks are terminated (then killed), and `TrainRunFailed` names the failing rank and its
error (the process handling is `planner.execute.procs`, shared with the inference runtime).

**Gradients of several copies.**  A parameter held by more than one stage copy (DualPipe: stage p+j is a second
copy of chunk j, on another rank) gets the *sum* of its copies' gradients — each copy saw a disjoint half of the
micro-batches, and the loss is a sum over micro-batches, so the sum is the gradient of the one logical parameter.
A real DualPipe deployment all-reduces the two copies' gradients between ranks r and p-1-r before the optimizer
step; here the launcher adds them (in rank order) when it collects the results.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from planner.errors import OpplanError
from planner.execute.procs import free_port, run_forked
from planner.execute.train.model import check_cut, layer_cut
from planner.execute.train.runtime import (
    PeerCommError,
    RankOutput,
    StageLayout,
    TrainFault,
    comm_call,
    run_rank_actions,
)
from planner.ir.moe_config import MoEConfig
from planner.schedule.program import Schedule

__all__ = ["TrainResult", "TrainRunFailed", "run_training_schedule"]


class TrainRunFailed(OpplanError):
    """A training rank raised, died or was late; the message names the rank and its error."""

    exit_status = 1


@dataclass
class TrainResult:
    """One training step: the loss (sum over micro-batches of each one's loss / micro-batch count, added in
    micro-batch order), each micro-batch's part, every parameter's gradient, and each rank's output (timings)."""

    schedule_name: str
    loss: float
    microbatch_losses: tuple[float, ...]
    grads: dict[str, np.ndarray]
    ranks: list[RankOutput]

    @property
    def step_s(self) -> tuple[float, ...]:
        return tuple(r.step_s for r in self.ranks)

    @property
    def busy_s(self) -> tuple[float, ...]:
        return tuple(r.busy_s for r in self.ranks)


def _rank_body(rank: int, world: int, init: str, schedule: Schedule, layout: StageLayout, cfg: MoEConfig,
               comm_timeout_s: float, fault: TrainFault | None, warmup_steps: int,
               cut: tuple[int, ...]) -> RankOutput:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                            timeout=timedelta(seconds=comm_timeout_s))
    try:
        out = run_rank_actions(rank, schedule, layout, cfg, comm_timeout_s=comm_timeout_s, fault=fault,
                               warmup_steps=warmup_steps, cut=cut)
        # no rank tears down its connections while a peer still reads from them
        comm_call(f"rank {rank}: the final barrier", dist.barrier)
    finally:
        dist.destroy_process_group()
    return out


def _combine(outputs: list[RankOutput], total_microbatches: int) -> tuple[tuple[float, ...], dict[str, np.ndarray]]:
    losses: dict[int, float] = {}
    grads: dict[str, np.ndarray] = {}
    for out in outputs:  # rank order
        losses.update(out.microbatch_losses)
        for name, g in out.grads.items():
            grads[name] = g.copy() if name not in grads else grads[name] + g
    missing = [g for g in range(total_microbatches) if g not in losses]
    if missing:
        raise TrainRunFailed(f"no loss came back for micro-batches {missing}")
    return tuple(losses[g] for g in range(total_microbatches)), grads


def run_training_schedule(
    schedule: Schedule,
    model_config: MoEConfig,
    *,
    world_size: int | None = None,
    timeout_s: float = 60.0,
    chains: tuple[tuple[int, ...], ...] | None = None,
    comm_timeout_s: float | None = None,
    fault: TrainFault | None = None,
    warmup_steps: int = 0,
    cut: tuple[int, ...] | None = None,
) -> TrainResult:
    """Run one training step of `schedule` on `world_size` (= ``schedule.p``) forked gloo ranks.

    `chains`: the stage chains micro-batches walk (default one chain 0..S-1; DualPipe:
    ``((0..p-1), (p..2p-1))``, see `runtime.StageLayout`).  `cut`: the model's unit boundaries, one chunk per
    chain position (`model.check_cut`; e.g. `model.even_cut` or `model.balanced_cut` for operator-level
    sub-chunks); None: whole layers (`model.layer_cut`).  `timeout_s` bounds the whole run;
    `comm_timeout_s` (default `timeout_s`) each receive, send and barrier; `warmup_steps` un-timed steps run
    first (their gradients are discarded), so that `TrainResult.ranks[r].timings` show the steady state.  Raises
    `TrainRunFailed` naming the rank that failed first (see `_collect`) or the ranks that did not finish in time;
    no rank outlives the call."""
    world = schedule.p if world_size is None else int(world_size)
    if world != schedule.p:
        raise ValueError(f"schedule {schedule.name!r} has {schedule.p} devices; world_size {world} must equal it")
    schedule.check_complete()
    layout = StageLayout.of(schedule, chains)
    cut = check_cut(model_config, cut) if cut is not None else layer_cut(model_config, layout.num_chunks)
    if len(cut) != layout.num_chunks + 1:  # refused here, before any process starts
        raise ValueError(f"cut {cut} makes {len(cut) - 1} chunks; the chains have {layout.num_chunks} stages")
    comm_timeout_s = float(timeout_s if comm_timeout_s is None else comm_timeout_s)
    init = f"tcp://127.0.0.1:{free_port()}"
    ranks = run_forked(
        world,
        lambda r: _rank_body(r, world, init, schedule, layout, model_config, comm_timeout_s, fault, warmup_steps,
                             cut),
        timeout_s=timeout_s, what=f"training step of schedule {schedule.name!r}", error=TrainRunFailed,
        # a rank whose receive broke because a peer failed is a consequence, not the cause
        secondary=lambda text: text.startswith(PeerCommError.__name__ + ":"), name="opplan-train-rank")
    losses, grads = _combine(ranks, layout.total_microbatches)
    return TrainResult(schedule.name, float(sum(losses)), losses, grads, ranks)
