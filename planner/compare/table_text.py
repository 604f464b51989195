"""The words of `plan-compare`'s table: one number format for every figure (`figure_text`), the planned row's
line (`opplan_line`: short, or with the search story when verbose), read from the notes the planned row's steps
leave on it (`planner.compare.compare_row`), and the table's last line, the outcome in words (`outcome_line`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from planner.compare.compare_row import CompareRow


def figure_text(value: float) -> str:
    """One number format for a column: at most 4 significant digits below 10^4, whole numbers above, never an
    exponent (1.121e+04 beside 9962 reads as a different magnitude)."""
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"


def opplan_line(opp: CompareRow, time_unit: str, memory_unit: str, cap_units: float | None,
                bound_round_gap: float, *, verbose: bool = True) -> str:
    """The planned row's line under the table: status, bound, gap, placement, memory cap and seconds; `verbose`
    adds why the placement, what the cut search, the bounds, the granularity and the search did, the warm start
    and the devices at the cap."""
    bound = opp.notes.get("bound_units")
    if not verbose:
        return (f"opplan: {opp.notes.get('status')}, bound "
                f"{figure_text(bound) + ' ' + time_unit if isinstance(bound, (int, float)) else bound}, gap "
                f"{opp.notes.get('gap', 0):.1%}, placement {opp.notes.get('placement')}, memory cap "
                f"{figure_text(cap_units) + ' ' + memory_unit if cap_units is not None else 'none'}, "
                f"{opp.notes.get('solve_time_s', 0):.1f} s (--verbose: how the search went)")
    told = _cut_text(opp.notes.get("cut"), time_unit, bound_round_gap)
    told += _every_cut_text(opp.notes.get("every_cut"), time_unit)
    told += _every_cut_memory_text(opp.notes.get("every_cut_memory"), time_unit)
    told += memory_bound_text(opp.notes.get("memory_bound"), time_unit)
    told += _granularity_text(opp.notes.get("granularity"), time_unit)
    told += _lns_text(opp.notes.get("lns"), time_unit)
    why = opp.notes.get("placement_why")
    if why:
        told = f" ({why})" + told
    skipped = opp.notes.get("placements_skipped")
    if isinstance(skipped, dict) and skipped:
        told += "".join(f", the {pl} placement not solved (its bound {figure_text(float(v))} {time_unit} cannot beat "
                        f"this schedule)" for pl, v in skipped.items())
    return (f"opplan: {opp.notes.get('status')}, bound "
            f"{figure_text(bound) + ' ' + time_unit if isinstance(bound, (int, float)) else bound}, gap "
            f"{opp.notes.get('gap', 0):.1%}, placement {opp.notes.get('placement')}{told}, warm start "
            f"{opp.notes.get('warm_start') or 'none'}, "
            f"memory cap {figure_text(cap_units) + ' ' + memory_unit if cap_units is not None else 'none'}"
            f"{at_cap_text(opp.notes.get('devices_at_cap'))}, "
            f"{opp.notes.get('solve_time_s', 0):.1f} s")


def _cut_text(cut: object, time_unit: str, bound_round_gap: float) -> str:
    """notes["cut"]: how the cut search moved the cut, its rounds by the bound, the bound over every cut."""
    if not isinstance(cut, dict):
        return ""
    chain = f", {cut['chain_moves']} of them chain moves" if cut.get("chain_moves") else ""
    text = (f", cut moved {cut['moves']} times{chain} ({cut['simulations']} simulations; the bound is "
            f"for that cut)" if cut["moves"] else f", cut kept ({cut['simulations']} simulations)")
    if cut.get("bound_rounds"):
        text += (f", {cut['bound_rounds']} of its rounds by the cut's bound (a solve's gap was at "
                 f"most {bound_round_gap:.0%})")
    if isinstance(cut.get("any_cut_bound_units"), (int, float)):
        text += f", bound over every cut {figure_text(cut['any_cut_bound_units'])} {time_unit} (work / devices)"
    return text


def _every_cut_text(every: object, time_unit: str) -> str:
    """notes["every_cut"]: the bound over every cut of both placements (`planner.compare.cut_bound`)."""
    if not isinstance(every, dict) or not isinstance(every.get("bound_units"), (int, float)):
        return ""
    fams: dict = every["by_placement_units"]
    told = ", ".join(f"{fam} {figure_text(v)}" for fam, v in fams.items())
    return (f", bound over every cut of the {' and '.join(fams)} placements "
            f"{figure_text(float(every['bound_units']))} {time_unit} (heads + work per device; {told})")


def _every_cut_memory_text(every: object, time_unit: str) -> str:
    """notes["every_cut_memory"]: the bound over every cut of both placements within the memory cap
    (`planner.compare.cut_memory_bound`), and whether it puts half of DualPipe's bubble out of reach."""
    if not isinstance(every, dict) or not isinstance(every.get("bound_units"), (int, float)):
        return ""
    if every.get("no_cut_fits"):
        return ", no cut of either placement fits the memory cap"
    text = f", within the cap {figure_text(float(every['bound_units']))} {time_unit}"
    half = every.get("half_bubble_units")
    if isinstance(half, (int, float)):
        text += (" (half of DualPipe's bubble out of reach on every cut)" if every.get("half_bubble_unreachable")
                 else f" (half of DualPipe's bubble needs {figure_text(float(half))} {time_unit}: not ruled out)")
    return text


def _granularity_text(gran: object, time_unit: str) -> str:
    """notes["granularity"]: the sub-chunk solve and which level the row kept, or why it ran at granularity 1."""
    if isinstance(gran, dict) and "tasks" in gran:
        fine = gran.get("fine_makespan_units")
        return (f", granularity k = {gran['k']} ({gran['tasks']} compute tasks, all-to-alls at "
                f"{gran['a2a_at']}; kept {gran['kept']}; stage level "
                f"{figure_text(float(gran['stage_level_makespan_units']))} {time_unit}, its order replayed "
                f"{figure_text(float(gran['stage_level_replayed_units']))} {time_unit}"
                + (f", sub-chunks {figure_text(float(fine))} {time_unit}" if fine is not None else "")
                + ")")
    if isinstance(gran, dict):
        return f", granularity 1 (asked {gran.get('asked')}: {gran.get('why')})"
    return ""


def _lns_text(lns: object, time_unit: str) -> str:
    """notes["lns"]: where the neighbourhood search started, what it gained, and the full model after it."""
    if not isinstance(lns, dict):
        return ""
    start = ("the full solve's order replayed" if lns.get("after_full_solve", True) else
             "no full solve first, the pipeline is that large; the warm start replayed")
    if lns.get("periodic_period_units") is not None:
        start = (f"no full solve first, the pipeline is that large; a periodic schedule (one "
                 f"micro-batch of each chain every {figure_text(float(lns['periodic_period_units']))} "
                 f"{time_unit}: it replays shorter than the warm start) replayed")
    if lns.get("folded"):
        start = "searched on the pipeline's mirror half: symmetric schedules, half the tasks; " + start
    text = (f", neighbourhood search {figure_text(float(lns['from_units']))} -> "
            f"{figure_text(float(lns['to_units']))} {time_unit} ({start} "
            f"{figure_text(float(lns['replayed_units']))}; {lns['gains']} gains in {lns['steps']} "
            f"steps, {lns['seconds']:.0f} s)")
    if lns.get("resolve_s") is not None:
        text += (f", then the full model again {float(lns['resolve_s']):.0f} s: "
                 f"{figure_text(float(lns['resolve_units']))} {time_unit}")
    return text


def at_cap_text(devices: object) -> str:
    """The table line's words for notes["devices_at_cap"]."""
    if not isinstance(devices, (tuple, list)) or not devices:
        return ""
    return f" (at the cap: device{'s' if len(devices) > 1 else ''} {', '.join(str(d) for d in devices)})"


def memory_bound_text(note: object, time_unit: str) -> str:
    """The table line's words for notes["memory_bound"] (`planner.compare.memory_bound_note`)."""
    if not isinstance(note, dict):
        return ""
    if "skipped" in note:
        return f", no memory bound ({note['skipped']})"
    pair = list(note.get("devices") or ())
    who = (f"devices {pair[0]} and {pair[1]} together: their" if len(pair) > 1 else
           f"device {note['device']}'s" if note["device"] is not None else "no device's")
    text = (f", memory bound {figure_text(float(note['bound_units']))} {time_unit} ({who} relaxation with the cap "
            f"raised it; {note['probes']} probes, {float(note['seconds']):.0f} s"
            # incomplete: the search's time ran out, or a probe's did (an unknown ends that relaxation's search)
            + ("" if note["complete"] else ", not searched to the end: out of time") + ")")
    half = note.get("half_bubble_units")
    if isinstance(half, (int, float)):
        text += (f"; half DualPipe's bubble needs at most {figure_text(float(half))} {time_unit}: "
                 + ("no schedule of this pipeline under the cap reaches it" if note["half_bubble_unreachable"]
                    else "this schedule reaches it" if note.get("half_bubble_reached") else "not ruled out")
                 + (f" ({note['half_bubble_answers']})" if note.get("half_bubble_answers") else ""))
        others = note.get("other_placements_units")
        if isinstance(others, dict) and others:
            text += "; on its own cut, " + ", ".join(
                f"the {pl} placement's bound {figure_text(v) if v < float('inf') else 'none within the cap'}"
                f" {time_unit if v < float('inf') else ''}".rstrip()
                + (" (above it)" if v > float(half) else " (below it)") for pl, v in others.items())
    return text


def outcome_line(values: Mapping[str, Mapping[str, float]], time_unit: str) -> str:
    """The table's last line ('result: opplan 25 unit — 3.8 % shorter than DualPipe, ...'): the planned schedule
    against DualPipe and against the best other schedule (the bubble as idle time, bubble ratio x makespan), from
    the rows' figures (schedule name -> {"makespan",
    "bubble_ratio", "peak_memory"}, the CSV's values).  Empty when there is no planned row; the DualPipe parts are
    left out when DualPipe did not run."""
    opp = values.get("opplan")
    if opp is None:
        return ""
    parts = [f"result: opplan {figure_text(opp['makespan'])} {time_unit}"]
    dp = values.get("dualpipe")
    others = {n: v for n, v in values.items() if n not in ("opplan", "dualpipe")}
    best = min(others, key=lambda n: others[n]["makespan"], default=None)
    versus = []
    if dp is not None:
        versus.append(_versus(opp["makespan"], dp["makespan"], "DualPipe"))
    if best is not None:
        versus.append(_versus(opp["makespan"], others[best]["makespan"], f"the best other schedule ({best})",
                              bare=bool(versus) and versus[0].endswith("shorter than DualPipe")))
    if dp is not None:
        # the bubble is idle time (a ratio times the makespan, the devices alike): a share of ratios would
        # overstate a shorter schedule's share
        idle, dp_idle = opp["bubble_ratio"] * opp["makespan"], dp["bubble_ratio"] * dp["makespan"]
        versus.append(_share("bubble", idle, dp_idle, "{:.1%}".format) if dp_idle > 0
                      else _share("bubble", opp["bubble_ratio"], dp["bubble_ratio"], "{:.1%}".format))
        versus.append(_share("peak memory", opp["peak_memory"], dp["peak_memory"], figure_text))
    return parts[0] + (" — " + ", ".join(versus) if versus else "")


def _versus(makespan: float, other: float, name: str, *, bare: bool = False) -> str:
    """'23.4 % shorter than NAME' (or '4.0 % longer than NAME', 'as long as NAME'); `bare`: '18.0 % than NAME'
    when shorter, as the second of two comparisons reads ('23.4 % shorter than A, 18.0 % than B')."""
    if other <= 0 or makespan == other:
        return f"as long as {name}"
    change = (other - makespan) / other
    if change > 0:
        return f"{100 * change:.1f} %{'' if bare else ' shorter'} than {name}"
    return f"{-100 * change:.1f} % longer than {name}"


def _share(what: str, value: float, reference: float, text: Callable[[float], str]) -> str:
    """'bubble 57 % of DualPipe's': `value` as a share of DualPipe's `reference`; 'bubble as DualPipe's (0.0%)'
    when both are 0, and both values in the figure's own format (`text`) when only the reference is 0."""
    if reference > 0:
        return f"{what} {100 * value / reference:.0f} % of DualPipe's"
    if value == reference:
        return f"{what} as DualPipe's ({text(reference)})"
    return f"{what} {text(value)}, DualPipe's {text(reference)}"
