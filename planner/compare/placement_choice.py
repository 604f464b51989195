"""Which placement the planned row solves when `plan-compare` may choose (``auto``, ``warm``): the signals known
before solving — each placement's shortest warm start within the cap and its lower bound — and the rule on them
(`dominant`, `choose`, `warmest`).
"""

from __future__ import annotations

from formulations.pipeline import prepare_pipeline
from planner.compare.baselines import SPLIT, WARM_FROM, pipeline_of, simulate_baseline
from planner.compare.compare_policy import DEFAULT_COMPARE_POLICY
from planner.compare.compare_row import CompareRow
from planner.compare.table_text import figure_text
from planner.errors import OpplanError
from planner.pipeline.registry import Scales
from planner.pipeline.stream_greedy import best_stream_list
from planner.pipeline.unroll import TrainingPipeline

# placement -> (its pipeline, its list schedule: (start ticks, makespan tick) or None), computed by `dominant`
Listed = dict[str, tuple[TrainingPipeline, tuple[dict[str, int], int] | None]]


def warmest(placements: list[str], p: int, m: int, costs, scales: Scales, by_name: dict[str, CompareRow],
            cap: int | None) -> str:
    """The placement whose baselines (`WARM_FROM`) give the shortest schedule within the cap (the first of
    `placements` when none fits): ``compare(opplan_placement="warm")`` solves that one only, with the whole budget."""
    def shortest(placement: str) -> float:
        rows = (by_name.get(n) or simulate_baseline(n, p, m, costs, scales) for n in WARM_FROM[placement])
        fits = [r.figures.makespan_tick for r in rows if r.figures is not None
                and (cap is None or r.figures.max_peak_memory_bytes <= cap)]
        return min(fits, default=float("inf"))
    return min(placements, key=lambda pl: (shortest(pl), placements.index(pl)))


def dominant(placements: list[str], p: int, m: int, costs, scales: Scales, by_name: dict[str, CompareRow],
             cap: int | None, listed: Listed | None = None,
             bound_tie: float = DEFAULT_COMPARE_POLICY.bound_tie) -> tuple[str | None, str]:
    """``compare(opplan_placement="auto")``'s choice: the placement that is at least as good as every other on both
    signals known before solving — the shortest warm start (its baselines, `WARM_FROM`, within the cap, and on a
    pipeline with communication streams the list schedule, `stream_greedy.best_stream_list`) and the
    lowest lower bound (the formulation's trivial bound on its baselines' cut, `prepare_pipeline`: critical path,
    work / devices, device bound) — solved alone with the whole budget; None when no placement is (the signals
    disagree: all are solved, the time split).  Ties go to the earlier of `placements`.  With the reason, in words.
    Why both signals: the warm start alone picks the V on the unit rows, where DualPipe's placement reaches the
    proven optimum.  A bound lower by less than `bound_tie` of the other's gap does not count as lower.  `listed`
    (when given) receives, per placement with communication streams, the pipeline and the list schedule computed
    here, so that the solve does not compute it again (`planner.compare.planned_row`)."""
    warm: dict[str, float] = {}
    bound: dict[str, float] = {}
    for pl in placements:
        rows = (by_name.get(n) or simulate_baseline(n, p, m, costs, scales) for n in WARM_FROM[pl])
        warm[pl] = min((r.figures.makespan_tick for r in rows if r.figures is not None
                        and (cap is None or r.figures.max_peak_memory_bytes <= cap)), default=float("inf"))
        try:
            pipe = pipeline_of(SPLIT[pl], p, m, costs, scales)
            bound[pl] = prepare_pipeline(pipe, cap, constructive=False).trivial_tick
        except OpplanError:  # one micro-batch does not fit the cap there: no schedule at all
            bound[pl] = float("inf")
            continue
        if pipe.streams_on:  # the list schedule is a warm start there too (`planner.compare.planned_row`)
            got = best_stream_list(pipe, [cap if cap is not None else 2**40] * p)
            if listed is not None:
                listed[pl] = (pipe, got)
            if got is not None:
                warm[pl] = min(warm[pl], got[1])

    def words(pl: str) -> str:
        def fig(tick: float) -> str:
            return figure_text(tick / scales.ticks_per_unit) if tick < float("inf") else "none within the cap"
        return f"{pl}: warm start {fig(warm[pl])}, bound {fig(bound[pl])}"
    told = "; ".join(words(pl) for pl in placements)
    alone, why = choose(placements, warm, bound, bound_tie)
    return alone, f"auto: {why} ({told})"


def choose(placements: list[str], warm: dict[str, float], bound: dict[str, float],
           bound_tie: float = DEFAULT_COMPARE_POLICY.bound_tie) -> tuple[str | None, str]:
    """`dominant`'s rule on its two signals (ticks; inf: none): the placement with the shortest warm start and the
    lowest bound, else one with the shortest warm start whose bound is above another's by at most `bound_tie` of its
    own gap (warm - bound), else None; with the reason in words."""
    for pl in placements:
        if all(warm[pl] <= warm[o] and bound[pl] <= bound[o] for o in placements):
            return pl, f"{pl} alone, the shortest warm start and the lowest bound"
    for pl in placements:
        tie = bound_tie * (warm[pl] - bound[pl]) if warm[pl] < float("inf") else 0.0
        if all(warm[pl] <= warm[o] and bound[pl] <= bound[o] + tie for o in placements):
            return pl, f"{pl} alone, the shortest warm start, its bound within {bound_tie:.0%} of its gap of the lowest"
    return None, "every placement, the signals disagree"
