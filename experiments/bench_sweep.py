"""`make bench` section `pipeline-sweep`: the memory what-if (`plan-compare --memory-sweep auto`,
`planner.compare.memory_sweep`), the planned pipeline at each per-device memory cap beside every baseline.

Cases (`CASES`): the bundled MoE cut into 8 stages on h100-8-nvlink with 16 micro-batches, as in section
`pipeline` (microseconds, MiB), and the DeepSeek-V3-like preset (61 layers) on h100-2x8-ib at p = 8, m = 20
(milliseconds, MiB); ``--quick``: the MoE at 4 stages, m = 8, and the preset with 8 layers at p = 4, m = 8.  The
caps come from the baselines' peaks (`planner.compare.memory_sweep.auto_caps`: from below the smallest to above
DualPipe's); each case's sweep gets `SweepBenchPolicy.case_s` in all (``quick_case_s`` quick).

One row per case and cap (``bench/results/pipeline-sweep.csv``): the planned schedule's makespan and peak memory
(empty where the cap is infeasible), its bound at the cap and gap (makespan minus bound, over makespan), where its
schedule comes from (``source``: a solve at this cap or a smaller one, or a baseline no solve beat), the best baseline
that fits the cap (peak memory at most the cap, so at the same or lower peak than the planned schedule may use) and
``planned_not_above_best_baseline``: the planned makespan at most that baseline's, computed here from the ticks of
both schedules (True where no baseline fits and nothing is to be beaten), and ``margin_vs_best_baseline``, how
much shorter the planned schedule is, over the baseline's makespan.  One picture per case
(`planner.compare.sweep_plot`: makespan against peak memory), ``bench/results/pipeline-sweep[-quick]-<case>.png``,
named in the rows' ``picture`` column.  Rerun: ``python -m experiments.bench --only pipeline-sweep [--quick]``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.bench_common import RESULTS

__all__ = ["CASES", "SweepBenchPolicy", "bench_sweep", "sweep_rows"]

CASES = ("moe", "preset")


@dataclass(frozen=True)
class SweepBenchPolicy:
    """The section's budget: seconds per case's sweep, all its caps together (the baselines and the picture
    included: `memory_sweep`'s ``time_limit_s``)."""

    # ten minutes a case: the bench allows that much per row, and each of the eight or so caps then gets over a minute
    case_s: float = 600.0
    # a smoke run: a few seconds a cap, enough for warm-started solves on the small sizes
    quick_case_s: float = 60.0


DEFAULT_SWEEP_BENCH_POLICY = SweepBenchPolicy()


def _cases(quick: bool, only: Sequence[str]) -> list[tuple[str, str, int, int, Callable[[], Any]]]:
    """(slug, case, p, m, costs maker) of `CASES` named in `only` (every one when empty), at the quick sizes with
    `quick`; the costs are built as section `pipeline` builds them."""
    from experiments.bench_pipeline import HW, MOE, _model_costs_of
    from planner.compare.presets import preset_costs
    from planner.ir.hardware import load_topology

    unknown = [c for c in only if c not in CASES]
    if unknown:
        raise ValueError(f"pipeline-sweep: unknown case {', '.join(unknown)}; choose from {', '.join(CASES)}")
    p_moe, m_moe = (4, 8) if quick else (8, 16)
    p_pre, m_pre, layers = (4, 8, 8) if quick else (8, 20, None)

    def preset():
        return preset_costs("deepseek-v3", load_topology(HW.parent / "h100-2x8-ib.yaml"), p_pre, num_layers=layers)

    cases = [("moe", "moe.onnx on h100-8-nvlink", p_moe, m_moe, lambda: _model_costs_of(MOE, p_moe)),
             ("preset", f"deepseek-v3 preset ({layers or 61} layers) on h100-2x8-ib", p_pre, m_pre, preset)]
    return [c for c in cases if not only or c[0] in only]


def sweep_rows(case: str, sweep, picture: str) -> list[dict]:
    """One CSV row per cap of `sweep` (`planner.compare.memory_sweep.MemorySweep`), as the module docstring says;
    `picture`: the file name of the case's picture.  The cap and the source are read from `sweep.frame()` (the
    figures ``plan-compare --memory-sweep`` writes); the comparison with the baselines is made on ticks and bytes."""
    from planner.compare.memory_sweep import PLANNED

    time_unit, memory_unit = sweep.units()
    per_t, per_b = sweep.baselines.scales.ticks_per_unit, sweep.baselines.scales.bytes_per_unit
    frame = sweep.frame()
    planned_rows = frame[frame["schedule"] == PLANNED].to_dict("records")
    cap_column = sweep.columns()[0]
    baselines = [r for r in sweep.baselines.ok_rows() if r.figures is not None and r.name != PLANNED]
    rows = []
    for pt, said in zip(sweep.points, planned_rows, strict=True):
        fitting = [r for r in baselines if r.figures.max_peak_memory_bytes <= pt.cap_bytes]
        best = min(fitting, key=lambda r: (r.figures.makespan_tick, r.figures.max_peak_memory_bytes), default=None)
        planned = None if pt.row is None else pt.row.figures
        if best is None:
            not_above: bool = True  # no baseline fits this cap: none to be above
        else:
            not_above = planned is not None and planned.makespan_tick <= best.figures.makespan_tick
        row = {"case": case, "p": sweep.baselines.num_devices, "m": sweep.baselines.num_microbatches,
               "time_unit": time_unit, "memory_unit": memory_unit, "cap": f"{said[cap_column]:.9g}",
               "planned_makespan": "", "planned_peak": "", "bound": "", "gap": "", "source": said["source"],
               "best_baseline": "" if best is None else best.name,
               "best_baseline_makespan": "" if best is None else round(best.figures.makespan_tick / per_t, 4),
               "best_baseline_peak": "" if best is None else round(best.figures.max_peak_memory_bytes / per_b, 6),
               "baselines_fitting": f"{len(fitting)} of {len(baselines)}",
               "planned_not_above_best_baseline": not_above, "margin_vs_best_baseline": "",
               "reason": pt.reason, "picture": picture}
        if planned is not None:
            row.update({"planned_makespan": round(planned.makespan_tick / per_t, 4),
                        "planned_peak": round(planned.max_peak_memory_bytes / per_b, 6)})
            if pt.bound_tick is not None:
                row.update({"bound": round(pt.bound_tick / per_t, 4),
                            "gap": round((planned.makespan_tick - pt.bound_tick) / max(planned.makespan_tick, 1), 4)})
            if best is not None:
                margin = (best.figures.makespan_tick - planned.makespan_tick) / best.figures.makespan_tick
                row["margin_vs_best_baseline"] = round(margin, 4)
        rows.append(row)
    return rows


def bench_sweep(quick: bool, *, only: Sequence[str] = (), out_dir: Path = RESULTS,
                policy: SweepBenchPolicy = DEFAULT_SWEEP_BENCH_POLICY) -> list[dict]:
    """The sweep of each case in `only` (`CASES`; every one when empty) within `policy`'s seconds a case, its
    picture written to `out_dir`; the rows of the module docstring (the caller writes the CSV)."""
    from planner.compare.memory_sweep import memory_sweep
    from planner.compare.sweep_plot import plot_sweep

    seconds = policy.quick_case_s if quick else policy.case_s
    rows: list[dict] = []
    for slug, case, p, m, costs_of in _cases(quick, only):
        costs = costs_of()
        print(f"   {case} p={p} m={m}: memory sweep, {seconds:g} s", flush=True)
        sweep = memory_sweep(p, m, costs, None, time_limit_s=seconds, report=lambda line: print("   " + line,
                                                                                             flush=True))
        print("   " + sweep.closing_line(), flush=True)
        out_dir.mkdir(parents=True, exist_ok=True)
        picture = plot_sweep(sweep, out_dir / f"pipeline-sweep{'-quick' if quick else ''}-{slug}.png", what=case)
        rows += sweep_rows(case, sweep, picture.name)
    return rows
