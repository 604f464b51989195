"""The planned row of `plan-compare` on one placement (`plan_placement`): the pipeline formulation solved with the
large-neighbourhood search after it (`planner.search.pipeline.solve`), warm-started from the best baseline or list
schedule; on a model, alternating with the cut search (`planner.compare.cut_search`), and at granularity k > 1 the
sub-chunk pipeline solved after the stage level (`planner.compare.subchunks`).  What one placement's solve is given
is one record, `PlacementJob`; its tuning is the job's `ComparePolicy`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from formulations.model_api import ProgressCallback
from formulations.pipeline import split_start_times
from formulations.stop import stop_requested
from planner.compare.baselines import SPLIT, WARM_FROM, pipeline_of, simulate_baseline
from planner.compare.compare_policy import DEFAULT_COMPARE_POLICY, ComparePolicy
from planner.compare.compare_row import CompareRow
from planner.compare.cut_search import any_cut_bound_tick, refine_cut
from planner.compare.model_costs import ModelCosts
from planner.compare.presets import PresetCosts
from planner.compare.subchunks import auto_granularity, expand_schedule, fine_pipeline
from planner.compare.table_text import figure_text
from planner.errors import OpplanError
from planner.pipeline.greedy import best_greedy
from planner.pipeline.metrics import figures
from planner.pipeline.registry import Scales, UnitCosts
from planner.pipeline.streams import simulate_pipeline
from planner.pipeline.unroll import TrainingPipeline
from planner.schedule.program import Schedule
from planner.schedule.validate import validate_plan
from planner.search.pipeline.results import LnsResult, LnsStep
from planner.search.pipeline.solve import solve_pipeline_lns

# a placement's pipeline and its list schedule ((start ticks, makespan tick) or None), computed by the auto choice
ListSchedule = tuple[TrainingPipeline, tuple[dict[str, int], int] | None]


@dataclass(frozen=True)
class RowSearch:
    """How the planned row's solves run the large-neighbourhood search: its share of each solve, and where its
    progress lines go (None: nowhere), with the placement they are for."""

    share: float = DEFAULT_COMPARE_POLICY.lns_share
    progress: Callable[[str], None] | None = None
    placement: str = ""
    reorder: bool = False  # micro-batches out of order inside a neighbourhood, untouched streams fixed (`compare`)

    def on_step(self, unit: str, ticks_per_unit: float) -> Callable[[LnsStep], None] | None:
        if self.progress is None:
            return None
        out = self.progress

        def line(step: LnsStep) -> None:
            if step.period_tick is not None:
                out(f"   periodic start ({self.placement}): {step.wall_s:.1f} s, one micro-batch of each chain every "
                    f"{figure_text(step.period_tick / ticks_per_unit)} {unit}, replayed "
                    f"{figure_text(step.after_tick / ticks_per_unit)} {unit} (best start before "
                    f"{figure_text(step.before_tick / ticks_per_unit)})")
            elif step.gained:
                out(f"   neighbourhood search ({self.placement}): {step.wall_s:.1f} s, step {step.step} ({step.kind}, "
                    f"{step.size} tasks): {figure_text(step.before_tick / ticks_per_unit)} -> "
                    f"{figure_text(step.after_tick / ticks_per_unit)} {unit}")
        return line

    def on_full(self, unit: str, ticks_per_unit: float) -> ProgressCallback | None:
        """A solver progress callback for the full model's solves: a line at each better incumbent (with the bound
        at that moment), so that a long solve is not silent."""
        if self.progress is None:
            return None
        out = self.progress
        best: list[float] = []

        def line(wall_s: float, incumbent: float | None, bound: float | None, gap: float | None) -> None:
            if incumbent is None or (best and incumbent >= best[-1]):
                return
            best.append(incumbent)
            # the solver's bound is for this placement's cut, not for every schedule of the model
            told = "" if bound is None else f", bound for this cut {figure_text(bound / ticks_per_unit)} {unit}"
            out(f"   full model ({self.placement}): {wall_s:.1f} s, incumbent "
                f"{figure_text(incumbent / ticks_per_unit)} {unit}{told}")
        return line

    def started(self, warm_name: str, warm_units: float | None, unit: str, limit_s: float) -> None:
        """The line that opens a solve: where it starts from, and its time."""
        if self.progress is not None:
            start = "no warm start" if warm_units is None else \
                f"starts from {warm_name or 'the warm start'} ({figure_text(warm_units)} {unit})"
            self.progress(f"   planned row ({self.placement}): {start}, {limit_s:.0f} s to solve")


@dataclass(frozen=True)
class PlacementJob:
    """What the planned row's solve on one placement is given (`plan_placement`)."""

    placement: str  # "dualpipe", "v" or "fixed"
    p: int  # devices (stages of the model)
    m: int  # micro-batches
    costs: UnitCosts | ModelCosts | PresetCosts
    scales: Scales
    baselines: dict[str, CompareRow]  # the baselines simulated so far, by name (the rest are simulated as needed)
    cap_bytes: int | None  # memory cap per device
    backend: str = "cpsat"
    granularity: int | None = 1  # sub-chunks per piece on a model (None: `auto_granularity`)
    subchunk_a2a: str = "piece"  # where a piece's all-to-alls sit among its sub-chunks
    search: RowSearch = RowSearch()
    listed: ListSchedule | None = None  # the auto choice's list schedule of this placement's pipeline
    policy: ComparePolicy = DEFAULT_COMPARE_POLICY


def plan_placement(job: PlacementJob, budget_s: float) -> CompareRow:
    """The planned row on `job.placement` within `budget_s`.  On a model the two levels alternate
    (`planner.compare.cut_search`): the cut is refined for the baselines' schedules (`policy.cut_share` of the
    budget), the pipeline formulation solves the chosen cut (warm-started), the cut is refined again for the
    schedule it returned and, when that moved the cut, the formulation solves the new cut warm-started from that
    schedule with the time left.  When a solve ends within `policy.bound_round_gap` of its cut's bound (with
    `policy.bound_round`), that round scores cuts by their bound instead (`refine_cut(score="bound")`: no reorder
    shortens such a schedule, only a cut with a lower bound can), and such rounds go on while their solve gains and
    time is left.  Then, at granularity k > 1 (`job.granularity`, None: `auto_granularity`), every piece of the
    final cut is split into k sub-chunks and the formulation solves that pipeline (`_solve_fine`,
    `policy.fine_share` of the budget; the stage level gets the rest) warm-started from the expansions of the
    stage-level schedules; the row keeps the shorter of the two and its notes say both."""
    t0 = time.monotonic()
    policy, costs = job.policy, job.costs
    references = reference_schedules(job)
    if not isinstance(costs, ModelCosts):
        return _solve_opplan(job, costs, references, budget_s, listed=job.listed)
    split, name = (2 if job.placement == "v" else 1), SPLIT[job.placement]
    p, m = job.p, job.m
    k = auto_granularity(costs.pipeline(name, p, m), policy) if job.granularity is None else int(job.granularity)
    total_s = budget_s
    if k > 1:
        budget_s = total_s * (1 - policy.fine_share)
    refs = [schedule for _, schedule in references]
    first = refine_cut(costs, split, name, p, m, refs, job.cap_bytes, deadline_s=t0 + policy.cut_share * budget_s,
                       policy=policy)
    solve_s = (budget_s - (time.monotonic() - t0)) * (1 - policy.cut_share)
    started_s = time.monotonic() - t0
    row = _solve_opplan(job, first.costs, references, solve_s, listed=job.listed)
    if row.figures is not None:  # time to best counts from the placement's start, cut search included
        row.notes["time_to_best_s"] = started_s + float(row.notes["time_to_best_s"])  # type: ignore[arg-type]
    rounds = [first]
    row_costs = first.costs
    bound_rounds = 0
    while row.schedule is not None and row.figures is not None:
        left = budget_s - (time.monotonic() - t0)
        # a solve at (or near) its cut's bound: only a cut with a lower bound can be shorter, so the round scores
        # cuts by their bound, and rounds go on while they gain; otherwise one round scored by the replays
        by_bound = policy.bound_round and float(row.notes["gap"]) <= policy.bound_round_gap  # type: ignore[arg-type]
        # Ctrl-C: as if time were up
        if left <= policy.cut_round_min_left_s or (len(rounds) > 1 and not by_bound) or stop_requested():
            break
        again = refine_cut(row_costs, split, name, p, m, [row.schedule, *refs], job.cap_bytes,
                           deadline_s=time.monotonic() + left / 2, score="bound" if by_bound else "makespan",
                           policy=policy)
        rounds.append(again)
        bound_rounds += int(by_bound)
        left = budget_s - (time.monotonic() - t0)
        if not again.moves_kept or left <= policy.cut_round_min_left_s:
            break
        started_s = time.monotonic() - t0
        other = _solve_opplan(job, again.costs, [*references, ("previous round", row.schedule)], left)
        if other.figures is None or other.figures.makespan_tick >= row.figures.makespan_tick:
            break
        other.notes["time_to_best_s"] = started_s + float(other.notes["time_to_best_s"])  # type: ignore[arg-type]
        row, row_costs = other, again.costs
    if k > 1 and row.schedule is not None and not stop_requested():
        row = _solve_fine(job, row_costs, row, [r for _, r in references], total_s - (time.monotonic() - t0), k,
                          started_s=time.monotonic() - t0)
    if row.pipeline is not None:
        any_cut = any_cut_bound_tick(costs, row.pipeline)
        row.notes["cut"] = {"moves": sum(r.moves_kept for r in rounds),
                            "chain_moves": sum(r.chain_moves_kept for r in rounds),
                            "simulations": sum(r.evaluations for r in rounds), "bound_rounds": bound_rounds,
                            "any_cut_bound_units": None if any_cut is None else any_cut / job.scales.ticks_per_unit}
    return row


def reference_schedules(job: PlacementJob) -> list[tuple[str, Schedule]]:
    """(name, schedule) of the baselines the planned row on `job.placement` starts from (`WARM_FROM`), simulated
    here when the user's `--schedules` left them out."""
    rows = ((n, job.baselines.get(n) or simulate_baseline(n, job.p, job.m, job.costs, job.scales))
            for n in WARM_FROM[job.placement])
    return [(n, r.schedule) for n, r in rows if not r.skipped and r.schedule is not None]


def _solve_opplan(job: PlacementJob, costs, candidates: list[tuple[str, Schedule]], time_limit_s: float,
                  pipe: TrainingPipeline | None = None, listed: ListSchedule | None = None) -> CompareRow:
    """Solve the pipeline formulation on `job.placement`'s pipeline of `costs` (or on `pipe`, e.g. a sub-chunk
    pipeline), warm-started from the shortest of the `candidates` (name, schedule), each re-simulated on this
    pipeline (its cut may not be theirs), that fits the cap, or the greedy list schedule when that is shorter (the
    auto choice's `listed` when it is this very pipeline); a skipped row with the solver's reason when it fails.
    The solve is `solve_pipeline_lns`: the full model, then the large-neighbourhood search for `job.search.share` of
    the time (notes["lns"] says what it gained).  On a sub-chunk pipeline (`pipe` given) the solver's schedule is
    also replayed as the baselines are, and the shorter timeline kept (see the comment below)."""
    fine, cap, scales = pipe is not None, job.cap_bytes, job.scales
    if pipe is None:
        pipe = pipeline_of(SPLIT[job.placement], job.p, job.m, costs, scales)
        pipe = dataclasses.replace(pipe, name=f"opplan-{job.placement}")
    warm, warm_name = None, ""
    prep_t0 = time.monotonic()
    for n, schedule in candidates:
        try:
            _inst, timeline = simulate_pipeline(pipe, schedule)
        except OpplanError:
            continue
        fig = figures(pipe, timeline)
        if cap is not None and fig.max_peak_memory_bytes > cap:
            continue
        times = split_start_times(pipe, timeline)
        if times is not None and (warm is None or fig.makespan_tick < warm[1]):
            warm = (times, fig.makespan_tick)
            warm_name = n
    greedy_t0 = time.monotonic()
    if listed is not None and dataclasses.replace(listed[0], name="") == dataclasses.replace(pipe, name=""):
        greedy = listed[1]  # the auto choice's list schedule of this very pipeline (same cut)
    else:
        greedy = best_greedy(pipe, [cap if cap is not None else 2**40] * job.p)
    if greedy is not None and (warm is None or greedy[1] < warm[1]):
        warm, warm_name = greedy, "greedy"
    if not fine:  # the list schedules take seconds on the largest pipelines: the row's budget pays for them
        time_limit_s = max(1.0, time_limit_s - (time.monotonic() - greedy_t0))
    else:  # a sub-chunk pipeline: building, validating and replaying its larger model take about what the
        # warm-start simulations took, twice over, outside the solver's own limit (keeps the row in its budget)
        time_limit_s = max(1.0, time_limit_s - 2 * (time.monotonic() - prep_t0))
    search = job.search
    try:
        time_unit = costs.time_unit if isinstance(costs, (ModelCosts, PresetCosts)) else "unit"
        search.started(warm_name, None if warm is None else warm[1] / scales.ticks_per_unit, time_unit, time_limit_s)
        sol, lns = solve_pipeline_lns(pipe, cap, warm_start=warm[0] if warm else None, time_limit_s=time_limit_s,
                                      backend=job.backend, lns_share=search.share, fifo_inside=not search.reorder,
                                      fix_untouched=search.reorder, policy=job.policy.search,
                                      progress=search.on_step(time_unit, scales.ticks_per_unit),
                                      full_progress=search.on_full(time_unit, scales.ticks_per_unit))
    except OpplanError as exc:  # no schedule on this placement: the row says why (memory, or a solver failure)
        return CompareRow("opplan", skipped=f"{job.placement} placement: {' '.join(str(exc).split())}")
    timeline, fig = sol.timeline, figures(pipe, sol.timeline)
    gap = sol.gap
    if fine:
        # The schedule's per-device order replayed as the baselines are (each task as early as it may start, the
        # communication streams first come, first served) can end before the solver's incumbent when the solver
        # stopped with slack in it; the replay is a valid schedule of the same pipeline, measured on the same basis.
        inst, replay = simulate_pipeline(pipe, sol.schedule)
        again = figures(pipe, replay)
        if again.makespan_tick < fig.makespan_tick and (cap is None or again.max_peak_memory_bytes <= cap):
            validate_plan(inst, replay.to_plan(method="opplan"))
            timeline, fig = replay, again
            gap = max(0.0, (fig.makespan_tick - sol.lower_bound_tick) / fig.makespan_tick)
    row = CompareRow("opplan", pipe, sol.schedule, timeline, fig)
    row.notes = {"status": sol.status, "bound_units": sol.lower_bound_tick / scales.ticks_per_unit,
                 "bound_tick": sol.lower_bound_tick, "gap": gap, "warm_start": warm_name,
                 "solve_time_s": sol.solve_time_s, "time_to_best_s": sol.time_to_best_s, "placement": job.placement,
                 "cap_bytes": cap, "warm_units": None if warm is None else warm[1] / scales.ticks_per_unit,
                 "lns": _lns_note(lns, scales)}
    return row


def _lns_note(lns: LnsResult | None, scales: Scales) -> dict[str, object] | None:
    """What the large-neighbourhood search did, in the comparison's units (None: it did not run)."""
    if lns is None:
        return None
    return {"from_units": lns.start_tick / scales.ticks_per_unit, "to_units": lns.best_tick / scales.ticks_per_unit,
            "replayed_units": lns.replayed_tick / scales.ticks_per_unit,
            "steps": len(lns.steps), "gains": lns.gains, "in_order": lns.in_order,
            "after_full_solve": lns.after_full_solve,
            "folded": lns.folded,
            "periodic_period_units": None if lns.periodic is None else lns.periodic[0] / scales.ticks_per_unit,
            "periodic_replayed_units": None if lns.periodic is None else lns.periodic[1] / scales.ticks_per_unit,
            "seconds": lns.steps[-1].wall_s if lns.steps else 0.0,
            "resolve_s": None if lns.resolve is None else lns.resolve[0],
            "resolve_units": None if lns.resolve is None else lns.resolve[1] / scales.ticks_per_unit}


def _solve_fine(job: PlacementJob, costs: ModelCosts, coarse: CompareRow, references: list[Schedule],
                time_limit_s: float, k: int, *, started_s: float) -> CompareRow:
    """The planned row at granularity k on `costs`' cut (`planner.compare.subchunks`): the formulation on the
    sub-chunk pipeline, warm-started from the shortest expansion (of the stage-level row's schedule and the
    references) that fits the cap, or the greedy list schedule when that is shorter.  Returns the shorter of
    that and `coarse`, with notes["granularity"] saying both."""
    a2a_at, scales = job.subchunk_a2a, job.scales
    try:
        fine = fine_pipeline(costs, SPLIT[job.placement], job.p, job.m, k, a2a_at=a2a_at)
    except OpplanError as exc:  # a piece too small to split: the stage-level row stands
        coarse.notes["granularity"] = {"k": 1, "asked": k, "why": str(exc)}
        return coarse
    pipe = dataclasses.replace(fine.pipeline, name=f"opplan-{job.placement}-k{k}")
    fine = dataclasses.replace(fine, pipeline=pipe)
    assert coarse.schedule is not None and coarse.figures is not None
    candidates = [("stage-level opplan", coarse.schedule), *((s.name, s) for s in references)]
    expanded = [(n, expand_schedule(s, fine)) for n, s in candidates]
    row = _solve_opplan(job, costs, expanded, time_limit_s, pipe=pipe)
    assert coarse.pipeline is not None
    _inst, replay = simulate_pipeline(coarse.pipeline, coarse.schedule)  # its order, replayed as the baselines are
    note = {"k": k, "tasks": fine.num_compute_tasks, "a2a_at": a2a_at,
            "stage_level_replayed_units": replay.makespan_tick / scales.ticks_per_unit, "stage_level_makespan_units":
            coarse.figures.makespan_tick / scales.ticks_per_unit,
            "stage_level_bound_units": coarse.notes.get("bound_units"), "kept": "stage level",
            "warm_start": row.notes.get("warm_start"), "warm_units": row.notes.get("warm_units")}
    if row.figures is None or row.figures.makespan_tick >= coarse.figures.makespan_tick:
        note["fine_makespan_units"] = None if row.figures is None else row.figures.makespan_tick / scales.ticks_per_unit
        note["fine_bound_units"] = row.notes.get("bound_units")
        coarse.notes["granularity"] = note
        return coarse
    note["kept"] = f"k = {k}"
    row.notes["time_to_best_s"] = started_s + float(row.notes["time_to_best_s"])  # type: ignore[arg-type]
    row.notes["granularity"] = note
    return row
