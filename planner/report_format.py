"""Terminal rendering of reports with rich (kept apart from the pure summaries in report.py).

Bytes and times are printed by `planner.ir.units.format_bytes` and `format_time`, the project's one formatter of
each (so a table, a progress line and a picture say the same thing the same way).
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from planner.ir.units import format_bytes
from planner.ir.units import format_time as _format_time


def format_time(value: float, unit: str) -> str:
    """`planner.ir.units.format_time` in the summary's unit (shorter to call in the tables below)."""
    return _format_time(value, unit=unit)


def _console() -> Console:
    """A console that does not wrap a line mid-phrase when the output is piped (rich assumes 80 columns there)."""
    piped = not sys.stdout.isatty()
    return Console(soft_wrap=True, width=200 if piped else None)


def human_count(n: float) -> str:
    for scale, name in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3f} {name}"
    return f"{n:.0f}"


def print_inspect_table(summary: dict[str, Any], console: Console | None = None) -> None:
    console = console or _console()
    unit = summary["hardware"]["time_unit"]
    totals = Table(title=f"Model {summary['model']}", show_header=False)
    before = summary.get("num_ops_before_passes", summary["num_ops"])
    totals.add_row("ops (after folding, dead code)", f"{summary['num_ops']} (of {before})")
    totals.add_row("edges", str(summary["num_edges"]))
    totals.add_row("FLOPs (2 x MACs)", human_count(summary["total_flops"]))
    totals.add_row("parameters (each initializer once)", format_bytes(summary["param_bytes"]))
    totals.add_row("parameters as placed (per op; memory checks use this)",
                   format_bytes(summary["param_bytes_as_placed"]))
    totals.add_row("activations (all outputs)", format_bytes(summary["activation_bytes"]))
    totals.add_row("devices", f"{len(summary['hardware']['devices'])}")
    totals.add_row("critical path of the op graph (fastest device, free links)",
                   format_time(summary["critical_path"], unit))
    totals.add_row("work bound (total work / total speed)", format_time(summary["work_bound"], unit))
    totals.add_row("serial time on fastest device", format_time(summary["serial_time_fastest_device"], unit))
    console.print(totals)
    heavy = Table(title="Heaviest ops")
    for col in ("op", "type", "time", "FLOPs"):
        heavy.add_column(col)
    for row in summary["heaviest_ops"]:
        heavy.add_row(row["name"], row["op_type"], format_time(row["time"], unit), human_count(row["flops"]))
    console.print(heavy)
    if summary["estimated_op_types"]:
        why = summary.get("estimated_why", {})
        est = ", ".join(f"{k} x{v}" + (f" ({why[k]})" if why.get(k) else "")
                        for k, v in summary["estimated_op_types"].items())
        console.print(f"[yellow]estimated:[/] {est}")
    else:
        console.print("every op type has a cost rule (nothing estimated)")


def print_plan_table(summary: dict[str, Any], console: Console | None = None) -> None:
    """The plan-solve / plan-simulate summary: quality line, per-device table, links, baselines."""
    console = console or _console()
    unit = summary["time_unit"]
    console.print(
        f"[bold]{summary['method']}[/] ({summary['solver'] or 'no solver'}, {summary['status']}): makespan "
        f"[bold]{format_time(summary['makespan'], unit)}[/], lower bound {format_time(summary['lower_bound'], unit)}, "
        f"gap {100 * summary['gap']:.1f}%, bubble ratio {summary['bubble_ratio']:.2f} (idle / (devices x makespan))",
    )
    console.print(f"  lower bound of the {summary['lower_bound_of']}")
    if "choice" in summary:
        choice = summary["choice"]
        each = "; ".join(f"{name} {format_time(c['makespan_s'], 's')}" + (
            f" -> {format_time(c['score_s'], 's')}" if choice["by"] == "runtime replay" else "")
            for name, c in choice["candidates"].items())
        console.print(f"  chosen by the {choice['by']}: {choice['chosen']} ({each})")
    table = Table()
    for col in ("device", "tasks", "busy", "busy %", "peak memory", "capacity"):
        table.add_column(col, justify="right" if col != "device" else "left")
    for d in summary["devices"]:
        cap = d["capacity_bytes"]
        table.add_row(d["device"], str(d["tasks"]), format_time(d["busy"], unit), f"{100 * d['busy_fraction']:.0f}",
                      format_bytes(d["peak_memory_bytes"]), format_bytes(cap) if cap < 2**61 else "unbounded")
    console.print(table)
    console.print(f"bytes across links: {format_bytes(summary['bytes_across_links'])} over "
                  f"{len(summary['links'])} device pairs")
    if summary.get("baselines"):
        parts = [f"{k} {format_time(v, unit)}" for k, v in summary["baselines"].items()]
        console.print("baselines on the op graph: " + ", ".join(parts))


def print_clustering(summary: dict[str, Any], console: Console | None = None) -> None:
    console = console or _console()
    unit = summary["time_unit"]
    table = Table(title="Coarsening", show_header=False)
    table.add_row("ops", str(summary["num_ops"]))
    table.add_row("linear clusters / after cycle repair", f"{summary['num_linear_clusters']} / "
                  f"{summary['num_clusters_after_repair']}")
    table.add_row("clusters after merging", str(summary["num_clusters"]))
    table.add_row("largest clusters (ops)", ", ".join(map(str, summary["largest_clusters"])))
    table.add_row("bytes cut / all edge bytes", f"{format_bytes(summary['cut_bytes'])} / "
                  f"{format_bytes(summary['total_edge_bytes'])}")
    table.add_row("critical path of the op graph (fastest device, free links; as plan-inspect)",
                  format_time(summary["critical_path"], unit))
    table.add_row("coarsening estimate (mean durations, every cut edge paid), ops -> clusters",
                  f"{format_time(summary['critical_path_before'], unit)} -> "
                  f"{format_time(summary['critical_path_after'], unit)}")
    console.print(table)
    if "dot" in summary:
        console.print(f"wrote the cluster graph: {summary['dot']}")
