"""Train with a planned pipeline schedule: plan it with `plan-compare`, run it in torch's own pipelining runtime.

    python docs/examples/train_with_planned_schedule.py [--stages 2] [--microbatches 4] [--steps 20]

1. `plan-compare --placement v` plans a schedule for `--stages` ranks and writes it, beside the baselines, as
   ``opplan.torch.csv``: one row per rank, one action per cell in PyTorch's letters (``0F1`` stage 0's forward of
   micro-batch 1, ``0I1`` its input-gradient backward, ``0W1`` its weight gradient).  The V placement cuts the model
   into 2 x stages chunks; rank r holds chunks r and 2 x stages - 1 - r.
2. One process per rank (forked here; under torchrun each rank would run `train_rank`) joins a gloo group, builds the
   modules of its chunks, and loads the CSV with `planner.execute.torch_pipelining.torch_schedule_runtime`.
3. Every training step is the usual loop: zero the gradients, `runtime.step(x, target=y, losses=...)` (the batch is
   split into the micro-batches and run in the planned order), then an optimizer step on the rank's own modules.

The rank that holds the last chunk prints the mean loss of each step.  `tests/test_readme_examples.py` runs this
script with a few steps.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from planner.cli_compare import compare_main
from planner.execute.torch_pipelining import stages_of_rank, torch_schedule_runtime
from planner.schedule.torch_csv import read_torch_csv

WIDTH = 16
ROWS_PER_MICROBATCH = 4


def plan_schedule(stages: int, microbatches: int, time_limit_s: float, out: Path) -> Path:
    """The planned schedule as torch's CSV (plan-compare on unit costs, V placement)."""
    status = compare_main(["--stages", str(stages), "--microbatches", str(microbatches), "--placement", "v",
                           "--time-limit", str(time_limit_s), "--bound-time", "0", "--no-pictures",
                           "--out", str(out)])
    if status != 0:
        raise SystemExit(status)
    return out / "opplan.torch.csv"


def chunk(index: int) -> torch.nn.Module:
    """Chunk `index` of the model, with weights that depend only on the index (every rank builds its own)."""
    torch.manual_seed(index)
    return torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh())


def batch(microbatches: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same inputs and targets on every rank: a fixed linear map to learn."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(microbatches * ROWS_PER_MICROBATCH, WIDTH, generator=gen)
    return x, 0.5 * torch.tanh(x @ torch.randn(WIDTH, WIDTH, generator=gen) / WIDTH**0.5)


def train_rank(rank: int, world: int, csv_path: str, microbatches: int, steps: int, port: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    try:
        modules = {s: chunk(s) for s in stages_of_rank(csv_path, rank)}
        runtime = torch_schedule_runtime(csv_path, rank, modules, microbatches, torch.nn.functional.mse_loss)
        params = [p for m in modules.values() for p in m.parameters()]
        optimizer = torch.optim.SGD(params, lr=0.5)
        x, y = batch(microbatches)
        holds_last = read_torch_csv(csv_path).num_stages - 1 in modules
        for step in range(1, steps + 1):
            optimizer.zero_grad()
            losses: list[torch.Tensor] = []
            runtime.step(x, target=y, losses=losses)
            optimizer.step()
            if holds_last:
                print(f"step {step}: loss {sum(float(v) for v in losses) / len(losses):.6f}", flush=True)
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", type=int, default=2, help="pipeline ranks")
    parser.add_argument("--microbatches", type=int, default=4, help="micro-batches per step")
    parser.add_argument("--steps", type=int, default=20, help="training steps")
    parser.add_argument("--time-limit", type=float, default=5.0, help="seconds to plan the schedule")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = plan_schedule(args.stages, args.microbatches, args.time_limit, Path(tmp))
        print(f"planned schedule ({csv_path.name}):")
        print(csv_path.read_text(), end="", flush=True)
        port = 29500 + os.getpid() % 1000
        mp.start_processes(train_rank, args=(args.stages, str(csv_path), args.microbatches, args.steps, port),
                           nprocs=args.stages, start_method="fork")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
