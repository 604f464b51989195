"""The memory what-if of ``plan-compare --memory-sweep LO:HI:STEP``: the planned pipeline at each per-device memory
cap beside every baseline, the Pareto front of makespan against peak memory a user reads to pick a memory budget.

Caps are in the comparison's memory unit (`Comparison.units`: the user's own on unit costs, MiB on a model or a
preset, where a size with its unit, ``2GiB``, also reads); the range is parsed as plan-whatif parses its own
(`planner.whatif.parse_memory_range`).

The baselines are simulated once: their makespan and peak memory do not depend on the cap; a baseline fits a cap
when its peak is at most the cap.  The planned row is solved at each cap (`compare` with that cap, the baselines
handed over) from the smallest cap up; each cap gets its share of the time left (time a cap does not use goes to the
caps after it), so the sweep ends near its time limit however many caps it has: a cap no baseline fits gets
`MemorySweepPolicy.cold_weight` shares, since its solve has no warm start, the others one.  Monotone by construction: a
schedule that fits a cap fits every larger one, so each cap keeps the shorter of its own schedule and the best one
found at a smaller cap, and the planned makespan never rises with the cap; once every cap is solved, a cap also
takes a schedule a larger cap's solve found whose peak fits it, where that one is shorter.  A baseline that fits
the cap is a schedule the planner may return as it is: where one is shorter than every solve's so far (the solve
warm-starts from the baselines of its own placement only, so a fixed-placement ZB-H1 under a tight cap can be), the
cap keeps that baseline's schedule and says so (``source``); the planned makespan is never above a baseline that
fits the same cap.  Its bound at a cap is the solve's there (the table's bound: for the placement and cut that
solve took, raised by the memory bound where that ran), no higher than the kept makespan.  A cap where no solve gave
a schedule that fits it and no baseline fits is infeasible, with the solve's reason in one line.

``--memory-sweep auto`` (`auto_caps`; `memory_sweep` with no caps) takes the caps from the baselines' peaks: from
below the smallest (where only a planned schedule can fit) to above DualPipe's, as round figures of the memory unit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import pandas as pd

from planner.compare.compare_row import CompareRow
from planner.compare.pipelines import Comparison, compare
from planner.compare.table_text import figure_text
from planner.errors import InputError
from planner.ir.units import parse_bytes
from planner.whatif import parse_memory_range, short_reason

REASON_CHARS = 160  # a placement's reason names the placement, the solver and its time: the part a reader needs

__all__ = ["AUTO", "FLAG", "PLANNED", "MemorySweep", "MemorySweepPolicy", "SweepPoint", "auto_caps", "memory_sweep",
           "parse_caps"]

FLAG = "--memory-sweep"
AUTO = "auto"  # ``--memory-sweep auto``: the caps from the baselines' peaks (`auto_caps`)
PLANNED = "opplan"  # the planned schedule's name in the sweep's frame, as in compare.csv
_GRID = 10**6  # steps per byte of `parse_caps`' range (six decimals of the memory unit add up exactly)
_CAP_DIGITS = 12  # most significant digits `_cap_units` tries before it gives a cap's exact quotient


@dataclass(frozen=True)
class MemorySweepPolicy:
    """The memory sweep's tuning (`memory_sweep`)."""

    # least seconds a cap's solve gets, even when the caps before it spent the time: a warm-started solve returns a
    # schedule within a second on the unit-cost pipelines, and a shorter share leaves the larger ones without one
    min_share_s: float = 1.0
    # seconds set aside from the time limit for the sweep's picture (one axes, a few dozen points)
    draw_s: float = 1.0
    # shares of the time a cap gets where no baseline fits it: its solve starts from no schedule (a list schedule at
    # best) and spends its time finding one, where a cap that a baseline fits is warm-started and ends early
    cold_weight: float = 3.0
    # ``auto``'s range (`auto_caps`): from this share of the smallest baseline peak (below it only a planned schedule
    # can fit: how far down the planner goes is what the sweep shows) ...
    auto_low: float = 0.8
    # ... to this multiple of DualPipe's peak (above it the planned schedule has every baseline's memory and more) ...
    auto_high: float = 1.1
    # ... in about this many caps (one more where the rounded ends need it): enough for the front's shape, few enough
    # that each cap's solve gets a useful share of the time
    auto_caps: int = 7
    # a step of fewer bytes than this is rounded up to whole bytes: on unit costs a unit is a few bytes, and a round
    # step in the unit would land between bytes (caps unevenly rounded, or two the same)
    auto_whole_bytes: int = 1000


DEFAULT_MEMORY_SWEEP_POLICY = MemorySweepPolicy()


def parse_caps(text: str, bytes_per_unit: int, *, sizes: bool) -> list[int]:
    """The caps of ``LO:HI:STEP`` (or ``a,b,c``) in bytes, ascending: a plain number is in the comparison's memory
    unit (`bytes_per_unit` bytes); with `sizes` (a model or a preset) a size with its unit (``2GiB``) reads too.
    Raises `InputError` naming ``--memory-sweep``."""

    # the range is stepped on a grid finer than a byte, so that a decimal step (0.1 MiB: not a whole number of
    # bytes) adds up to its HI exactly; each cap is then rounded to whole bytes
    def to_grid(token: str) -> int:
        try:
            value = Fraction(token.strip())
        except (ValueError, ZeroDivisionError):
            if not sizes:
                raise InputError(f"{FLAG} {text!r}: {token!r} is not a number (on unit costs the caps are in the "
                                 "unit of --activation and --param)") from None
            return parse_bytes(token, where=FLAG) * _GRID
        return round(value * bytes_per_unit * _GRID)

    on_grid = parse_memory_range(text, flag=FLAG, to_bytes=to_grid, example="1GiB:8GiB:1GiB" if sizes else "2:8:1")
    return sorted({round(Fraction(v, _GRID)) for v in on_grid})


def auto_caps(baselines: Comparison, policy: MemorySweepPolicy = DEFAULT_MEMORY_SWEEP_POLICY) -> list[int]:
    """The caps of ``--memory-sweep auto`` in bytes, ascending, from the peaks of the baselines that ran
    (`baselines.ok_rows()`): evenly spaced, the first at most `policy.auto_low` x the smallest peak, the last the
    first at or above `policy.auto_high` x DualPipe's peak (the largest peak where DualPipe did not run), and about
    `policy.auto_caps` of them (the step is the range over `auto_caps - 1`, rounded up to two significant digits of
    the memory unit, and every cap is a multiple of it, so that the caps read as round figures: the ends rounded
    outwards may add one; where a step is under `policy.auto_whole_bytes` bytes, on unit costs, it is rounded up to
    whole bytes, and there may be fewer).  Raises `InputError` where no baseline ran (nothing to take the range
    from)."""
    per_b = baselines.scales.bytes_per_unit
    peaks = {r.name: r.figures.max_peak_memory_bytes for r in baselines.ok_rows() if r.figures is not None}
    if not peaks:
        raise InputError(f"{FLAG} {AUTO}: no baseline ran, so there are no peaks to take the caps from",
                         fix="give the caps as LO:HI:STEP")
    if policy.auto_caps < 2 or not 0 < policy.auto_low < policy.auto_high:
        raise InputError(f"MemorySweepPolicy: auto_caps {policy.auto_caps} (need at least 2), auto_low "
                         f"{policy.auto_low} and auto_high {policy.auto_high} (need 0 < auto_low < auto_high)")
    lo = Fraction(min(peaks.values()), per_b) * Fraction(str(policy.auto_low))
    hi = Fraction(peaks.get("dualpipe", max(peaks.values())), per_b) * Fraction(str(policy.auto_high))
    raw = (hi - lo) / (policy.auto_caps - 1)
    digit = Fraction(10) ** (math.floor(math.log10(raw)) - 1)  # the step's second significant digit
    step = math.ceil(raw / digit) * digit
    if step * per_b < policy.auto_whole_bytes:  # a unit of few bytes (unit costs): a cap between two bytes is noise
        step = Fraction(math.ceil(step * per_b), per_b)
    first = max(math.floor(lo / step), 1)  # a multiple of the step at or below LO, and above 0
    last = math.ceil(hi / step)
    return sorted({round(i * step * per_b) for i in range(first, last + 1)})


@dataclass(frozen=True)
class SweepPoint:
    """The planned schedule at one cap: the kept row (the shortest found at this cap or a smaller one; None:
    infeasible), the cap where it was found, the solve's bound at this cap in ticks, why it is infeasible, and
    which baseline's schedule it is where no solve found one as short ("": a solve's)."""

    cap_bytes: int
    row: CompareRow | None
    found_at_bytes: int = 0
    bound_tick: int | None = None
    reason: str = ""
    baseline: str = ""

    def source(self, cap_units: float, memory_unit: str) -> str:
        """Where the kept schedule comes from, in words (the CSV's ``source``; `cap_units`: where it was found)."""
        if self.row is None:
            return ""
        if self.baseline:
            return f"baseline {self.baseline}: no solve found one as short"
        if self.found_at_bytes == self.cap_bytes:
            return "solve"
        return f"solve at cap {figure_text(cap_units)} {memory_unit}"


@dataclass(frozen=True)
class MemorySweep:
    """The baselines (`baselines.rows`, simulated once) and the planned schedule at each cap (`points`)."""

    baselines: Comparison
    points: tuple[SweepPoint, ...]

    def units(self) -> tuple[str, str]:
        return self.baselines.units()

    def columns(self) -> list[str]:
        t, mem = self.units()
        return [f"memory_cap_{mem}", "schedule", f"makespan_{t}", f"peak_memory_{mem}", f"bound_{t}", "gap",
                "feasible", "source", "reason"]

    def frame(self) -> pd.DataFrame:
        """One row per cap and schedule (the planned one first, then the baselines in the table's order), the
        columns of ``memory_sweep.csv`` (`columns`): the cap, makespan, peak memory and bound in the comparison's
        units (NaN where there is none: a baseline has no bound, an infeasible cap no figures), ``gap`` (makespan
        minus bound, over makespan), ``feasible`` (1 or 0: a baseline fits the cap when its peak is at most the cap),
        ``source`` (where the planned row's schedule comes from, `SweepPoint.source`) and ``reason`` (why not
        feasible, one line)."""
        per_t, per_b = self.baselines.scales.ticks_per_unit, self.baselines.scales.bytes_per_unit
        nan = float("nan")
        records = []
        for pt in self.points:
            cap = _cap_units(pt.cap_bytes, per_b)
            if pt.row is None or pt.row.figures is None:
                records.append([cap, PLANNED, nan, nan, nan, nan, 0, "", pt.reason])
            else:
                f = pt.row.figures
                gap = nan if pt.bound_tick is None else (f.makespan_tick - pt.bound_tick) / max(f.makespan_tick, 1)
                records.append([cap, PLANNED, f.makespan_tick / per_t, f.max_peak_memory_bytes / per_b,
                                nan if pt.bound_tick is None else pt.bound_tick / per_t, gap, 1,
                                pt.source(_cap_units(pt.found_at_bytes, per_b), self.units()[1]), ""])
            for r in self.baselines.ok_rows():
                g = r.figures
                assert g is not None
                fits = g.max_peak_memory_bytes <= pt.cap_bytes
                records.append([cap, r.name, g.makespan_tick / per_t, g.max_peak_memory_bytes / per_b, nan, nan,
                                int(fits), "baseline", "" if fits else
                                f"its peak memory {figure_text(g.max_peak_memory_bytes / per_b)} is above the cap"])
        cols = self.columns()
        return pd.DataFrame(records, columns=cols).astype(
            {cols[0]: "float64", cols[2]: "float64", cols[3]: "float64", cols[4]: "float64", "gap": "float64",
             "feasible": "int64", "source": "object", "reason": "object"})

    def csv_text(self) -> str:
        """``memory_sweep.csv``: `frame()` with nine significant digits, an empty cell where a figure is missing,
        LF line ends."""
        return str(self.frame().to_csv(index=False, float_format="%.9g", na_rep="", lineterminator="\n"))

    def point_line(self, pt: SweepPoint) -> str:
        """The line printed for one cap: the planned makespan, bubble, peak, bound and gap (or why infeasible) and the
        shortest baseline that fits the cap."""
        t, mem = self.units()
        per_t, per_b = self.baselines.scales.ticks_per_unit, self.baselines.scales.bytes_per_unit
        head = f"memory cap {figure_text(pt.cap_bytes / per_b)} {mem}: "
        fitting = [r for r in self.baselines.ok_rows() if r.figures is not None
                   and r.figures.max_peak_memory_bytes <= pt.cap_bytes]
        best = min(fitting, key=lambda r: r.figures.makespan_tick, default=None)  # type: ignore[union-attr]
        base = ("no baseline fits" if best is None else
                f"best baseline that fits {best.name} {figure_text(best.figures.makespan_tick / per_t)} {t} "  # type: ignore[union-attr]
                f"({len(fitting)} of {len(self.baselines.ok_rows())} fit)")
        if pt.row is None or pt.row.figures is None:
            return head + f"planned infeasible ({pt.reason}); {base}"
        f = pt.row.figures
        bound = "" if pt.bound_tick is None else (
            f", bound {figure_text(pt.bound_tick / per_t)} {t}, gap "
            f"{(f.makespan_tick - pt.bound_tick) / max(f.makespan_tick, 1):.1%}")
        found = "" if pt.found_at_bytes == pt.cap_bytes and not pt.baseline else \
            f" ({pt.source(_cap_units(pt.found_at_bytes, per_b), mem)})"
        return (head + f"planned {figure_text(f.makespan_tick / per_t)} {t}, bubble {f.bubble_ratio:.1%}, peak "
                f"{figure_text(f.max_peak_memory_bytes / per_b)} {mem}{bound}{found}; {base}")

    def closing_line(self) -> str:
        """The line after the caps: where the planned schedule first fits and what the largest cap gives."""
        t, mem = self.units()
        per_t, per_b = self.baselines.scales.ticks_per_unit, self.baselines.scales.bytes_per_unit
        feasible = [pt for pt in self.points if pt.row is not None and pt.row.figures is not None]
        if not feasible:
            return f"memory sweep: {len(self.points)} caps, the planned schedule fits none"
        first, last = feasible[0], feasible[-1]
        return (f"memory sweep: {len(self.points)} caps, the planned schedule fits from "
                f"{figure_text(first.cap_bytes / per_b)} {mem} "
                f"({figure_text(first.row.figures.makespan_tick / per_t)} {t}) to "  # type: ignore[union-attr]
                f"{figure_text(last.cap_bytes / per_b)} {mem} "
                f"({figure_text(last.row.figures.makespan_tick / per_t)} {t})")  # type: ignore[union-attr]


def memory_sweep(p: int, m: int, costs, caps_bytes: Sequence[int] | None, *, time_limit_s: float,
                 report: Callable[[str], None] | None = None,
                 sweep_policy: MemorySweepPolicy = DEFAULT_MEMORY_SWEEP_POLICY, **compare_args) -> MemorySweep:
    """The baselines once and the planned row at each of `caps_bytes` (None: `auto_caps` from the baselines' peaks)
    within `time_limit_s` in all (module docstring; `sweep_policy.draw_s` of it is left for the picture); `report`
    gets `MemorySweep.point_line` as each cap is done; `compare_args` go to every `compare` (schedules, placement,
    backend, progress, ...)."""
    policy = sweep_policy
    deadline = time.monotonic() + time_limit_s - policy.draw_s
    caps = None if caps_bytes is None else sorted(set(caps_bytes))
    if caps is not None:
        _check_caps(caps, time_limit_s, policy)  # before the baselines: a bad range costs nothing
    schedules = compare_args.pop("schedules", None)
    base = compare(p, m, costs, schedules=schedules, opplan=False)
    if caps is None:
        caps = auto_caps(base, policy)
        _check_caps(caps, time_limit_s, policy)
    per_b = base.scales.bytes_per_unit
    sweep = MemorySweep(base, ())
    points: list[SweepPoint] = []
    kept: tuple[CompareRow, int] | None = None
    solved: list[tuple[CompareRow, int]] = []  # every planned schedule found, with the cap it was found at
    peaks = [r.figures.max_peak_memory_bytes for r in base.ok_rows() if r.figures is not None]
    weights = [1.0 if any(peak <= cap for peak in peaks) else policy.cold_weight for cap in caps]
    for i, cap in enumerate(caps):
        share = max(policy.min_share_s, (deadline - time.monotonic()) * weights[i] / sum(weights[i:]))
        cmp = compare(p, m, costs, baselines=base.rows, memory_cap_units=cap / per_b, time_limit_s=share,
                      **compare_args)
        row = cmp.row(PLANNED)
        bound = None
        if row.figures is not None:
            noted = row.notes.get("bound_tick")
            bound = int(noted) if isinstance(noted, (int, float)) else None
            solved.append((row, cap))
            if kept is None or row.figures.makespan_tick < kept[0].figures.makespan_tick:  # type: ignore[union-attr]
                kept = (row, cap)
        fitting = [r for r in base.ok_rows() if r.figures is not None and r.figures.max_peak_memory_bytes <= cap]
        shortest = min(fitting, key=lambda r: r.figures.makespan_tick, default=None)  # type: ignore[union-attr]
        if shortest is not None and (kept is None or shortest.figures.makespan_tick  # type: ignore[union-attr]
                                     < kept[0].figures.makespan_tick):  # type: ignore[union-attr]
            kept = (shortest, cap)  # a baseline that fits is a schedule the planner may return as it is
        point = SweepPoint(cap, None, reason=_why_none(row.skipped))
        if kept is not None:
            held = kept[0].figures.makespan_tick  # type: ignore[union-attr]
            point = SweepPoint(cap, kept[0], kept[1], None if bound is None else min(bound, held),
                               baseline="" if kept[0].name == PLANNED else kept[0].name)
        points.append(point)
        if report is not None:
            report(sweep.point_line(point))
    return MemorySweep(base, tuple(_carried_down(points, solved)))


def _carried_down(points: list[SweepPoint], solved: list[tuple[CompareRow, int]]) -> list[SweepPoint]:
    """Each point with the shortest schedule any solve found whose peak fits its cap, where that is shorter than
    the one it keeps: a solve at a larger cap may find a schedule that also fits a smaller one."""
    out = []
    for point in points:
        fits = [(row, at) for row, at in solved
                if row.figures is not None and row.figures.max_peak_memory_bytes <= point.cap_bytes]
        best = min(fits, key=lambda ra: ra[0].figures.makespan_tick, default=None)  # type: ignore[union-attr]
        held = None if point.row is None or point.row.figures is None else point.row.figures.makespan_tick
        if best is not None and (held is None or best[0].figures.makespan_tick < held):  # type: ignore[union-attr]
            tick = best[0].figures.makespan_tick  # type: ignore[union-attr]
            point = SweepPoint(point.cap_bytes, best[0], best[1],
                               None if point.bound_tick is None else min(point.bound_tick, tick))
        out.append(point)
    return out


def _check_caps(caps: list[int], time_limit_s: float, policy: MemorySweepPolicy) -> None:
    """At least one cap, every one positive, and the time limit gives each its least share (else `InputError`)."""
    if not caps or caps[0] <= 0:
        raise InputError(f"memory sweep: need at least one positive cap (got {caps})")
    if len(caps) * policy.min_share_s > time_limit_s:
        raise InputError(f"{FLAG}: {len(caps)} caps need at least {len(caps) * policy.min_share_s:g} s, more than "
                         f"the time limit {time_limit_s:g} s", fix="take a larger STEP or raise --time-limit")


def _why_none(skipped: str) -> str:
    """The planned row's reason for giving no schedule, in one line: the placements' own words without the
    table's wrapper (`compare`'s skipped row), cut as plan-whatif cuts its reasons."""
    prefix = "no placement gave a schedule ("
    if skipped.startswith(prefix) and skipped.endswith(")"):
        skipped = skipped[len(prefix):-1]
    return short_reason(skipped or "no schedule", limit=REASON_CHARS)


def _cap_units(cap_bytes: int, bytes_per_unit: int) -> float:
    """A cap in the memory unit with the fewest significant digits that still round to its bytes: the user's own
    figure back (0.6 MiB, not the 0.600000381 its whole bytes make)."""
    exact = cap_bytes / bytes_per_unit
    for digits in range(1, _CAP_DIGITS + 1):
        short = float(f"{exact:.{digits}g}")
        if round(short * bytes_per_unit) == cap_bytes:
            return short
    return exact
