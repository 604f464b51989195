"""The README's result tables, rendered from `make bench`'s CSVs so that no figure in the README is typed by hand.

`TABLES` is the registry: per table, the marker name, the CSV under `bench/results/`, the columns shown, a title
and a one-line reading.  `update_readme(results_dir, readme_path)` rewrites the text between the markers

    <!-- bench:NAME -->
    ...
    <!-- /bench:NAME -->

of every registered table found in the README: the title, the table from the CSV, and the reading.  The full run's
CSV (``engine.csv``) is used when it exists, else the quick run's (``engine-quick.csv``, marked as such in the
title); with neither, the block says "not measured yet: run `make bench`".  A README without a table's markers is
left alone for that table.  Cells are the CSV's text as written; a column the CSV lacks shows as an empty cell, so
a renamed column shows up in the README instead of stopping the bench at its end.

Sections whose CSV rows are not all of one kind (a summary row, two sub-benches), or too many for a README, pass
`select`: a function from the CSV's rows to the rows shown (a filter, or a summary computed from them).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

NOT_MEASURED = "not measured yet: run `make bench`"


@dataclass(frozen=True)
class ResultTable:
    """One README table: `csv_name` under the results folder, the `columns` shown (in order), a `title` and a
    one-line `reading`; `select` maps the CSV's rows to the rows shown (default: all of them)."""

    name: str
    csv_name: str
    columns: tuple[str, ...]
    title: str
    reading: str
    select: Callable[[list[dict[str, str]]], list[dict[str, str]]] | None = None


Rows = list[dict[str, str]]


def _model_rows(rows: Rows) -> Rows:
    """The bundled model's rows (the layered graphs are summed up in the summary row)."""
    return [r for r in rows if r.get("instance", "").startswith("moe/")]


def _summary(rows: Rows) -> Rows:
    return [r for r in rows if r.get("instance") == "summary"]


def _coarsen_sizes(rows: Rows) -> Rows:
    """The size rows merged within the critical-path tolerance, what the search uses (the parallelism rows of the
    same section have no critical path before/after; the rows merged to the count alone have no tolerance)."""
    return [r for r in rows if r.get("critical_path_before_tick") and r.get("cp_tolerance")]


def _planned_per_case(rows: Rows) -> Rows:
    """The planned rows (schedule ``opplan``), one per case: the values of its stage counts joined by `` / `` in
    their order (``4 / 8``), those every row of the case shares (the schedule, the MoE finding, the units) once, a
    column empty in every row empty."""
    planned = [r for r in rows if r.get("schedule") == "opplan"]
    out = []
    for case in dict.fromkeys(r.get("case", "") for r in planned):
        mine = [r for r in planned if r.get("case", "") == case]
        out.append({k: _joined([r.get(k, "") for r in mine], k in _SHARED) for k in mine[0]})
    return out


def _joined(values: list[str], shared: bool) -> str:
    """`values` joined by `` / `` (each distinct one once when `shared`); empty when all are."""
    if not any(values):
        return ""
    return " / ".join(dict.fromkeys(values) if shared else values)


_SHARED = ("case", "schedule", "moe_found", "time_unit", "memory_unit")  # one value per case in `_planned_per_case`


def _stg_per_set(rows: Rows) -> Rows:
    """One row per STG set: instances, how many reached the optimum, mean and largest distance to it."""
    out = []
    for name in dict.fromkeys(r.get("set", "") for r in rows):
        mine = [r for r in rows if r.get("set", "") == name]
        above = [float(r["pct_above"]) for r in mine if r.get("pct_above")]
        out.append({"set": name, "instances": str(len(mine)),
                    "reached_optimum": str(sum(r.get("reached") == "True" for r in mine)),
                    "mean_pct_above": f"{sum(above) / len(above):.3f}" if above else "",
                    "max_pct_above": f"{max(above):.3f}" if above else ""})
    return out


_PREDICTED = ("opplan-1-rank", "opplan-advised", "opplan-chosen")


def _runtime_by_model(rows: Rows) -> Rows:
    """One row per model from the runtime section's one row per (model, configuration)."""
    out: dict[str, dict[str, str]] = {}
    for r in rows:
        model = out.setdefault(r.get("model", ""), {"model": r.get("model", "")})
        config = r.get("config", "")
        model[config.replace("-", "_") + "_ms"] = r.get("median_ms", "")
        model["effective_parallelism"] = (f"{r.get('effective_parallelism_start', '')} / "
                                          f"{r.get('effective_parallelism_end', '')}")
        if config == "opplan-chosen":
            model.update(opplan_ms=r.get("median_ms", ""), opplan_runs=r.get("chosen", ""),
                         speedup_ceiling=r.get("speedup_ceiling", ""))
        if config == "opplan-advised":
            model.update(advised_runs=r.get("chosen", ""))
        if config in _PREDICTED:
            model[f"_vs_{config}"] = r.get("measured_vs_predicted", "") or "-"
    for model in out.values():
        model["measured_vs_predicted"] = " / ".join(model.pop(f"_vs_{c}", "-") for c in _PREDICTED)
        singles = [float(model[k]) for k in ("ort_1_ms", "torch_1_ms", "opplan_1_rank_ms") if model.get(k)]
        ours, intra = model.get("opplan_ms"), model.get("ort_2_intra_ms")
        if singles and ours:
            model["speedup_vs_best_single"] = f"{min(singles) / float(ours):.2f}"
        if ours and intra:
            model["vs_ort_2_intra"] = f"{float(ours) / float(intra):.2f}"
    return list(out.values())


def _sweep_per_case(rows: Rows) -> Rows:
    """One row per case from the memory sweep's one row per cap: the caps, how many fit no baseline, at how many
    the planned makespan is at most the best baseline that fits (computed per cap), the gaps and the picture."""
    out = []
    for case in dict.fromkeys(r.get("case", "") for r in rows):
        mine = [r for r in rows if r.get("case", "") == case]
        gaps = [100 * float(r["gap"]) for r in mine if r.get("gap")]
        first = mine[0]
        out.append({"case": case, "p": first.get("p", ""), "m": first.get("m", ""),
                    "caps": f"{len(mine)}: {mine[0].get('cap', '')} to {mine[-1].get('cap', '')}",
                    "memory_unit": first.get("memory_unit", ""),
                    "fit_no_baseline": str(sum(not r.get("best_baseline") for r in mine)),
                    "planned_not_above_best_baseline": (
                        f"{sum(r.get('planned_not_above_best_baseline') == 'True' for r in mine)} of {len(mine)}"),
                    "gap_pct": f"{min(gaps):.1f} to {max(gaps):.1f}" if gaps else "",
                    "picture": first.get("picture", "")})
    return out


def _mutation_per_package(rows: Rows) -> Rows:
    """One row per package (the folder of the module's file): modules, mutants run (sampled; equivalent ones are
    not run),
    killed (timeouts count as killed), the kill ratio over them, and the package's lowest module."""
    out = []
    for package in sorted(dict.fromkeys(r.get("path", "").rpartition("/")[0] for r in rows)):
        mine = [r for r in rows if r.get("path", "").rpartition("/")[0] == package]
        run = sum(int(r.get("sampled") or 0) for r in mine)
        killed = sum(int(r.get("killed") or 0) + int(r.get("timeout") or 0) for r in mine)
        lowest = min(mine, key=lambda r: float(r.get("kill_ratio") or 0))
        out.append({"package": package, "modules": str(len(mine)), "mutants": str(run), "killed": str(killed),
                    "kill_pct": f"{100 * killed / run:.1f}" if run else "",
                    "lowest_module": f"{lowest.get('module', '')} {100 * float(lowest.get('kill_ratio') or 0):.0f}%"})
    return out


TABLES: tuple[ResultTable, ...] = (
    ResultTable(
        "engine", "engine.csv",
        ("instance", "tasks", "devices", "best_classic", "final", "bound", "gap_pct", "closed_pct", "found_by"),
        "The planner on the bundled MoE against the classic list schedulers (section `engine`)",
        "Makespans in ticks; `best_classic` is the best of HEFT, HEFT/CPoP and PEFT, `final` the planner's plan "
        "within the time limit, `closed_pct` the share of HEFT's gap to the bound the planner closed.",
        select=_model_rows),
    ResultTable(
        "engine-summary", "engine.csv",
        ("layered", "failures", "heft_gap_over_2pct", "mean_closed_pct", "beats_best_classic"),
        "The planner on random layered graphs (section `engine`)",
        "`mean_closed_pct`: the mean share of HEFT's gap to the bound the planner closed, over the graphs where HEFT "
        "is more than 2 % above the bound; `beats_best_classic`: graphs where it beat HEFT, HEFT/CPoP and PEFT.",
        select=_summary),
    ResultTable(
        "stg", "stg.csv",
        ("set", "instances", "reached_optimum", "mean_pct_above", "max_pct_above"),
        "STG task graphs with proven optima (section `stg`)",
        "Per set: how many plans reach the published optimum within 10 s each, and the distance to it in per cent.",
        select=_stg_per_set),
    ResultTable(
        "coarsen", "coarsen.csv",
        ("graph", "n_tasks", "cp_tolerance", "clusters", "critical_path_before_tick", "critical_path_after_tick",
         "coarsen_s"),
        "Coarsening (section `coarsen`)",
        "The merge keeps the coarse critical path within `cp_tolerance` of the op graph's; `coarsen_s` is seconds "
        "on the machine that ran the bench.",
        select=_coarsen_sizes),
    ResultTable(
        "heft", "heft.csv",
        ("num_tasks", "num_devices", "insertion", "memory_limited", "wall_s", "makespan_tick", "lower_bound_tick"),
        "HEFT on random layered graphs (section `heft`)",
        "Seconds on the machine that ran the bench: compare rows of one run, not runs.",
    ),
    ResultTable(
        "import", "import.csv",
        ("model", "num_ops", "import_s", "cost_and_inspect_s", "us_per_op"),
        "ONNX import and inspection of stacked MoE models (section `import`)",
        "Per-op time should stay flat as the model grows tenfold.",
    ),
    ResultTable(
        "runtime", "runtime.csv",
        ("model", "ort_1_ms", "ort_2_intra_ms", "ort_parallel_2_ms", "torch_1_ms", "opplan_1_rank_ms",
         "opplan_advised_ms", "advised_runs", "opplan_ms", "opplan_runs", "codegen_torchrun_ms",
         "speedup_vs_best_single", "speedup_ceiling",
         "vs_ort_2_intra", "measured_vs_predicted", "effective_parallelism"),
        "Running a model on this host: onnxruntime, torch and opplan's run side by side (section `runtime`)",
        "Medians in ms; `opplan_advised_ms` runs the ranks and threads plan-solve advises (`advised_runs`, "
        "plan-run's default), `opplan_ms` the run `plan-run --choose` picks by measuring (`opplan_runs`), "
        "`codegen_torchrun_ms` plan-codegen's code for the plan's ranks under torchrun; "
        "`speedup_vs_best_single` is the fastest one-process, one-thread run over `opplan_ms`, `speedup_ceiling` "
        "the most any run on the two cores could gain over one thread with the calibrated op times (whatever its "
        "ranks and threads, transfers free: `planner.cost.core_bound`), `vs_ort_2_intra` "
        "its time over onnxruntime's with two intra-op threads (the same cores); `measured_vs_predicted` for one "
        "rank / advised / chosen; effective parallelism of 2 processes at the section's start / end.",
        select=_runtime_by_model),
    ResultTable(
        "pipeline", "pipeline.csv",
        ("case", "p", "m", "moe_found", "makespan", "time_unit", "bubble_vs_dualpipe", "peak_memory", "memory_unit",
         "gap", "half_bubble_unreachable", "bound_every_cut_memory", "half_bubble_unreachable_every_cut"),
        "The planned training pipeline (section `pipeline`)",
        "The planned schedule under DualPipe's peak memory per device, one row per case (its stage counts `p` joined "
        "by ` / `, each column in that order); `moe_found` the MoE structure found in the "
        "graph; `bubble_vs_dualpipe` is its bubble (idle time) over DualPipe's; `gap` to the proven bound on the "
        "row's own cut and placement, and whether that bound puts half of DualPipe's bubble out of reach there "
        "(`half_bubble_unreachable`, empty where the row is optimal); `bound_every_cut_memory` a bound on every "
        "schedule of every cut of both placements within the cap, and whether it puts half of DualPipe's bubble out "
        "of reach.",
        select=_planned_per_case),
    ResultTable(
        "pipeline-sweep", "pipeline-sweep.csv",
        ("case", "p", "m", "caps", "memory_unit", "fit_no_baseline", "planned_not_above_best_baseline", "gap_pct",
         "picture"),
        "The planned training pipeline at each memory cap (section `pipeline-sweep`)",
        "Per case: the per-device memory caps swept, how many of them no baseline fits, at how many the planned "
        "makespan is at most that of the shortest baseline whose peak fits the cap (computed per cap; counted where "
        "none fits), and the gap to the proven bound; per cap in the CSV, makespan against peak memory in "
        "`bench/results/<picture>`.",
        select=_sweep_per_case),
    ResultTable(
        "mutation", "mutation_summary.csv",
        ("package", "modules", "mutants", "killed", "kill_pct", "lowest_module"),
        "Mutation testing (`make mutate`)",
        "Per package: the modules covered, the mutants run (a fixed-seed sample per module, known equivalent ones "
        "left out), how many a test killed, and the module with the lowest kill ratio; per module in "
        "`bench/results/mutation_summary.csv`, survivors in `mutation_survivors.csv`.",
        select=_mutation_per_package),
)


def _marker_re(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- bench:{re.escape(name)} -->\n)(.*?)(<!-- /bench:{re.escape(name)} -->)", re.DOTALL)


def _read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _cell(value: str | None) -> str:
    return (value or "").replace("|", "\\|").replace("\n", " ")


def render_table(table: ResultTable, rows: Sequence[dict[str, str]], source: str) -> str:
    """The block's text (title with `source`, Markdown table, reading), each line ending in a newline."""
    shown = list(rows) if table.select is None else table.select(list(rows))
    lines = [f"**{table.title}** ({source})", "", "| " + " | ".join(table.columns) + " |",
             "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in table.columns) + " |" for r in shown]
    lines += ["", table.reading]
    return "\n".join(lines) + "\n"


def render_block(table: ResultTable, results_dir: Path) -> str:
    """The block for `table` from the full run's CSV, else the quick run's, else the "not measured yet" line."""
    full = results_dir / table.csv_name
    quick = full.with_name(f"{full.stem}-quick{full.suffix}")
    if full.is_file():
        return render_table(table, _read_rows(full), f"`bench/results/{full.name}`")
    if quick.is_file():
        return render_table(table, _read_rows(quick), f"`bench/results/{quick.name}`, quick mode")
    return f"**{table.title}**: {NOT_MEASURED}.\n"


def update_readme(results_dir: str | Path, readme_path: str | Path,
                  tables: Sequence[ResultTable] = TABLES) -> list[str]:
    """Rewrite every registered block found in the README from `results_dir`; the names of the blocks rewritten."""
    path = Path(readme_path)
    text = path.read_text(encoding="utf-8")
    done = []
    for table in tables:
        pattern = _marker_re(table.name)
        if pattern.search(text) is None:
            continue
        block = render_block(table, Path(results_dir))
        text = pattern.sub(lambda m, block=block: m.group(1) + block + m.group(3), text)
        done.append(table.name)
    path.write_text(text, encoding="utf-8")
    return done


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite the README's result tables from `bench/results/` (what `make bench` and `make mutate` end with):
    ``python -m experiments.readme_results [TABLE ...]`` (default every table)."""
    import sys

    names = list(sys.argv[1:] if argv is None else argv)
    unknown = [n for n in names if n not in {t.name for t in TABLES}]
    if unknown:
        print(f"unknown table(s) {', '.join(unknown)}; known: {', '.join(t.name for t in TABLES)}")
        return 2
    root = Path(__file__).resolve().parents[1]
    done = update_readme(root / "bench" / "results", root / "README.md",
                         [t for t in TABLES if not names or t.name in names])
    print(f"rewrote README tables: {', '.join(done) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
