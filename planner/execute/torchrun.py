"""Run a plan under torchrun, on one host or many: `python -m planner.execute.torchrun --plan plan.json ...`.

torchrun starts the processes and sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; each rank
reads them (init_method ``env://``), loads the plan and the model (the same path on every host; the hash is
checked on each), builds its share and runs.  Rank 0 gathers the timings and writes the report.  WORLD_SIZE must
equal the plan's number of devices, or pass --ranks WORLD_SIZE to fold devices onto ranks (device d on rank
d % N; torchrun reads any option of its own that starts with --nproc, so ours is --ranks there).  If a rank
fails, torchrun's agent stops the others; a rank waiting on a dead peer gives up after --timeout seconds.

One host, 4 ranks::

    torchrun --standalone --nproc-per-node 4 -m planner.execute.torchrun --plan plan.json --check

Two hosts with 4 ranks each (run on both, node-rank 0 and 1; HOST0 is reachable from both)::

    torchrun --nnodes 2 --nproc-per-node 4 --node-rank 0 --rdzv-backend c10d --rdzv-endpoint HOST0:29500 \\
        -m planner.execute.torchrun --plan plan.json --backend nccl --report run.json

With gloo across hosts, set GLOO_SOCKET_IFNAME to the interface that connects them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from planner.errors import InputError, OpplanError
from planner.execute.dist import RunSpec, run_rank
from planner.execute.partition import partition_plan
from planner.execute.program import default_feeds
from planner.execute.runner import build_report, load_checked_plan
from planner.ir.units import format_time


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m planner.execute.torchrun", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plan", type=Path, required=True)
    parser.add_argument("--ranks", "--nproc", dest="nproc", type=int, default=None,
                        help="fold the plan's devices onto this many ranks (device d on rank d %% N)")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--report", type=Path, default=None)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    try:
        plan, graph = load_checked_plan(args.plan)
        part = partition_plan(plan, graph, world if args.nproc is None else args.nproc, str(args.plan))
        if part.world_size != world:
            raise InputError(f"torchrun started {world} ranks; the plan needs {part.world_size} "
                             f"(or pass --ranks {world})", path=str(args.plan))
    except OpplanError as exc:
        print(f"error: rank {rank}: {exc}", file=sys.stderr)
        return exc.exit_status
    if args.backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    feeds = default_feeds(graph)
    spec = RunSpec(plan.model_path, graph, part, feeds, backend=args.backend, repeat=args.repeat,
                   warmup=args.warmup, comm_timeout_s=args.timeout)
    try:
        results = run_rank(rank, spec, "env://", collect=True)
    except Exception as exc:  # noqa: BLE001 - name the rank, then fail so that torchrun stops the others
        print(f"error: rank {rank} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if rank == 0:
        assert isinstance(results, list)  # collect=True: rank 0 gets every rank's result
        report = build_report(args.plan, plan, part, results, results[0].outputs, feeds if args.check else None,
                              args.backend, args.repeat, args.warmup, args.report, graph)
        sim = report["simulated_makespan_s"]
        print(f"measured makespan {format_time(report['measured_makespan_s'])}, simulated "
              f"{format_time(sim) if sim is not None else 'n/a'}, max abs error {report['max_abs_error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
