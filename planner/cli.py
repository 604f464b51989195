"""Command-line entry points.  Thin: parse arguments, call the library, print or write the result.

Every user error is an `OpplanError`: printed as one line `error: ...` on stderr, exit status 2, no traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from formulations.stop import SearchStopped
from planner.bundled_profiles import DEFAULT_PROFILE
from planner.cli_args import (
    ArgumentParser,
    fraction,
    nonnegative_int,
    positive_int,
    positive_seconds,
)
from planner.cli_interrupt import ctrl_c_in_search
from planner.cli_outputs import check_output_dir, check_output_file, moved, staged_dir
from planner.data import BUNDLED_MODEL as DEFAULT_MODEL
from planner.errors import InputError, OpplanError
from planner.ir.model_warnings import model_warnings
from planner.search.options import Method

if TYPE_CHECKING:
    from planner.ir.topology import Topology
    from planner.schedule.plan import Plan
    from planner.schedule.timeline import Timeline
    from planner.solve import Outcome

# The heavy modules (onnx, matplotlib, the solvers) are imported inside the command bodies, after the arguments are
# parsed and the output paths checked: `--help` and a bad argument answer at once, and Ctrl-C while they load is
# one line like any other moment.

PAUSE_ENV = "OPPLAN_PAUSE_AT"


def pause_point(name: str) -> None:
    """Wait here (saying so on stdout) when the environment variable `PAUSE_ENV` names this point: the tests send
    Ctrl-C at a moment they choose (before the heavy imports, inside an output folder written but not yet moved into
    place) and check that stderr holds one line and nothing is left."""
    if os.environ.get(PAUSE_ENV) == name:
        print(f"paused at {name}", flush=True)
        time.sleep(600)

def _run(main: Callable[[argparse.Namespace], int], parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse (a bad argument is one line and status 2: `planner.cli_args`), run, and turn every user error into one
    line on stderr and its exit status; the status is returned, so a `*_main` called from Python never exits."""
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a bad argument, already reported on one line (2)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return main(args)
    except OpplanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_status
    except (KeyboardInterrupt, SearchStopped):  # SearchStopped: Ctrl-C before the search had a plan to keep
        print("interrupted", file=sys.stderr)
        return 130


def _add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, default=None,
                        help="ONNX model, task-graph JSON or STG file (default: the bundled MoE)")
    parser.add_argument("--hw", type=Path, default=None,
                        help="hardware profile YAML, or a bundled profile's name such as h100-8-nvlink.yaml "
                             "(default: the bundled cpu-4.yaml)")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=AxBxC",
                        help="fix a dynamic input's shape (repeatable)")
    parser.add_argument("--input-value", action="append", default=[], metavar="NAME=VALUE",
                        help="bind an input to a known value, e.g. a sample rate (repeatable; an If on it is inlined)")


def _load_model_and_hw(args: argparse.Namespace):
    """The model after the same passes plan-solve runs (constant folding, dead code), costed on the hardware."""
    from planner.ir.hardware import load_topology
    from planner.ir.load import parse_input_shape, parse_input_value
    from planner.prepare import prepare

    shapes = dict(parse_input_shape(s) for s in args.input_shape)
    topology = load_topology(args.hw or DEFAULT_PROFILE)
    values = dict(parse_input_value(s) for s in args.input_value)
    prepared = prepare(args.model or DEFAULT_MODEL, topology, input_shapes=shapes or None, input_values=values or None)
    return prepared, topology, prepared.instance


def _inspect(args: argparse.Namespace) -> int:
    if args.dot:
        check_output_file(args.dot, "--dot")
    pause_point("imports")
    from planner.ir.moe_structure import find_moe_layers
    from planner.report import inspect_summary
    from planner.report_format import print_inspect_table

    prepared, _topology, instance = _load_model_and_hw(args)
    if args.clusters or args.dot:
        return _inspect_clusters(args, instance)
    summary = inspect_summary(prepared.graph, instance, top=args.top)
    summary["num_ops_before_passes"] = prepared.ops_before_passes
    if args.format == "json":
        print(json.dumps(summary, indent=2))
    else:
        print_inspect_table(summary)
        print(find_moe_layers(prepared.graph).summary_line())  # MoE layers from the graph's structure
    return 0


def _inspect_clusters(args: argparse.Namespace, instance) -> int:
    from planner.coarsen import coarsen
    from planner.coarsen.dot import cluster_graph_dot
    from planner.report import clustering_summary
    from planner.report_format import print_clustering
    from planner.schedule.atomic import atomic_write_text
    from planner.search.policy import DEFAULT_CLUSTERS, SearchPolicy

    # The clusters the search's linear rounds start from: the same target and the parallelism-keeping merge.
    target = args.target_clusters or DEFAULT_CLUSTERS["cpsat"]
    coarsening = SearchPolicy().coarsen
    result = coarsen(instance, target_clusters=target, cp_tolerance=coarsening.cp_tolerance, policy=coarsening)
    summary = clustering_summary(result)
    if args.dot:
        atomic_write_text(args.dot, cluster_graph_dot(result.instance, result.sizes))
        summary["dot"] = str(args.dot)
    if args.format == "json":
        print(json.dumps(summary, indent=2))
    else:
        print_clustering(summary)
    return 0


def inspect_main(argv: Sequence[str] | None = None) -> int:
    """plan-inspect: op count, FLOPs, parameter and activation bytes, bounds on the hardware, heaviest ops."""
    parser = ArgumentParser(prog="plan-inspect", description=inspect_main.__doc__)
    _add_model_args(parser)
    parser.add_argument("--format", choices=("table", "json"), default="table", help="how to print the summary")
    parser.add_argument("--top", type=nonnegative_int, default=10, help="how many of the heaviest ops to list")
    parser.add_argument("--clusters", action="store_true",
                        help="report the coarsening the search starts from (linear clustering + the merge that "
                        "keeps the critical path)")
    parser.add_argument("--target-clusters", type=positive_int, default=None,
                        help="with --clusters: how many clusters (default: what the CP-SAT search uses)")
    parser.add_argument("--dot", type=Path, default=None, help="write the cluster graph as Graphviz DOT here")
    return _run(_inspect, parser, argv)




# ------------------------------------------------------------------------------------------------ plan-solve
def _parse_rules(items: Sequence[str], flag: str) -> dict[str, str]:
    rules = {}
    for item in items:
        pattern, sep, device = item.rpartition("=")
        if not sep or not pattern or not device:
            raise InputError(f"{flag} {item!r}: expected OP_PATTERN=DEVICE_NAME, e.g. 'layer0/expert*=node0/gpu1'")
        rules[pattern] = device
    return rules


def _add_solve_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--method", choices=[m.value for m in Method], default="milp",
                        help="milp: the bi-level search (exact on clusters, refined); the others are the heuristics "
                        "alone")
    parser.add_argument("--backend", default="cpsat", help="MILP solver: cpsat (default), scip, cbc or highs")
    parser.add_argument("--time-limit", type=positive_seconds, default=60.0, metavar="S",
                        help="total budget in seconds")
    parser.add_argument("--gap", type=fraction, default=0.0, help="stop at this relative gap (0.01 = 1%%)")
    parser.add_argument("--threads", type=positive_int, default=8, help="solver threads")
    parser.add_argument("--seed", type=nonnegative_int, default=0, help="solver random seed")
    parser.add_argument("--clusters", type=positive_int, default=None, help="target number of clusters for the MILP")
    parser.add_argument("--rounds", type=nonnegative_int, default=4, help="most refinement rounds of the bi-level loop")


def _options(args: argparse.Namespace):
    from planner.search.options import SolveOptions

    return SolveOptions(method=Method(args.method), backend=args.backend, time_limit_s=args.time_limit,
                        rel_gap=args.gap, threads=args.threads, seed=args.seed, target_clusters=args.clusters,
                        max_rounds=args.rounds)


def _progress_printer(quiet: bool):
    if quiet:
        return None
    start = time.monotonic()

    def say(message: str) -> None:
        elapsed = time.monotonic() - start
        print(f"[{elapsed:6.1f}s] {message}", file=sys.stderr, flush=True)

    return say


def plan_in_user_ids(outcome) -> Plan:
    """The plan a plan file stores: every task/op of the input under its own id, with its device, start and end.

    The search may have planned clusters (`outcome.saved_plan()` then names `cluster#26` ...); its expansion to the
    op graph (`outcome.op_plan`, validated on the op graph, same makespan and bound) is what the user reads, with
    the clusters recorded beside it (`Plan.clusters`).
    """
    return _in_user_ids(outcome)[0]


def _in_user_ids(outcome) -> tuple[Plan, Timeline]:
    """`plan_in_user_ids` and its replay on the op graph (`simulate_plan`: the times every other output shows)."""
    saved = outcome.saved_plan()
    plan = saved
    if saved.task_ops:
        plan = dataclasses.replace(outcome.op_plan, instance_name=outcome.fine.name, task_ops={},
                                   clusters={k: tuple(v) for k, v in saved.task_ops.items()})
    return as_early_as_possible(plan, outcome.fine)


def as_early_as_possible(plan: Plan, fine) -> tuple[Plan, Timeline]:
    """The plan with each op started as early as its device order and inputs allow, when that is shorter and still
    fits memory.  Cluster members expanded back to back can often start earlier; replaying the plan (the Gantt
    chart, plan-simulate) does exactly that, so the file states the times every other output will show.

    Also returns the returned plan's replay.  The replay that retimes the plan is that replay whenever the
    returned plan orders each device's ops the same way (always when the plan is kept; checked when the retimed
    one is returned: ops of no length at one tick may sort differently), so at 100k ops one replay (~2 s) is saved."""
    from planner.schedule.plan import PlanStatus
    from planner.schedule.simulate import plan_orders, replayed_plan, simulate_plan
    from planner.schedule.validate import check_plan

    orders = plan_orders(fine, plan)
    timeline = simulate_plan(fine, plan)
    tight = replayed_plan(plan, fine, timeline)
    if tight.makespan_tick >= plan.makespan_tick or check_plan(fine, tight)[0]:
        return plan, timeline
    bound = min(plan.lower_bound_tick, tight.makespan_tick)
    status = PlanStatus.OPTIMAL if bound >= tight.makespan_tick else plan.status
    retimed = dataclasses.replace(plan, placements=tight.placements, makespan_tick=tight.makespan_tick,
                                  lower_bound_tick=bound, status=status)
    if plan_orders(fine, retimed) != orders:
        timeline = simulate_plan(fine, retimed)
    return retimed, timeline


def _write_outputs(outcome, plan_path: Path, *, pictures: bool, provenance: dict,
                   op_types: dict[str, str] | None = None) -> dict:
    """Save the plan and, next to it, the Gantt PNG and the Chrome trace of the op-level timeline: all three or none
    (written in a temporary folder beside them and moved into place at the end, so Ctrl-C while drawing leaves no
    plan without its pictures)."""
    from planner.plot import plot_gantt
    from planner.schedule.plan_io import save_plan
    from planner.schedule.trace import write_chrome_trace

    placed, timeline = _in_user_ids(outcome)  # the timeline: the saved plan, replayed (the times the file states)
    plan = dataclasses.replace(placed, **provenance)
    written = {"plan": str(plan_path)}
    stem = plan_path.with_suffix("")
    with staged_dir(plan_path.parent) as staging:
        save_plan(plan, staging / plan_path.name)
        if pictures:
            plot_gantt(timeline, staging / f"{stem.name}.gantt.png", title=f"{plan.instance_name}: {plan.method}",
                       op_types=op_types)
            write_chrome_trace(timeline, staging / f"{stem.name}.trace.json")
            written.update(gantt=f"{stem}.gantt.png", trace=f"{stem}.trace.json")
        pause_point("writing")
    return {"timeline": timeline, "written": written, "plan": plan}


def _plan_files(plan_path: Path, *, pictures: bool) -> list[tuple[Path, str]]:
    """The files a plan is written as (`_write_outputs`), each with the flag that names it in an error."""
    files = [(plan_path, "--out")]
    if pictures:
        stem = plan_path.with_suffix("")
        files += [(Path(f"{stem}.gantt.png"), "--out"), (Path(f"{stem}.trace.json"), "--out")]
    return files


def _solve_outputs(args: argparse.Namespace) -> list[tuple[Path, str]]:
    return _plan_files(args.out, pictures=not args.no_pictures)


def _solve_input(args: argparse.Namespace) -> tuple[Topology, str | Path]:
    """The devices and the model file of plan-solve: a task graph (``--graph``, on ``--devices`` identical devices or
    ``--hw``) or an ONNX model (``--model`` on ``--hw``, else the bundled model and profile)."""
    from planner.ir.hardware import load_topology
    from planner.ir.topology import Topology

    if args.graph is not None:
        if args.model is not None:
            raise InputError("give either --model or --graph, not both")
        if args.devices is None and args.hw is None:
            raise InputError("--graph needs --devices N (identical, fully connected devices) or --hw")
        return (load_topology(args.hw) if args.hw else Topology.identical(args.devices)), args.graph
    if args.devices is not None:
        raise InputError("--devices applies to --graph task graphs; an ONNX model takes its devices from --hw")
    return load_topology(args.hw or DEFAULT_PROFILE), args.model or DEFAULT_MODEL


def _summary_extra(outcome: Outcome, written: dict, choice: dict, tick_s: float | None) -> dict[str, object]:
    """What plan-solve's summary says beyond the plan itself: the files written, which phase found the plan, the
    runtime choice, and the cluster rounds of a clustered search (their bound in seconds)."""
    extra: dict[str, object] = {"written": written}
    if outcome.phases:
        extra.update(found_by=outcome.found_by)
    if choice:
        extra.update(choice=choice)
    if outcome.rounds:
        tick = tick_s or 1.0
        extra.update(clusters=outcome.rounds[-1].clusters, rounds=len(outcome.rounds),
                     cluster_bound=outcome.rounds[-1].cluster_bound_tick * tick)
    return extra


def _solve(args: argparse.Namespace) -> int:
    for path, flag in _solve_outputs(args):
        check_output_file(path, flag)
    pause_point("imports")
    from planner.cost.measured import load_measured_times
    from planner.cost.measured_transfers import measured_transfer_s, with_transfer_latency
    from planner.ir.load import parse_input_shape, parse_input_value
    from planner.ir.units import parse_bytes
    from planner.prepare import prepare
    from planner.report import plan_summary
    from planner.report_format import print_plan_table
    from planner.run_advice import advise_from_measured
    from planner.runtime_choice import choose_plan, retimed_run_plan
    from planner.schedule.runtime_replay import RuntimeReplay
    from planner.solve import plan_instance

    topology, model_path = _solve_input(args)
    capacity = parse_bytes(args.memory, where="--memory") if args.memory else None
    measured = load_measured_times(args.measured) if args.measured else None
    transfer_s = measured_transfer_s(args.measured) if args.measured else None
    if transfer_s is not None:  # a re-plan from a run: its transfers cost what the run measured
        topology = with_transfer_latency(topology, sum(transfer_s))
    shapes = dict(parse_input_shape(s) for s in args.input_shape)
    values = dict(parse_input_value(s) for s in args.input_value)
    prepared = prepare(model_path, topology, input_shapes=shapes or None, input_values=values or None,
                       capacity_bytes=capacity,
                       measured_s=measured, pins=_parse_rules(args.pin, "--pin"),
                       forbids=_parse_rules(args.forbid, "--forbid"))
    for line in model_warnings(prepared.graph):  # planning goes on: the plan is still worth writing
        print(f"warning: {line}", file=sys.stderr)
    say = _progress_printer(args.quiet)
    if say:
        say(f"{model_path}: {prepared.ops_before_passes} ops, {prepared.instance.num_tasks} after constant folding "
            f"and dead-code elimination; {topology.num_devices} devices ({topology.name})")
        if transfer_s is not None:
            say(f"transfers as the run measured them: {transfer_s[0] * 1e6:.0f} us a send, {transfer_s[1] * 1e6:.0f}"
                f" us a receive (each link's latency {sum(transfer_s) * 1e6:.0f} us)")
    options = _options(args)
    with ctrl_c_in_search():
        outcome = plan_instance(prepared.instance, options, progress=say)
    replay = RuntimeReplay.of(topology.source_path, topology, solo_durations=measured is not None,
                              transfer_s=transfer_s) if options.method is Method.MILP else None
    run_plan = None
    if args.measured is not None and options.method is Method.MILP:  # a re-plan keeps the run's plan unless beaten
        run_plan, why = retimed_run_plan(args.measured, prepared.instance)
        if run_plan is None and why != "not a plan-run report" and say:
            say(f"the measured run's plan is not a candidate: {why}")
    outcome, choice = choose_plan(outcome, replay=replay, run_plan=run_plan, say=say)
    source = prepared.graph.source
    provenance = {
        "model_path": str(Path(model_path).resolve()), "model_sha256": source.sha256 if source else "",
        "hardware_path": str(Path(topology.source_path).resolve()) if topology.source_path else "",
        "hardware_sha256": topology.source_sha256, "input_shapes": shapes, "input_values": values,
        "run": advise_from_measured(args.measured, outcome.op_plan, choice, say, graph=prepared.graph),
    }
    out = _write_outputs(outcome, args.out, pictures=not args.no_pictures, provenance=provenance,
                         op_types={op.name: op.op_type for op in prepared.graph.ops})
    summary = plan_summary(out["plan"], out["timeline"], prepared.instance, baselines=dict(outcome.baselines),
                           extra=_summary_extra(outcome, out["written"], choice, prepared.instance.tick_s))
    if args.format == "json":
        print(json.dumps(summary, indent=2, default=str))
    else:
        print_plan_table(summary)
        for kind, path in out["written"].items():
            print(f"wrote {kind}: {path}")
    return 0


def solve_main(argv: Sequence[str] | None = None) -> int:
    """plan-solve: place and order every op on the devices (bi-level MILP by default); write plan, Gantt, trace."""
    parser = ArgumentParser(prog="plan-solve", description=solve_main.__doc__)
    _add_model_args(parser)
    parser.add_argument("--graph", type=Path, default=None, help="a task-graph JSON file instead of a model")
    parser.add_argument("--devices", type=positive_int, default=None, help="with --graph: N identical devices")
    parser.add_argument("--out", type=Path, default=Path("out/plan.json"), help="plan file (default out/plan.json)")
    parser.add_argument("--memory", default=None, help="override every device's memory, e.g. 16GiB")
    parser.add_argument("--measured", type=Path, default=None, help="measured op times (.csv op,seconds or ORT .json)")
    parser.add_argument("--pin", action="append", default=[], metavar="PATTERN=DEVICE", help="run matching ops there")
    parser.add_argument("--forbid", action="append", default=[], metavar="PATTERN=DEVICE", help="never there")
    parser.add_argument("--no-pictures", action="store_true", help="skip the Gantt PNG and the trace")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="how to print the summary")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    _add_solve_args(parser)
    return _run(_solve, parser, argv)


# --------------------------------------------------------------------------------------------- plan-simulate
def _simulate_instance(plan: Plan, fine, plan_path: str):
    """The instance the plan's tasks live on: the op graph, or (an older plan file whose tasks are clusters) the op
    graph contracted to the plan's clusters.  Names the first task the model does not have."""
    from planner.coarsen import contract

    index = fine.task_index
    if not plan.task_ops:
        unknown = next((p.task for p in plan.placements if p.task not in index), None)
        if unknown is not None:
            raise InputError(f"the plan names op {unknown!r}, which the model does not have", path=plan_path,
                             fix="re-plan with plan-solve")
        return fine
    try:
        clusters = [[index[op] for op in plan.task_ops[name]] for name in (p.task for p in plan.placements)]
    except KeyError as exc:
        raise InputError(f"the plan names op {exc.args[0]!r}, which the model does not have", path=plan_path) \
            from None
    names = tuple(p.task for p in plan.placements)
    return dataclasses.replace(contract(fine, clusters), task_names=names,
                               task_ops={n: tuple(plan.task_ops[n]) for n in names})


def _simulate(args: argparse.Namespace) -> int:
    if args.out:
        for path, flag in _plan_files(args.out, pictures=True):
            check_output_file(path, flag)
    pause_point("imports")
    from planner.ir.hardware import load_topology
    from planner.ir.topology import Topology
    from planner.ir.units import format_time
    from planner.plot import plot_gantt
    from planner.prepare import prepare
    from planner.report import plan_summary
    from planner.report_format import print_plan_table
    from planner.schedule.plan_io import load_plan, save_plan
    from planner.schedule.simulate import retime_plan, simulate_plan
    from planner.schedule.trace import write_chrome_trace

    plan = load_plan(args.plan)
    model = Path(plan.model_path)
    if not plan.model_path or not model.is_file():
        raise InputError(f"the plan's model {plan.model_path or '(none recorded)'} is missing", path=str(args.plan),
                         fix="re-plan with plan-solve")
    if plan.model_sha256 and hashlib.sha256(model.read_bytes()).hexdigest() != plan.model_sha256:
        raise InputError(f"the model {model} changed since this plan was made (hash mismatch)", path=str(args.plan),
                         fix="re-plan with plan-solve")
    hw = args.hw or (Path(plan.hardware_path) if plan.hardware_path else None)
    topology = load_topology(hw) if hw else Topology.identical(len(plan.device_names))
    if topology.num_devices != len(plan.device_names):
        raise InputError(f"the plan uses {len(plan.device_names)} devices, {hw} has {topology.num_devices}",
                         path=str(args.plan), fix="simulate on hardware with the same number of devices")
    fine = prepare(model, topology, input_shapes=plan.input_shapes or None,
                   input_values=plan.input_values or None).instance
    instance = _simulate_instance(plan, fine, str(args.plan))
    retimed = retime_plan(plan, instance, link_contention=args.contention,
                          hardware_path=str(hw or ""), hardware_sha256=topology.source_sha256)
    # One lower bound, of the op graph (planner.report): on the plan's own hardware the plan's bound still holds
    # (it was proven on this very instance; contention only lengthens a plan); elsewhere only the op graph's
    # critical path / work bound on the new hardware is known.  Never a bound of the contracted cluster graph.
    same_hw = topology.source_sha256 == plan.hardware_sha256 and fine.tick_s == plan.tick_s
    bound = fine.trivial_lower_bound_tick()
    if same_hw:
        bound = max(bound, plan.lower_bound_tick)
        note = "op graph, from the plan (the same hardware)"
    else:
        note = f"op graph on {hw or 'these devices'}: max(critical path, work bound)"
    bound = min(bound, retimed.makespan_tick)
    unchanged = same_hw and retimed.makespan_tick == plan.makespan_tick
    retimed = dataclasses.replace(retimed, lower_bound_tick=bound, status=plan.status if unchanged else retimed.status)
    timeline = simulate_plan(instance, retimed, link_contention=args.contention)
    planned_makespan = plan.makespan_tick * (plan.tick_s or 1)
    summary = plan_summary(retimed, timeline, fine, extra={"planned_makespan": planned_makespan}, bound_note=note)
    if args.out:
        stem = args.out.with_suffix("").name
        with staged_dir(args.out.parent) as staging:  # the plan, its Gantt and its trace land together or not at all
            save_plan(retimed, staging / args.out.name)
            plot_gantt(timeline, staging / f"{stem}.gantt.png", title=f"{plan.instance_name} re-timed")
            write_chrome_trace(timeline, staging / f"{stem}.trace.json")
            pause_point("writing")
    if args.format == "json":
        print(json.dumps(summary, indent=2, default=str))
    else:
        print(f"planned makespan {format_time(summary['planned_makespan'], unit=summary['time_unit'])}; re-timed on "
              f"{hw or 'the same devices'}:")
        print_plan_table(summary)
    return 0


def simulate_main(argv: Sequence[str] | None = None) -> int:
    """plan-simulate: replay a plan (same devices and orders) on its hardware or other hardware (--hw)."""
    parser = ArgumentParser(prog="plan-simulate", description=simulate_main.__doc__)
    parser.add_argument("--plan", type=Path, required=True, help="plan file from plan-solve")
    parser.add_argument("--hw", type=Path, default=None,
                        help="other hardware profile (same number of devices; default: the plan's own)")
    parser.add_argument("--contention", action="store_true", help="serialize transfers on each directed link")
    parser.add_argument("--out", type=Path, default=None, help="write the re-timed plan (+ Gantt and trace) here")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="how to print the summary")
    return _run(_simulate, parser, argv)


# ------------------------------------------------------------------------------------------------ plan-whatif
def _whatif(args: argparse.Namespace) -> int:
    check_output_dir(args.out_dir, "--out-dir")
    pause_point("imports")
    from planner.ir.hardware import load_topology
    from planner.ir.units import format_bytes, format_time
    from planner.prepare import prepare
    from planner.whatif import memory_sweep, parse_memory_range, short_reason, write_whatif

    capacities = parse_memory_range(args.memory)
    topology = load_topology(args.hw or DEFAULT_PROFILE)
    prepared = prepare(args.model or DEFAULT_MODEL, topology)
    say = _progress_printer(args.quiet)
    result = memory_sweep(prepared.instance, capacities, _options(args), progress=say)
    with staged_dir(args.out_dir) as staging:  # both files or neither, even on Ctrl-C while drawing
        csv_path, png_path = moved(list(write_whatif(result, staging)), staging, args.out_dir)
        pause_point("writing")
    unit = prepared.instance.time_unit
    for row in result.rows:
        shown = format_time(row.makespan_s, unit=unit) if row.feasible else f"infeasible: {row.reason}"
        print(f"{format_bytes(row.capacity_bytes):>12}  {shown}")
        if args.verbose and row.details:  # the planner's full words, once (the CSV's details column)
            print(f"{'':>12}  {row.details}")
    why = result.capacity_lower_bound_reason
    print(f"smallest capacity that can fit at all (lower bound): {format_bytes(result.capacity_lower_bound_bytes)} "
          f"({why if args.verbose else short_reason(why)})")
    if result.smallest_feasible_bytes is not None:
        print(f"smallest feasible capacity in the sweep: {format_bytes(result.smallest_feasible_bytes)}")
    else:
        print("no capacity in the sweep is feasible")
    print(f"wrote {csv_path} and {png_path}")
    return 0


def whatif_main(argv: Sequence[str] | None = None) -> int:
    """plan-whatif: plan under each memory capacity; CSV and plot of makespan against memory."""
    parser = ArgumentParser(prog="plan-whatif", description=whatif_main.__doc__)
    _add_model_args(parser)
    parser.add_argument("--memory", required=True, metavar="FROM:TO:STEP", help="e.g. 8GiB:80GiB:8GiB, or a list a,b,c")
    parser.add_argument("--out-dir", type=Path, default=Path("out/whatif"),
                        help="folder for whatif.csv and whatif.png")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--verbose", action="store_true",
                        help="the planner's full reasons: why each capacity is infeasible and the lower bound's")
    _add_solve_args(parser)
    parser.set_defaults(time_limit=20.0)
    return _run(_whatif, parser, argv)
