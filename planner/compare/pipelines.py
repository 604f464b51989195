"""Compare the baselines and the planned schedule on one cost model (the library side of ``plan-compare``).

Every schedule is simulated on the instance of its own pipeline (`planner.pipeline.registry.pipeline_for` on unit
costs, `model_costs.ModelCosts.pipeline` on a model, `presets.PresetCosts.pipeline` on a preset: the same model on
the same p devices, cut as the schedule needs) with the same costs; figures come from
`planner.pipeline.metrics.figures`.  Units: on unit costs makespan in the user's time unit, memory in the user's
memory unit (`--activation`, `--param`); on a model microseconds and MiB; on a preset milliseconds and MiB.
Bubble ratio = total idle time / (devices x makespan).  Peak memory = max over devices of (parameters + activations
in flight).

The planned row ``opplan`` solves `formulations.pipeline` on a placement (``both``: both DualPipe's two-direction
split — two copies, m/2 micro-batches each way — and the V-shape split — 2p half stages, as ZB-V and DualPipeV —
with half the time limit each, keeping the shorter; ``auto``, the default: the one of those two that has both the
shortest warm start within the cap (on pipelines with communication streams the list schedule of
`planner.pipeline.stream_greedy` counts) and the lowest bound (a bound lower by less than `BOUND_TIE` of that warm
start's gap does not count), alone with the time limit left after that choice, or ``both`` when no placement has
both (`_dominant`, `_choose`); ``warm``: only the one whose baselines run shortest within the cap, with the
whole time limit; or one of ``dualpipe``, ``v``, ``fixed``), warm-started from
the best baseline on that split that fits the cap, or the constructive list schedule of `planner.pipeline.greedy`
when that is shorter (its overlapped pairs included when `fb_overlap` < 1: the formulation may pair F and B
itself); the cap defaults to DualPipe's peak memory per device.  Each solve gives `LNS_SHARE` of its time (``compare(
lns_share=...)``, ``plan-compare --lns-share``) to the large-neighbourhood search of `formulations.pipeline_lns`
after the full model, which moves the large pipelines the full model stalls on (a search that stalls hands the time
left back to the full model); the bound stays the full model's (or the trivial bound, when the search left
micro-batch order), and the table's line says what the search and that second full solve gained.  With
``compare(lns_mode="reorder")`` (``plan-compare --lns-mode reorder``) micro-batches may leave their order inside a
neighbourhood and the streams a neighbourhood does not touch stay fixed (smaller steps); the default keeps the
order: measured side by side inside `compare` (`experiments.bench_pipeline.bench_lns_mode`) reorder was no better
at the same budget, where the search gets a few seconds of each solve (README, "The search's mode").
On a model the planned row also chooses its own
cut (`planner.compare.cut_search`, `_plan_placement`): the baselines keep the bottleneck-minimal cut their users
would take, the planned row moves the boundaries between pieces where the schedules run shorter, and its bound is
the formulation's bound *for the cut it chose* (the table line says so); beside it, on a model or a preset, the
bound over every cut of both placements (`planner.compare.cut_bound`, notes["every_cut"]).  Then, at granularity k > 1
(`planner.compare.subchunks`; `compare(granularity=...)`, ``plan-compare --granularity``, or chosen by the task
count with ``auto``), every piece of that cut is split into k sub-chunks on its device and the formulation orders
their F, B and W (`_solve_fine`), warm-started from the stage-level schedules expanded; the row keeps the shorter
schedule.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from formulations.model_api import ProgressCallback
from formulations.pipeline import prepare_pipeline, split_start_times
from formulations.pipeline_lns import LnsResult, LnsStep, solve_pipeline_lns
from planner.compare.compare_row import CompareRow
from planner.compare.cut_bound import every_cut_bound_tick
from planner.compare.cut_search import any_cut_bound_tick, refine_cut
from planner.compare.memory_bound_note import MEMORY_BOUND_S, note_memory_bound
from planner.compare.model_costs import ModelCosts
from planner.compare.plot import plot_schedule, plot_side_by_side
from planner.compare.presets import PresetCosts
from planner.compare.subchunks import auto_granularity, expand_schedule, fine_pipeline
from planner.errors import OpplanError
from planner.pipeline.generators import RequirementError
from planner.pipeline.greedy import best_greedy
from planner.pipeline.metrics import figures
from planner.pipeline.registry import GENERATORS, Scales, UnitCosts, pipeline_for
from planner.pipeline.stream_greedy import best_stream_list
from planner.pipeline.streams import simulate_pipeline
from planner.pipeline.unroll import TrainingPipeline
from planner.schedule.atomic import atomic_write_text
from planner.schedule.program import Schedule
from planner.schedule.torch_csv import write_torch_csv
from planner.schedule.validate import validate_plan

CSV_COLUMNS = ("schedule", "makespan", "bubble_ratio", "peak_memory", "param_memory")
_WARM_FROM = {"v": ("zb-v", "dualpipev"), "fixed": ("1f1b", "gpipe", "zb-h1", "zb-h2"), "dualpipe": ("dualpipe",)}
_SPLIT = {"v": "opplan-v", "fixed": "1f1b", "dualpipe": "dualpipe"}
CUT_SHARE = 0.25  # of a placement's time on a model, what the first cut search gets (module docstring)
BOUND_ROUND = True  # the second cut round scores cuts by their bound when the first solve's gap is small
BOUND_ROUND_GAP = 0.01  # ... at most this (`_plan_placement`)
PLACEMENTS = ("auto", "both", "warm", "dualpipe", "v", "fixed")  # `compare`'s opplan_placement
FINE_SHARE = 0.5  # of a placement's time on a model, what the sub-chunk solve gets when granularity k > 1
# `auto`: a placement with the shortest warm start is solved alone also when another's bound is lower by less than
# this fraction of its own gap (warm start - bound): a lower bound that much below a schedule that far from it says
# nothing about which placement ends shorter.  The preset at p = 16 (DualPipe's placement: list schedule 7175 ms,
# bound 5670; the V: 7324, 5660): alone with 600 s 6905 ms, against 6997 with 300 s each (2026-12-02).  The unit
# rows keep both placements: there the V's warm start equals its bound.
BOUND_TIE = 0.05
AT_CAP_SHARE = 0.99  # a device whose peak is at least this share of the cap counts as at the cap (`devices_at_cap`)
LNS_SHARE = 0.5  # of each formulation solve's time, what the large-neighbourhood search gets after the full model
LNS_MODES = ("in-order", "reorder")  # `compare`'s lns_mode (module docstring)


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

    def csv_text(self) -> str:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in self.ok_rows():
            w.writerow(self.values(r))
        return buf.getvalue()

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

    def table(self) -> str:
        """The table plan-compare prints: one row per schedule, figures in the comparison's units (`units`)."""
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
            lines.append(f"{r.name:<18}{_figure(v['makespan']):>12}{v['bubble_ratio']:>9.2%}"
                         f"{_figure(v['peak_memory']):>12}{_figure(v['param_memory']):>12}{mark}")
        opp = next((r for r in self.rows if r.name == "opplan" and not r.skipped), None)
        if opp is not None:
            bound = opp.notes.get("bound_units")
            cap = self.memory_cap_units
            cut = opp.notes.get("cut")
            cut_text = ""
            if isinstance(cut, dict):
                chain = f", {cut['chain_moves']} of them chain moves" if cut.get("chain_moves") else ""
                cut_text = (f", cut moved {cut['moves']} times{chain} ({cut['simulations']} simulations; the bound is "
                            f"for that cut)" if cut["moves"] else f", cut kept ({cut['simulations']} simulations)")
                if cut.get("bound_rounds"):
                    cut_text += (f", {cut['bound_rounds']} of its rounds by the cut's bound (a solve's gap was at "
                                 f"most {BOUND_ROUND_GAP:.0%})")
                if isinstance(cut.get("any_cut_bound_units"), (int, float)):
                    cut_text += (f", bound over every cut {_figure(cut['any_cut_bound_units'])} {time_unit} "
                                 f"(work / devices)")
            every = opp.notes.get("every_cut")
            if isinstance(every, dict) and isinstance(every.get("bound_units"), (int, float)):
                fams: dict = every["by_placement_units"]  # type: ignore[assignment]
                told = ", ".join(f"{fam} {_figure(v)}" for fam, v in fams.items())
                cut_text += (f", bound over every cut of the {' and '.join(fams)} placements "
                             f"{_figure(float(every['bound_units']))} {time_unit} (heads + work per device; {told})")
            cut_text += _memory_bound_text(opp.notes.get("memory_bound"), time_unit)
            gran = opp.notes.get("granularity")
            if isinstance(gran, dict) and "tasks" in gran:
                fine = gran.get("fine_makespan_units")
                cut_text += (f", granularity k = {gran['k']} ({gran['tasks']} compute tasks, all-to-alls at "
                             f"{gran['a2a_at']}; kept {gran['kept']}; stage level "
                             f"{_figure(float(gran['stage_level_makespan_units']))} {time_unit}, its order replayed "
                             f"{_figure(float(gran['stage_level_replayed_units']))} {time_unit}"
                             + (f", sub-chunks {_figure(float(fine))} {time_unit}" if fine is not None else "")
                             + ")")
            elif isinstance(gran, dict):
                cut_text += f", granularity 1 (asked {gran.get('asked')}: {gran.get('why')})"
            lns = opp.notes.get("lns")
            if isinstance(lns, dict):
                start = ("the full solve's order replayed" if lns.get("after_full_solve", True) else
                         "no full solve first, the pipeline is that large; the warm start replayed")
                if lns.get("periodic_period_units") is not None:
                    start = (f"no full solve first, the pipeline is that large; a periodic schedule (one "
                             f"micro-batch of each chain every {_figure(float(lns['periodic_period_units']))} "
                             f"{time_unit}: it replays shorter than the warm start) replayed")
                if lns.get("folded"):
                    start = ("searched on the pipeline's mirror half: symmetric schedules, half the tasks; "
                             + start)
                cut_text += (f", neighbourhood search {_figure(float(lns['from_units']))} -> "
                             f"{_figure(float(lns['to_units']))} {time_unit} ({start} "
                             f"{_figure(float(lns['replayed_units']))}; {lns['gains']} gains in {lns['steps']} "
                             f"steps, {lns['seconds']:.0f} s)")
                if lns.get("resolve_s") is not None:
                    cut_text += (f", then the full model again {float(lns['resolve_s']):.0f} s: "
                                 f"{_figure(float(lns['resolve_units']))} {time_unit}")
            why = opp.notes.get("placement_why")
            if why:
                cut_text = f" ({why})" + cut_text
            lines.append(f"opplan: {opp.notes.get('status')}, bound "
                         f"{_figure(bound) + ' ' + time_unit if isinstance(bound, (int, float)) else bound}, gap "
                         f"{opp.notes.get('gap', 0):.1%}, placement {opp.notes.get('placement')}{cut_text}, warm start "
                         f"{opp.notes.get('warm_start') or 'none'}, "
                         f"memory cap {_figure(cap) + ' ' + memory_unit if cap is not None else 'none'}"
                         f"{_at_cap_text(opp.notes.get('devices_at_cap'))}, "
                         f"{opp.notes.get('solve_time_s', 0):.1f} s")
        return "\n".join(lines)


def _figure(value: float) -> str:
    """One number format for a column: at most 4 significant digits below 10^4, whole numbers above, never an
    exponent (1.121e+04 beside 9962 reads as a different magnitude)."""
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"


def _pipeline(name: str, p: int, m: int, costs, scales: Scales) -> TrainingPipeline:
    """The pipeline `name` runs on: unit costs (`registry.pipeline_for`) or a model's stages (`ModelCosts`)."""
    if isinstance(costs, (ModelCosts, PresetCosts)):
        return costs.pipeline(name, p, m)
    return pipeline_for(name, p, m, costs, scales)


def scales_of(costs) -> Scales:
    if isinstance(costs, (ModelCosts, PresetCosts)):
        return Scales(costs.ticks_per_unit, costs.bytes_per_unit)
    return Scales.of(costs)


def simulate_baseline(name: str, p: int, m: int, costs, scales: Scales) -> CompareRow:
    try:
        schedule = GENERATORS[name](p, m)
    except RequirementError as exc:
        return CompareRow(name, skipped=str(exc))
    pipe = _pipeline(name, p, m, costs, scales)
    inst, tl = simulate_pipeline(pipe, schedule)
    validate_plan(inst, tl.to_plan(method=name))
    return CompareRow(name, pipe, schedule, tl, figures(pipe, tl))


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
    lns_share: float = LNS_SHARE,
    progress: Callable[[str], None] | None = None,
    lns_mode: str = "in-order",
    bound_time_s: float = MEMORY_BOUND_S,
) -> Comparison:
    """Simulate every baseline (skipping those whose requirements fail) and, if `opplan`, solve the planned row
    on `opplan_placement` (`PLACEMENTS`; module docstring) within `time_limit_s` (the auto placement choice included).
    `granularity`: sub-chunks per piece for the planned row on a model (`planner.compare.subchunks`; 1, the
    default: stage level only; None: chosen by `auto_granularity`); `subchunk_a2a`: where a piece's all-to-alls sit
    among its sub-chunks (`planner.compare.subchunks.A2A_AT`: ``piece``, as the baselines are measured, or
    ``experts``); `lns_share`: of each formulation solve's time, what the large-neighbourhood search
    (`formulations.pipeline_lns`) gets after the full model (0: none); `progress`: called with a line for the auto
    placement choice, for each solve's start (its warm start and time), for each better incumbent of the full model
    and for each gain of the search; `lns_mode` (`LNS_MODES`): ``reorder`` lets the search run micro-batches out of
    order inside a neighbourhood and fixes the streams a neighbourhood does not touch, ``in-order`` (the default)
    keeps the order and models every stream's middle; `bound_time_s`: after the solves, the time the memory bound
    (`planner.compare.memory_bound_note`) may take on a row not proven optimal (0: none)."""
    costs = costs or UnitCosts()
    scales = scales_of(costs)
    if p < 1 or m < 1:
        raise OpplanError(f"need at least one stage and one micro-batch (got {p} stages, {m} micro-batches)")
    if lns_mode not in LNS_MODES:
        raise OpplanError(f"unknown search mode {lns_mode!r}", fix=f"use one of {', '.join(LNS_MODES)}")
    reorder = lns_mode == "reorder"
    names = schedules or tuple(GENERATORS)
    rows = [simulate_baseline(n, p, m, costs, scales) for n in names]
    cmp = Comparison(p, m, costs, scales, rows)
    if not opplan:
        return cmp
    by_name = {r.name: r for r in rows if not r.skipped}
    cap: int | None
    if memory_cap_units is not None:
        cap = round(memory_cap_units * scales.bytes_per_unit)
    elif "dualpipe" in by_name:
        cap = by_name["dualpipe"].figures.max_peak_memory_bytes  # type: ignore[union-attr]
    else:
        dp = simulate_baseline("dualpipe", p, m, costs, scales)
        cap = dp.figures.max_peak_memory_bytes if dp.figures else None
    cmp.memory_cap_units = None if cap is None else cap / scales.bytes_per_unit
    why = ""  # how auto chose (the table line says it)
    listed: dict[str, tuple[TrainingPipeline, tuple[dict[str, int], int] | None]] = {}  # auto's list schedules
    t0 = time.monotonic()
    if opplan_placement in ("auto", "both", "warm"):
        placements = _free_placements(p, m)
        if opplan_placement == "warm" and len(placements) > 1:
            placements = [_warmest(placements, p, m, costs, scales, by_name, cap)]
        elif opplan_placement == "auto" and len(placements) > 1:
            alone, why = _dominant(placements, p, m, costs, scales, by_name, cap, listed)
            placements = [alone] if alone is not None else placements
            # the choice's list schedules (handed to the solve) and bounds take ~30 s at p = 16: the row's budget
            # pays for them, so the row keeps to `time_limit_s` (unless the choice alone takes longer)
            time_limit_s = max(1.0, time_limit_s - (time.monotonic() - t0))
            if progress is not None:
                progress(f"   {why}")
    elif opplan_placement in _WARM_FROM:
        placements = [opplan_placement]
    else:
        raise OpplanError(f"unknown placement {opplan_placement!r} for the planned schedule",
                          fix=f"use one of {', '.join(PLACEMENTS)}")
    best: CompareRow | None = None
    tried: dict[str, tuple[int, int]] = {}  # placement -> (makespan, bound) in ticks
    failures: list[str] = []  # why a placement gave no schedule, in the skipped row's words
    for placement in placements:
        before = time.monotonic() - t0  # time to best counts from the placement choice's start
        search = _Search(lns_share, progress, placement, reorder)
        row = _plan_placement(placement, p, m, costs, scales, by_name, cap, time_limit_s / len(placements), backend,
                              granularity, subchunk_a2a, search, listed.get(placement))
        if row.figures is None:
            failures.append(row.skipped or f"{placement} placement: no schedule")
            continue
        row.notes["time_to_best_s"] = before + float(row.notes["time_to_best_s"])  # type: ignore[arg-type]
        row.notes["tried"] = tried
        row.notes["placement_why"] = why
        tried[placement] = (row.figures.makespan_tick, int(row.notes["bound_tick"]))  # type: ignore[call-overload]
        if best is None or best.figures is None or row.figures.makespan_tick < best.figures.makespan_tick:
            best = row
    if best is None:
        rows.append(CompareRow("opplan", skipped="no placement gave a schedule (" + "; ".join(failures) + ")"))
    else:
        _note_every_cut_bound(best, p, m, costs, scales)
        best.notes["devices_at_cap"] = devices_at_cap(best.figures.peak_memory_bytes, cap)  # type: ignore[union-attr]
        dualpipe = by_name.get("dualpipe")
        note_memory_bound(best, None if dualpipe is None else dualpipe.figures, cap, scales, bound_time_s,
                          None if progress is None else (lambda line: progress(f"   {line}")))
        _note_other_placements(best, p, m, costs, scales, cap)
        rows.append(best)
    return cmp


def devices_at_cap(peak_bytes: Sequence[int], cap_bytes: int | None) -> tuple[int, ...]:
    """The devices whose peak memory is at least `AT_CAP_SHARE` of the cap (none without a cap): where the cap,
    not the order, keeps a schedule above its cut's bound (issue 11: on the GPT-2 export at p = 8 the cut's
    uncapped optimum is its device bound, 3320 us; the capped schedule, 3445 us, has devices 1, 3, 4, 6 at the cap)."""
    if cap_bytes is None or cap_bytes <= 0:
        return ()
    return tuple(d for d, peak in enumerate(peak_bytes) if peak >= AT_CAP_SHARE * cap_bytes)


def _at_cap_text(devices: object) -> str:
    """The table line's words for notes["devices_at_cap"]."""
    if not isinstance(devices, (tuple, list)) or not devices:
        return ""
    return f" (at the cap: device{'s' if len(devices) > 1 else ''} {', '.join(str(d) for d in devices)})"


def _memory_bound_text(note: object, time_unit: str) -> str:
    """The table line's words for notes["memory_bound"] (`planner.compare.memory_bound_note`)."""
    if not isinstance(note, dict):
        return ""
    if "skipped" in note:
        return f", no memory bound ({note['skipped']})"
    pair = list(note.get("devices") or ())
    who = (f"devices {pair[0]} and {pair[1]} together: their" if len(pair) > 1 else
           f"device {note['device']}'s" if note["device"] is not None else "no device's")
    text = (f", memory bound {_figure(float(note['bound_units']))} {time_unit} ({who} relaxation with the cap "
            f"raised it; {note['probes']} probes, {float(note['seconds']):.0f} s"
            # incomplete: the search's time ran out, or a probe's did (an unknown ends that relaxation's search)
            + ("" if note["complete"] else ", not searched to the end: out of time") + ")")
    half = note.get("half_bubble_units")
    if isinstance(half, (int, float)):
        text += (f"; half DualPipe's bubble needs at most {_figure(float(half))} {time_unit}: "
                 + ("no schedule of this pipeline under the cap reaches it" if note["half_bubble_unreachable"]
                    else "this schedule reaches it" if note.get("half_bubble_reached") else "not ruled out")
                 + (f" ({note['half_bubble_answers']})" if note.get("half_bubble_answers") else ""))
        others = note.get("other_placements_units")
        if isinstance(others, dict) and others:
            text += "; on its own cut, " + ", ".join(
                f"the {pl} placement's bound {_figure(v) if v < float('inf') else 'none within the cap'}"
                f" {time_unit if v < float('inf') else ''}".rstrip()
                + (" (above it)" if v > float(half) else " (below it)") for pl, v in others.items())
    return text


def _free_placements(p: int, m: int) -> list[str]:
    """The placements ``auto``, ``both`` and ``warm`` choose from: DualPipe's two directions (an even number of
    devices and of micro-batches) and the V."""
    return [pl for pl in ("dualpipe", "v") if pl != "dualpipe" or (p % 2 == 0 and m % 2 == 0)]


def _note_other_placements(row: CompareRow, p: int, m: int, costs, scales: Scales, cap: int | None) -> None:
    """Where the memory bound proved half of DualPipe's bubble out of reach on the planned row's placement, the
    other placements' bounds on their own cut (`prepare_pipeline`'s trivial bound: critical path, work / devices,
    device bound; no order or memory assumed), so the note says whether they could reach it
    (notes["memory_bound"]["other_placements_units"]; inf: one micro-batch does not fit the cap there)."""
    note = row.notes.get("memory_bound")
    if not isinstance(note, dict) or not note.get("half_bubble_unreachable"):
        return
    others: dict[str, float] = {}
    for pl in _free_placements(p, m):
        if pl == row.notes.get("placement"):
            continue
        try:
            tick = prepare_pipeline(_pipeline(_SPLIT[pl], p, m, costs, scales), cap, constructive=False).trivial_tick
        except OpplanError:
            others[pl] = float("inf")
            continue
        others[pl] = tick / scales.ticks_per_unit
    note["other_placements_units"] = others


def _note_every_cut_bound(row: CompareRow, p: int, m: int, costs, scales: Scales) -> None:
    """On a model or a preset, note on the planned row the bound over every cut of both placements it solves
    (`planner.compare.cut_bound`: per device, the pieces' heads and work, minimised over cuts), per placement and
    the lesser (notes["every_cut"]); computed once, after the solves (seconds on a few hundred ops, outside the
    time limit)."""
    if not isinstance(costs, (ModelCosts, PresetCosts)):
        return
    bound, per_family = every_cut_bound_tick(costs, p, m)
    row.notes["every_cut"] = {"bound_units": None if bound is None else bound / scales.ticks_per_unit,
                              "by_placement_units": {fam: None if v is None else v / scales.ticks_per_unit
                                                     for fam, v in per_family.items()}}


def _warmest(placements: list[str], p: int, m: int, costs, scales: Scales, by_name: dict[str, CompareRow],
             cap: int | None) -> str:
    """The placement whose baselines (`_WARM_FROM`) give the shortest schedule within the cap (the first of
    `placements` when none fits): ``compare(opplan_placement="warm")`` solves that one only, with the whole budget."""
    def shortest(placement: str) -> float:
        rows = (by_name.get(n) or simulate_baseline(n, p, m, costs, scales) for n in _WARM_FROM[placement])
        fits = [r.figures.makespan_tick for r in rows if r.figures is not None
                and (cap is None or r.figures.max_peak_memory_bytes <= cap)]
        return min(fits, default=float("inf"))
    return min(placements, key=lambda pl: (shortest(pl), placements.index(pl)))


def _dominant(placements: list[str], p: int, m: int, costs, scales: Scales, by_name: dict[str, CompareRow],
              cap: int | None,
              listed: dict[str, tuple[TrainingPipeline, tuple[dict[str, int], int] | None]] | None = None,
              ) -> tuple[str | None, str]:
    """``compare(opplan_placement="auto")``'s choice: the placement that is at least as good as every other on both
    signals known before solving — the shortest warm start (its baselines, `_WARM_FROM`, within the cap, and on a
    pipeline with communication streams the list schedule, `stream_greedy.best_stream_list`) and the
    lowest lower bound (the formulation's trivial bound on its baselines' cut, `prepare_pipeline`: critical path,
    work / devices, device bound) — solved alone with the whole budget; None when no placement is (the signals
    disagree: all are solved, the time split).  Ties go to the earlier of `placements`.  With the reason, in words.
    Why both signals: the warm start alone picks the V on the unit rows, where DualPipe's placement reaches the
    proven optimum (README, "The budget: one placement").  A bound lower by less than `BOUND_TIE` of the other's
    gap does not count as lower.  `listed` (when given) receives, per placement with communication streams, the
    pipeline and the list schedule computed here, so that the solve does not compute it again (`_solve_opplan`)."""
    warm: dict[str, float] = {}
    bound: dict[str, float] = {}
    for pl in placements:
        rows = (by_name.get(n) or simulate_baseline(n, p, m, costs, scales) for n in _WARM_FROM[pl])
        warm[pl] = min((r.figures.makespan_tick for r in rows if r.figures is not None
                        and (cap is None or r.figures.max_peak_memory_bytes <= cap)), default=float("inf"))
        try:
            pipe = _pipeline(_SPLIT[pl], p, m, costs, scales)
            bound[pl] = prepare_pipeline(pipe, cap, constructive=False).trivial_tick
        except OpplanError:  # one micro-batch does not fit the cap there: no schedule at all
            bound[pl] = float("inf")
            continue
        if pipe.streams_on:  # the list schedule is a warm start there too (`_solve_opplan`)
            got = best_stream_list(pipe, [cap if cap is not None else 2**40] * p)
            if listed is not None:
                listed[pl] = (pipe, got)
            if got is not None:
                warm[pl] = min(warm[pl], got[1])

    def words(pl: str) -> str:
        def fig(tick: float) -> str:
            return _figure(tick / scales.ticks_per_unit) if tick < float("inf") else "none within the cap"
        return f"{pl}: warm start {fig(warm[pl])}, bound {fig(bound[pl])}"
    told = "; ".join(words(pl) for pl in placements)
    alone, why = _choose(placements, warm, bound)
    return alone, f"auto: {why} ({told})"


def _choose(placements: list[str], warm: dict[str, float], bound: dict[str, float]) -> tuple[str | None, str]:
    """`_dominant`'s rule on its two signals (ticks; inf: none): the placement with the shortest warm start and the
    lowest bound, else one with the shortest warm start whose bound is above another's by at most `BOUND_TIE` of its
    own gap (warm - bound), else None; with the reason in words."""
    for pl in placements:
        if all(warm[pl] <= warm[o] and bound[pl] <= bound[o] for o in placements):
            return pl, f"{pl} alone, the shortest warm start and the lowest bound"
    for pl in placements:
        tie = BOUND_TIE * (warm[pl] - bound[pl]) if warm[pl] < float("inf") else 0.0
        if all(warm[pl] <= warm[o] and bound[pl] <= bound[o] + tie for o in placements):
            return pl, f"{pl} alone, the shortest warm start, its bound within {BOUND_TIE:.0%} of its gap of the lowest"
    return None, "every placement, the signals disagree"


def _reference_schedules(placement, p, m, costs, scales, by_name) -> list[tuple[str, Schedule]]:
    """(name, schedule) of the baselines the planned row on `placement` starts from (`_WARM_FROM`), simulated here
    when the user's `--schedules` left them out."""
    rows = ((n, by_name.get(n) or simulate_baseline(n, p, m, costs, scales)) for n in _WARM_FROM[placement])
    return [(n, r.schedule) for n, r in rows if not r.skipped and r.schedule is not None]


@dataclass(frozen=True)
class _Search:
    """How the planned row's solves run the large-neighbourhood search: its share of each solve, and where its
    progress lines go (None: nowhere), with the placement they are for."""

    share: float = LNS_SHARE
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
                    f"{_figure(step.period_tick / ticks_per_unit)} {unit}, replayed "
                    f"{_figure(step.after_tick / ticks_per_unit)} {unit} (best start before "
                    f"{_figure(step.before_tick / ticks_per_unit)})")
            elif step.gained:
                out(f"   neighbourhood search ({self.placement}): {step.wall_s:.1f} s, step {step.step} ({step.kind}, "
                    f"{step.size} tasks): {_figure(step.before_tick / ticks_per_unit)} -> "
                    f"{_figure(step.after_tick / ticks_per_unit)} {unit}")
        return line

    def on_full(self, unit: str, ticks_per_unit: float) -> ProgressCallback | None:
        """A solver progress callback for the full model's solves: a line at each better incumbent (with the bound
        at that moment), so that a long solve is not silent (issue 11's Scale: "print progress")."""
        if self.progress is None:
            return None
        out = self.progress
        best: list[float] = []

        def line(wall_s: float, incumbent: float | None, bound: float | None, gap: float | None) -> None:
            if incumbent is None or (best and incumbent >= best[-1]):
                return
            best.append(incumbent)
            told = "" if bound is None else f", bound {_figure(bound / ticks_per_unit)} {unit}"
            out(f"   full model ({self.placement}): {wall_s:.1f} s, incumbent {_figure(incumbent / ticks_per_unit)} "
                f"{unit}{told}")
        return line

    def started(self, warm_name: str, warm_units: float | None, unit: str, limit_s: float) -> None:
        """The line that opens a solve: where it starts from, and its time."""
        if self.progress is not None:
            start = "no warm start" if warm_units is None else \
                f"starts from {warm_name or 'the warm start'} ({_figure(warm_units)} {unit})"
            self.progress(f"   planned row ({self.placement}): {start}, {limit_s:.0f} s to solve")


def _plan_placement(placement, p, m, costs, scales, by_name, cap, budget_s, backend, granularity=1,
                    subchunk_a2a="piece", search: _Search = _Search(),
                    listed: tuple[TrainingPipeline, tuple[dict[str, int], int] | None] | None = None) -> CompareRow:
    """The planned row on one placement.  On a model the two levels alternate (`planner.compare.cut_search`):
    the cut is refined for the baselines' schedules (CUT_SHARE of the budget), the pipeline formulation solves
    the chosen cut (warm-started), the cut is refined again for the schedule it returned and, when that moved the
    cut, the formulation solves the new cut warm-started from that schedule with the time left.  When a solve ends
    within BOUND_ROUND_GAP of its cut's bound (`BOUND_ROUND`), that round scores cuts by their bound instead
    (`refine_cut(score="bound")`: no reorder shortens such a schedule, only a cut with a lower bound can), and
    such rounds go on while their solve gains and time is left.  Then, at
    granularity k > 1 (`granularity`, None: `auto_granularity`), every piece of the final cut is split into k
    sub-chunks and the formulation solves that pipeline (`_solve_fine`, FINE_SHARE of the budget; the stage
    level gets the rest) warm-started from the expansions of the stage-level schedules; the row keeps the
    shorter of the two and its notes say both."""
    t0 = time.monotonic()
    references = _reference_schedules(placement, p, m, costs, scales, by_name)
    if not isinstance(costs, ModelCosts):
        return _solve_opplan(placement, p, m, costs, scales, references, cap, budget_s, backend, search=search,
                             listed=listed)
    split, name = (2 if placement == "v" else 1), _SPLIT[placement]
    k = auto_granularity(costs.pipeline(name, p, m)) if granularity is None else int(granularity)
    total_s = budget_s
    if k > 1:
        budget_s = total_s * (1 - FINE_SHARE)
    refs = [schedule for _, schedule in references]
    first = refine_cut(costs, split, name, p, m, refs, cap, deadline_s=t0 + CUT_SHARE * budget_s)
    solve_s = (budget_s - (time.monotonic() - t0)) * (1 - CUT_SHARE)
    started_s = time.monotonic() - t0
    row = _solve_opplan(placement, p, m, first.costs, scales, references, cap, solve_s, backend, search=search,
                        listed=listed)
    if row.figures is not None:  # time to best counts from the placement's start, cut search included
        row.notes["time_to_best_s"] = started_s + float(row.notes["time_to_best_s"])  # type: ignore[arg-type]
    rounds = [first]
    row_costs = first.costs
    bound_rounds = 0
    while row.schedule is not None and row.figures is not None:
        left = budget_s - (time.monotonic() - t0)
        # a solve at (or near) its cut's bound: only a cut with a lower bound can be shorter, so the round scores
        # cuts by their bound, and rounds go on while they gain; otherwise one round scored by the replays
        by_bound = BOUND_ROUND and float(row.notes["gap"]) <= BOUND_ROUND_GAP  # type: ignore[arg-type]
        if left <= 1.0 or (len(rounds) > 1 and not by_bound):
            break
        again = refine_cut(row_costs, split, name, p, m, [row.schedule, *refs], cap,
                           deadline_s=time.monotonic() + left / 2, score="bound" if by_bound else "makespan")
        rounds.append(again)
        bound_rounds += int(by_bound)
        left = budget_s - (time.monotonic() - t0)
        if not again.moves_kept or left <= 1.0:
            break
        started_s = time.monotonic() - t0
        other = _solve_opplan(placement, p, m, again.costs, scales, [*references, ("previous round", row.schedule)],
                              cap, left, backend, search=search)
        if other.figures is None or other.figures.makespan_tick >= row.figures.makespan_tick:
            break
        other.notes["time_to_best_s"] = started_s + float(other.notes["time_to_best_s"])  # type: ignore[arg-type]
        row, row_costs = other, again.costs
    if k > 1 and row.schedule is not None:
        row = _solve_fine(placement, p, m, row_costs, scales, row, [r for _, r in references], cap,
                          total_s - (time.monotonic() - t0), backend, k, subchunk_a2a,
                          started_s=time.monotonic() - t0, search=search)
    if row.pipeline is not None:
        any_cut = any_cut_bound_tick(costs, row.pipeline)
        row.notes["cut"] = {"moves": sum(r.moves_kept for r in rounds),
                            "chain_moves": sum(r.chain_moves_kept for r in rounds),
                            "simulations": sum(r.evaluations for r in rounds), "bound_rounds": bound_rounds,
                            "any_cut_bound_units": None if any_cut is None else any_cut / scales.ticks_per_unit}
    return row


def _solve_opplan(placement, p, m, costs, scales, candidates: list[tuple[str, Schedule]], cap, time_limit_s,
                  backend, pipe: TrainingPipeline | None = None, search: _Search = _Search(),
                  listed: tuple[TrainingPipeline, tuple[dict[str, int], int] | None] | None = None) -> CompareRow:
    """Solve the pipeline formulation on `placement`'s pipeline of `costs` (or on `pipe`, e.g. a sub-chunk
    pipeline), warm-started from the shortest of the `candidates` (name, schedule), each re-simulated on this
    pipeline (its cut may not be theirs), that fits the cap, or the greedy list schedule when that is shorter; a
    skipped row with the solver's reason when it fails.  The solve is `solve_pipeline_lns`: the full model, then
    the large-neighbourhood search for `search.share` of the time (notes["lns"] says what it gained).  On a
    sub-chunk pipeline (`pipe` given) the solver's schedule is also replayed as the baselines are, and the shorter
    timeline kept (see the comment below)."""
    fine = pipe is not None
    if pipe is None:
        pipe = _pipeline(_SPLIT[placement], p, m, costs, scales)
        pipe = dataclasses.replace(pipe, name=f"opplan-{placement}")
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
        greedy = best_greedy(pipe, [cap if cap is not None else 2**40] * p)
    if greedy is not None and (warm is None or greedy[1] < warm[1]):
        warm, warm_name = greedy, "greedy"
    if not fine:  # the list schedules take seconds on the largest pipelines (17,664 tasks: ~18 s): the row's budget
        time_limit_s = max(1.0, time_limit_s - (time.monotonic() - greedy_t0))
    else:  # a sub-chunk pipeline: building, validating and replaying its larger model take about what the
        # warm-start simulations took, twice over, outside the solver's own limit (keeps the row in its budget)
        time_limit_s = max(1.0, time_limit_s - 2 * (time.monotonic() - prep_t0))
    try:
        time_unit = costs.time_unit if isinstance(costs, (ModelCosts, PresetCosts)) else "unit"
        search.started(warm_name, None if warm is None else warm[1] / scales.ticks_per_unit, time_unit, time_limit_s)
        sol, lns = solve_pipeline_lns(pipe, cap, warm_start=warm[0] if warm else None, time_limit_s=time_limit_s,
                                      backend=backend, lns_share=search.share, fifo_inside=not search.reorder,
                                      fix_untouched=search.reorder,
                                      progress=search.on_step(time_unit, scales.ticks_per_unit),
                                      full_progress=search.on_full(time_unit, scales.ticks_per_unit))
    except OpplanError as exc:  # no schedule on this placement: the row says why (memory, or a solver failure)
        return CompareRow("opplan", skipped=f"{placement} placement: {' '.join(str(exc).split())}")
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
                 "solve_time_s": sol.solve_time_s, "time_to_best_s": sol.time_to_best_s, "placement": placement,
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


def _solve_fine(placement, p, m, costs: ModelCosts, scales, coarse: CompareRow, references: list[Schedule], cap,
                time_limit_s, backend, k, a2a_at, *, started_s: float, search: _Search = _Search()) -> CompareRow:
    """The planned row at granularity k on `costs`' cut (`planner.compare.subchunks`): the formulation on the
    sub-chunk pipeline, warm-started from the shortest expansion (of the stage-level row's schedule and the
    references) that fits the cap, or the greedy list schedule when that is shorter.  Returns the shorter of
    that and `coarse`, with notes["granularity"] saying both."""
    try:
        fine = fine_pipeline(costs, _SPLIT[placement], p, m, k, a2a_at=a2a_at)
    except OpplanError as exc:  # a piece too small to split: the stage-level row stands
        coarse.notes["granularity"] = {"k": 1, "asked": k, "why": str(exc)}
        return coarse
    pipe = dataclasses.replace(fine.pipeline, name=f"opplan-{placement}-k{k}")
    fine = dataclasses.replace(fine, pipeline=pipe)
    assert coarse.schedule is not None and coarse.figures is not None
    candidates = [("stage-level opplan", coarse.schedule), *((s.name, s) for s in references)]
    expanded = [(n, expand_schedule(s, fine)) for n, s in candidates]
    row = _solve_opplan(placement, p, m, costs, scales, expanded, cap, time_limit_s, backend, pipe=pipe,
                        search=search)
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


def write_outputs(cmp: Comparison, out_dir: str | os.PathLike[str], *, pictures: bool = True) -> list[Path]:
    """compare.csv, one torch pipelining CSV and (if `pictures`) one Gantt PNG per schedule, and a side-by-side
    picture; returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "compare.csv"]
    atomic_write_text(written[0], cmp.csv_text())
    for r in cmp.ok_rows():
        assert r.schedule is not None and r.timeline is not None
        path = out / f"{r.name}.torch.csv"
        write_torch_csv(r.schedule, path)
        written.append(path)
    if pictures:
        for r in cmp.ok_rows():
            path = out / f"{r.name}.png"
            plot_schedule(cmp, r, path)  # the figures of compare.csv, in its units (planner.compare.plot)
            written.append(path)
        written.append(plot_side_by_side(cmp, out / "side_by_side.png"))
    return written
