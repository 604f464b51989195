"""The cluster graph as Graphviz DOT text: one node per cluster (name, op count, cost), one edge per cluster pair
(bytes).  Pure text; render with `dot -Tsvg clusters.dot`."""

from __future__ import annotations

from planner.cost.instance import SchedulingInstance


def _quote(text: str) -> str:
    """A DOT string literal; a label may use DOT's own line break, written as the two characters \\ and n."""
    return '"' + text.replace('"', "'") + '"'


def cluster_graph_dot(coarse: SchedulingInstance, sizes: tuple[int, ...]) -> str:
    """DOT for a contracted instance; `sizes[k]` is the number of ops in cluster k."""
    tick = coarse.tick_s or 1.0
    unit = coarse.time_unit
    fastest = coarse.min_duration_tick()
    lines = [f"digraph {_quote(coarse.name)} {{", "  rankdir=TB;", "  node [shape=box, fontsize=10];"]
    for k, name in enumerate(coarse.task_names):
        label = name + "\\n" + f"{sizes[k]} ops, {fastest[k] * tick:.3g} {unit}"
        lines.append(f"  c{k} [label={_quote(label)}];")
    for e, (s, t) in enumerate(coarse.edges):
        lines.append(f"  c{s} -> c{t} [label={_quote(str(int(coarse.edge_bytes[e])) + ' B')}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
