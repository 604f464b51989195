"""Terminal rendering of reports with rich (kept apart from the pure summaries in report.py).

Bytes are printed by `planner.ir.units.format_bytes`, the project's one bytes formatter.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from planner.ir.units import format_bytes


def human_time(t: float, unit: str) -> str:
    if unit != "s":
        return f"{t:g} {unit}"
    for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if t >= scale:
            return f"{t / scale:.3f} {name}"
    return f"{t / 1e-9:.1f} ns"


def human_count(n: float) -> str:
    for scale, name in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3f} {name}"
    return f"{n:.0f}"


def print_inspect_table(summary: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    unit = summary["hardware"]["time_unit"]
    totals = Table(title=f"Model {summary['model']}", show_header=False)
    before = summary.get("num_ops_before_passes", summary["num_ops"])
    totals.add_row("ops (after folding, dead code)", f"{summary['num_ops']} (of {before})")
    totals.add_row("edges", str(summary["num_edges"]))
    totals.add_row("FLOPs (2 x MACs)", human_count(summary["total_flops"]))
    totals.add_row("parameters", format_bytes(summary["param_bytes"]))
    totals.add_row("activations (all outputs)", format_bytes(summary["activation_bytes"]))
    totals.add_row("devices", f"{len(summary['hardware']['devices'])}")
    totals.add_row("critical path (fastest device, free links)", human_time(summary["critical_path"], unit))
    totals.add_row("work bound (total work / total speed)", human_time(summary["work_bound"], unit))
    totals.add_row("serial time on fastest device", human_time(summary["serial_time_fastest_device"], unit))
    console.print(totals)
    heavy = Table(title="Heaviest ops")
    for col in ("op", "type", "time", "FLOPs"):
        heavy.add_column(col)
    for row in summary["heaviest_ops"]:
        heavy.add_row(row["name"], row["op_type"], human_time(row["time"], unit), human_count(row["flops"]))
    console.print(heavy)
    if summary["estimated_op_types"]:
        est = ", ".join(f"{k} x{v}" for k, v in summary["estimated_op_types"].items())
        console.print(f"[yellow]estimated (costed by bytes moved, no FLOP rule):[/] {est}")
    else:
        console.print("every op type has a cost rule (nothing estimated)")


def print_plan_table(summary: dict[str, Any], console: Console | None = None) -> None:
    """The plan-solve / plan-simulate summary: quality line, per-device table, links, baselines."""
    console = console or Console()
    unit = summary["time_unit"]
    console.print(
        f"[bold]{summary['method']}[/] ({summary['solver'] or 'no solver'}, {summary['status']}): makespan "
        f"[bold]{human_time(summary['makespan'], unit)}[/], lower bound {human_time(summary['lower_bound'], unit)}, "
        f"gap {100 * summary['gap']:.1f}%, bubble ratio {summary['bubble_ratio']:.2f} (idle / (devices x makespan))"
    )
    if "cluster_bound" in summary:
        console.print(f"  on {summary['clusters']} clusters: solver bound {human_time(summary['cluster_bound'], unit)}"
                      f" ({summary['rounds']} rounds, {summary['solve_time_s']:.1f} s)")
    table = Table()
    for col in ("device", "tasks", "busy", "busy %", "peak memory", "capacity"):
        table.add_column(col, justify="right" if col != "device" else "left")
    for d in summary["devices"]:
        cap = d["capacity_bytes"]
        table.add_row(d["device"], str(d["tasks"]), human_time(d["busy"], unit), f"{100 * d['busy_fraction']:.0f}",
                      format_bytes(d["peak_memory_bytes"]), format_bytes(cap) if cap < 2**61 else "unbounded")
    console.print(table)
    console.print(f"bytes across links: {format_bytes(summary['bytes_across_links'])} over "
                  f"{len(summary['links'])} device pairs")
    if summary.get("baselines"):
        parts = [f"{k} {human_time(v, unit)}" for k, v in summary["baselines"].items()]
        console.print("baselines on the op graph: " + ", ".join(parts))


def print_clustering(summary: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    unit = summary["time_unit"]
    table = Table(title="Coarsening", show_header=False)
    table.add_row("ops", str(summary["num_ops"]))
    table.add_row("linear clusters / after cycle repair", f"{summary['num_linear_clusters']} / "
                  f"{summary['num_clusters_after_repair']}")
    table.add_row("clusters after merging", str(summary["num_clusters"]))
    table.add_row("largest clusters (ops)", ", ".join(map(str, summary["largest_clusters"])))
    table.add_row("bytes cut / all edge bytes", f"{format_bytes(summary['cut_bytes'])} / "
                  f"{format_bytes(summary['total_edge_bytes'])}")
    table.add_row("critical path estimate, ops -> clusters", f"{human_time(summary['critical_path_before'], unit)} -> "
                  f"{human_time(summary['critical_path_after'], unit)}")
    console.print(table)
    if "dot" in summary:
        console.print(f"wrote the cluster graph: {summary['dot']}")
