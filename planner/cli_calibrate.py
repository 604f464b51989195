"""plan-calibrate: measure this machine with the concurrency plans run under and write a hardware profile.

Thin, like `planner/cli.py`: parse, call `planner.execute.calibrate` (the torch measurements), write the profile
(`planner.execute.calibrate_profile`) and print the summary.  `planner.execute` (and so torch) is imported only
inside the call, so that this module and its ``--help`` load without torch.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from planner.cli import _run
from planner.cli_args import ArgumentParser, positive_int, positive_seconds
from planner.cli_outputs import check_output_file
from planner.errors import InputError
from planner.schedule.atomic import atomic_write_text

if TYPE_CHECKING:
    from planner.execute.engine_times import EngineTimes

PROFILE_HOW = {
    "float_flops": "peak_flops.float = median over the float matmul and conv sizes of their achieved FLOP/s",
    "double_flops": "peak_flops.double = median over the double matmul sizes of their achieved FLOP/s",
    "memory_bandwidth": "memory_bandwidth = achieved bytes/s of torch.add on float32 vectors (2 reads, 1 write)",
    "launch_overhead": "launch_overhead = median time of one op through our runtime (Relu, Add, Reshape, Softmax, "
                       "LayerNormalization on one element)",
    "link_latency": "links.intra_host.latency = intercept of the Theil-Sen line of the gloo ping-pong's one-way "
                    "time (round trip / 2) over message bytes",
    "link_bandwidth": "links.intra_host.bandwidth = 1 / slope of that line",
    "op_overhead": "op_overhead = the runtime probe's seconds per op that plan-run's rank loop spends around "
                   "run_node (chains of tiny ops; outside ops, transfers and the tail)",
    "send_overhead": "links.intra_host.send_overhead = the runtime probe's seconds per send (pack + isend) on the "
                     "sending rank",
    "recv_overhead": "links.intra_host.recv_overhead = the runtime probe's seconds per receive on the receiving "
                     "rank: posting it (irecv) and waiting for its data after the sending op had ended, the ranks "
                     "computing between transfers",
    "effective_parallelism": "hosts[].sharing.effective_parallelism = median over ranks, repeats and ops (a matmul, "
                             "a conv) of nproc x (rate with every rank computing) / (rate alone); measured_ranks = "
                             "nproc (the compute figures above were measured with that many ranks at once)",
}
FACTOR_HOW = ("op_cost_factors.{op_type} = geometric mean over the representative {op_type} ops (those whose "
              "roofline is at least launch_overhead) of measured time - launch_overhead over their roofline "
              "max(FLOPs / peak_flops.float, bytes / memory_bandwidth), 1 where they disagree by more than 3x; "
              "fitted: {fit}")


def _calibrate(args: argparse.Namespace) -> int:
    if args.model is not None and not args.model.is_file():
        raise InputError("model not found", path=str(args.model), fix="pass an ONNX model file")
    check_output_file(args.out, "--out")
    if args.model is not None:
        check_output_file(_op_times_path(args), "--op-times")
    if args.transport == "shm" and args.nproc < 2:
        raise InputError("--transport shm prices a link between processes", fix="pass --nproc 2 or more")
    # here, not at the top: torch stays optional (module docstring)
    from planner.execute.calibrate import CalibrationSpec, calibrate, default_sizes
    from planner.execute.calibrate_profile import op_csv, profile_document, profile_yaml, summary_lines

    repeats = args.repeats or (3 if args.quick else 5)
    spec = CalibrationSpec(nproc=args.nproc, threads=args.threads, repeats=repeats,
                           sizes=default_sizes(args.device, args.quick),
                           model_path=str(args.model) if args.model and args.engine == "torch" else None,
                           timeout_s=args.timeout,
                           progress=not args.quiet, device=args.device, op_factors=not args.no_op_factors,
                           runtime_probe=not args.no_runtime_probe, sharing=not args.no_sharing)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    cal = calibrate(spec)
    figures = cal.profile_figures()
    how = {k: PROFILE_HOW[k] for k, v in figures.items() if v is not None}
    fits = cal.op_cost_fits()
    how.update({f"op_cost_factors.{t}": FACTOR_HOW.format(op_type=t, fit=fit.describe()) for t, fit in fits.items()})
    how.update({k: f.how for k, f in cal.figures.items()})
    spread = {k: f"{f.spread:.1%} of {len(f.samples)} samples (repeats x ranks)" for k, f in cal.figures.items()}
    for key, value in figures.items():
        if value is not None:
            parts = cal.contributing(key)
            spread[key] = (f"largest (max-min)/median over {len(parts[0].samples)} samples (repeats x ranks) of "
                           f"its {len(parts)} measurement(s): {max(f.spread for f in parts):.1%}")
    try:
        doc = profile_document(figures, how, spread, nproc=args.nproc, threads=args.threads,
                               torch_version=cal.torch_version, name=args.name, load_avg=load,
                               memory_bytes=cal.device_memory_bytes or None, device=args.device,
                               op_cost_factors={t: fit.factor for t, fit in fits.items()})
        engine_times = (_onnxruntime_op_seconds(args.model, repeats, args.nproc * args.threads)
                        if args.model is not None and args.engine == "onnxruntime" else None)
        if args.transport == "shm":
            _shared_memory_link(doc, args.model, engine_times[0].op_s if engine_times else None)
        text = profile_yaml(doc)
    except ValueError as exc:
        raise InputError(f"the measured profile does not validate: {exc}", path=str(args.out)) from None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, text)
    if not args.quiet:
        rows = [(f.name, f.value, f.unit, f.spread, len(f.samples)) for f in cal.figures.values()]
        for line in summary_lines(rows):
            print(line)
        if fits:
            print("op cost factors (measured - launch overhead) / roofline, per op type: " +
                  ", ".join(f"{t} {fit.factor:.3g}" for t, fit in fits.items()))
        print(f"measured with {args.nproc} process(es) x {args.threads} thread(s), {repeats} repeats each, in "
              f"{cal.wall_s:.1f} s" + (f"; load average {load:.2f} at the start" if load is not None else ""))
    print(f"wrote profile: {args.out}")
    if args.model is not None:
        times = _op_times_path(args)
        if args.engine == "torch":
            atomic_write_text(times, op_csv(cal.op_seconds))
            print(f"wrote op times: {times} ({len(cal.op_seconds)} ops as torch runs them; "
                  f"plan-solve --measured {times})")
        else:
            measured = engine_times or []
            atomic_write_text(times, op_csv(measured[0].op_s, {f"seconds_{m.threads}_threads": m.op_s
                                                               for m in measured[1:]}))
            whole = ", ".join(f"{m.whole_s * 1e3:.3g} ms on {m.threads} thread{'s' if m.threads > 1 else ''}"
                              for m in measured)
            print(f"wrote op times: {times} ({len(measured[0].op_s)} ops as onnxruntime runs them, the whole "
                  f"graph {whole}; plan-solve --measured {times})")
    return 0


def _shared_memory_link(doc: dict, model: Path | None, op_s: Mapping[str, float] | None) -> None:
    """The profile's link as the fast executor's shared memory: the ping-pong's latency and bandwidth, and on
    each side of a transfer the larger of one engine call, half a crossing's cost beyond that latency, and, with
    the model's op times, what one of its segments costs beyond its ops (`shm_probe`)."""
    from planner.execute.calibrate_profile import with_shared_memory_link
    from planner.execute.engine_times import engine_call_s
    from planner.execute.shm_probe import crossing_s, segment_overhead_s, shm_link_figures

    link = shm_link_figures()
    with tempfile.TemporaryDirectory() as tmp:
        crossing = crossing_s(Path(tmp) / "chain.onnx", crossings=40)
    side_s = max(engine_call_s(), (crossing - link.latency_s) / 2)
    if model is not None and op_s is not None:
        side_s = max(side_s, segment_overhead_s(model, op_s))
    with_shared_memory_link(doc, link.latency_s, link.bandwidth_bytes_per_s, side_s)


def _op_times_path(args: argparse.Namespace) -> Path:
    """Where --model's op,seconds CSV goes: --op-times, or <model stem>.times.csv beside --out."""
    return args.op_times or args.out.with_name(args.model.stem + ".times.csv")


def _onnxruntime_op_seconds(model: Path, repeats: int, cores: int) -> list[EngineTimes]:
    """The model's ops as the fast executor's onnxruntime engine runs them on default inputs: on one thread, and
    on `cores` intra-op threads when that is more (one rank with every core the ranks would use)."""
    from planner.execute.engine_times import engine_op_times
    from planner.execute.program import default_feeds, prepared_graph

    graph = prepared_graph(model)
    feeds = default_feeds(graph)
    return [engine_op_times(graph, model, feeds, threads=k, repeat=max(repeats, 5))
            for k in dict.fromkeys((1, cores))]


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
