"""plan-run and plan-codegen: run a plan for real on torch.distributed, or write it out as per-rank Python files.

Thin, like `planner/cli.py`: parse, call `planner.execute`, print.  `planner.execute` (and so torch) is imported
only inside the two calls, so that this module, its ``--help`` and the planning commands load without torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from planner.cli import _run, pause_point
from planner.cli_args import (
    ArgumentParser,
    RawDescriptionDefaultsHelpFormatter,
    nonnegative_int,
    positive_int,
    positive_seconds,
)
from planner.cli_outputs import check_output_dir, check_output_file, moved, staged_dir
from planner.errors import InputError
from planner.ir.units import format_time


def _shapes(items: Sequence[str]):
    from planner.ir.load import parse_input_shape  # here: it loads onnx, which --help does without

    return dict(parse_input_shape(s) for s in items) or None


def _feeds(path: Path | None):
    if path is None:
        return None
    try:
        with np.load(path) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read inputs: {exc}", path=str(path), fix="pass an .npz file of input arrays") \
            from None


def _list_ops() -> int:
    # here, not at the top: torch stays optional (module docstring)
    from planner.execute.ops import supported_op_types

    ops = supported_op_types()
    print(f"{len(ops)} ONNX op types (default domain) the runtime runs:")
    for i in range(0, len(ops), 8):
        print("  " + ", ".join(ops[i:i + 8]))
    return 0


def _fast_config(args: argparse.Namespace, plan, ranks_available: int) -> tuple[tuple[int, int], str]:
    """(ranks, threads per rank) for a fast run without --choose, and why: --nproc and --threads as given; what
    neither sets, the plan's run advice (plan-solve on op times for several thread counts) where it has one, else
    the plan's used devices on one thread each."""
    if args.nproc is None and args.threads is None and plan.run is not None:
        return (plan.run.ranks, plan.run.threads), f"as plan-solve advised: {plan.run.reason}"
    return (args.nproc or ranks_available, args.threads or 1), "as asked"


def _run_fast(args: argparse.Namespace) -> int:
    # here, not at the top: torch stays optional (module docstring)
    from planner.execute.fast_choice import RunConfig, choose_run, cores_available, run_config, used_devices
    from planner.execute.program import default_feeds
    from planner.execute.runner import compare_outputs, degenerate_reference_note, load_checked_plan
    from planner.ir.onnx_values import bound_input_feeds, reference_outputs

    plan, graph = load_checked_plan(args.plan, _shapes(args.input_shape), replan=args.replan)
    feeds = _feeds(args.inputs) or default_feeds(graph)
    where = str(args.plan)
    warmup = max(args.warmup, 2) if args.engine == "auto" else args.warmup
    if args.choose:
        say = None if args.format == "json" else (lambda line: print(f"  measured {line}", flush=True))
        choice = choose_run(plan, graph, feeds, repeat=args.repeat, warmup=warmup, engine=args.engine, where=where,
                            say=say)
        trial, run, reason = choice.chosen, choice.run, choice.reason
    else:
        config, reason = _fast_config(args, plan, min(used_devices(plan), cores_available()))
        trial, run = run_config(plan, graph, feeds, RunConfig(config[0], config[1], args.engine), repeat=args.repeat,
                                warmup=warmup, where=where)
    ran = (trial.config.ranks, trial.config.threads)
    advice = plan.run if plan.run is not None and (plan.run.ranks, plan.run.threads) == ran else None
    simulated_s = advice.predicted_s if advice else plan.makespan_tick * (plan.tick_s or 1.0)
    report: dict[str, object] = {
              "plan": where, "executor": "fast", "ranks": trial.config.ranks, "threads": trial.config.threads,
              "engine_rule": trial.config.engine, "engines": dict(trial.engines), "reason": reason,
              "measured_makespan_s": trial.median_s, "measured_makespans_s": list(trial.makespans_s),
              "simulated_makespan_s": simulated_s,
              "max_abs_error": None, "max_rel_error": None}
    if args.check:
        ref_feeds = {**feeds, **bound_input_feeds(plan.model_path, plan.input_values)}
        ref, _ = reference_outputs(plan.model_path, ref_feeds, list(run.outputs), plan.input_shapes,
                                   plan.input_values)
        max_abs, max_rel = compare_outputs(run.outputs, ref)
        report.update(max_abs_error=max_abs, max_rel_error=max_rel, check_note=degenerate_reference_note(ref))
    if args.format == "json":
        print(json.dumps(report, indent=2))
        return 0
    engines = ", ".join(f"{n} segments on {e}" for e, n in sorted(trial.engines.items()))
    print(f"ran {where} with the fast executor: {trial.config.label()} ({reason}); {engines}")
    print(f"measured makespan {format_time(trial.median_s)} (median of {args.repeat} after {warmup} warm-up; "
          f"spread {format_time(trial.spread_s)}); the plan predicts {format_time(simulated_s)} "
          + (f"for {advice.label()}" if advice else f"on its {used_devices(plan)} device(s)"))
    if args.check:
        print(f"check against onnxruntime: max abs error {max_abs:.3g}, max rel error {max_rel:.3g}")
        if report["check_note"]:
            print(f"note: {report['check_note']}")
    return 0


def _run_plan(args: argparse.Namespace) -> int:
    if args.list_ops:
        return _list_ops()
    if args.plan is None:
        raise InputError("--plan is required (or --list-ops)")
    if args.report is not None:
        check_output_file(args.report, "--report")
        check_output_file(args.report.with_name(args.report.stem + ".trace.json"), "--report")
    if args.executor == "fast" or args.choose:
        if args.backend != "gloo" or args.report is not None:
            raise InputError("the fast executor runs on one host through shared memory and writes no run.json",
                             fix="drop --backend/--report, or use --executor traced")
        return _run_fast(args)
    # here, not at the top: torch stays optional (module docstring)
    from planner.execute.runner import run_plan

    outcome = run_plan(args.plan, replan=args.replan, nproc=args.nproc, backend=args.backend, check=args.check,
                       repeat=args.repeat, warmup=args.warmup, report_path=args.report, feeds=_feeds(args.inputs),
                       input_shapes=_shapes(args.input_shape), comm_timeout_s=args.timeout,
                       run_timeout_s=args.run_timeout, threads=args.threads or 1, probe=not args.no_probe)
    r = outcome.report
    if args.format == "json":
        print(json.dumps(r, indent=2))
        return 0
    print(f"ran {args.plan} on {r['world_size']} {r['backend']} ranks, {r['transfers']} transfers "
          f"({r['transfer_bytes']} bytes)")
    shapes = ", ".join(f"{k}={'x'.join(map(str, v))}" for k, v in r["input_shapes"].items())
    values = ", ".join(f"{k}={','.join(f'{x:g}' for x in v)}" for k, v in r["input_values"].items())
    print(f"  input shapes: {shapes or 'none'}" + (f"; input values: {values}" if values else "")
          + ("; re-planned (HEFT) for these shapes" if r["replanned"] else ""))
    for name, info in r["outputs"].items():
        print(f"  output {name}: shape {info['shape']} {info['dtype']}")
    sim = r["simulated_makespan_s"]
    print(f"measured makespan {format_time(r['measured_makespan_s'])} (median of {args.repeat} after "
          f"{args.warmup} warm-up)" + (f"; simulated {format_time(sim)}" if sim is not None else ""))
    print("busy per rank: " + ", ".join(format_time(b) for b in r["busy_s"]))
    if "peak_tensor_bytes" in r:
        # here, not at the top: torch stays optional (module docstring); run_report itself has no torch
        from planner.execute.run_report import summary_lines

        for line in summary_lines(r):
            print(line)
    if "machine_state" in r:
        # here, not at the top: torch stays optional (module docstring); machine_scale itself has no torch
        from planner.execute.machine_scale import summary_lines as machine_lines

        for line in machine_lines(r["machine_state"]):
            print(line)
    if "sharing" in r:
        # here, not at the top: torch stays optional (module docstring); run_sharing itself has no torch
        from planner.execute.run_sharing import summary_line as sharing_line

        shared = sharing_line(r["sharing"])
        if shared:
            print(shared)
    if args.check:
        print(f"check against onnxruntime: max abs error {r['max_abs_error']:.3g}, "
              f"max rel error {r['max_rel_error']:.3g}")
        if r.get("check_note"):
            print(f"note: {r['check_note']}")
    if args.report:
        print(f"wrote report: {args.report}\nwrote trace: {r['trace']}")
    return 0


def run_main(argv: Sequence[str] | None = None) -> int:
    """plan-run: run a plan on torch.distributed, one rank per planned device (forked locally).

    Multi-host: start `python -m planner.execute.torchrun --plan plan.json` with torchrun on every host
    (torchrun --nnodes H --nproc-per-node P --node-rank I --rdzv-backend c10d --rdzv-endpoint HOST:PORT ...);
    each rank reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the environment."""
    parser = ArgumentParser(prog="plan-run", description=run_main.__doc__,
                            formatter_class=RawDescriptionDefaultsHelpFormatter)
    parser.add_argument("--plan", type=Path, default=None, help="plan file from plan-solve (an ONNX model's plan)")
    parser.add_argument("--list-ops", action="store_true", help="print the ONNX op types the runtime runs and exit")
    parser.add_argument("--replan", action="store_true",
                        help="with --input-shape other than the plan's: plan those shapes (HEFT) and run that")
    parser.add_argument("--nproc", type=positive_int, default=None,
                        help="processes (default: one per planned device; fewer: device d runs on rank d %% N)")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo",
                        help="torch.distributed backend of the traced executor (nccl: one GPU per rank)")
    parser.add_argument("--threads", type=positive_int, default=None,
                        help="threads per rank (default 1; the fast executor without --nproc follows the plan's run "
                             "advice where it has one; calibrate with the same plan-calibrate --threads)")
    parser.add_argument("--check", action="store_true", help="compare the outputs with onnxruntime")
    parser.add_argument("--repeat", type=positive_int, default=1, help="measured repetitions (the median is reported)")
    parser.add_argument("--warmup", type=nonnegative_int, default=1, help="warm-up repetitions before measuring")
    parser.add_argument("--report", type=Path, default=None, help="write run.json (+ .trace.json) here")
    parser.add_argument("--no-probe", action="store_true",
                        help="with --report: skip measuring the machine's state before and after the timed "
                             "repetitions (done on a profile from plan-calibrate)")
    parser.add_argument("--inputs", type=Path, default=None, help=".npz of input arrays (default: deterministic)")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=AxBxC",
                        help="input shapes to run (default: the ones the plan was made with, stored in it); "
                             "others are refused unless --replan")
    parser.add_argument("--timeout", type=positive_seconds, default=60.0, help="seconds any one transfer may wait")
    parser.add_argument("--run-timeout", type=positive_seconds, default=600.0, help="seconds the whole run may take")
    parser.add_argument("--executor", choices=("traced", "fast"), default="traced",
                        help="traced (default): every op timed, run.json and trace with --report, gloo or NCCL; "
                             "fast: each rank runs straight-line segments on the fastest engine, tensors through "
                             "shared memory (one host)")
    parser.add_argument("--engine", choices=("auto", "torch", "onnxruntime"), default="auto",
                        help="fast executor: the engine per segment (default auto: the fastest in the warm-up)")
    parser.add_argument("--choose", action="store_true",
                        help="fast executor: measure one rank (every core, then one thread) against the plan's ranks "
                             "and run the fastest (the split only when it wins beyond the run-to-run noise)")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="how to print the summary")
    return _run(_run_plan, parser, argv)


def _codegen(args: argparse.Namespace) -> int:
    check_output_dir(args.out, "--out")
    pause_point("imports")
    # here, not at the top: torch stays optional (module docstring)
    from planner.execute.codegen import write_code

    with staged_dir(args.out) as staging:  # the whole folder or none, even on Ctrl-C while writing the weights
        written = moved(write_code(args.plan, staging, nproc=args.nproc, input_shapes=_shapes(args.input_shape)),
                        staging, args.out)
        pause_point("writing")
    for path in written:
        print(f"wrote {path}")
    return 0


def codegen_main(argv: Sequence[str] | None = None) -> int:
    """plan-codegen: write one plain PyTorch file per rank (torch calls in plan order, explicit sends and
    receives), each rank's weights beside it (torch.save) and a launcher for torchrun; the folder needs only torch."""
    parser = ArgumentParser(prog="plan-codegen", description=codegen_main.__doc__)
    parser.add_argument("--plan", type=Path, required=True, help="plan file from plan-solve (an ONNX model's plan)")
    parser.add_argument("--out", type=Path, required=True, help="folder for rank_<r>.py, launch.py, weights")
    parser.add_argument("--nproc", type=positive_int, default=None,
                        help="ranks (default: one per planned device; fewer: device d runs on rank d %% N)")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=AxBxC",
                        help="input shapes the code runs (default: the ones the plan was made with)")
    return _run(_codegen, parser, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_main())
