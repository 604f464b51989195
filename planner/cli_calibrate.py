"""plan-calibrate: measure this machine with the concurrency plans run under and write a hardware profile.

Thin, like `planner/cli.py`: parse, measure and build the profile (`planner.calibration.measure_profile`, which
calls `planner.execute.calibrate`, the torch measurements), write the profile and the op times and print the
summary.  `planner.execute` (and so torch) is imported only inside the call, so that this module and its
``--help`` load without torch.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from planner.calibration import CalibrationRequest, check_request, measure_profile
from planner.cli import _run
from planner.cli_args import ArgumentParser, positive_int, positive_seconds
from planner.cli_outputs import check_output_file
from planner.schedule.atomic import atomic_write_text


def _calibrate(args: argparse.Namespace) -> int:
    request = CalibrationRequest(nproc=args.nproc, threads=args.threads, repeats=args.repeats, quick=args.quick,
                                 device=args.device, model=args.model, engine=args.engine,
                                 transport=args.transport, name=args.name, timeout_s=args.timeout,
                                 progress=not args.quiet, op_factors=not args.no_op_factors,
                                 runtime_probe=not args.no_runtime_probe, sharing=not args.no_sharing,
                                 profile_path=args.out)
    check_request(request)
    check_output_file(args.out, "--out")
    if args.model is not None:
        check_output_file(_op_times_path(args), "--op-times")
    # here, not at the top: torch stays optional (module docstring)
    from planner.execute.calibrate_profile import op_frame_csv, summary_lines

    measured = measure_profile(request)
    cal, fits, load = measured.calibration, measured.fits, measured.load_avg
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, measured.text)
    if not args.quiet:
        for line in summary_lines(measured.figure_rows()):
            print(line)
        if fits:
            print("op cost factors (measured - launch overhead) / roofline, per op type: " +
                  ", ".join(f"{t} {fit.factor:.3g}" for t, fit in fits.items()))
        print(f"measured with {args.nproc} process(es) x {args.threads} thread(s), {request.effective_repeats} "
              f"repeats each, in {cal.wall_s:.1f} s" +
              (f"; load average {load:.2f} at the start" if load is not None else ""))
    print(f"wrote profile: {args.out}")
    frame = measured.op_times_frame()
    if frame is not None:
        times = _op_times_path(args)
        atomic_write_text(times, op_frame_csv(frame))
        if args.engine == "torch":
            print(f"wrote op times: {times} ({len(cal.op_seconds)} ops as torch runs them; "
                  f"plan-solve --measured {times})")
        else:
            engine_times = measured.engine_times or []
            whole = ", ".join(f"{m.whole_s * 1e3:.3g} ms on {m.threads} thread{'s' if m.threads > 1 else ''}"
                              for m in engine_times)
            print(f"wrote op times: {times} ({len(engine_times[0].op_s)} ops as onnxruntime runs them, the whole "
                  f"graph {whole}; plan-solve --measured {times})")
    return 0


def _op_times_path(args: argparse.Namespace) -> Path:
    """Where --model's op,seconds CSV goes: --op-times, or <model stem>.times.csv beside --out."""
    return args.op_times or args.out.with_name(args.model.stem + ".times.csv")


def calibrate_main(argv: Sequence[str] | None = None) -> int:
    """plan-calibrate: measure this machine with N processes running at once (each with its torch threads, as
    plan-run's ranks): achieved FLOP/s of matrix products and convolutions, memory bandwidth, our runtime's per-op
    overhead, gloo point-to-point latency and bandwidth, and a cost factor per op type fitted on representative
    ops run by our runtime; write a hardware profile (YAML, with a provenance block)
    for plan-solve --hw.  --model also measures that model's ops and writes the op,seconds CSV that
    plan-solve --measured reads."""
    parser = ArgumentParser(prog="plan-calibrate", description=calibrate_main.__doc__)
    parser.add_argument("--nproc", type=positive_int, default=1,
                        help="processes measuring at once: the number of ranks plans will run on (default 1)")
    parser.add_argument("--threads", type=positive_int, default=1,
                        help="torch threads per process (plan-run's ranks use 1; default 1)")
    parser.add_argument("--out", type=Path, default=Path("calibrated.yaml"), help="hardware profile to write")
    parser.add_argument("--name", default=None, help="the profile's name (default calibrated-<host>-<nproc>)")
    parser.add_argument("--model", type=Path, default=None, help="also time this ONNX model's ops")
    parser.add_argument("--engine", choices=("torch", "onnxruntime"), default="torch",
                        help="how --model's ops are timed: our torch runtime's calls (default), or onnxruntime's "
                             "kernels as the fast executor runs them (plan-run --executor fast)")
    parser.add_argument("--transport", choices=("gloo", "shm"), default="gloo",
                        help="the intra-host link the profile prices: gloo (plan-run's traced ranks; default) or "
                             "shm (shared memory, plan-run --executor fast); needs --nproc 2 or more")
    parser.add_argument("--op-times", type=Path, default=None,
                        help="where --model's op,seconds CSV goes (default <model stem>.times.csv beside --out)")
    parser.add_argument("--repeats", type=positive_int, default=None, help="repeats per figure (default 5; 3 quick)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a few seconds (tests, smoke checks)")
    parser.add_argument("--timeout", type=positive_seconds, default=600.0, help="seconds the whole run may take")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: rank r measures GPU r and p2p over NCCL (a GPU host; default cpu)")
    parser.add_argument("--no-op-factors", action="store_true",
                        help="skip the representative ops: a profile without the op_cost_factors table")
    parser.add_argument("--no-runtime-probe", action="store_true",
                        help="skip the runtime probe: a profile without op_overhead, send_overhead, recv_overhead "
                             "(priced as before them)")
    parser.add_argument("--no-sharing", action="store_true",
                        help="skip solo vs concurrent throughput: a profile without hosts[].sharing (simulated as "
                             "before it)")
    parser.add_argument("--quiet", action="store_true", help="no progress or summary, only the written files")
    return _run(_calibrate, parser, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(calibrate_main())
