"""Mutation testing of the core modules: plant each small bug, run the tests that matter, count what survives.

    python -m experiments.mutation.run                    # every module in MODULES (make mutate)
    python -m experiments.mutation.run --module validate  # one module (its key in MODULES, or its path)

How.  The parent imports the heavy third-party libraries once, then forks one child per mutant.  The child puts a
finder in front of `sys.meta_path` that loads the target module from the mutated syntax tree (nothing is written
to disk: no copy of the tree, no edited file) and runs pytest in-process on the module's test selection with `-x`.
A child still running after the timeout is killed and counts as killed (an infinite loop is a detected bug).
Before the mutants, the unmutated selection must pass; its time sets the timeout.  Since it then ran tests, a mutant
whose pytest runs none counts as killed: exit 4 when the mutant raises on import and a conftest imports it (e.g. a
default `Objective()` built at module level that now fails its own check), exit 5 when the mutant makes every test
skip or deselect.  The same exit codes from the unmutated selection stop the run: there the selection is wrong.

Which mutants.  All points of `experiments.mutation.operators` in the module, or a fixed-seed sample of
`--max-mutants` of them (default per module in MODULES) so that the whole run fits in about 30 minutes on one
core.  Mutants listed in `experiments/mutation/equivalent.txt` (key and a one-line reason)
are not run and are left out of the ratio.

Writes (creates nothing else):
    bench/results/mutation_summary.csv
        module,path,points,sampled,equivalent,killed,timeout,survived,kill_ratio,seconds
    bench/results/mutation_survivors.csv
        module,path,line,edit,source_line,key
A run of one module replaces that module's rows and keeps the others.
"""

from __future__ import annotations

import argparse
import csv
import fcntl
import importlib
import importlib.abc
import importlib.util
import os
import random
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from experiments.mutation.operators import list_mutants, mutated_code

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
EQUIVALENT = Path(__file__).resolve().parent / "equivalent.txt"


@dataclass(frozen=True)
class Target:
    """A module under test: its file, the pytest arguments that select its tests, how many mutants to sample."""

    path: str
    tests: tuple[str, ...]
    max_mutants: int = 60


# The table the brief asks for: module key -> file and test selection.  When a module moves (e.g. the solve paths
# of the formulations), change its row.
MODULES: dict[str, Target] = {
    "placement": Target("formulations/placement.py",
                        ("tests/test_placement_families.py", "tests/test_formulation_placement.py", "-k",
                         "not cbc and not scip"), max_mutants=40),
    "stages": Target("formulations/stages.py",
                     ("tests/test_stage_formulation_details.py", "tests/test_stage_families.py",
                      "tests/test_formulation_stages.py")),
    "pipeline": Target("formulations/pipeline.py",
                       ("tests/test_pipeline_formulation_details.py", "tests/test_pipeline_families.py",
                        "tests/test_pipeline_compare.py",
                        "tests/test_pipeline_overlap.py", "-k",
                        "not cbc and not scip and not cli and not compare and not dualpipe_at"), max_mutants=30),
    # the pipeline formulation and its data and bounds share 40 sampled mutants, 30 + 10 by size
    "pipeline_bounds": Target("formulations/pipeline_bounds.py",
                              ("tests/test_pipeline_formulation_details.py", "tests/test_pipeline_families.py",
                               "tests/test_pipeline_compare.py",
                               "tests/test_pipeline_overlap.py", "-k",
                               "not cbc and not scip and not cli and not compare and not dualpipe_at"),
                              max_mutants=10),
    "validate": Target("planner/schedule/validate.py", ("tests/test_validate.py", "tests/test_validate_sweep.py",
                                                        "tests/test_validate_details.py"), max_mutants=0),
    "simulate": Target("planner/schedule/simulate.py", ("tests/test_simulate_details.py",
                                                        "tests/test_simulate_sharing_details.py",
                                                        "tests/test_simulate.py"), max_mutants=0),
    "memory": Target("planner/schedule/memory.py",
                     ("tests/test_memory_details.py", "tests/test_memory_intervals_details.py",
                      "tests/test_validate.py", "tests/test_validate_details.py", "tests/test_simulate.py"),
                     max_mutants=0),
    "list_schedule": Target("planner/heuristics/list_schedule.py",
                            ("tests/test_list_schedule_details.py", "tests/test_heft_rank.py",
                             "tests/test_heuristics.py", "-k", "not 100k")),
    "metrics": Target("planner/pipeline/metrics.py",
                      ("tests/test_idle_parts_details.py", "tests/test_pipeline_metrics.py",
                       "tests/test_pipeline_generators.py"), max_mutants=0),
    # the hand-built cases only: the property sweeps of test_coarsen_merge.py take minutes per mutant
    "merge": Target("planner/coarsen/merge.py",
                    ("tests/test_coarsen_merge_details.py",
                     "tests/test_coarsen_merge.py::test_experts_of_one_moe_layer_stay_in_separate_clusters",
                     "tests/test_coarsen_merge.py::test_heavy_parts_of_diamond_experts_stay_apart")),
    # search, coarsening and training costs (the package's __init__ files only document, so they are not listed)
    "search_budget": Target("planner/search/budget.py", ("tests/test_search_budget_details.py",), max_mutants=0),
    "search_phases": Target("planner/search/phases.py",
                            ("tests/test_search_budget_details.py", "tests/test_search_phases.py"), max_mutants=25),
    "search_options": Target("planner/search/options.py", ("tests/test_search_budget_details.py",), max_mutants=0),
    "search_policy": Target("planner/search/policy.py", ("tests/test_search_budget_details.py",), max_mutants=15),
    "search_state": Target("planner/search/state.py", ("tests/test_search_budget_details.py",), max_mutants=0),
    "search_assignment": Target("planner/search/assignment.py", ("tests/test_search_phase_details.py",),
                                max_mutants=0),
    "search_comm_bound": Target("planner/search/comm_bound.py", ("tests/test_search_phase_details.py",),
                                max_mutants=0),
    "search_iterated": Target("planner/search/iterated.py", ("tests/test_search_phase_details.py",), max_mutants=0),
    "search_list_scheduling": Target("planner/search/list_scheduling.py",
                                     ("tests/test_search_phase_details.py",
                                      "tests/test_engine_phases.py::test_phase_zero_takes_peft_when_it_is_shortest",
                                      "tests/test_engine_phases.py::test_baselines_reuse_phase_zero_heft",
                                      "tests/test_engine_phases.py::test_phase_zero_raises_heft_error_when_nothing_fits",
                                      "tests/test_engine_phases.py::"
                                      "test_phase_zero_takes_the_memory_aware_schedule_when_heft_hits_memory",
                                      "tests/test_engine_phases.py::test_phase_zero_falls_back_to_the_packed_plan"),
                                     max_mutants=20),
    "search_cluster_rounds": Target("planner/search/cluster_rounds.py", ("tests/test_search_phase_details.py",),
                                    max_mutants=20),
    "search_linear_rounds": Target("planner/search/linear_rounds.py", ("tests/test_search_phase_details.py",),
                                   max_mutants=20),
    "pipeline_search_policy": Target("planner/search/pipeline/policy.py",
                                     ("tests/test_pipeline_search_details.py", "-k", "tuning"), max_mutants=0),
    "pipeline_search_results": Target("planner/search/pipeline/results.py",
                                      ("tests/test_pipeline_search_details.py", "-k", "gains or replay or tuning"),
                                      max_mutants=0),
    "pipeline_neighbourhoods": Target("planner/search/pipeline/neighbourhoods.py",
                                      ("tests/test_pipeline_search_details.py", "-k",
                                       "nearest or chain or window or microbatches or devices or critical or ends "
                                       "or pair"), max_mutants=25),
    "pipeline_lns": Target("planner/search/pipeline/lns.py",
                           ("tests/test_pipeline_search_details.py", "-k",
                            "stops_at or stall or at_its_bound or without_time or replay_of or grows or defaults "
                            "or weighs or less_than_a_step"),
                           max_mutants=25),
    "pipeline_half": Target("planner/search/pipeline/half.py",
                            ("tests/test_pipeline_search_details.py", "-k", "half or symmetric"), max_mutants=25),
    "pipeline_periodic": Target("planner/search/pipeline/periodic.py",
                                ("tests/test_pipeline_search_details.py", "-k", "periodic"), max_mutants=0),
    "pipeline_solve": Target("planner/search/pipeline/solve.py",
                             ("tests/test_pipeline_search_details.py",
                              "tests/test_pipeline_lns.py::test_a_stalled_search_hands_its_time_back_to_the_full_model",
                              "tests/test_pipeline_lns.py::test_a_pipeline_above_the_size_limit_starts_the_search_"
                              "from_its_warm_start",
                              "tests/test_pipeline_lns.py::test_solve_with_search_bound_never_above_the_makespan",
                              "-k", "solve or stalled or size_limit or search_share or hand_back or time_to_best "
                              "or periodic_schedule_when or gains_nothing or renamed_in_order or any_order "
                              "or survives_a_search or no_periodic_share"),
                             max_mutants=25),
    "linear": Target("planner/coarsen/linear.py", ("tests/test_linear_clustering_details.py",
                                                   "tests/test_coarsen_linear.py"), max_mutants=0),
    "training_costs": Target("planner/cost/training_costs.py", ("tests/test_training_costs_details.py",),
                             max_mutants=0),
    # pipeline schedules and comparison (left out: the packages' __init__ files and compare_row.py, which only
    # document or hold plain data, and compare_policy.py, whose only points are the default values of tuning knobs)
    "pipeline_generators": Target("planner/pipeline/generators.py",
                                  ("tests/test_pipeline_generators_details.py", "tests/test_pipeline_generators.py"),
                                  max_mutants=20),
    "pipeline_zero_bubble": Target("planner/pipeline/zero_bubble.py",
                                   ("tests/test_pipeline_generators_details.py", "tests/test_pipeline_generators.py",
                                    "tests/test_pipeline_zbv.py"), max_mutants=20),
    "pipeline_dualpipe": Target("planner/pipeline/dualpipe.py",
                                ("tests/test_pipeline_generators_details.py", "tests/test_pipeline_generators.py",
                                 "tests/test_pipeline_zbv.py"), max_mutants=20),
    "pipeline_registry": Target("planner/pipeline/registry.py",
                                ("tests/test_pipeline_generators_details.py", "tests/test_pipeline_generators.py"),
                                max_mutants=15),
    "pipeline_unroll": Target("planner/pipeline/unroll.py",
                              ("tests/test_pipeline_unroll_details.py", "tests/test_pipeline_unroll.py",
                               "tests/test_pipeline_generators.py"), max_mutants=20),
    "training_pipeline": Target("planner/pipeline/training_pipeline.py",
                                ("tests/test_training_pipeline_details.py", "tests/test_pipeline_unroll_details.py",
                                 "tests/test_pipeline_unroll.py"), max_mutants=15),
    "pipeline_streams": Target("planner/pipeline/streams.py",
                               ("tests/test_pipeline_streams_details.py", "tests/test_pipeline_overlap.py", "-k",
                                "not cli and not replay and not dualpipes"), max_mutants=15),
    "pipeline_mirror": Target("planner/pipeline/mirror.py",
                              ("tests/test_pipeline_mirror_details.py", "tests/test_pipeline_mirror.py", "-k",
                               "not too_large and not short_steps"), max_mutants=15),
    "pipeline_greedy": Target("planner/pipeline/greedy.py",
                              ("tests/test_pipeline_greedy_details.py", "tests/test_pipeline_greedy.py"),
                              max_mutants=15),
    "pipeline_stream_greedy": Target("planner/pipeline/stream_greedy.py",
                                     ("tests/test_pipeline_stream_greedy_details.py",
                                      "tests/test_pipeline_stream_greedy.py"), max_mutants=15),
    "compare_cut_bound": Target("planner/compare/cut_bound.py",
                                ("tests/test_cut_bound_details.py", "tests/test_cut_bound.py", "-k",
                                 "not plan_compare_reports"), max_mutants=20),
    "compare_cut_search": Target("planner/compare/cut_search.py",
                                 ("tests/test_cut_search_details.py", "tests/test_cut_search.py", "-k",
                                  "not planned_row_chooses"), max_mutants=15),
    "compare_memory_bound_note": Target("planner/compare/memory_bound_note.py",
                                        ("tests/test_memory_bound_note_details.py", "tests/test_memory_bound_note.py"),
                                        max_mutants=15),
    "compare_model_costs": Target("planner/compare/model_costs.py",
                                  ("tests/test_model_costs_details.py", "tests/test_pipeline_model.py", "-k",
                                   "not compare_with_comm"), max_mutants=15),
    "compare_subchunks": Target("planner/compare/subchunks.py",
                                ("tests/test_subchunks_details.py", "tests/test_subchunks.py", "-k",
                                 "not compare_reports"), max_mutants=15),
    "compare_placement_choice": Target("planner/compare/placement_choice.py",
                                       ("tests/test_placement_choice_details.py",
                                        "tests/test_auto_placement_and_bound_cuts.py", "-k",
                                        "choice_details or small_part_of_the_gap"), max_mutants=12),
    "compare_planned_row": Target("planner/compare/planned_row.py",
                                  ("tests/test_planned_row_details.py", "tests/test_planned_row_paths.py",
                                   "tests/test_pipeline_compare.py", "-k", "not cli"), max_mutants=15),
    "compare_table_text": Target("planner/compare/table_text.py",
                                 ("tests/test_table_text_details.py", "tests/test_compare_summary.py", "-k", "not cli"),
                                 max_mutants=15),
    "compare_pipelines": Target("planner/compare/pipelines.py",
                                ("tests/test_compare_table_details.py", "tests/test_compare_model_run_details.py",
                                 "tests/test_pipeline_compare.py", "-k", "not cli"), max_mutants=15),
    "compare_baselines": Target("planner/compare/baselines.py", ("tests/test_compare_baselines_details.py",),
                                max_mutants=0),
    "compare_budget": Target("planner/compare/compare_budget.py", ("tests/test_compare_baselines_details.py",),
                             max_mutants=0),
    "compare_plot": Target("planner/compare/plot.py",
                           ("tests/test_compare_plot_details.py", "tests/test_compare_pictures.py"), max_mutants=12),
    "compare_presets": Target("planner/compare/presets.py",
                              ("tests/test_presets_details.py", "tests/test_presets.py", "-k", "not cli_end_to_end"),
                              max_mutants=15),
}

# Imported once in the parent so that each forked child starts warm.  Only third-party code: a project module
# imported here would be shared by every child, unmutated.
PRELOAD = ("numpy", "pytest", "hypothesis", "xdist", "ortools.sat.python.cp_model", "pulp", "highspy",
           "matplotlib", "matplotlib.pyplot", "yaml", "onnx")

SUMMARY_COLUMNS = ("module", "path", "points", "sampled", "equivalent", "killed", "timeout", "survived",
                   "kill_ratio", "seconds")
SURVIVOR_COLUMNS = ("module", "path", "line", "edit", "source_line", "key")


class _MutantFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves one module from a given code object; every other import goes the usual way."""

    def __init__(self, name: str, filename: str, code) -> None:
        self.name, self.filename, self.code = name, filename, code

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        return importlib.util.spec_from_file_location(fullname, self.filename, loader=self)

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        exec(self.code, module.__dict__)  # noqa: S102 - the mutant is our own compiled syntax tree


def load_equivalent() -> dict[tuple[str, str], str]:
    """(path, key) -> reason, from `experiments/mutation/equivalent.txt` (lines `path | key | reason`, # comments)."""
    out: dict[tuple[str, str], str] = {}
    if not EQUIVALENT.exists():
        return out
    for raw in EQUIVALENT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        path, key, reason = (part.strip() for part in line.split(" | ", 2))
        out[path, key] = reason
    return out


def _run_child(target: Target, index: int | None, code_source: str, quiet: bool) -> int:
    """In the forked child: install the mutant, run pytest, never return."""
    try:
        name = target.path.removesuffix(".py").replace("/", ".")
        filename = str(ROOT / target.path)
        sys.meta_path.insert(0, _MutantFinder(name, filename, mutated_code(code_source, filename, index)))
        if quiet:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
        import pytest

        rc = pytest.main(["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "0",
                          "-o", "addopts=-m 'not slow and not gpu'", *target.tests])
        code = int(rc)
    except BaseException:  # noqa: BLE001 - a mutant that breaks the import machinery is a killed mutant
        code = 3
    os._exit(code)


def _run(target: Target, index: int | None, source: str, timeout_s: float, quiet: bool = True) -> tuple[str, float]:
    """'killed', 'timeout', 'survived' or 'error' (the unmutated selection ran no tests), and the seconds."""
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        _run_child(target, index, source, quiet)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - t0 > timeout_s:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", time.monotonic() - t0
        time.sleep(0.05)
    rc = os.waitstatus_to_exitcode(status)
    elapsed = time.monotonic() - t0
    if rc == 0:
        return "survived", elapsed
    if rc in (4, 5) and index is None:  # usage error / no tests collected: the selection is wrong
        return "error", elapsed
    return "killed", elapsed


def mutate_module(key: str, target: Target, *, max_mutants: int | None, seed: int, equivalent: dict,
                  log=print) -> tuple[dict, list[dict]]:
    source = (ROOT / target.path).read_text()
    mutants = list_mutants(source)
    equiv = [m for m in mutants if (target.path, m.key) in equivalent]
    candidates = [m for m in mutants if (target.path, m.key) not in equivalent]
    cap = target.max_mutants if max_mutants is None else max_mutants
    sample = sorted(random.Random(f"{seed}:{target.path}").sample(candidates, min(cap, len(candidates))),
                    key=lambda m: m.index) if cap > 0 else candidates
    t0 = time.monotonic()
    outcome, base_s = _run(target, None, source, timeout_s=900, quiet=True)
    if outcome != "survived":
        raise SystemExit(f"{key}: the unmutated tests do not pass ({outcome}); run "
                         f"pytest {' '.join(target.tests)} to see why")
    timeout_s = 3 * base_s + 10
    log(f"{key}: {len(mutants)} points, {len(equiv)} documented equivalent, running {len(sample)} "
        f"(baseline {base_s:.1f} s, timeout {timeout_s:.0f} s)")
    counts = {"killed": 0, "timeout": 0, "survived": 0, "error": 0}
    survivors: list[dict] = []
    for m in sample:
        result, _secs = _run(target, m.index, source, timeout_s)
        counts[result] += 1
        if result == "survived":
            survivors.append({"module": key, "path": target.path, "line": m.line, "edit": m.edit,
                              "source_line": m.source_line, "key": m.key})
            log(f"  survived  L{m.line}: {m.edit}   | {m.source_line}")
    killed = counts["killed"] + counts["timeout"]
    ran = killed + counts["survived"]
    ratio = killed / ran if ran else 1.0
    row = {"module": key, "path": target.path, "points": len(mutants), "sampled": len(sample),
           "equivalent": len(equiv), "killed": counts["killed"], "timeout": counts["timeout"],
           "survived": counts["survived"], "kill_ratio": f"{ratio:.3f}", "seconds": f"{time.monotonic() - t0:.0f}"}
    log(f"{key}: kill ratio {ratio:.1%} ({killed}/{ran}), {row['seconds']} s")
    return row, survivors


def _merge_csv(path: Path, columns: tuple[str, ...], rows: list[dict], replaced: set[str]) -> None:
    """Replace the rows of the `replaced` modules in `path` by `rows`, keeping the others; under an exclusive lock
    on a file beside it, so that runs of other modules finishing at the same moment keep each other's rows."""
    with path.with_name(path.name + ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept: list[dict] = []
        if path.exists():
            with path.open(newline="") as f:
                kept = [r for r in csv.DictReader(f) if r["module"] not in replaced]
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns)
            w.writeheader()
            w.writerows(kept + rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.mutation.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--module", action="append", help="module key in MODULES or its path (repeatable); "
                    f"default all: {', '.join(MODULES)}")
    ap.add_argument("--max-mutants", type=int, default=None,
                    help="mutants sampled per module (0 = all points; default: per module in MODULES)")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed")
    ap.add_argument("--list", action="store_true", help="print the mutation points and exit")
    args = ap.parse_args(argv)
    by_path = {t.path: k for k, t in MODULES.items()}
    keys = []
    for name in args.module or list(MODULES):
        key = by_path.get(name, name)
        if key not in MODULES:
            ap.error(f"unknown module {name!r}; known: {', '.join(MODULES)}")
        keys.append(key)
    if args.list:
        for key in keys:
            for m in sorted(list_mutants((ROOT / MODULES[key].path).read_text()), key=lambda m: (m.line, m.col)):
                print(f"{MODULES[key].path}:{m.line}: {m.edit}   | {m.key}")
        return 0
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT / "tests"))  # the tests import their helpers as top-level modules
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.dont_write_bytecode = True
    os.environ.setdefault("MPLBACKEND", "Agg")
    for mod in PRELOAD:
        try:
            importlib.import_module(mod)
        except ImportError:
            pass
    equivalent = load_equivalent()
    RESULTS.mkdir(parents=True, exist_ok=True)
    rows, survivors = [], []
    for key in keys:
        row, surv = mutate_module(key, MODULES[key], max_mutants=args.max_mutants, seed=args.seed,
                                  equivalent=equivalent)
        rows.append(row)
        survivors.extend(surv)
    _merge_csv(RESULTS / "mutation_summary.csv", SUMMARY_COLUMNS, rows, set(keys))
    _merge_csv(RESULTS / "mutation_survivors.csv", SURVIVOR_COLUMNS, survivors, set(keys))
    print(f"wrote {RESULTS / 'mutation_summary.csv'} and {RESULTS / 'mutation_survivors.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
