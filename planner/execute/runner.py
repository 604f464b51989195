"""`run_plan`: load a plan, check it against its model, run it on local ranks, check and report.

Report (`run.json`, written atomically)::

    plan, model_path, backend, world_size, device_names, rank_of_device, repeat, warmup
    outputs                {name: {shape, dtype}}
    max_abs_error          max |ours - onnxruntime| over all outputs (null without --check)
    max_rel_error          max_abs_error of each output / max |onnxruntime| of that output, the largest (null ...)
    reference_model        which model onnxruntime ran for the check: the file, or below opset 7 the model as
                           upgraded (`planner.ir.onnx_values.reference_outputs`; null without --check)
    check_note             why the check proves little, when onnxruntime's outputs are all zeros or constant
                           (`degenerate_reference_note`; null otherwise)
    measured_makespan_s    median over the measured repetitions of (latest rank end - start barrier)
    measured_makespans_s   every measured repetition
    simulated_makespan_s   the plan's makespan (ticks x tick_s)
    busy_s                 per rank: compute time in the median repetition
    build_s                per rank: seconds to build its share of the model
    transfers, transfer_bytes
    measured_vs_simulated, simulated_busy_s, busy_ratio, op_seconds, op_seconds_median, load_factor, op_rank,
    op_deviations,
    time_breakdown         per rank: the median repetition's ops / receive waits / sends / the rest, beside the
                           plan's busy and idle time (`planner.execute.run_breakdown`)
    peak_tensor_bytes,
    fixed_tensor_bytes, predicted_peak_bytes, predicted_peak_bytes_per_device, peak_ratio
                           how good the prediction was (`planner.execute.run_report`); `plan-solve --measured
                           run.json` re-plans from `op_seconds`
    machine_state          the machine at run time against the plan's profile (`planner.execute.machine_scale`):
                           profile ("calibrated" by plan-calibrate, or "nominal": then only note and
                           profile_figures, nothing compared), note, profile_figures {float_flops, launch_overhead,
                           link_latency, link_bandwidth}; calibrated and probed (plan-run --report, gloo) also
                           probe_before / probe_after (the same figures measured by the ranks right before and after
                           the timed repetitions, median over ranks), slowdown_before / slowdown_after / slowdown
                           ({compute, overhead, latency, bandwidth}: x slower than at calibration; slowdown = the
                           geometric mean of before and after), resimulated_makespan_s (the plan's schedule
                           re-priced on the profile scaled by slowdown), resimulated_unscaled_makespan_s (on the
                           profile as it is: the plan's makespan unless it was planned with --measured),
                           stretch (scaled / unscaled) and measured_vs_resimulated (measured / (simulated x
                           stretch))
    measured_vs_resimulated  = machine_state's (null when not compared)
    sharing                the plan's schedule replayed with the host's ranks sharing its cores, when the profile
                           has a hosts[].sharing block (`planner.execute.run_sharing`): profile ("shared" or
                           "none" with a note), effective_parallelism, measured_ranks, priced_by,
                           simulated_makespan_s, unshared_makespan_s, measured_vs_simulated, with the profile's
                           send / receive overheads charged to the ranks' streams charged_makespan_s and
                           measured_vs_charged, and with the probe resimulated_makespan_s and
                           measured_vs_resimulated
    simulated_shared_makespan_s, measured_vs_simulated_shared, measured_vs_resimulated_shared,
    measured_vs_charged_shared
                           = sharing's (null without the block); simulated_makespan_s stays the plan's own
    trace                  path of the Chrome trace of the median repetition (pid = rank, tid 0 compute, 1 receives,
                           2 sends; the ranks on one time line; opens in Perfetto)
    input_shapes           {graph input: shape} that ran (the plan's, or the new ones with --replan)
    input_values           {input: values} bound at import (from the plan)
    replanned              true when --replan made a new plan for other input shapes
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from planner.errors import InputError
from planner.execute.dist import Fault, RankResult, RunSpec, launch_local
from planner.execute.machine_probe import probe as _probe
from planner.execute.machine_scale import profile_state, rank_median, state_report
from planner.execute.partition import Partition, partition_plan
from planner.execute.program import check_supported, default_feeds, prepared_graph
from planner.execute.run_breakdown import time_breakdown
from planner.execute.run_report import prediction_quality
from planner.execute.run_sharing import sharing_report
from planner.heuristics.list_schedule import heft
from planner.ir.graph import OpGraph
from planner.ir.hardware import load_topology
from planner.ir.onnx_values import bound_input_feeds, reference_outputs
from planner.ir.topology import Topology
from planner.prepare import prepare
from planner.schedule.atomic import atomic_write_text
from planner.schedule.plan import Plan
from planner.schedule.plan_io import load_plan

__all__ = ["RunOutcome", "load_checked_plan", "run_plan", "compare_outputs", "degenerate_reference_note",
           "chrome_trace_of_run"]


@dataclass
class RunOutcome:
    plan: Plan
    partition: Partition
    results: list[RankResult]
    outputs: dict[str, np.ndarray]
    report: dict[str, Any] = field(default_factory=dict)


def _fmt_shapes(shapes: Mapping[str, Sequence[int]]) -> str:
    return " ".join(f"{k}={'x'.join(map(str, v))}" for k, v in sorted(shapes.items())) or "the model's own shapes"


def _replan(plan: Plan, model: Path, shapes: Mapping[str, Sequence[int]], where: str) -> Plan:
    """A HEFT plan of the same model on the same hardware for other input shapes (plan-run --replan)."""
    hw = Path(plan.hardware_path) if plan.hardware_path else None
    topology = load_topology(hw) if hw is not None and hw.is_file() else Topology.identical(len(plan.device_names))
    if topology.num_devices != len(plan.device_names):
        raise InputError(f"cannot re-plan: the plan's hardware {hw} now has {topology.num_devices} devices",
                         path=where, fix="re-plan with plan-solve")
    prepared = prepare(model, topology, input_shapes=shapes, input_values=plan.input_values or None)
    fresh = heft(prepared.instance)
    return dataclasses.replace(fresh, model_path=plan.model_path, model_sha256=plan.model_sha256,
                               hardware_path=plan.hardware_path, hardware_sha256=plan.hardware_sha256,
                               input_shapes={k: tuple(v) for k, v in shapes.items()},
                               input_values=dict(plan.input_values))


def load_checked_plan(plan_path: str | Path, input_shapes: Mapping[str, Sequence[int]] | None = None,
                      *, replan: bool = False) -> tuple[Plan, OpGraph]:
    """The plan and its prepared model graph; InputError when the model is missing or changed (hash mismatch) or
    the runtime lacks some of its ops.

    The model is prepared with the input shapes and values the plan stores.  `input_shapes` that differ from
    them are refused unless `replan` (then a HEFT plan for the new shapes is made and run)."""
    where = str(plan_path)
    plan = load_plan(plan_path)
    if not plan.model_path:
        raise InputError("the plan names no model file", path=where, fix="plan an ONNX model with plan-solve")
    model = Path(plan.model_path)
    if model.suffix.lower() != ".onnx":
        raise InputError(f"the plan's model {model} is not an ONNX model; only ONNX plans can run", path=where)
    if not model.is_file():
        raise InputError(f"the plan's model {model} is missing", path=where, fix="re-plan with plan-solve")
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    if plan.model_sha256 and sha != plan.model_sha256:
        raise InputError(f"the model {model} does not match this plan (hash mismatch: the plan was made for "
                         f"{plan.model_sha256[:12]}, the file is {sha[:12]})", path=where,
                         fix="re-plan with plan-solve")
    planned = {k: tuple(v) for k, v in plan.input_shapes.items()}
    given = {k: tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()}
    if given and given != planned:
        if not replan:
            raise InputError(f"the plan was made for input shapes {_fmt_shapes(planned)}, not {_fmt_shapes(given)}",
                             path=where, fix="drop --input-shape to run the plan's shapes, or add --replan to plan "
                                             "the new shapes (HEFT) and run that")
        plan = _replan(plan, model, given, where)
        planned = given
    graph = prepared_graph(model, planned or None, plan.input_values or None)
    check_supported(graph, where)
    return plan, graph


def compare_outputs(ours: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray]) -> tuple[float, float]:
    """(max abs error, max relative error); relative = an output's max abs error / its max |reference|."""
    max_abs = max_rel = 0.0
    for k, b in ref.items():
        a = ours[k]
        if a.shape != b.shape:
            return float("inf"), float("inf")
        if a.size == 0:
            continue
        diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        scale = float(np.max(np.abs(b.astype(np.float64))))
        max_abs = max(max_abs, diff)
        max_rel = max(max_rel, diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf")))
    return max_abs, max_rel


def degenerate_reference_note(ref: Mapping[str, np.ndarray]) -> str | None:
    """A note when onnxruntime's outputs cannot tell a right run from a wrong one: an output whose elements are all
    zero, or (more than one element) all equal up to float rounding (a spread of at most 1e-6 of their size),
    matches any run that writes that constant (a model with degenerate weights does: the onnx wheel's light
    models).  None when every output varies."""
    flat = []
    for name, value in ref.items():
        v = np.asarray(value)
        if v.size == 0 or v.dtype.kind not in "biuf":
            continue
        if not np.any(v):
            flat.append(f"{name!r} is all zeros")
        elif v.size > 1 and float(np.ptp(v.astype(np.float64))) <= 1e-6 * float(np.max(np.abs(v))):
            flat.append(f"{name!r} is constant ({v.reshape(-1)[0]:.6g} everywhere)")
    if not flat:
        return None
    scope = "the check tested nothing" if len(flat) == len(ref) else "the check tested only the other outputs"
    return f"the reference output {', '.join(flat)}: {scope}"


_TID = {"op": 0, "recv": 1, "post": 1, "send": 2, "tail": 2}  # trace thread of each event kind (`RankRun.events`)


def chrome_trace_of_run(results: Sequence[RankResult], index: int, device_names: Sequence[str],
                        rank_of_device: Sequence[int]) -> dict[str, Any]:
    """Trace Event Format of measured repetition `index`: pid = rank, tid 0 = compute, tid 1 = receives (waits,
    posting), tid 2 = sends (packing and posting after an op) and the repetition's tail.

    The ranks' events are put on one time line: each rank's are shifted by how much later it left the start
    barrier than the first rank (`RankRun.start_s`, one monotonic clock per host), so that a transfer's receive
    end lies after its sending op's end (unshifted, receives measured up to 10 ms "before" their send at load 12).
    No shift when the start times are unknown or more than a second apart (ranks on different hosts)."""
    events: list[dict[str, Any]] = []
    starts = [res.runs[index].start_s for res in results]
    aligned = all(starts) and max(starts) - min(starts) < 1.0
    for res in results:
        r = res.rank
        shift_s = res.runs[index].start_s - min(starts) if aligned else 0.0
        devices = [d for i, d in enumerate(device_names) if rank_of_device[i] == r]
        events.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0,
                       "args": {"name": f"rank {r} ({', '.join(devices) or 'no device'})"}})
        events.append({"ph": "M", "name": "thread_name", "pid": r, "tid": 0, "args": {"name": "compute"}})
        events.append({"ph": "M", "name": "thread_name", "pid": r, "tid": 1, "args": {"name": "receive"}})
        events.append({"ph": "M", "name": "thread_name", "pid": r, "tid": 2, "args": {"name": "send, tail"}})
        for kind, name, s, e in res.runs[index].events:
            events.append({"ph": "X", "name": name, "cat": kind, "pid": r, "tid": _TID[kind],
                           "ts": round((s + shift_s) * 1e6, 3), "dur": round((e - s) * 1e6, 3)})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def run_plan(plan_path: str | Path, *, nproc: int | None = None, backend: str = "gloo", check: bool = False,
             repeat: int = 1, warmup: int = 1, report_path: str | Path | None = None,
             feeds: Mapping[str, np.ndarray] | None = None,
             input_shapes: Mapping[str, Sequence[int]] | None = None, fault: Fault | None = None,
             comm_timeout_s: float = 60.0, run_timeout_s: float = 600.0, replan: bool = False,
             threads: int = 1, probe: bool = True) -> RunOutcome:
    """Run a plan file on local ranks (fork); see the module docstring for the report.  With `report_path`,
    `probe` and a gloo run on a profile calibrated by plan-calibrate, the ranks measure the machine's state before
    and after the timed repetitions (`machine_state` in the report)."""
    if repeat < 1 or warmup < 0:
        raise InputError(f"--repeat {repeat}: must be at least 1 (and warm-up at least 0)")
    if backend not in ("gloo", "nccl"):
        raise InputError(f"--backend {backend}: expected gloo or nccl")
    plan, graph = load_checked_plan(plan_path, input_shapes, replan=replan)
    partition = partition_plan(plan, graph, nproc, str(plan_path))
    feeds = dict(feeds) if feeds is not None else default_feeds(graph)
    missing = [k for k in graph.graph_inputs if k not in feeds]
    if missing:
        raise InputError(f"no value for graph input(s) {missing}", path=str(plan_path))
    state = profile_state(plan.hardware_path)
    prober = None
    if report_path is not None and probe and backend == "gloo" and state.calibrated and state.sizes is not None:
        prober = partial(_probe, sizes=state.sizes)
    spec = RunSpec(plan.model_path, graph, partition, feeds, backend=backend, repeat=repeat, warmup=warmup,
                   comm_timeout_s=comm_timeout_s, run_timeout_s=run_timeout_s, fault=fault, threads=threads,
                   probe=prober)
    results = launch_local(spec)
    outputs = results[0].outputs
    ref_feeds = {**feeds, **bound_input_feeds(plan.model_path, plan.input_values)} if check else None
    report = build_report(plan_path, plan, partition, results, outputs, ref_feeds, backend, repeat, warmup,
                          report_path, graph)
    return RunOutcome(plan, partition, results, outputs, report)


def _machine_state(plan: Plan, graph: OpGraph, results: Sequence[RankResult], measured_makespan_s: float
                   ) -> dict[str, Any]:
    """The report's `machine_state` (module docstring; `planner.execute.machine_scale`)."""
    state = profile_state(plan.hardware_path)
    before = rank_median([res.probe_before for res in results if res.probe_before])
    after = rank_median([res.probe_after for res in results if res.probe_after])
    topology = load_topology(plan.hardware_path) if state.calibrated else None
    if topology is not None and topology.num_devices != len(plan.device_names):
        topology = None
    return state_report(state, before, after, plan, graph, topology, measured_makespan_s)


def _sharing(plan: Plan, graph: OpGraph, measured_makespan_s: float, machine_state: Mapping[str, Any]
             ) -> dict[str, Any]:
    """The report's `sharing` block (module docstring; `planner.execute.run_sharing`)."""
    try:
        topology = load_topology(plan.hardware_path) if plan.hardware_path else None
    except InputError:  # the profile is gone or changed: nothing to replay on
        topology = None
    return sharing_report(plan, graph, topology, measured_makespan_s, machine_state)


def build_report(plan_path, plan: Plan, partition: Partition, results: Sequence[RankResult],
                 outputs: Mapping[str, np.ndarray], check_feeds: Mapping[str, np.ndarray] | None, backend: str,
                 repeat: int, warmup: int, report_path: str | Path | None, graph: OpGraph | None = None
                 ) -> dict[str, Any]:
    spans = [max(res.runs[i].end_s for res in results) for i in range(repeat)]
    median = statistics.median(spans)
    mid = min(range(repeat), key=lambda i: (abs(spans[i] - median), i))
    max_abs = max_rel = reference = check_note = None
    if check_feeds is not None:
        ref, reference = reference_outputs(plan.model_path, check_feeds, partition.outputs, plan.input_shapes,
                                           plan.input_values)
        max_abs, max_rel = compare_outputs(outputs, ref)
        check_note = degenerate_reference_note(ref)
    report: dict[str, Any] = {
        "plan": str(plan_path), "model_path": plan.model_path, "backend": backend,
        "world_size": partition.world_size, "device_names": list(partition.device_names),
        "rank_of_device": list(partition.rank_of_device), "repeat": repeat, "warmup": warmup,
        "outputs": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in outputs.items()},
        "max_abs_error": max_abs, "max_rel_error": max_rel, "reference_model": reference, "check_note": check_note,
        "measured_makespan_s": median, "measured_makespans_s": spans,
        "simulated_makespan_s": plan.makespan_tick * (plan.tick_s or 1.0) if plan.time_unit == "s" else None,
        "busy_s": [res.runs[mid].busy_s for res in results],
        "build_s": [res.build_s for res in results],
        "transfers": len(partition.transfers),
        "transfer_bytes": sum(t.size_bytes for t in partition.transfers),
        "trace": None,
        "input_shapes": {k: list(graph.tensors[k].shape) for k in graph.graph_inputs} if graph is not None else {},
        "input_values": {k: list(v) for k, v in plan.input_values.items()},
        "replanned": plan.input_shapes != load_plan(plan_path).input_shapes,
    }
    if graph is not None:
        report.update(prediction_quality(plan, partition, results, mid, graph, median,
                                         report["simulated_makespan_s"]))
        report["time_breakdown"] = time_breakdown(plan, partition, results, mid, graph)
        report["machine_state"] = _machine_state(plan, graph, results, median)
        report["measured_vs_resimulated"] = report["machine_state"].get("measured_vs_resimulated")
        report["sharing"] = _sharing(plan, graph, median, report["machine_state"])
        report["simulated_shared_makespan_s"] = report["sharing"].get("simulated_makespan_s")
        report["measured_vs_simulated_shared"] = report["sharing"].get("measured_vs_simulated")
        report["measured_vs_resimulated_shared"] = report["sharing"].get("measured_vs_resimulated")
        report["measured_vs_charged_shared"] = report["sharing"].get("measured_vs_charged")
    if report_path is not None:
        rp = Path(report_path)
        rp.parent.mkdir(parents=True, exist_ok=True)
        trace_path = rp.with_name(rp.stem + ".trace.json")
        trace = chrome_trace_of_run(results, mid, partition.device_names, partition.rank_of_device)
        atomic_write_text(trace_path, json.dumps(trace) + "\n")
        report["trace"] = str(trace_path)
        atomic_write_text(rp, json.dumps(report, indent=1, allow_nan=True) + "\n")
    return report
