"""Compare the baselines and the planned schedule on one cost model (the library side of ``plan-compare``).

Every schedule is simulated on the instance of its own pipeline (`planner.compare.baselines`: `registry.pipeline_for`
on unit costs, `model_costs.ModelCosts.pipeline` on a model, `presets.PresetCosts.pipeline` on a preset: the same
model on the same p devices, cut as the schedule needs) with the same costs; figures come from
`planner.pipeline.metrics.figures`.  Units: on unit costs makespan in the user's time unit, memory in the user's
memory unit (`--activation`, `--param`); on a model microseconds and MiB; on a preset milliseconds and MiB.
Bubble ratio = total idle time / (devices x makespan).  Peak memory = max over devices of (parameters + activations
in flight).

The planned row ``opplan`` solves `formulations.pipeline` on a placement (``both``: both DualPipe's two-direction
split — two copies, m/2 micro-batches each way — and the V-shape split — 2p half stages, as ZB-V and DualPipeV —
with half the time limit each, keeping the shorter; ``auto``, the default: the one of those two that has both the
shortest warm start within the cap (on pipelines with communication streams the list schedule of
`planner.pipeline.stream_greedy` counts) and the lowest bound (a bound lower by less than `ComparePolicy.bound_tie`
of that warm start's gap does not count), alone with the time limit left after that choice, or ``both`` when no
placement has both (`planner.compare.placement_choice`); ``warm``: only the one whose baselines run shortest within
the cap, with the whole time limit; or one of ``dualpipe``, ``v``, ``fixed``), warm-started from the best baseline
on that split that fits the cap, or the constructive list schedule of `planner.pipeline.greedy` when that is shorter
(its overlapped pairs included when `fb_overlap` < 1: the formulation may pair F and B itself); the cap defaults to
DualPipe's peak memory per device.  Each solve gives `ComparePolicy.lns_share` of its time (``compare(
lns_share=...)``, ``plan-compare --lns-share``) to the large-neighbourhood search of `planner.search.pipeline` after
the full model, which moves the large pipelines the full model stalls on (a search that stalls hands the time left
back to the full model); the bound stays the full model's (or the trivial bound, when the search left micro-batch
order), and the table's line says what the search and that second full solve gained.  With
``compare(lns_mode="reorder")`` (``plan-compare --lns-mode reorder``) micro-batches may leave their order inside a
neighbourhood and the streams a neighbourhood does not touch stay fixed (smaller steps); the default keeps the
order, because reordering is no better at the same budget where the search gets a few seconds of each solve
(`experiments.bench_pipeline.bench_lns_mode` measures the two side by side).
On a model the planned row also chooses its own cut (`planner.compare.planned_row`, `planner.compare.cut_search`):
the baselines keep the bottleneck-minimal cut their users would take, the planned row moves the boundaries between
pieces where the schedules run shorter, and its bound is the formulation's bound *for the cut it chose* (the table
line says so); beside it, on a model or a preset, the bound over every cut of both placements
(`planner.compare.cut_bound`, notes["every_cut"]).  Then, at granularity k > 1 (`planner.compare.subchunks`;
`compare(granularity=...)`, ``plan-compare --granularity``, or chosen by the task count with ``auto``), every piece
of that cut is split into k sub-chunks on its device and the formulation orders their F, B and W, warm-started from
the stage-level schedules expanded; the row keeps the shorter schedule.  The planned row's tuning is one record,
`planner.compare.compare_policy.ComparePolicy`, passed down from the caller.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import pandas as pd

from formulations.pipeline import prepare_pipeline
from formulations.stop import stop_requested
from planner.compare.baselines import SPLIT, WARM_FROM, free_placements, pipeline_of, scales_of, simulate_baseline
from planner.compare.compare_budget import DEFAULT_COMPARE_BUDGET, CompareBudget, drawing_s
from planner.compare.compare_policy import DEFAULT_COMPARE_POLICY, LNS_MODES, PLACEMENTS, ComparePolicy
from planner.compare.compare_row import CompareRow
from planner.compare.cut_bound import FAMILIES, every_cut_bound_tick
from planner.compare.cut_memory_note import note_every_cut_memory_bound
from planner.compare.memory_bound_note import note_memory_bound
from planner.compare.model_costs import ModelCosts
from planner.compare.placement_choice import Listed, dominant, warmest
from planner.compare.planned_row import PlacementJob, RowSearch, plan_placement
from planner.compare.plot import plot_schedule, plot_side_by_side
from planner.compare.presets import PresetCosts
from planner.compare.table_text import figure_text, opplan_line, outcome_line
from planner.compare.torch_runnable import TORCH_PLACEMENTS, runnable_row, torch_runs
from planner.errors import OpplanError
from planner.pipeline.registry import GENERATORS, Scales, UnitCosts
from planner.schedule.atomic import atomic_write_text
from planner.schedule.plan import PlanStatus
from planner.schedule.torch_csv import write_torch_csv

# the names callers take from here, whichever module of planner.compare holds them
__all__ = ["CSV_COLUMNS", "LNS_MODES", "PLACEMENTS", "CompareRow", "CompareValues", "Comparison", "compare",
           "devices_at_cap", "scales_of", "simulate_baseline", "write_outputs"]

_TICKS = re.compile(r"\b(\d+) ticks\b")
CSV_COLUMNS = ("schedule", "makespan", "bubble_ratio", "peak_memory", "param_memory")


class CompareValues(TypedDict):
    """One row of compare.csv (keys: CSV_COLUMNS), figures in the comparison's units."""

    schedule: str
    makespan: float
    bubble_ratio: float
    peak_memory: float
    param_memory: float


@dataclass
class Comparison:
    num_devices: int
    num_microbatches: int
    costs: UnitCosts | ModelCosts | PresetCosts
    scales: Scales
    rows: list[CompareRow]
    memory_cap_units: float | None = None
    policy: ComparePolicy = DEFAULT_COMPARE_POLICY  # the planned row's tuning (its table line names a knob)
    # the planned schedule torch's pipelining runtime runs, when the planned row's does not (`compare(runnable=True)`)
    runnable: CompareRow | None = None

    def ok_rows(self) -> list[CompareRow]:
        return [r for r in self.rows if not r.skipped]

    def row(self, name: str) -> CompareRow:
        return next(r for r in self.rows if r.name == name)

    def values(self, r: CompareRow) -> CompareValues:
        f = r.figures
        assert f is not None
        return {
            "schedule": r.name,
            "makespan": f.makespan_tick / self.scales.ticks_per_unit,
            "bubble_ratio": round(f.bubble_ratio, 6),
            "peak_memory": f.max_peak_memory_bytes / self.scales.bytes_per_unit,
            "param_memory": max(f.param_bytes, default=0) / self.scales.bytes_per_unit,
        }

    def units(self) -> tuple[str, str]:
        """(time unit, memory unit) of every figure: the model's ("us", "MiB"), or the user's own on unit costs."""
        if isinstance(self.costs, (ModelCosts, PresetCosts)):
            return self.costs.time_unit, self.costs.memory_unit
        return "unit", "unit"

    def csv_frame(self) -> pd.DataFrame:
        """One row per schedule that ran, in `CSV_COLUMNS`: makespan in the time unit, bubble ratio, the largest
        device's peak and parameter memory in the memory unit (`units()`); `compare.csv` is written from it."""
        return pd.DataFrame([self.values(r) for r in self.ok_rows()], columns=list(CSV_COLUMNS))

    def csv_text(self) -> str:
        """`compare.csv`'s text: `csv_frame()` with LF line ends."""
        return str(self.csv_frame().to_csv(index=False, lineterminator="\n"))

    def best_marks(self) -> dict[str, str]:
        """Row name -> its mark in the table: the best known schedule (the shortest baseline; ties all marked) and,
        when the planned row is at least as short, ``best of all``."""
        done = [r for r in self.ok_rows() if r.figures is not None]
        baselines = [r for r in done if r.name != "opplan"]
        marks: dict[str, str] = {}
        if baselines:
            best = min(r.figures.makespan_tick for r in baselines)  # type: ignore[union-attr]
            marks = {r.name: "best known" for r in baselines if r.figures.makespan_tick == best}  # type: ignore[union-attr]
            opp = next((r for r in done if r.name == "opplan"), None)
            if opp is not None and opp.figures.makespan_tick <= best:  # type: ignore[union-attr]
                marks["opplan"] = "best of all"
        return marks

    def table(self, *, verbose: bool = True) -> str:
        """The table plan-compare prints: one row per schedule, figures in the comparison's units (`units`), the
        planned row's line (`verbose`: with how the search went) and the outcome in words (`outcome_line`)."""
        time_unit, memory_unit = self.units()
        lines = [f"{'schedule':<18}{'makespan':>12}{'bubble':>9}{'peak mem':>12}{'params':>12}",
                 f"{'':<18}{f'({time_unit})':>12}{'':>9}{f'({memory_unit})':>12}{f'({memory_unit})':>12}"]
        marks = self.best_marks()
        for r in self.rows:
            if r.skipped:
                lines.append(f"{r.name:<18}skipped: {r.skipped}")
                continue
            v = self.values(r)
            mark = f"  <- {marks[r.name]}" if r.name in marks else ""
            lines.append(f"{r.name:<18}{figure_text(v['makespan']):>12}{v['bubble_ratio']:>9.2%}"
                         f"{figure_text(v['peak_memory']):>12}{figure_text(v['param_memory']):>12}{mark}")
        opp = next((r for r in self.rows if r.name == "opplan" and not r.skipped), None)
        if opp is not None:
            lines.append(opplan_line(opp, time_unit, memory_unit, self.memory_cap_units, self.policy.bound_round_gap,
                                     verbose=verbose))
            figures = {r.name: {k: float(v) for k, v in self.values(r).items() if k != "schedule"}  # type: ignore[arg-type]
                       for r in self.ok_rows()}
            lines.append(outcome_line(figures, time_unit))
        return "\n".join(lines)


def compare(
    p: int,
    m: int,
    costs: UnitCosts | ModelCosts | PresetCosts | None = None,
    *,
    schedules: tuple[str, ...] | None = None,
    opplan: bool = True,
    memory_cap_units: float | None = None,
    opplan_placement: str = "auto",
    time_limit_s: float = 120.0,
    backend: str = "cpsat",
    granularity: int | None = 1,
    subchunk_a2a: str = "piece",
    lns_share: float | None = None,
    progress: Callable[[str], None] | None = None,
    lns_mode: str = "in-order",
    bound_time_s: float | None = None,
    policy: ComparePolicy = DEFAULT_COMPARE_POLICY,
    pictures: bool = False,
    budget: CompareBudget = DEFAULT_COMPARE_BUDGET,
    baselines: Sequence[CompareRow] | None = None,
    runnable: bool = False,
) -> Comparison:
    """Simulate every baseline (skipping those whose requirements fail) and, if `opplan`, solve the planned row
    on `opplan_placement` (`PLACEMENTS`; module docstring) within `time_limit_s` (the auto placement choice included).
    `granularity`: sub-chunks per piece for the planned row on a model (`planner.compare.subchunks`; 1, the
    default: stage level only; None: chosen by `auto_granularity`); `subchunk_a2a`: where a piece's all-to-alls sit
    among its sub-chunks (`planner.compare.subchunks.A2A_AT`: ``piece``, as the baselines are measured, or
    ``experts``); `lns_share`: of each formulation solve's time, what the large-neighbourhood search
    (`planner.search.pipeline`) gets after the full model (0: none; None: `policy.lns_share`); `progress`: called
    with a line for the auto placement choice, for each solve's start (its warm start and time), for each better
    incumbent of the full model and for each gain of the search; `lns_mode` (`LNS_MODES`): ``reorder`` lets the
    search run micro-batches out of order inside a neighbourhood and fixes the streams a neighbourhood does not
    touch, ``in-order`` (the default) keeps the order and models every stream's middle; `bound_time_s`: after the
    solves, the time the memory bound (`planner.compare.memory_bound_note`) may take on a row not proven optimal
    (0: none; None: `policy.memory_bound_s`); `policy`: the planned row's tuning (`ComparePolicy`).

    `time_limit_s` bounds the whole comparison: the baselines, the placement choice, the solves, the memory bound
    (at most `bound_time_s`, and at most `budget.bound_share` of the limit set aside for it) and, when `pictures`
    (the caller draws them next, `write_outputs`), the estimated time of the drawing (`CompareBudget`) all come out
    of it; the solves get the rest.  A placement whose bound is no lower than a schedule another placement already
    found is not solved (a progress line says so).  `baselines`: the baseline rows already simulated on these
    costs (a memory sweep simulates them once), taken instead of simulating `schedules` again.

    `runnable`: when the planned row's schedule is one torch's pipelining runtime cannot run (DualPipe's two
    directions; `planner.compare.torch_runnable`), also plan one it can, `Comparison.runnable`: the shortest row
    already solved on the V or the fixed placement, else a solve on the one of them whose baselines run shortest,
    which gets `policy.runnable_share` of the solves' time when none of the placements solved is runnable (set
    aside before them) and what the solves left otherwise."""
    t_start = time.monotonic()
    costs = costs or UnitCosts()
    scales = scales_of(costs)
    if p < 1 or m < 1:
        raise OpplanError(f"need at least one stage and one micro-batch (got {p} stages, {m} micro-batches)")
    if lns_mode not in LNS_MODES:
        raise OpplanError(f"unknown search mode {lns_mode!r}", fix=f"use one of {', '.join(LNS_MODES)}")
    names = schedules or tuple(GENERATORS)
    rows = list(baselines) if baselines is not None else [simulate_baseline(n, p, m, costs, scales) for n in names]
    cmp = Comparison(p, m, costs, scales, rows, policy=policy)
    if not opplan:
        return cmp
    by_name = {r.name: r for r in rows if not r.skipped}
    cap = _memory_cap(p, m, costs, scales, by_name, memory_cap_units)
    cmp.memory_cap_units = None if cap is None else cap / scales.bytes_per_unit
    job = PlacementJob("", p, m, costs, scales, by_name, cap, backend, granularity, subchunk_a2a, policy=policy)
    deadline = t_start + time_limit_s
    draw_s = _drawing_estimate_s(rows, budget) if pictures else 0.0
    if bound_time_s is None:
        bound_time_s = policy.memory_bound_s
    bound_reserve_s = min(bound_time_s, budget.bound_share * time_limit_s)
    t0 = time.monotonic()
    placements, why, listed = _placements(opplan_placement, job, progress)
    if why and progress is not None:
        progress(f"   {why}")
    # the baselines and the choice's list schedules and bounds (tens of seconds on the largest pipelines) are paid
    # for, and the memory bound's and the pictures' shares set aside: the command keeps to `time_limit_s` (unless
    # those alone take longer)
    solve_s = max(budget.min_solve_s, deadline - time.monotonic() - draw_s - bound_reserve_s)
    # none of the placements solved is one torch runs: the runnable alternative's share is set aside
    runnable_s = policy.runnable_share * solve_s if runnable and not set(placements) & set(TORCH_PLACEMENTS) else 0.0
    share = policy.lns_share if lns_share is None else lns_share
    search = RowSearch(share, progress, "", lns_mode == "reorder")
    solved: dict[str, CompareRow] = {}
    best, failures = _solve_placements(job, placements, max(budget.min_solve_s, solve_s - runnable_s), t0, why,
                                       listed, search, budget.min_solve_s, solved)
    if runnable and best is not None and not torch_runs(best) and not stop_requested():
        cmp.runnable = runnable_row(job, solved, max(budget.min_solve_s,
                                                     deadline - time.monotonic() - draw_s - bound_reserve_s), search)
    if best is None:
        rows.append(CompareRow("opplan", skipped="no placement gave a schedule (" + "; ".join(failures) + ")"))
    else:
        _note_planned_row(best, cmp, by_name.get("dualpipe"), cap, bound_time_s, deadline - draw_s, progress)
        rows.append(best)
    return cmp


def _note_planned_row(best: CompareRow, cmp: Comparison, dualpipe: CompareRow | None, cap: int | None,
                      bound_time_s: float, bound_until: float, progress: Callable[[str], None] | None) -> None:
    """The notes the steps after the solves add to the planned row `best`: the bound over every cut, the devices at
    the memory cap, the memory bound (at most `bound_time_s`, and only until the monotonic time `bound_until`;
    why it was skipped when no time is left or the user stopped the search) and the other placements' bounds."""
    p, m, costs, scales = cmp.num_devices, cmp.num_microbatches, cmp.costs, cmp.scales
    _note_every_cut_bound(best, p, m, costs, scales, cmp.policy)
    if not stop_requested():
        note_every_cut_memory_bound(best, p, m, costs, scales, cap, None if dualpipe is None else dualpipe.figures,
                                    cmp.policy)
    best.notes["devices_at_cap"] = devices_at_cap(best.figures.peak_memory_bytes, cap,  # type: ignore[union-attr]
                                                  cmp.policy.at_cap_share)
    bound_s = min(bound_time_s, bound_until - time.monotonic())  # what the solves left, up to its own
    if stop_requested():  # the user's Ctrl-C stopped the search: no bound search after it
        bound_s = 0.0
    if bound_time_s > 0 >= bound_s and best.notes.get("status") is not PlanStatus.OPTIMAL:
        best.notes["memory_bound"] = {"skipped": "the search was stopped (Ctrl-C)" if stop_requested()
                                      else "the time limit is spent"}
    note_memory_bound(best, None if dualpipe is None else dualpipe.figures, cap, scales, bound_s,
                      None if progress is None else
                      (lambda line: progress(f"   {ticks_in_units(line, scales, cmp.units()[0])}")),
                      cmp.policy.memory_bound)
    _note_other_placements(best, p, m, costs, scales, cap)


def ticks_in_units(line: str, scales: Scales, time_unit: str) -> str:
    """A progress line of the pipeline formulations with every "N ticks" in the comparison's time unit (the table's
    and the CSV's): solver ticks mean nothing to a reader."""
    return _TICKS.sub(lambda found: f"{figure_text(int(found[1]) / scales.ticks_per_unit)} {time_unit}", line)


def _drawing_estimate_s(rows: list[CompareRow], budget: CompareBudget) -> float:
    """The time the pictures of these rows and the planned one take to draw: one per schedule (the planned row's
    about as large as the largest baseline's) and the side-by-side of all (`CompareBudget`)."""
    bars = _bars(rows)[:-1]
    largest = max(bars, default=0)
    return drawing_s(budget, [*bars, largest, sum(bars) + largest])


def _bars(rows: list[CompareRow]) -> list[int]:
    """The bars of each row's picture, and of the side-by-side of them all (the last)."""
    bars = [len(r.timeline.placements) for r in rows if not r.skipped and r.timeline is not None]
    return [*bars, sum(bars)]


def _memory_cap(p: int, m: int, costs, scales: Scales, by_name: dict[str, CompareRow],
                memory_cap_units: float | None) -> int | None:
    """The planned row's memory cap per device in bytes: the user's, else DualPipe's peak memory (None: DualPipe
    does not run here)."""
    if memory_cap_units is not None:
        return round(memory_cap_units * scales.bytes_per_unit)
    if "dualpipe" in by_name:
        return by_name["dualpipe"].figures.max_peak_memory_bytes  # type: ignore[union-attr]
    dp = simulate_baseline("dualpipe", p, m, costs, scales)
    return dp.figures.max_peak_memory_bytes if dp.figures else None


def _placements(opplan_placement: str, job: PlacementJob,
                progress: Callable[[str], None] | None) -> tuple[list[str], str, Listed]:
    """The placements the planned row solves (module docstring), how ``auto`` chose (words; empty otherwise), and
    the list schedules the choice computed (handed to the solves)."""
    listed: Listed = {}
    if opplan_placement in ("auto", "both", "warm"):
        placements = free_placements(job.p, job.m)
        if opplan_placement == "warm" and len(placements) > 1:
            return [warmest(placements, job.p, job.m, job.costs, job.scales, job.baselines, job.cap_bytes)], "", listed
        if opplan_placement == "auto" and len(placements) > 1:
            alone, why = dominant(placements, job.p, job.m, job.costs, job.scales, job.baselines, job.cap_bytes,
                                  listed, job.policy.bound_tie)
            return ([alone] if alone is not None else placements), why, listed
        return placements, "", listed
    if opplan_placement in WARM_FROM:
        return [opplan_placement], "", listed
    raise OpplanError(f"unknown placement {opplan_placement!r} for the planned schedule",
                      fix=f"use one of {', '.join(PLACEMENTS)}")


def _solve_placements(job: PlacementJob, placements: list[str], time_limit_s: float, t0: float, why: str,
                      listed: Listed, search: RowSearch, min_solve_s: float = DEFAULT_COMPARE_BUDGET.min_solve_s,
                      solved: dict[str, CompareRow] | None = None) -> tuple[CompareRow | None, list[str]]:
    """The planned row on each of `placements`, the time left split evenly among the placements left: the
    shortest (None: none gave a schedule), with the placements tried and why auto chose in its notes; and why each
    failed placement gave no schedule.  A placement whose bound is no lower than the shortest schedule found so far
    is not solved (it cannot end shorter; notes["placements_skipped"] and a progress line say so), and its time
    goes to the placements after it.  `solved` (when given) receives each placement's row that has a schedule."""
    best: CompareRow | None = None
    # placement -> (makespan, bound) in ticks; makespan None: not solved, its bound cannot beat the incumbent
    tried: dict[str, tuple[int | None, int]] = {}
    skipped: dict[str, float] = {}  # placement -> its bound in the comparison's units, no lower than the incumbent
    failures: list[str] = []  # why a placement gave no schedule, in the skipped row's words
    deadline = time.monotonic() + time_limit_s
    for i, placement in enumerate(placements):
        if best is not None and stop_requested():  # the user's Ctrl-C: the schedule found so far stands
            break
        if best is not None and best.figures is not None:
            bound = _placement_bound_tick(job, placement)
            if bound is not None and bound >= best.figures.makespan_tick:
                per = job.scales.ticks_per_unit
                skipped[placement] = bound / per
                tried[placement] = (None, bound)
                if search.progress is not None:
                    search.progress(f"   {placement} placement skipped: its bound {figure_text(bound / per)} cannot "
                                    f"beat the {best.notes.get('placement')} placement's schedule "
                                    f"{figure_text(best.figures.makespan_tick / per)}")
                continue
        before = time.monotonic() - t0  # time to best counts from the placement choice's start
        share_s = max(min_solve_s, (deadline - time.monotonic()) / (len(placements) - i))
        row = plan_placement(dataclasses.replace(job, placement=placement, listed=listed.get(placement),
                                                 search=dataclasses.replace(search, placement=placement)),
                             share_s)
        if row.figures is None:
            failures.append(row.skipped or f"{placement} placement: no schedule")
            continue
        row.notes["time_to_best_s"] = before + float(row.notes["time_to_best_s"])  # type: ignore[arg-type]
        row.notes["tried"] = tried
        row.notes["placement_why"] = why
        row.notes["placements_skipped"] = skipped
        tried[placement] = (row.figures.makespan_tick, int(row.notes["bound_tick"]))  # type: ignore[call-overload]
        if solved is not None:
            solved[placement] = row
        if best is None or best.figures is None or row.figures.makespan_tick < best.figures.makespan_tick:
            best = row
    return best, failures


def _placement_bound_tick(job: PlacementJob, placement: str) -> int | None:
    """A lower bound on every schedule the planned row can find on `placement`, in ticks; None where none is
    cheap to know.  On unit costs the placement's trivial bound (critical path, work / devices; no order or memory
    assumed); on a model or a preset the planned row moves its cut, so the bound over every cut of the placement
    (`planner.compare.cut_bound`).  Only at granularity 1: sub-chunks can overlap what a stage-level bound keeps
    apart."""
    if job.granularity != 1 or placement not in SPLIT:
        return None
    try:
        if isinstance(job.costs, (ModelCosts, PresetCosts)):
            return (every_cut_bound_tick(job.costs, job.p, job.m, (placement,), job.policy)[0] if placement in FAMILIES
                    else None)
        pipeline = pipeline_of(SPLIT[placement], job.p, job.m, job.costs, job.scales)
        return prepare_pipeline(pipeline, job.cap_bytes, constructive=False).trivial_tick
    except OpplanError:
        return None


def devices_at_cap(peak_bytes: Sequence[int], cap_bytes: int | None,
                   at_cap_share: float = DEFAULT_COMPARE_POLICY.at_cap_share) -> tuple[int, ...]:
    """The devices whose peak memory is at least `at_cap_share` of the cap (none without a cap): where the cap,
    not the order, keeps a schedule above its cut's bound (a capped schedule can sit above its cut's uncapped
    optimum with every device at the cap)."""
    if cap_bytes is None or cap_bytes <= 0:
        return ()
    return tuple(d for d, peak in enumerate(peak_bytes) if peak >= at_cap_share * cap_bytes)


def _note_other_placements(row: CompareRow, p: int, m: int, costs, scales: Scales, cap: int | None) -> None:
    """Where the memory bound proved half of DualPipe's bubble out of reach on the planned row's placement, the
    other placements' bounds on their own cut (`prepare_pipeline`'s trivial bound: critical path, work / devices,
    device bound; no order or memory assumed), so the note says whether they could reach it
    (notes["memory_bound"]["other_placements_units"]; inf: one micro-batch does not fit the cap there)."""
    note = row.notes.get("memory_bound")
    if not isinstance(note, dict) or not note.get("half_bubble_unreachable"):
        return
    others: dict[str, float] = {}
    for pl in free_placements(p, m):
        if pl == row.notes.get("placement"):
            continue
        try:
            tick = prepare_pipeline(pipeline_of(SPLIT[pl], p, m, costs, scales), cap, constructive=False).trivial_tick
        except OpplanError:
            others[pl] = float("inf")
            continue
        others[pl] = tick / scales.ticks_per_unit
    note["other_placements_units"] = others


def _note_every_cut_bound(row: CompareRow, p: int, m: int, costs, scales: Scales, policy: ComparePolicy) -> None:
    """On a model or a preset, note on the planned row the bound over every cut of both placements it solves
    (`planner.compare.cut_bound`: per device, the pieces' heads and work, minimised over cuts), per placement and
    the lesser (notes["every_cut"]); computed once, after the solves (seconds on a few hundred ops, outside the
    time limit); not after the user's Ctrl-C stopped the search (they asked for the result now)."""
    if not isinstance(costs, (ModelCosts, PresetCosts)) or stop_requested():
        return
    bound, per_family = every_cut_bound_tick(costs, p, m, policy=policy)
    row.notes["every_cut"] = {"bound_units": None if bound is None else bound / scales.ticks_per_unit,
                              "by_placement_units": {fam: None if v is None else v / scales.ticks_per_unit
                                                     for fam, v in per_family.items()}}


def write_outputs(cmp: Comparison, out_dir: str | os.PathLike[str], *, pictures: bool = True,
                  progress: Callable[[str], None] | None = None,
                  budget: CompareBudget = DEFAULT_COMPARE_BUDGET) -> list[Path]:
    """compare.csv, one torch pipelining CSV and (if `pictures`) one Gantt PNG per schedule, and a side-by-side
    picture, and ``opplan-runnable.torch.csv`` when `cmp.runnable` holds a schedule; returns the paths written.
    `progress` gets a line before each picture ("drawing 3/10 pictures: ...") when the drawing is expected to take
    longer than `budget.progress_after_s` (on a large pipeline each picture takes seconds)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "compare.csv"]
    atomic_write_text(written[0], cmp.csv_text())
    for r in cmp.ok_rows():
        assert r.schedule is not None and r.timeline is not None
        path = out / f"{r.name}.torch.csv"
        write_torch_csv(r.schedule, path)
        written.append(path)
    if cmp.runnable is not None and cmp.runnable.schedule is not None:  # the planned schedule torch's runtime runs
        path = out / f"{cmp.runnable.name}.torch.csv"
        write_torch_csv(cmp.runnable.schedule, path)
        written.append(path)
    if pictures:
        rows = cmp.ok_rows()
        total = len(rows) + 1
        if progress is not None and drawing_s(budget, _bars(rows)) <= budget.progress_after_s:
            progress = None
        for i, r in enumerate(rows, 1):
            if progress is not None:
                progress(f"   drawing {i}/{total} pictures: {r.name}")
            path = out / f"{r.name}.png"
            plot_schedule(cmp, r, path)  # the figures of compare.csv, in its units (planner.compare.plot)
            written.append(path)
        if progress is not None:
            progress(f"   drawing {total}/{total} pictures: side by side")
        written.append(plot_side_by_side(cmp, out / "side_by_side.png"))
    return written
