"""The search on a mirror half measured under named settings, side by side in one run, on the DeepSeek-V3-like
preset at p = 16.

The case is the bench row ``preset:16`` without the rest of `plan-compare`: the DeepSeek-V3-like preset (61 layers)
on h100-2x8-ib, p = 16, m = 64, DualPipe's placement, DualPipe's peak memory per device as the cap, warm-started
from the stream list schedule (`planner.pipeline.stream_greedy.best_stream_list`), searched by
`planner.search.pipeline.solve.solve_pipeline_lns` (which folds this pipeline and searches its half) for
`--seconds` each.  A setting is a search policy (`SETTINGS`: `planner.search.pipeline.policy.PipelineSearchPolicy`
with some knobs changed), passed to that run alone, so ``two-phase`` is exactly what `plan-compare` runs.

Columns: setting, seed, seconds, the warm start's and the final makespan (ms), the makespan at each checkpoint of
`CHECKPOINTS_S` before its end (``ms_at_60s`` ...), bubble / DualPipe's (total idle over the devices against
DualPipe's, at the same cap), the periodic start's period and replayed makespan (empty: the search started from the
list schedule), the search's steps and gains (also per neighbourhood kind), wall time and the load
average at the end (the machine is shared: read ratios of runs side by side, never one time alone).  ``--quick``:
8 layers, p = 4, m = 8, still `--seconds` each (a smoke run: the preset at p = 4 is small enough for the full
model, so the search runs on the whole pipeline there, not the half).

Rerun: ``python -m experiments.bench_half --seconds 600 --settings two-phase,short,long --seeds 0``
(writes bench/results/pipeline_half.csv).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from collections.abc import Sequence
from pathlib import Path

from experiments.bench_common import write_csv
from planner.search.pipeline.policy import PipelineSearchPolicy

REPO = Path(__file__).resolve().parents[1]
CHECKPOINTS_S = (60, 120, 300, 600, 900, 1200, 1800, 2400, 3600)
DEFAULT = PipelineSearchPolicy()


def _half(**changes: object) -> PipelineSearchPolicy:
    """The default policy with the half's knobs in `changes` changed."""
    return dataclasses.replace(DEFAULT, half=dataclasses.replace(DEFAULT.half, **changes))  # type: ignore[arg-type]


# name -> (what it is, the search policy it runs with)
SETTINGS: dict[str, tuple[str, PipelineSearchPolicy]] = {
    "two-phase": ("the default: a periodic start where it replays shorter (15 % of the time), then half the time "
                  "in 0.5 s steps on 4 workers, then 2 s steps on 8 with one step on each end (fill, drain) halfway "
                  "through them and one at their end", DEFAULT),
    "no-ends": ("the two phases without the steps on the ends", _half(ends=False)),
    "ends-once": ("one round of the ends' steps, at the end of the second phase", _half(ends_rounds=1)),
    "ends-wide": ("the default with each end's step over a quarter of the tasks, not 17 %",
                  dataclasses.replace(DEFAULT, lns=dataclasses.replace(DEFAULT.lns, ends_share=0.25))),
    "ends-thrice": ("three rounds of the ends' steps, the second phase split in three before them",
                    _half(ends_rounds=3)),
    "ends-four-short": ("four rounds of the ends' steps, each within 30 s", _half(ends_rounds=4, ends_step_s=30.0)),
    "deterministic": ("CP-SAT's deterministic mode in every step, the first phase on 1 worker",
                      _half(deterministic=True, threads=1)),
    "one-worker": ("the default with the first phase's steps on 1 CP-SAT worker", _half(threads=1)),
    "workers-4-both": ("the default with the second phase in 1 s steps on 4 workers, not 2 s on 8",
                       _half(step_share=0.25, second_threads=4)),
    "list-start": ("the default from the list schedule alone, no periodic start",
                   dataclasses.replace(DEFAULT, periodic=dataclasses.replace(DEFAULT.periodic, share=0.0))),
    "short": ("0.5 s steps on 1 worker all the time", _half(first_share=1.0, ends=False, threads=1)),
    "long": ("2 s steps on 8 workers all the time", _half(first_share=0.0, ends=False)),
}


def preset_case(quick: bool):
    """(pipeline, cap, warm start, its makespan tick, DualPipe's total bubble tick, ticks per ms) of the case."""
    from planner.compare.pipelines import scales_of, simulate_baseline
    from planner.compare.presets import preset_costs
    from planner.ir.hardware import load_topology
    from planner.pipeline.stream_greedy import best_stream_list

    p, m, layers = (4, 8, 8) if quick else (16, 64, None)
    topology = load_topology(REPO / "hardware_profiles" / "h100-2x8-ib.yaml")
    costs = preset_costs("deepseek-v3", topology, p, num_layers=layers)
    dualpipe = simulate_baseline("dualpipe", p, m, costs, scales_of(costs))
    assert dualpipe.figures is not None, f"DualPipe did not simulate on the case: {dualpipe}"
    cap = dualpipe.figures.max_peak_memory_bytes
    pipeline = costs.pipeline("dualpipe", p, m)
    listed = best_stream_list(pipeline, [cap] * p)
    assert listed is not None, "the preset's pipeline has communication streams: the list schedule applies"
    warm, span = listed
    return pipeline, cap, warm, span, dualpipe.figures.bubble_tick, costs.ticks_per_unit


def bench_half(settings: Sequence[str], seeds: Sequence[int], seconds: float, quick: bool = False) -> list[dict]:
    """Each setting of `settings` (names of `SETTINGS`) with each seed, `seconds` each, one after another: one row
    each (module docstring)."""
    from planner.pipeline.metrics import figures
    from planner.search.pipeline import solve

    pipeline, cap, warm, span, dp_bubble, tpu = preset_case(quick)
    rows: list[dict] = []
    for name in settings:
        for seed in seeds:
            marks: dict[int, float] = {}

            t0 = time.monotonic()

            def progress(step, marks=marks, t0=t0) -> None:
                # the run's own clock: the search's steps count from the search's start, after the periodic start
                for t in CHECKPOINTS_S:
                    if time.monotonic() - t0 >= t and t not in marks:
                        marks[t] = min(step.before_tick, step.after_tick) / tpu  # a periodic start may lose

            sol, lns = solve.solve_pipeline_lns(pipeline, cap, warm_start=warm, time_limit_s=seconds, seed=seed,
                                                progress=progress, policy=SETTINGS[name][1])
            found = figures(pipeline, sol.timeline)
            row = {"setting": name, "seed": seed, "seconds": seconds, "start_ms": round(span / tpu, 2),
                   "makespan_ms": round(found.makespan_tick / tpu, 2),
                   "bubble_vs_dualpipe": round(found.bubble_tick / dp_bubble, 4)}
            row.update({f"ms_at_{t}s": round(marks[t], 2) if t in marks else "" for t in CHECKPOINTS_S
                        if t < seconds})  # the run's end is makespan_ms
            row.update({"steps": 0 if lns is None else len(lns.steps), "gains": 0 if lns is None else lns.gains,
                        "gains_by_kind": "" if lns is None else _by_kind(lns.steps),
                        "folded": bool(lns is not None and lns.folded),
                        "period_ms": "" if lns is None or lns.periodic is None else round(lns.periodic[0] / tpu, 2),
                        "periodic_replayed_ms": "" if lns is None or lns.periodic is None else
                        round(lns.periodic[1] / tpu, 2),
                        "wall_s": round(time.monotonic() - t0, 1),
                        "load": round(os.getloadavg()[0], 2), "what": SETTINGS[name][0]})
            rows.append(row)
            print(row, flush=True)
    return rows


def _by_kind(steps) -> str:
    """'kind gains/steps' for each neighbourhood kind the steps drew."""
    tally: dict[str, list[int]] = {}
    for s in steps:
        tally.setdefault(s.kind, [0, 0])
        tally[s.kind][0] += int(s.gained)
        tally[s.kind][1] += 1
    return " ".join(f"{k} {g}/{n}" for k, (g, n) in sorted(tally.items()))


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line, checked before anything runs (an unknown setting is an error, exit 2)."""
    ap = argparse.ArgumentParser(prog="python -m experiments.bench_half", description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", type=lambda x: x.split(","), default=list(SETTINGS),
                    help="comma-separated, run in this order: "
                    + "; ".join(f"{k}: {v[0]}" for k, v in SETTINGS.items()))
    ap.add_argument("--seeds", type=lambda x: [int(v) for v in x.split(",")], default=[0],
                    help="comma-separated seeds, each setting runs once per seed (default 0)")
    ap.add_argument("--seconds", type=float, default=600.0, help="the search's time per run (default 600)")
    ap.add_argument("--quick", action="store_true", help="8 layers, p = 4, m = 8 (a smoke run)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "pipeline_half.csv",
                    help="the CSV written (default bench/results/pipeline_half.csv)")
    args = ap.parse_args(argv)
    unknown = [x for x in args.settings if x not in SETTINGS]
    if unknown:
        ap.error(f"--settings: unknown setting {', '.join(unknown)}; choose from {', '.join(SETTINGS)}")
    if args.seconds <= 0:
        ap.error(f"--seconds must be positive, got {args.seconds:g}")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = _arguments(argv)
    rows = bench_half(args.settings, args.seeds, args.seconds, quick=args.quick)
    write_csv(args.out, rows)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
