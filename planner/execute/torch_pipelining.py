"""Run one of our exported pipeline schedules in PyTorch's own pipelining runtime.

`plan-compare` writes each stage-level schedule as ``<schedule>.torch.csv`` (`planner.schedule.torch_csv`, the
``compute_only`` format of ``torch.distributed.pipelining``).  `torch_schedule_runtime(csv_path, rank,
stage_modules, ...)` builds, on one rank of an initialised process group, the ``PipelineStage`` of every stage the
CSV puts on that rank and a ``_PipelineScheduleRuntime`` that loads the CSV (``_load_csv``: torch validates it,
infers the stage-to-rank mapping and inserts the sends and receives itself).  Then ``runtime.step(x, target=y)``
on every rank trains one batch exactly as torch's built-in schedules do: the batch is split into
`n_microbatches` along dimension 0, the loss is computed per micro-batch on the last stage, and with
`scale_grads` (torch's default) the accumulated gradients are divided by `n_microbatches` (a mean-reduced loss).

What torch's runtime cannot run, and why (checked against torch 2.13):

* DualPipe's bidirectional schedule (and a planned schedule on its two-direction placement): it holds two copies
  of the model, one per direction, whose gradients must be summed; torch's runtime knows one chain of stages
  ``0 .. S-1``, each stage on one rank.  torch refuses the CSV ("Got m/2 FORWARD microbatches for stage 0,
  expected m" with `n_microbatches` = m; "Malformed compute schedule" with m/2, as the reverse direction's first
  stage waits for an input no stage sends); the error raised here says so.  When the planned schedule is on that
  placement, `plan-compare` also writes ``opplan-runnable.torch.csv``, the planned schedule on a placement torch
  runs (`planner.compare.torch_runnable`).

torch's runtime is private API (underscore names); the helper keeps the use in one place.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

from planner.errors import OpplanError
from planner.schedule.actions import OverlapAction
from planner.schedule.program import Schedule
from planner.schedule.torch_csv import read_torch_csv

__all__ = ["TorchScheduleError", "stages_of_rank", "torch_schedule_runtime"]


class TorchScheduleError(OpplanError):
    """The CSV does not fit the given stage modules, or torch's runtime refuses the schedule."""

    exit_status = 1


def stages_of_rank(csv_path: str | os.PathLike[str], rank: int) -> tuple[int, ...]:
    """The stage indices the CSV runs on `rank` (its row), in increasing order."""
    return _stages_of_rank(read_torch_csv(csv_path), rank, csv_path)


def _stages_of_rank(schedule: Schedule, rank: int, csv_path: str | os.PathLike[str]) -> tuple[int, ...]:
    if not 0 <= rank < schedule.num_devices:
        raise TorchScheduleError(f"{csv_path}: rank {rank} has no row (the CSV has {schedule.num_devices})")
    stages: set[int] = set()
    for a in schedule.actions[rank]:
        stages.update((a.forward.stage, a.backward.stage) if isinstance(a, OverlapAction) else (a.stage,))
    return tuple(sorted(stages))


def torch_schedule_runtime(
    csv_path: str | os.PathLike[str],
    rank: int,
    stage_modules: Mapping[int, nn.Module],
    n_microbatches: int,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    device: torch.device | str = "cpu",
    group: dist.ProcessGroup | None = None,
    scale_grads: bool = True,
) -> _PipelineScheduleRuntime:
    """torch's pipelining runtime on this rank, loaded with our CSV; call ``.step(...)`` on it on every rank.

    `stage_modules` maps each stage index the CSV puts on `rank` (`stages_of_rank`) to its module; the number of
    stages is the number of distinct stages in the CSV and the number of ranks its number of rows (it must equal
    the process group's size).  Raises `TorchScheduleError` when the modules do not match the CSV's stages, or
    when torch refuses the schedule (its message included)."""
    schedule = read_torch_csv(csv_path)
    mine = _stages_of_rank(schedule, rank, csv_path)
    if tuple(sorted(stage_modules)) != mine:
        raise TorchScheduleError(f"{csv_path}: rank {rank} runs stages {list(mine)}, "
                                 f"but modules were given for {sorted(stage_modules)}")
    dev = torch.device(device)
    stages = [PipelineStage(stage_modules[s], s, schedule.num_stages, dev, group=group) for s in mine]
    runtime = _PipelineScheduleRuntime(stages, n_microbatches, loss_fn=loss_fn, scale_grads=scale_grads)
    try:
        runtime._load_csv(str(csv_path), format="compute_only")
    except AssertionError as exc:  # torch's validation and lowering raise AssertionError
        raise TorchScheduleError(f"{csv_path}: torch's pipelining runtime refuses this schedule: {exc}",
                                 fix="torch runs one chain of stages, each on one rank; DualPipe's two "
                                     "directions are two chains") from exc
    return runtime
