"""`make bench` section `runtime`: one model step timed five ways, side by side in one run, as ratios.

For the bundled MoE (`planner/data/models/moe.onnx`) and the Inception-v1, ResNet-50 and SqueezeNet light models of
the onnx wheel, each timed as the median of K repetitions after warm-up (K = 5; 2 with `--quick`); the first three
in this process, one after the other, each after two warm-up runs (see `blocked_medians` for why not interleaved):

* `torch_serial_s`   our single-process torch executor (`planner.execute.program`), every op in the graph's
                     topological order, `torch.set_num_threads(1)`; per repetition it builds the environment of
                     feeds and constants and runs the ops, as each rank of `run_plan` does.
* `ort_seq_s`        onnxruntime, CPU provider, `ExecutionMode.ORT_SEQUENTIAL`, 1 intra-op thread (default graph
                     optimizations, so it runs fused kernels on the original model, not our folded graph).
* `ort_par_s`        onnxruntime `ExecutionMode.ORT_PARALLEL`, 4 inter-op threads, 1 intra-op thread.
* `opplan_measured_s` the plan for the bundled `cpu-4.yaml` (4 CPU processes; `plan-solve` MILP with a 20 s
                     budget, HEFT with `--quick`) run on 4 forked gloo ranks by `run_plan` with `repeat=K`: the
                     report's `measured_makespan_s` (median over repetitions of latest rank end - start barrier).
* `opplan_simulated_s` the plan's own makespan (the cost model's seconds), and `simulated_serial_s` the makespan
                     of the same cost model's single-device plan, so that `simulated_speedup` (what the plan
                     promises) can be set against `measured_speedup` (torch serial / opplan measured).

Ratios `*_vs_torch` are each time / `torch_serial_s`; `measured_vs_simulated` = opplan measured / simulated.
Every row also carries `cpu_count`, the 1-minute load average at the start, and `effective_parallelism`:
N x (time of one busy loop alone) / (time of N loops started together in N processes), N = 4, i.e. how many
cores the 4 ranks really get.  A step of a model that fails is recorded in that row's `error` column; the
other steps and models still run.

The cpu-4 profile's figures are nominal (one 96 GFLOP/s core per process, 10 us per op), not calibrated on this
machine, so `measured_vs_simulated` measures the profile as much as the plan.  Run alone with
`python -m experiments.bench --only runtime`; `python -m experiments.bench_runtime [CSV]` prints a CSV of this
section as a Markdown table.

**Calibration rows** (`part` = `calibration`), on `CAL_NPROC` = 2 ranks, per model: `plan-calibrate --nproc 2` right
before that model's plans (a fresh profile per model, so that its runs are minutes after their calibration: a shared
host's load can change several times over within the tens of minutes one calibration at the start would serve), then
five plans, each run by `run_plan(nproc=2, repeat=K, report_path=...)` right after it is made (K = 5, or more for a
short plan: enough repetitions to time 0.1 s of its predicted makespan, at most 50, `repetitions`; the row's
`repeat`):

* `nominal`     planned on cpu-4's nominal figures for 2 processes (`cpu-4.yaml` with `count: 2`): "before";
* `calibrated_no_factors`  planned on that profile without its `op_cost_factors` table (the plain roofline of
                its figures), so that the factors' effect is measured in the same run;
* `calibrated_no_probe`  planned on that profile without the runtime probe's figures (`op_overhead`, the links'
                `send_overhead` and `recv_overhead`; `without_runtime_overheads`): the calibration before issue
                14's runtime-overhead model, measured in the same run;
* `calibrated`  planned on the profile `plan-calibrate --nproc 2` wrote at the start of this section: "after";
* `replanned`   planned on the same profile with `--measured` = the `calibrated` run's report (its measured op
                times): plan, run, measure, re-plan.

The light CNNs get seeded random weights (as in the corpus, `experiments.corpus`), so `--check` compares outputs
that vary.  Each row: `effective_parallelism` for 2 processes (as above), `measured_makespan_s` (median of K),
`simulated_makespan_s` (the plan's), `measured_vs_simulated`; beside it the machine's state the run's probe saw
(`run.json`'s `machine_state`, `planner.execute.machine_scale`): `slowdown_before_after` (x slower than at
calibration before / after the timed repetitions: `c` compute, `o` per-op overhead, `l` link latency, `b` link
bandwidth), `resimulated_makespan_s` (the plan's schedule re-priced on the profile scaled by those slowdowns) and
`measured_vs_resimulated` (empty on the `nominal` row: nothing to compare), `since_calibration_s` (seconds from
the model's calibration to the end of the row's run), `calibrated_profile` (the model's profile's figures);
`busy_ratio` and `peak_ratio` per rank (measured / simulated busy time; measured / predicted peak tensor bytes,
"/"-joined), `devices_used`, `transfers`,
`breakdown_ms` (per rank, where the median repetition's time went: `breakdown_text`);
Processor sharing (the profile's `hosts[].sharing`, `planner.cost.sharing`; empty on `nominal`): beside the
plan's own prediction, `simulated_shared_makespan_s` and `measured_vs_simulated_shared` (the plan's schedule
replayed with the ranks sharing the host's cores: run.json's `sharing`), `measured_vs_charged_shared` (that
replay with the runtime probe's send / receive overheads on the ranks' streams rather than in the link's
latency), `measured_vs_resimulated_shared` (the shared replay stretched by the probe's slowdowns); from the
run's trace (`compute_overlap`) `both_computing_share` (of the time
any rank computed, the share both did) and measured / planned seconds of the ops that ran alone
(`alone_ops_ratio`) and beside the other rank's ops (`concurrent_ops_ratio`).
`replanned` rows add the calibrated and the re-planned plan run again alternately, `rounds` times each (3; 1
with `--quick`), so that the load drifting on a shared machine falls on both alike: the medians of their
measured makespans, `calibrated_alternating_s` and `replanned_alternating_s`, and `vs_calibrated_measured` =
re-planned / calibrated; `replanned_same_plan` says whether the re-plan kept the calibrated plan (the same device
and order for every op: `planner.runtime_choice` keeps the measured run's plan unless it predicts a shorter one),
when `vs_calibrated_measured` is the measuring procedure's own noise.
`python -m experiments.bench_runtime --calibration [--quick]` runs only these rows
(`bench/results/runtime-calibration[-quick].csv`) and prints them as a Markdown table.

**Per-op-type comparison** (`python -m experiments.bench_runtime --op-types [--quick]`; not part of `make bench`):
`plan-calibrate --nproc 2` (the profile is kept as `bench/results/calibrated-2.yaml`), a plan of the random-weight
Inception-v1 on it, run on 2 ranks (`repeat` K); per op type the run's measured seconds (sum of the ops' medians
over the repetitions, `op_seconds_median`) beside the cost model's without the profile's `op_cost_factors` (the
plain roofline of its figures) and with them (`op_type_rows`, CSV `runtime-optypes.csv`), and the link model
against the run's trace (`transfer_rows`: waited-for transfers, observed vs latency + bytes / bandwidth).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import math
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HW = REPO / "hardware_profiles" / "cpu-4.yaml"
NPROC = 4
ORT_INTER_OP_THREADS = 4
MILP_TIME_LIMIT_S = 20


def _light_dir() -> Path:
    """The onnx wheel's light models, found without importing onnx (only planner/ir imports it)."""
    spec = importlib.util.find_spec("onnx")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the onnx package is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / "backend" / "test" / "data" / "light"


def models() -> dict[str, Path]:
    light = _light_dir()
    return {
        "moe": REPO / "planner" / "data" / "models" / "moe.onnx",
        **{name: light / f"light_{name}.onnx" for name in ("inception_v1", "resnet50", "squeezenet")},
    }


# ------------------------------------------------------------------------------------------------ the machine
def _busy(n: int) -> float:
    t = time.perf_counter()
    x = 0
    for i in range(n):
        x += i * i
    return time.perf_counter() - t


def _busy_child(n: int, start, queue) -> None:
    start.wait()
    queue.put(_busy(n))


def effective_parallelism(n_proc: int = NPROC, loop: int = 3_000_000) -> float:
    """N x (one busy loop alone) / (wall time of N loops in N processes started together): ~N on N free cores,
    ~1 on one core."""
    ctx = multiprocessing.get_context("fork")
    _busy(loop // 10)
    alone = min(_busy(loop) for _ in range(2))
    start, queue = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_busy_child, args=(loop, start, queue)) for _ in range(n_proc)]
    for p in procs:
        p.start()
    t = time.perf_counter()
    start.set()
    for _ in procs:
        queue.get(timeout=120)
    together = time.perf_counter() - t
    for p in procs:
        p.join(timeout=10)
    return n_proc * alone / together


# ----------------------------------------------------------------------------------------------- the timings
def torch_serial_step(model: Path) -> Callable[[], None]:
    """One step of our executor in one process, ops in topological order; the program is built here, outside the
    timing, as the ranks build theirs before the start barrier.  Call it with one torch thread."""
    import torch

    from planner.execute.program import check_supported, default_feeds, load_program, prepared_graph, run_ops, to_tensor

    graph = prepared_graph(model)
    check_supported(graph, str(model))
    program = load_program(graph, model)
    feeds = {k: to_tensor(v) for k, v in default_feeds(graph).items()}
    order = [op.name for op in graph.ops]

    def step() -> None:
        with torch.inference_mode():
            env = dict(feeds)
            env.update(program.constants)
            run_ops(order, env, program)

    return step


def ort_step(model: Path, parallel: bool) -> Callable[[], Any]:
    """One onnxruntime run on the CPU provider: sequential (1 thread) or parallel execution mode (4 inter-op
    threads, 1 intra-op thread)."""
    import onnxruntime as ort

    from planner.execute.program import default_feeds, prepared_graph

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = ORT_INTER_OP_THREADS if parallel else 1
    opts.execution_mode = ort.ExecutionMode.ORT_PARALLEL if parallel else ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    all_feeds = default_feeds(prepared_graph(model))
    feeds = {i.name: all_feeds[i.name] for i in session.get_inputs()}
    return lambda: session.run(None, feeds)


def blocked_medians(steps: dict[str, Callable[[], Any]], repeat: int, warmup: int = 2,
                    pause_s: float = 0.2) -> dict[str, float]:
    """Median seconds of each step over `repeat` runs after `warmup` runs, one step after the other with a pause
    between them, one torch thread.  Not interleaved: onnxruntime's parallel mode leaves its pool threads spinning
    after each run, and on this small machine a torch step run right after one (even after a sequential one) was
    measured 2-3x slower than alone."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        medians = {}
        for key, fn in steps.items():
            time.sleep(pause_s)
            for _ in range(warmup):
                fn()
            times = []
            for _ in range(repeat):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
            medians[key] = statistics.median(times)
        return medians
    finally:
        torch.set_num_threads(threads)


def plan_model(model: Path, out: Path, method: str, time_limit_s: float) -> Path:
    from planner.cli import solve_main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):  # its summary, its errors
        rc = solve_main(["--model", str(model), "--hw", str(HW), "--method", method, "--time-limit",
                         str(time_limit_s), "--out", str(out), "--quiet", "--no-pictures", "--format", "json"])
    if rc != 0:
        lines = err.getvalue().strip().splitlines()
        raise RuntimeError(f"plan-solve --method {method} exited with {rc}" + (f": {lines[-1]}" if lines else ""))
    return out


def _seconds(plan) -> float:
    return plan.makespan_tick * (plan.tick_s or 1.0)


# ---------------------------------------------------------------------------------------------------- a row
def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def bench_model(name: str, model: Path, tmp: Path, repeat: int, method: str, time_limit_s: float) -> dict:
    """One row; each step's failure goes to `error` and leaves its columns empty."""
    row: dict[str, Any] = {"model": name}
    errors: list[str] = []

    def attempt(step: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:  # a bench row records the failure and goes on
            errors.append(f"{step}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            return None

    graph = attempt("import", lambda: __import__("planner.execute.program", fromlist=["x"]).prepared_graph(model))
    row["num_ops"] = graph.num_ops if graph is not None else None
    steps = {"torch_serial_s": attempt("torch serial", lambda: torch_serial_step(model)),
             "ort_seq_s": attempt("onnxruntime sequential", lambda: ort_step(model, parallel=False)),
             "ort_par_s": attempt("onnxruntime parallel", lambda: ort_step(model, parallel=True))}
    times: dict[str, float | None] = dict.fromkeys(steps)
    medians = attempt("timing", lambda: blocked_medians({k: f for k, f in steps.items() if f}, repeat))
    times.update(medians or {})

    from planner.schedule.plan_io import load_plan

    t = time.perf_counter()
    plan_path = attempt("plan", lambda: plan_model(model, tmp / f"{name}.json", method, time_limit_s))
    row["plan_s"] = round(time.perf_counter() - t, 2)
    times["opplan_measured_s"] = times["opplan_simulated_s"] = None
    if plan_path is not None:
        plan = load_plan(plan_path)
        row.update(plan_status=plan.status, plan_gap=round(plan.gap, 4), plan_tasks=len(plan.placements),
                   devices_used=len({p.device for p in plan.placements}))
        times["opplan_simulated_s"] = _seconds(plan)

        def run() -> dict:
            from planner.execute.runner import run_plan

            return run_plan(plan_path, nproc=NPROC, check=True, repeat=repeat, run_timeout_s=600).report

        report = attempt("run", run)
        if report is not None:
            times["opplan_measured_s"] = report["measured_makespan_s"]
            row["max_abs_error"] = report["max_abs_error"]
            row["transfers"] = report["transfers"]
            row["rank_busy_s"] = "/".join(f"{b:.4f}" for b in report["busy_s"])
    serial_plan = attempt("single-device plan", lambda: plan_model(model, tmp / f"{name}-serial.json",
                                                                   "single_device", time_limit_s))
    times["simulated_serial_s"] = _seconds(load_plan(serial_plan)) if serial_plan is not None else None

    row.update({k: (round(v, 6) if v is not None else None) for k, v in times.items()})
    base = times["torch_serial_s"]
    for key in ("ort_seq_s", "ort_par_s", "opplan_measured_s", "opplan_simulated_s"):
        row[key.removesuffix("_s") + "_vs_torch"] = _ratio(times[key], base)
    row["measured_vs_simulated"] = _ratio(times["opplan_measured_s"], times["opplan_simulated_s"])
    row["measured_speedup"] = _ratio(base, times["opplan_measured_s"])
    row["simulated_speedup"] = _ratio(times["simulated_serial_s"], times["opplan_simulated_s"])
    row["error"] = "; ".join(errors)
    return row


# ------------------------------------------------------------------------------------------ calibration rows
CAL_NPROC = 2
CAL_TIME_LIMIT_S = 10


def nominal_profile(tmp: Path, nproc: int = CAL_NPROC) -> Path:
    """cpu-4.yaml's nominal figures for `nproc` processes (the plan's devices = the ranks that run it)."""
    text = HW.read_text().replace("count: 4", f"count: {nproc}").replace("name: cpu-4", f"name: cpu-{nproc}-nominal")
    out = tmp / f"cpu-{nproc}-nominal.yaml"
    out.write_text(text)
    return out


def calibrated_profile(tmp: Path, quick: bool, nproc: int = CAL_NPROC) -> Path:
    from planner.cli_calibrate import calibrate_main

    out = tmp / f"calibrated-{nproc}.yaml"
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = calibrate_main(["--nproc", str(nproc), "--out", str(out), "--quiet", *(["--quick"] if quick else [])])
    if rc != 0:
        raise RuntimeError(f"plan-calibrate exited with {rc}: {err.getvalue().strip()[-300:]}")
    return out


def random_weight_models(tmp: Path) -> dict[str, Path]:
    """`models()` with the light CNNs' constant weights replaced by seeded random ones and the final softmax
    dropped, as the corpus does (`experiments.corpus`), so that `--check` compares outputs that vary."""
    import onnx

    from experiments.corpus import drop_final_softmax, randomize_weights

    out = {}
    for i, (name, path) in enumerate(models().items()):
        if name == "moe":
            out[name] = path
            continue
        copy = tmp / f"light_{name}_random.onnx"
        onnx.save(drop_final_softmax(randomize_weights(onnx.load(str(path)), seed=100 + i)), str(copy))
        out[name] = copy
    return out


def _plan_on(model: Path, hw: Path, out: Path, method: str, time_limit_s: float, measured: Path | None) -> Path:
    from planner.cli import solve_main

    err = io.StringIO()
    args = ["--model", str(model), "--hw", str(hw), "--method", method, "--time-limit", str(time_limit_s),
            "--out", str(out), "--quiet", "--no-pictures", "--format", "json"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = solve_main(args + (["--measured", str(measured)] if measured else []))
    if rc != 0:
        raise RuntimeError(f"plan-solve exited with {rc}: {err.getvalue().strip()[-300:]}")
    return out


def _joined(values: list | None) -> str:
    return "/".join(f"{v:.3f}" if v is not None else "" for v in values) if values else ""


def _slowdown_text(state: dict) -> str:
    """machine_state's slowdowns before / after the timed repetitions, e.g. `c1.3 o1.1 l2.0 b0.9 / c1.2 ...`."""
    def one(s: dict | None) -> str:
        return " ".join(f"{k[0]}{v:.2g}" for k, v in (s or {}).items() if v is not None)

    if "slowdown_before" not in state:
        return ""
    return f"{one(state['slowdown_before'])} / {one(state['slowdown_after'])}"


MIN_TIMED_S = 0.1  # the calibration rows time at least this much of a plan (in repetitions of its makespan)
MAX_REPEAT = 50


def repetitions(repeat: int, predicted_s: float) -> int:
    """`repeat`, or more for a short plan: enough repetitions of `predicted_s` to time `MIN_TIMED_S` (at most
    `MAX_REPEAT`), so that the median of a 3 ms run is not one scheduler hiccup away from 1.5x (the bundled MoE's
    single-rank plan measured 2.9-4.9 ms over runs with 5 repetitions)."""
    if predicted_s <= 0:
        return repeat
    return max(repeat, min(MAX_REPEAT, math.ceil(MIN_TIMED_S / predicted_s)))


def calibration_rows(name: str, model: Path, tmp: Path, nominal: Path, calibrated: Path, repeat: int, method: str,
                     time_limit_s: float, rounds: int = 3, calibrated_at: float | None = None) -> list[dict]:
    """The rows of one model (module docstring); a failing step ends that model's rows with its error.
    `calibrated_at`: time.monotonic() when `calibrated` was written (each row's `since_calibration_s`)."""
    from planner.execute.runner import run_plan
    from planner.schedule.plan_io import load_plan

    rows: list[dict] = []
    measured_by: dict[str, float] = {}
    stages: list[tuple[str, Path, Path | None]] = [
        ("nominal", nominal, None), ("calibrated_no_factors", without_op_factors(calibrated, tmp / "plain.yaml"), None),
        ("calibrated_no_probe", without_runtime_overheads(calibrated, tmp / "no-probe.yaml"), None),
        ("calibrated", calibrated, None), ("replanned", calibrated, tmp / f"{name}-calibrated.run.json")]
    for stage, hw, measured in stages:
        row: dict[str, Any] = {"part": "calibration", "model": name, "stage": stage, "method": method,
                               "repeat": repeat, "nproc": CAL_NPROC}
        try:
            plan_path = _plan_on(model, hw, tmp / f"{name}-{stage}.json", method, time_limit_s, measured)
            plan = load_plan(plan_path)
            reps = repetitions(repeat, plan.makespan_tick * (plan.tick_s or 0.0))
            row["repeat"] = reps
            report = run_plan(plan_path, nproc=CAL_NPROC, repeat=reps, check=True,
                              report_path=tmp / f"{name}-{stage}.run.json", run_timeout_s=600).report
        except Exception as exc:  # a bench row records the failure and goes on
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            rows.append(row)
            break
        measured_by[stage] = report["measured_makespan_s"]
        state = report["machine_state"]
        resim = state.get("resimulated_makespan_s")
        shared = report.get("simulated_shared_makespan_s")
        row.update(measured_vs_simulated_shared=_ratio(report["measured_makespan_s"], shared),
                   simulated_shared_makespan_s=round(shared, 6) if shared is not None else None,
                   measured_vs_resimulated_shared=report.get("measured_vs_resimulated_shared"),
                   measured_vs_charged_shared=report.get("measured_vs_charged_shared"),
                   **compute_overlap(plan, report))
        row.update(measured_vs_resimulated=_ratio(report["measured_makespan_s"], resim),
                   resimulated_makespan_s=round(resim, 6) if resim is not None else None,
                   slowdown_before_after=_slowdown_text(state),
                   since_calibration_s=round(time.monotonic() - calibrated_at) if calibrated_at else None)
        row.update(measured_makespan_s=round(report["measured_makespan_s"], 6),
                   simulated_makespan_s=round(report["simulated_makespan_s"], 6),
                   measured_vs_simulated=_ratio(report["measured_makespan_s"], report["simulated_makespan_s"]),
                   busy_ratio=_joined(report["busy_ratio"]), peak_ratio=_joined(report["peak_ratio"]),
                   peak_tensor_bytes="/".join(map(str, report["peak_tensor_bytes"])),
                   predicted_peak_bytes="/".join(map(str, report["predicted_peak_bytes"] or [])),
                   devices_used=len({p.device for p in plan.placements}), transfers=report["transfers"],
                   max_abs_error=report["max_abs_error"], plan_status=plan.status, error="",
                   breakdown_ms=breakdown_text(report["time_breakdown"]))
        rows.append(row)
    if len(measured_by) == len(stages):
        # the two plans again, alternately, so that the machine's load drifts over both alike
        alternate: dict[str, list[float]] = {"calibrated": [], "replanned": []}
        for _ in range(rounds):
            for stage in alternate:
                timed = load_plan(tmp / f"{name}-{stage}.json")
                report = run_plan(tmp / f"{name}-{stage}.json", nproc=CAL_NPROC,
                                  repeat=repetitions(repeat, timed.makespan_tick * (timed.tick_s or 0.0)),
                                  run_timeout_s=600).report
                alternate[stage].append(report["measured_makespan_s"])
        a, b = (statistics.median(alternate[k]) for k in ("calibrated", "replanned"))
        rows[-1].update(calibrated_alternating_s=round(a, 6), replanned_alternating_s=round(b, 6),
                        vs_calibrated_measured=_ratio(b, a),
                        replanned_same_plan=_same_plan(tmp / f"{name}-calibrated.json", tmp / f"{name}-replanned.json"))
    return rows


def compute_overlap(plan, report: dict) -> dict[str, Any]:
    """From a run's trace (the median repetition, ranks on one clock): `both_computing_share` = the time two or
    more ranks ran ops at once / the time any rank ran ops; and the ops' measured / planned seconds for the ops
    that ran with no other rank computing (`alone_ops_ratio`, overlap < 20 % of the op) and for those that ran
    beside another rank's ops for > 80 % of their time (`concurrent_ops_ratio`): whether a rank alone runs faster
    than the calibration's all-ranks-at-once figures (processor sharing)."""
    import json

    try:
        trace = json.loads(Path(report["trace"]).read_text())
    except (OSError, TypeError, ValueError):
        return {}
    planned = {p.task: (p.end_tick - p.start_tick) * (plan.tick_s or 1.0) for p in plan.placements}
    spans: dict[int, list[tuple[float, float, str]]] = {}
    for ev in trace["traceEvents"]:
        if ev.get("ph") == "X" and ev.get("cat") == "op":
            spans.setdefault(ev["pid"], []).append((ev["ts"] * 1e-6, (ev["ts"] + ev["dur"]) * 1e-6, ev["name"]))
    edges = sorted({t for row in spans.values() for s, e, _ in row for t in (s, e)})
    any_s = both_s = 0.0
    for a, b in zip(edges, edges[1:]):  # piecewise: how many ranks compute in [a, b)
        k = sum(1 for row in spans.values() if any(s <= a and b <= e for s, e, _ in row))
        any_s += (b - a) if k else 0.0
        both_s += (b - a) if k >= 2 else 0.0
    sums = {"alone": [0.0, 0.0], "concurrent": [0.0, 0.0]}
    for rank, row in spans.items():
        others = [x for r, rr in spans.items() if r != rank for x in rr]
        for s, e, name in row:
            if name not in planned or e <= s:
                continue
            shared = sum(max(0.0, min(e, oe) - max(s, os_)) for os_, oe, _ in others) / (e - s)
            kind = "alone" if shared < 0.2 else "concurrent" if shared > 0.8 else None
            if kind:
                sums[kind][0] += e - s
                sums[kind][1] += planned[name]
    return {"both_computing_share": round(both_s / any_s, 3) if any_s else None,
            "alone_ops_ratio": _ratio(*sums["alone"]) if sums["alone"][1] else None,
            "concurrent_ops_ratio": _ratio(*sums["concurrent"]) if sums["concurrent"][1] else None}


def _same_plan(a: Path, b: Path) -> bool:
    """Whether two plan files put every op on the same device, in the same order there."""
    from planner.schedule.plan_io import load_plan

    def orders(path: Path) -> list[tuple[int, str]]:
        return [(p.device, p.task) for p in sorted(load_plan(path).placements, key=lambda p: (p.device, p.start_tick))]

    return orders(a) == orders(b)


def bench_calibration(quick: bool) -> list[dict]:
    repeat = 2 if quick else 5
    method = "heft" if quick else "milp"
    machine: dict[str, Any] = {"cpu_count": os.cpu_count(), "load_avg_1min": round(os.getloadavg()[0], 2)}
    try:
        machine["effective_parallelism"] = round(effective_parallelism(CAL_NPROC), 2)
    except Exception as exc:  # noqa: BLE001 - a bench column, not a test
        machine["effective_parallelism"] = None
        print(f"   effective parallelism not measured: {exc}", file=sys.stderr)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        nominal = nominal_profile(tmp)
        try:
            paths = random_weight_models(tmp)
        except Exception as exc:  # noqa: BLE001 - a bench row, not a test
            return [{"part": "calibration", "error": f"set-up (models): {exc}", **machine}]
        for name, path in paths.items():
            # calibrated right before this model's plans and runs, so that its runs are minutes, not tens of
            # minutes, after the calibration (the load here changed 3-10x between a calibration and later runs)
            try:
                calibrated = calibrated_profile(tmp / name, quick)
            except Exception as exc:  # noqa: BLE001 - a bench row, not a test
                rows.append({"part": "calibration", "model": name, "error": f"plan-calibrate: {exc}", **machine})
                continue
            calibrated_at = time.monotonic()
            figures = profile_figures_text(calibrated)
            for row in calibration_rows(name, path, tmp, nominal, calibrated, repeat, method, CAL_TIME_LIMIT_S,
                                        rounds=1 if quick else 3, calibrated_at=calibrated_at):
                rows.append({**row, **machine, "calibrated_profile": figures,
                             "load_avg_1min_end": round(os.getloadavg()[0], 2)})
            print(f"   {name}: calibration rows done", file=sys.stderr, flush=True)
    return rows


def profile_figures_text(calibrated: Path) -> str:
    """A calibrated profile's figures in one line (the probe's overheads named apart)."""
    import yaml

    from planner.ir.hardware import load_topology

    topology = load_topology(calibrated)
    dev, link = topology.devices[0], topology.links[0][-1]
    figures = (f"float {dev.peak_flops_per_s['float'] / 1e9:.4g} GFLOP/s; memory bandwidth "
               f"{dev.memory_bandwidth_bytes_per_s / 1e9:.4g} GB/s; launch overhead "
               f"{dev.launch_overhead_s * 1e6:.4g} us; link latency {link.latency_s * 1e6:.4g} us, bandwidth "
               f"{link.bandwidth_bytes_per_s / 1e9:.4g} GB/s")
    doc = yaml.safe_load(calibrated.read_text())
    sharing = (doc["hosts"][0].get("sharing") or {}).get("effective_parallelism")
    if sharing is not None:
        figures += f"; effective parallelism {sharing}"
    probe = {"op_overhead": doc["hosts"][0]["devices"][0].get("op_overhead"),
             **{k: doc["links"]["intra_host"].get(k) for k in ("send_overhead", "recv_overhead")}}
    return figures + " (launch overhead and latency include the probe's " + ", ".join(
        f"{k} {v}" for k, v in probe.items() if v is not None) + ")"


# ------------------------------------------------------------------------------- per-op-type comparison rows
def without_op_factors(profile: Path, out: Path) -> Path:
    """A copy of a profile without its `op_cost_factors` tables (the roofline the factors were fitted against)."""
    import yaml

    doc = yaml.safe_load(profile.read_text())
    for host in doc["hosts"]:
        for group in host["devices"]:
            group.pop("op_cost_factors", None)
    doc["name"] = f"{doc['name']}-no-factors"
    out.write_text(yaml.safe_dump(doc, sort_keys=False, width=120))
    return out


def without_runtime_overheads(profile: Path, out: Path) -> Path:
    """A copy of a profile without the runtime probe's figures (`op_overhead`, the links' `send_overhead` and
    `recv_overhead`): the calibrated profile as it was before the probe."""
    import yaml

    doc = yaml.safe_load(profile.read_text())
    for host in doc["hosts"]:
        for group in host["devices"]:
            group.pop("op_overhead", None)
    for link in (doc.get("links") or {}).values():
        link.pop("send_overhead", None)
        link.pop("recv_overhead", None)
    doc["name"] = f"{doc['name']}-no-probe"
    out.write_text(yaml.safe_dump(doc, sort_keys=False, width=120))
    return out


def breakdown_text(rows: list[dict]) -> str:
    """Per rank, the run's time breakdown (`run_breakdown`) in ms: `end=ops+recv_early+recv_late+send+post+tail+
    other (simulated busy+idle)`, ranks joined by " | "."""
    def ms(x: float) -> str:
        return f"{x * 1e3:.2f}"

    return " | ".join(
        f"{ms(r['end_s'])}={ms(r['ops_s'])}+{ms(r['recv_early_s'])}+{ms(r['recv_late_s'])}+{ms(r['send_s'])}+"
        f"{ms(r['post_s'])}+{ms(r['tail_s'])}+{ms(r['other_s'])} (sim {ms(r['sim_busy_s'])}+{ms(r['sim_idle_s'])})"
        for r in rows)


def op_type_rows(model: Path, profile: Path, op_seconds: dict[str, float]) -> list[dict]:
    """Per op type of `model`: ops, measured seconds (sum of `op_seconds`, one rank's), the cost model's seconds
    on device 0 of `profile` without and with its op_cost_factors, and measured / each; a last row `all`."""
    import numpy as np

    from planner.cost.model import compute_seconds
    from planner.execute.program import prepared_graph
    from planner.ir.hardware import load_topology

    graph = prepared_graph(model)
    with tempfile.TemporaryDirectory() as tmp:
        plain = compute_seconds(graph, load_topology(without_op_factors(profile, Path(tmp) / "plain.yaml")))[:, 0]
    factored = compute_seconds(graph, load_topology(profile))[:, 0]
    totals: dict[str, list[float]] = {}
    for i, op in enumerate(graph.ops):
        t = totals.setdefault(op.op_type, [0, 0.0, 0.0, 0.0])
        t[0] += 1
        t[1] += op_seconds.get(op.name, float("nan"))
        t[2] += float(plain[i])
        t[3] += float(factored[i])
    totals["all"] = [graph.num_ops, float(np.nansum([op_seconds.get(o.name, np.nan) for o in graph.ops])),
                     float(plain.sum()), float(factored.sum())]
    rows = []
    for op_type, (n, measured, before, after) in sorted(totals.items(), key=lambda kv: (kv[0] == "all", -kv[1][1])):
        rows.append({"op_type": op_type, "ops": n, "measured_s": round(measured, 6),
                     "roofline_s": round(before, 6), "factored_s": round(after, 6),
                     "measured_vs_roofline": _ratio(measured, before), "measured_vs_factored": _ratio(measured, after)})
    return rows


def transfer_rows(graph, trace: dict, topology) -> list[dict[str, Any]]:
    """The link model against a run's trace (its ranks on one time line, `runner.chrome_trace_of_run`), per
    direction (src -> dst rank) and for all: the transfers the receiver waited for from before the sending op
    ended (so that its wait covers the whole transfer): their count, the median of observed = receive end -
    sending op's end (packing, isend and the transport: what the plan's link is to price), the median of the
    profile's latency + bytes / bandwidth for the same transfers, and observed / modelled of the two medians."""
    producer = {t: op.name for op in graph.ops for t in op.outputs if t}
    ops: dict[str, tuple[int, float, float]] = {}
    recvs: list[tuple[int, str, float, float]] = []
    for ev in trace["traceEvents"]:
        if ev.get("ph") != "X":
            continue
        s, e = ev["ts"] * 1e-6, (ev["ts"] + ev["dur"]) * 1e-6
        if ev["cat"] == "op":
            ops[ev["name"]] = (ev["pid"], s, e)
        elif ev["cat"] == "recv":
            recvs.append((ev["pid"], ev["name"], s, e))
    by_dir: dict[str, list[tuple[float, float]]] = {}
    link = topology.links[0][-1]
    for dst, tensor, s, e in recvs:
        src_op = ops.get(producer.get(tensor, ""))
        if src_op is None or src_op[0] == dst or s > src_op[2]:
            continue
        pair = (e - src_op[2], link.transfer_s(graph.tensors[tensor].size_bytes))
        by_dir.setdefault(f"{src_op[0]}->{dst}", []).append(pair)
        by_dir.setdefault("all", []).append(pair)
    rows: list[dict[str, Any]] = []
    for direction, pairs in sorted(by_dir.items(), key=lambda kv: kv[0] == "all"):
        observed = statistics.median(p[0] for p in pairs)
        modelled = statistics.median(p[1] for p in pairs)
        rows.append({"direction": direction, "waited_transfers": len(pairs),
                     "observed_median_s": round(observed, 6), "modelled_median_s": round(modelled, 6),
                     "observed_vs_modelled": _ratio(observed, modelled)})
    return rows


def bench_op_types(quick: bool, name: str = "inception_v1", nproc: int = CAL_NPROC
                   ) -> tuple[list[dict], list[dict], Path]:
    """`plan-calibrate --nproc N` (profile kept in bench/results), a plan of random-weight `name` on it, run by
    `run_plan(nproc=N, repeat=K)`; then `op_type_rows` of the run's per-op medians against the profile without
    and with its op_cost_factors, and `transfer_rows` of the run's trace.  Returns (op-type rows, transfer rows,
    the profile)."""
    import json

    from planner.execute.program import prepared_graph
    from planner.execute.runner import run_plan
    from planner.ir.hardware import load_topology

    repeat = 2 if quick else 5
    out_dir = REPO / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        profile = calibrated_profile(tmp, quick, nproc)
        kept = out_dir / f"calibrated-{nproc}{'-quick' if quick else ''}.yaml"
        kept.write_text(profile.read_text())
        model = random_weight_models(tmp)[name]
        plan = _plan_on(model, profile, tmp / "plan.json", "heft" if quick else "milp", CAL_TIME_LIMIT_S, None)
        report = run_plan(plan, nproc=nproc, repeat=repeat, report_path=tmp / "run.json", run_timeout_s=600).report
        rows = op_type_rows(model, profile, report["op_seconds_median"])
        trace = json.loads(Path(report["trace"]).read_text())
        links = transfer_rows(prepared_graph(model), trace, load_topology(profile))
    load = round(os.getloadavg()[0], 2)
    extra = {"model": name, "nproc": nproc, "measured_vs_simulated": report["measured_vs_simulated"],
             "load_avg_1min_end": load}
    return [{**row, **extra} for row in rows], [{**row, **extra} for row in links], kept


def bench_runtime(quick: bool) -> list[dict]:
    return [{"part": "speed", **row} for row in _speed_rows(quick)] + bench_calibration(quick)


def _speed_rows(quick: bool) -> list[dict]:
    repeat = 2 if quick else 5
    method = "heft" if quick else "milp"
    machine: dict[str, Any] = {"cpu_count": os.cpu_count(), "load_avg_1min": round(os.getloadavg()[0], 2)}
    try:
        machine["effective_parallelism"] = round(effective_parallelism(), 2)
    except Exception as exc:  # noqa: BLE001 - a bench column, not a test
        machine["effective_parallelism"] = None
        print(f"   effective parallelism not measured: {exc}", file=sys.stderr)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in models().items():
            row = bench_model(name, path, Path(tmp), repeat, method, MILP_TIME_LIMIT_S)
            rows.append({**row, "method": method, "repeat": repeat, "nproc": NPROC, **machine})
            print(f"   {name}: done", file=sys.stderr, flush=True)
    return rows


# ------------------------------------------------------------------------------------------ Markdown table
TABLE_COLUMNS = ("model", "num_ops", "torch_serial_s", "ort_seq_vs_torch", "ort_par_vs_torch",
                 "opplan_measured_vs_torch", "opplan_simulated_vs_torch", "measured_vs_simulated",
                 "measured_speedup", "simulated_speedup", "error")


def markdown_table(rows: list[dict], columns: tuple[str, ...] = TABLE_COLUMNS) -> str:
    def cell(v: Any) -> str:
        if v is None or v == "":
            return ""
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


CALIBRATION_COLUMNS = ("model", "stage", "measured_makespan_s", "simulated_makespan_s", "measured_vs_simulated",
                       "measured_vs_simulated_shared", "measured_vs_charged_shared", "measured_vs_resimulated",
                       "measured_vs_resimulated_shared",
                       "both_computing_share", "alone_ops_ratio", "concurrent_ops_ratio", "slowdown_before_after",
                       "since_calibration_s", "busy_ratio",
                       "peak_ratio", "devices_used", "transfers", "vs_calibrated_measured", "replanned_same_plan",
                       "breakdown_ms", "error")


LINK_COLUMNS = ("direction", "waited_transfers", "observed_median_s", "modelled_median_s", "observed_vs_modelled")
OP_TYPE_COLUMNS = ("op_type", "ops", "measured_s", "roofline_s", "factored_s", "measured_vs_roofline",
                   "measured_vs_factored")


def main(argv: list[str] | None = None) -> int:
    import csv

    args = sys.argv[1:] if argv is None else argv
    if "--op-types" in args:
        from experiments.bench_common import RESULTS, write_csv

        quick = "--quick" in args
        load = round(os.getloadavg()[0], 2)
        rows, links, profile = bench_op_types(quick)
        write_csv(RESULTS / f"runtime-optypes{'-quick' if quick else ''}.csv", rows)
        print(f"profile: {profile}; load average {load} at the start, {rows[-1]['load_avg_1min_end']} at the end; "
              f"the run's measured / simulated makespan {rows[-1]['measured_vs_simulated']}")
        print(markdown_table(rows, OP_TYPE_COLUMNS))
        print(markdown_table(links, LINK_COLUMNS))
        return 0
    if "--calibration" in args:
        from experiments.bench_common import RESULTS, write_csv

        quick = "--quick" in args
        rows = bench_calibration(quick)
        write_csv(RESULTS / f"runtime-calibration{'-quick' if quick else ''}.csv", rows)
        print(markdown_table(rows, CALIBRATION_COLUMNS))
        return 0
    path = Path(args[0]) if args else REPO / "bench" / "results" / "runtime.csv"
    with path.open(newline="") as f:
        rows = [{k: (_num(v) if k != "model" else v) for k, v in r.items()} for r in csv.DictReader(f)]
    print(markdown_table(rows))
    return 0


def _num(v: str) -> Any:
    try:
        return float(v) if any(c in v for c in ".e") else int(v)
    except ValueError:
        return v


if __name__ == "__main__":
    raise SystemExit(main())
