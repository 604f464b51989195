"""``plan-compare --memory-sweep LO:HI:STEP`` (or ``auto``: the caps from the baselines' peaks): the planned pipeline
at each memory cap beside the baselines (`planner.compare.memory_sweep`), one line per cap and a closing line
printed, ``memory_sweep.csv`` and ``memory_sweep.png`` written into ``--out`` (staged: every file or none).

Thin, as `planner.cli_compare`: `sweep_caps` reads the caps right after the costs are known (a bad range is one
error line and exit status 2 before any solve), `run_sweep` runs the sweep and writes its files.
"""

from __future__ import annotations

import argparse
import sys
import time

from planner.cli import pause_point
from planner.cli_outputs import staged_dir
from planner.compare.compare_policy import ComparePolicy
from planner.errors import InputError

__all__ = ["run_sweep", "sweep_caps"]

_MIB = 2**20  # a model's and a preset's memory unit (`ModelCosts.bytes_per_unit`)


def sweep_caps(args: argparse.Namespace, costs) -> list[int] | str | None:
    """The caps of ``--memory-sweep`` in bytes (None: no sweep asked; ``auto``, `memory_sweep.AUTO`, as it is: the
    sweep takes them from the baselines' peaks), in the comparison's memory unit: the unit of
    ``--activation``/``--param`` on unit costs, MiB on a model or a preset (where ``2GiB`` reads too).  `costs`:
    the unit or preset costs, or None on a model (whose costs come after its stage cut)."""
    if args.memory_sweep is None:
        return None
    if args.memory is not None:
        raise InputError("--memory-sweep and --memory exclude each other",
                         fix="give the caps as --memory-sweep LO:HI:STEP, or one cap with --memory")
    if args.no_opplan:
        raise InputError("--memory-sweep plans the pipeline at each cap, so it needs the planned schedule",
                         fix="leave out --no-opplan")
    from planner.compare.baselines import scales_of
    from planner.compare.memory_sweep import AUTO, parse_caps
    from planner.pipeline.registry import UnitCosts

    if args.memory_sweep.strip().lower() == AUTO:
        return AUTO
    on_units = isinstance(costs, UnitCosts)
    return parse_caps(args.memory_sweep, scales_of(costs).bytes_per_unit if costs is not None else _MIB,
                      sizes=not on_units)


def run_sweep(args: argparse.Namespace, costs, caps: list[int] | str, names: tuple[str, ...] | None,
              policy: ComparePolicy, started: float) -> int:
    """Plan at each of `caps` (`sweep_caps`: bytes, or ``auto``) within what is left of ``--time-limit`` (counted
    from the monotonic `started`), print a line per cap and a closing line, write the sweep's files; the exit
    status."""
    from planner.compare.memory_sweep import memory_sweep
    from planner.compare.sweep_plot import write_sweep

    sweep = memory_sweep(args.stages, args.microbatches, costs, None if isinstance(caps, str) else caps,
                         time_limit_s=max(1.0, args.time_limit - (time.monotonic() - started)),
                         report=lambda line: print(line, flush=True), schedules=names,
                         opplan_placement=args.placement, backend=args.backend, granularity=args.granularity,
                         subchunk_a2a=args.subchunk_a2a, lns_mode=args.lns_mode, bound_time_s=args.bound_time,
                         policy=policy, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(sweep.closing_line())
    with staged_dir(args.out) as staging:  # every file or none, even on Ctrl-C while drawing
        written = write_sweep(sweep, staging, pictures=not args.no_pictures)
        pause_point("writing")
    print(f"wrote {len(written)} files to {args.out} ({', '.join(p.name for p in written)})")
    return 0
