"""One step of the large-neighbourhood search over a pipeline schedule: a compact model of the part of the
incumbent's order that a neighbourhood frees (`solve_step`), on the order and replay of `formulations.pipeline_units`.

A neighbourhood N of units is freed; with first / last the earliest start / latest end of N, every stream's order
splits into a prefix (the leading units outside N that end by `first`: fixed), a middle (modelled) and a suffix (the
trailing units outside N that start at `last` or later: replayed).  The compact model (CP-SAT by default,
`_step_model`) has a start for each middle unit only: precedence between middle units, releases from the prefix, no
overlap per stream above the prefix's end, the incumbent's order between consecutive middle units outside N
(``keep[...]``: only N is reordered), family 3 of `formulations.pipeline` over the middle (an activation allocated in
the prefix holds from its fixed start, one freed in the suffix to the horizon, one held across the middle lowers the
capacity), family 5 between middle units (`fifo_inside` False: not for N's units, so micro-batches may run out of
order inside N where memory allows), and a makespan C >= every middle unit's end plus the tail of each suffix unit it
feeds (an edge, or its stream's first suffix unit) and >= what the prefix alone implies.  The objective puts C first
and the sum of N's ends second, so that a step that cannot shorten the makespan still moves N earlier and leaves
slack for the next; the incumbent is the hint.  The step's order (prefix, middle by the new starts, suffix) is
replayed; the caller decides whether it replaces the incumbent.

With `fix_untouched`, a stream that holds no unit of N keeps its middle at the incumbent's times (region "f": no
variables, no no-overlap; a modelled unit feeding one of them must end by its start less the delay,
``deadline[...]``, one it feeds is released by its end, ``release[...]``, and its suffix's tail bounds C as a
constant; a device whose compute stream is fixed needs no memory row: its activations all live on that stream).
This is a further restriction of the same step, so everything above still holds; it makes a step the size of the
streams N touches instead of every stream's.  Every replayed step is an order whose middle satisfied the memory
rows, so it fits the caps.  The model is the size of the middle, not of the pipeline, which is what lets the search
move pipelines far too large for the full formulation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from formulations.backends import get_backend
from formulations.model_api import (
    LinExpr,
    ModelBuilder,
    SolveParams,
    SolveStatus,
    Var,
    as_expr,
    cname,
    interval,
)
from formulations.pipeline_units import Units


@dataclass
class _Step:
    """One step's compact model over the middle units (module docstring)."""

    region: dict[int, str]  # unit -> "p" (prefix: fixed), "m" (middle: in the model) or "s" (suffix: replayed)
    start: dict[int, Var]
    makespan: Var


def _regions(units: Units, order: Mapping[int, Sequence[int]], start: Sequence[int], free: frozenset[int],
             fix_untouched: bool) -> dict[int, str]:
    """Unit -> its region in the step (`_Step.region`; "f": a middle fixed by `fix_untouched`)."""
    dur = units.dur
    first = min(start[r] for r in free)
    last = max(start[r] + dur[r] for r in free)
    region: dict[int, str] = {}
    for on in order.values():
        i, j = 0, len(on)
        while i < j and on[i] not in free and start[on[i]] + dur[on[i]] <= first:
            i += 1
        while j > i and on[j - 1] not in free and start[on[j - 1]] >= last:
            j -= 1
        region.update({r: "p" for r in on[:i]})
        inner = "f" if fix_untouched and not any(r in free for r in on) else "m"
        region.update({r: inner for r in on[i:j]})
        region.update({r: "s" for r in on[j:]})
    return region


def _edge_rows(units: Units, builder: ModelBuilder, step: _Step, start: Sequence[int],
               tail: Sequence[int]) -> int | None:
    """Precedence, release, deadline, tail and sink rows along the edges; the makespan that the fixed units alone
    imply, or None when a suffix unit feeds the middle (only at zero-length boundaries: the step is skipped)."""
    region, svar, c, dur = step.region, step.start, step.makespan, units.dur
    const_c = 0
    for r in units.reps:
        outs = list(units.succ[r])
        if region[r] == "s":
            if any(region[v] != "s" for v, _ in outs):
                return None
            continue
        if region[r] in ("p", "f"):  # fixed at the incumbent's times (a fixed unit's modelled predecessors
            # get their deadline in the middle branch below)
            for v, d in outs:
                if region[v] == "s":
                    const_c = max(const_c, start[r] + dur[r] + d + tail[v])
                elif region[v] == "m":
                    builder.add(svar[v] >= start[r] + dur[r] + d, cname("release", u=r, v=v))
            if not outs:
                const_c = max(const_c, start[r] + dur[r])
            continue
        for v, d in outs:
            if region[v] == "m":
                builder.add(svar[v] >= svar[r] + dur[r] + d, cname("prec", u=r, v=v))
            elif region[v] == "s":
                builder.add(c >= svar[r] + dur[r] + d + tail[v], cname("tail", u=r, v=v))
            else:
                builder.add(svar[r] + dur[r] + d <= start[v], cname("deadline", u=r, v=v))
        if not outs:
            builder.add(c >= svar[r] + dur[r], cname("sink", u=r))
    return const_c


def _stream_rows(units: Units, builder: ModelBuilder, step: _Step, start: Sequence[int], tail: Sequence[int],
                 order: Mapping[int, Sequence[int]], free: frozenset[int]) -> int:
    """Per stream: C after each middle unit and the suffix's tail, the incumbent's order between kept middle units,
    no overlap; the makespan that a stream's fixed units alone imply."""
    region, svar, c, dur = step.region, step.start, step.makespan, units.dur
    const_c = 0
    for d, on in order.items():
        pre = [r for r in on if region[r] == "p"]
        mid = [r for r in on if region[r] == "m"]
        suf = [r for r in on if region[r] == "s"]
        kept = [r for r in mid if r not in free]
        fixed = [r for r in on if region[r] == "f"]
        for r in mid:
            if suf:
                builder.add(c >= svar[r] + dur[r] + tail[suf[0]], cname("before", u=r))
        if pre and suf and not mid and not fixed:  # the stream's prefix runs straight into its suffix
            const_c = max(const_c, start[pre[-1]] + dur[pre[-1]] + tail[suf[0]])
        if fixed and suf:
            const_c = max(const_c, start[fixed[-1]] + dur[fixed[-1]] + tail[suf[0]])
        for a, b in zip(kept, kept[1:]):
            builder.add(svar[b] >= svar[a] + dur[a], cname("keep", u=a, v=b))
        builder.no_overlap([interval(svar[r], dur[r], svar[r] + dur[r], None, f"iv_{r}") for r in mid],
                           cname("stream", d=d))
    return const_c


def _step_model(units: Units, builder: ModelBuilder, start: Sequence[int], tail: Sequence[int],
                order: Mapping[int, Sequence[int]], free: frozenset[int], fifo_inside: bool,
                fix_untouched: bool = False) -> _Step | None:
    """The compact model of one step (module docstring), or None when the incumbent's order does not split into
    prefix, middle and suffix on some stream (zero-length units at the boundary: the step is skipped).  With
    `fix_untouched`, the middle of every stream that holds no unit of `free` is fixed at the incumbent's times
    (region "f": releases and deadlines for the modelled units, no variables)."""
    setup, dur = units.setup, units.dur
    region = _regions(units, order, start, free, fix_untouched)
    middle = [r for r in units.reps if region[r] == "m"]
    horizon = max(start[r] + tail[r] for r in units.reps)
    floor: dict[int, int] = {}  # unit -> end of the last prefix unit on its stream: no middle unit starts before it
    for on in order.values():
        pre = [r for r in on if region[r] == "p"]
        floor.update((r, start[pre[-1]] + dur[pre[-1]] if pre else 0) for r in on)
    svar = {r: builder.int_var(floor[r], horizon - dur[r], f"S_{r}") for r in middle}
    c = builder.int_var(0, horizon, "C")
    step = _Step(region, svar, c)

    def end(r: int) -> LinExpr:
        return svar[r] + dur[r]

    by_edges = _edge_rows(units, builder, step, start, tail)
    if by_edges is None:
        return None
    const_c = max(by_edges, _stream_rows(units, builder, step, start, tail, order, free))
    builder.add(c >= const_c, "rest")
    _memory_rows(units, builder, start, region, svar, horizon)
    if setup.fifo:
        for a, b, name in units.fifo_links:
            if region[a] != "m" or region[b] != "m" or (not fifo_inside and (a in free or b in free)):
                continue
            builder.add(svar[b] >= end(a), name)
    weight = len(free) * horizon + 1  # one makespan tick outweighs every secondary tick
    builder.minimize(c * weight + sum((end(r) for r in sorted(free)), as_expr(0)))
    for r in middle:
        builder.hint(svar[r], start[r])
    builder.hint(c, max(const_c, max((start[r] + tail[r] for r in middle), default=0)))
    return step


def solve_step(units: Units, backend: str, order: Mapping[int, Sequence[int]], start: Sequence[int],
               tail: Sequence[int], free: frozenset[int], *, time_limit_s: float, threads: int, seed: int,
               deterministic: bool, fifo_inside: bool = True, fix_untouched: bool = False,
               ) -> tuple[bool, tuple[dict[int, list[int]], tuple[list[int], list[int]]] | None]:
    """One step (module docstring) on the units `free` of the order `order` (timed as `start`, with
    `tail`): whether its model was proven optimal, and every stream's new order (prefix and fixed units as they
    were, the middle by the solved starts, the suffix as it was) with its replay, or None when the step was
    skipped, found no solution or its order does not replay.  The caller decides whether to keep it."""
    builder = get_backend(backend).new_builder()
    step = _step_model(units, builder, start, tail, order, free, fifo_inside, fix_untouched)
    if step is None:
        return False, None
    # a relative gap below 1 / (2 H) is under half a makespan tick's weight: the step stops once its makespan is
    # proven optimal, without proving the secondary term to the last tick
    horizon = max(start[r] + tail[r] for r in units.reps)
    result = builder.solve(SolveParams(time_limit_s=time_limit_s, rel_gap=0.5 / max(1, horizon), threads=threads,
                                       seed=seed, deterministic=deterministic))
    proven = result.status is SolveStatus.OPTIMAL
    if not result.has_solution:
        return proven, None
    moved = {r: result.int_value(v) for r, v in step.start.items()}
    new_order = {d: [r for r in on if step.region[r] in ("p", "f")]
                 + sorted((r for r in on if step.region[r] == "m"),
                          key=lambda r: (moved[r], moved[r] + units.dur[r], r))
                 + [r for r in on if step.region[r] == "s"] for d, on in order.items()}
    again = units.replay(new_order)
    return proven, None if again is None else (new_order, again)


def _memory_rows(units: Units, builder: ModelBuilder, start: Sequence[int], region: Mapping[int, str],
                 svar: Mapping[int, Var], horizon: int) -> None:
    """Family 3 over the middle: an activation allocated before it holds from its (fixed) start, one freed after
    it holds to the horizon, one held across it lowers the capacity; one wholly before or after it is not there."""
    for d, (room, held_for) in enumerate(units.activations):
        if any(region[r] == "f" for r in units.on_stream.get(d, ())):
            continue  # the device's compute stream is fixed (its activations all live there): memory as before
        held, ivs, dem = 0, [], []
        for f, until, demand, name in held_for:
            if region[f] == "s" or region[until] == "p":
                continue
            if region[f] == "p" and region[until] == "s":
                held += demand
                continue
            lo = svar[f] if region[f] == "m" else as_expr(start[f])
            hi = svar[until] + units.dur[until] if region[until] == "m" else as_expr(horizon)
            ivs.append(interval(lo, hi - lo, hi, None, name))
            dem.append(demand)
        if ivs:
            builder.cumulative(ivs, dem, room - held, cname("memory", d=d))

