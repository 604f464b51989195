"""A calibration as ``plan-calibrate`` makes it: measure this machine (`planner.execute.calibrate`), say how each
profile figure was measured and how much its samples spread, build the validated profile (YAML text) and, with a
model, its per-op times (`measure_profile`).  ``plan-calibrate`` and ``opplan.calibrate`` both call it, so that the
command's files and the API's frames come from one measurement path; writing files and printing stay with them.

`planner.execute` (and so torch) is imported only inside the calls: importing this module needs no torch.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

    from planner.execute.calibrate import Calibration
    from planner.execute.calibrate_fit import FactorFit
    from planner.execute.engine_times import EngineTimes

__all__ = ["PROFILE_HOW", "FACTOR_HOW", "CalibrationRequest", "MeasuredProfile", "check_request", "measure_profile"]

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


@dataclass(frozen=True)
class CalibrationRequest:
    """What to measure, as ``plan-calibrate``'s options say it: `repeats` None is 5 (3 `quick`); `model` with
    `engine` "torch" is timed by our runtime inside the calibration, with "onnxruntime" by the fast executor's
    engine after it; `transport` "shm" prices the link as shared memory (needs `nproc` >= 2); `progress` prints
    the ranks' progress lines on stderr; `profile_path` only names the file in a validation error."""

    nproc: int = 1
    threads: int = 1
    repeats: int | None = None
    quick: bool = False
    device: str = "cpu"
    model: Path | None = None
    engine: str = "torch"
    transport: str = "gloo"
    name: str | None = None
    timeout_s: float = 600.0
    progress: bool = True
    op_factors: bool = True
    runtime_probe: bool = True
    sharing: bool = True
    profile_path: Path | None = None

    @property
    def effective_repeats(self) -> int:
        return self.repeats or (3 if self.quick else 5)


@dataclass(frozen=True)
class MeasuredProfile:
    """One calibration: the measurements (`calibration`), the fitted op-cost factors (`fits`), the profile mapping
    (`doc`) and its validated YAML text (`text`), the load average at the start (None where unknown), and with
    `engine` "onnxruntime" the engine's op times (on 1 thread, then on nproc x threads when more)."""

    request: CalibrationRequest
    calibration: Calibration
    fits: dict[str, FactorFit]
    doc: dict[str, Any]
    text: str
    load_avg: float | None
    engine_times: list[EngineTimes] | None

    def figure_rows(self) -> list[tuple[str, float, str, float, int]]:
        """(name, median value, unit, spread = (max - min) / median, samples) per measured figure."""
        return [(f.name, f.value, f.unit, f.spread, len(f.samples)) for f in self.calibration.figures.values()]

    def op_times_frame(self) -> pd.DataFrame | None:
        """The op-times CSV's frame (`calibrate_profile.op_frame`): ``op``, ``seconds`` and, for the onnxruntime
        engine on more than one thread, ``seconds_<k>_threads``; None without a model."""
        from planner.execute.calibrate_profile import op_frame

        if self.request.model is None:
            return None
        if self.request.engine == "torch":
            return op_frame(self.calibration.op_seconds)
        measured = self.engine_times or []
        return op_frame(measured[0].op_s, {f"seconds_{m.threads}_threads": m.op_s for m in measured[1:]})


def check_request(request: CalibrationRequest) -> None:
    """`InputError` for an unknown engine, transport or device, a count below 1, a model that is not a file, or a
    shared-memory link without two processes (the command's parser refuses the first three already)."""
    for what, value, known in (("engine", request.engine, ("torch", "onnxruntime")),
                               ("transport", request.transport, ("gloo", "shm")),
                               ("device", request.device, ("cpu", "cuda"))):
        if value not in known:
            raise InputError(f"unknown {what} {value!r}", fix=f"pass one of {', '.join(known)}")
    if min(request.nproc, request.threads, request.repeats or 1) < 1:
        raise InputError("nproc, threads and repeats must be 1 or more")
    if request.model is not None and not request.model.is_file():
        raise InputError("model not found", path=str(request.model), fix="pass an ONNX model file")
    if request.transport == "shm" and request.nproc < 2:
        raise InputError("--transport shm prices a link between processes", fix="pass --nproc 2 or more")


def measure_profile(request: CalibrationRequest) -> MeasuredProfile:
    """Measure as `request` says and build the profile (`InputError` when it does not validate).  Takes seconds
    (`quick`) to minutes; `CalibrationFailed` when a measuring rank fails."""
    check_request(request)
    # here, not at the top: torch stays optional (module docstring)
    from planner.execute.calibrate import CalibrationSpec, calibrate, default_sizes
    from planner.execute.calibrate_profile import profile_document, profile_yaml

    repeats = request.effective_repeats
    model = request.model
    spec = CalibrationSpec(nproc=request.nproc, threads=request.threads, repeats=repeats,
                           sizes=default_sizes(request.device, request.quick),
                           model_path=str(model) if model and request.engine == "torch" else None,
                           timeout_s=request.timeout_s, progress=request.progress, device=request.device,
                           op_factors=request.op_factors, runtime_probe=request.runtime_probe,
                           sharing=request.sharing)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    cal = calibrate(spec)
    figures = cal.profile_figures()
    fits = cal.op_cost_fits()
    how, spread = _provenance(cal, figures, fits)
    try:
        doc = profile_document(figures, how, spread, nproc=request.nproc, threads=request.threads,
                               torch_version=cal.torch_version, name=request.name, load_avg=load,
                               memory_bytes=cal.device_memory_bytes or None, device=request.device,
                               op_cost_factors={t: fit.factor for t, fit in fits.items()})
        engine_times = (_onnxruntime_op_seconds(model, repeats, request.nproc * request.threads)
                        if model is not None and request.engine == "onnxruntime" else None)
        if request.transport == "shm":
            _shared_memory_link(doc, model, engine_times[0].op_s if engine_times else None)
        text = profile_yaml(doc)
    except ValueError as exc:
        path = None if request.profile_path is None else str(request.profile_path)
        raise InputError(f"the measured profile does not validate: {exc}", path=path) from None
    return MeasuredProfile(request, cal, fits, doc, text, load, engine_times)


def _provenance(cal: Calibration, figures: Mapping[str, float | None], fits: Mapping[str, FactorFit]
                ) -> tuple[dict[str, str], dict[str, str]]:
    """The provenance block's `measured` (how each figure was measured) and `spread` (of its samples)."""
    how = {k: PROFILE_HOW[k] for k, v in figures.items() if v is not None}
    how.update({f"op_cost_factors.{t}": FACTOR_HOW.format(op_type=t, fit=fit.describe()) for t, fit in fits.items()})
    how.update({k: f.how for k, f in cal.figures.items()})
    spread = {k: f"{f.spread:.1%} of {len(f.samples)} samples (repeats x ranks)" for k, f in cal.figures.items()}
    for key, value in figures.items():
        if value is not None:
            parts = cal.contributing(key)
            spread[key] = (f"largest (max-min)/median over {len(parts[0].samples)} samples (repeats x ranks) of "
                           f"its {len(parts)} measurement(s): {max(f.spread for f in parts):.1%}")
    return how, spread


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


def _onnxruntime_op_seconds(model: Path, repeats: int, cores: int) -> list[EngineTimes]:
    """The model's ops as the fast executor's onnxruntime engine runs them on default inputs: on one thread, and
    on `cores` intra-op threads when that is more (one rank with every core the ranks would use)."""
    from planner.execute.engine_times import engine_op_times
    from planner.execute.program import default_feeds, prepared_graph

    graph = prepared_graph(model)
    feeds = default_feeds(graph)
    return engine_op_times(graph, model, feeds, threads=tuple(dict.fromkeys((1, cores))), repeat=max(repeats, 5))
