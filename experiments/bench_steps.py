"""The same steps of the half's search solved under several CP-SAT settings, side by side in one run, on the
DeepSeek-V3-like preset at p = 16: what each setting proves and gains per step, from the same incumbent.

The case is `experiments.bench_half`'s (the bench row ``preset:16``: DualPipe's placement and peak memory, the
list schedule as the warm start), folded to its mirror half when it folds.  An incumbent is first searched for
`--warm-seconds` with the first phase's settings (`planner.search.pipeline.policy.HalfSearchPolicy`: its `threads`
workers, `step_s` steps, CP-SAT's default portfolio), so that the steps below start where the search spends its
time, not on the list schedule.  From that one incumbent, neighbourhoods are drawn with each seed of `--seeds`:
`--draws` of each kind (``critical``, ``window``, ``microbatches``) at each size (100, 180 and 260 tasks).  Each
neighbourhood is solved once per configuration (`formulations.pipeline_step.solve_step`, the search's own step),
always from the incumbent, so a configuration's gains are each step's alone, summed.

A configuration is ``WORKERSxSECONDS`` (CP-SAT workers, the step's limit), in the default portfolio, or with a
trailing ``d`` in CP-SAT's deterministic mode (``1x0.5d``).  Columns: configuration, seed, steps, proven (the
step's model solved to optimality), gained (the replayed order shorter than the incumbent), gain_ms (summed), wall_s
(the solves' wall time summed), the incumbent's makespan, the load average at the end.  ``--quick``: the preset's
8 layers at p = 4, m = 8 (not a mirror image at that size: the whole pipeline), a smoke run.

Rerun: ``python -m experiments.bench_steps --configs 1x0.5,4x0.5,8x1 --seeds 0,1``
(writes bench/results/pipeline_steps.csv).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from experiments.bench_common import write_csv
from experiments.bench_half import preset_case

REPO = Path(__file__).resolve().parents[1]
KINDS = ("critical", "window", "microbatches")
SIZES = (100, 180, 260)  # tasks per neighbourhood
_CONFIG = re.compile(r"^(\d+)x(\d+(?:\.\d+)?)(d?)$")


@dataclass(frozen=True)
class Config:
    """How one step is solved: CP-SAT workers, the step's limit, the deterministic mode or the default portfolio."""

    workers: int
    step_s: float
    deterministic: bool

    @property
    def name(self) -> str:
        return f"{self.workers}x{self.step_s:g}{'d' if self.deterministic else ''}"


def parse_config(text: str) -> Config:
    """``WORKERSxSECONDS`` with an optional trailing ``d`` (module docstring); ValueError naming the fix."""
    m = _CONFIG.match(text.strip())
    if m is None or int(m.group(1)) < 1 or float(m.group(2)) <= 0:
        raise ValueError(f"configuration {text!r} is not WORKERSxSECONDS[d], e.g. 4x0.5 or 1x0.5d")
    return Config(int(m.group(1)), float(m.group(2)), m.group(3) == "d")


def bench_steps(configs: Sequence[Config], seeds: Sequence[int], warm_s: float, draws: int,
                quick: bool = False) -> list[dict]:
    """One row per configuration and seed (module docstring)."""
    from formulations.pipeline import prepare_pipeline
    from formulations.pipeline_step import solve_step
    from formulations.pipeline_units import Units
    from planner.pipeline.mirror import fold
    from planner.search.pipeline.half import improve_folded
    from planner.search.pipeline.lns import improve_pipeline
    from planner.search.pipeline.neighbourhoods import neighbourhood
    from planner.search.pipeline.policy import HalfSearchPolicy, PipelineLnsPolicy

    pipeline, cap, warm, _span, _dp_bubble, tpu = preset_case(quick)
    setup = prepare_pipeline(pipeline, cap, warm_start=warm, fifo=True, pair_window=2)
    mirror = fold(pipeline, setup.cap)
    rows: list[dict] = []

    def measure(space, incumbent):
        first = HalfSearchPolicy()  # the first phase's steps and workers
        found = improve_pipeline(space, incumbent, time_limit_s=warm_s, policy=PipelineLnsPolicy(step_s=first.step_s),
                                 threads=first.threads, deterministic=False,
                                              bound_tick=setup.trivial_tick)
        units = Units(space, found.times.pairs)
        order = units.order(found.times.start)
        timed = units.replay(order)
        assert timed is not None, "the search's own schedule replays"
        start, tail = timed
        before = space.makespan_tick(units.times(start))
        for seed in seeds:
            rng = random.Random(seed)
            frees = [frozenset(units.rep[t] for t in neighbourhood(kind, space, found.times, size, rng))
                     for size in SIZES for kind in KINDS for _ in range(draws)]
            for config in configs:
                proven = gained = 0
                gain_tick, wall_s = 0, 0.0
                for k, free in enumerate(frees):
                    t0 = time.monotonic()
                    ok, stepped = solve_step(units, "cpsat", order, start, tail, free, time_limit_s=config.step_s,
                                             threads=config.workers, seed=seed + k,
                                             deterministic=config.deterministic)
                    wall_s += time.monotonic() - t0
                    after = before if stepped is None else space.makespan_tick(units.times(stepped[1][0]))
                    proven += ok
                    gained += after < before
                    gain_tick += max(0, before - after)
                row = {"config": config.name, "seed": seed, "steps": len(frees), "proven": proven, "gained": gained,
                       "gain_ms": round(gain_tick / tpu, 2), "wall_s": round(wall_s, 1),
                       "incumbent_ms": round(before / tpu, 2), "warm_seconds": warm_s,
                       "load": round(os.getloadavg()[0], 2)}
                rows.append(row)
                print(row, flush=True)
        return found

    if mirror is None or quick:
        measure(setup, setup.known)
    else:
        improve_folded(setup, mirror, setup.known, measure)
    return rows


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line, checked before anything runs (a bad configuration is an error, exit 2)."""
    ap = argparse.ArgumentParser(prog="python -m experiments.bench_steps", description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="1x0.5,4x0.5,8x1",
                    help="comma-separated WORKERSxSECONDS[d] (d: CP-SAT's deterministic mode; default "
                    "1x0.5,4x0.5,8x1)")
    ap.add_argument("--seeds", type=lambda x: [int(v) for v in x.split(",")], default=[0, 1],
                    help="comma-separated seeds of the draws (default 0,1)")
    ap.add_argument("--warm-seconds", type=float, default=280.0,
                    help="the incumbent's search before the steps (default 280)")
    ap.add_argument("--draws", type=int, default=3, help="neighbourhoods per kind and size (default 3)")
    ap.add_argument("--quick", action="store_true", help="8 layers, p = 4, m = 8 (a smoke run)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "pipeline_steps.csv",
                    help="the CSV written (default bench/results/pipeline_steps.csv)")
    args = ap.parse_args(argv)
    try:
        args.configs = [parse_config(c) for c in args.configs.split(",")]
    except ValueError as exc:
        ap.error(f"--configs: {exc}")
    if args.warm_seconds < 0 or args.draws < 1:
        ap.error("--warm-seconds must be >= 0 and --draws >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = _arguments(argv)
    rows = bench_steps(args.configs, args.seeds, args.warm_seconds, args.draws, quick=args.quick)
    write_csv(args.out, rows)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
