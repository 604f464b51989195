"""`make bench` section `runtime`: what a user gets when they run a model on this host, side by side in one run.

For each model, one after the other, each timing in a forked child (each the median of `repeat` calls after
warm-up: 11, or enough to time a quarter of a second of steps, at most 200, `repetitions`; the parent starts no
thread pool that the executor's forked ranks could inherit):

* `ort-1`              onnxruntime, 1 intra-op thread, sequential (the original file, all graph optimizations);
* `ort-2-intra`        onnxruntime, 2 intra-op threads;
* `ort-parallel-2`     onnxruntime's parallel mode, 2 inter-op threads, 1 intra-op thread;
* `torch-1`, `torch-2` our torch kernels as straight-line code over the whole graph (`engines.TorchEngine`), 1 and 2
                       torch threads;

then in forked processes with the fast executor (`planner.execute.fast_run`, engines chosen per segment), on the
plan `plan-solve --measured` makes on what `plan-calibrate --nproc 2 --transport shm --model M --engine
onnxruntime` measured (a 2-process profile whose link is the shared memory the executor transfers through, each
transfer also paying one engine call on each side, with the slow-down of two ranks computing at once, and the
model's op times as its onnxruntime engine runs them on 1 and on 2 threads):

* `opplan-1-rank`      every op on one rank, 1 thread;
* `opplan-advised`     the ranks and threads plan-solve advises (`planner.run_advice`), as `plan-run --executor
                       fast` runs the plan by default;
* `opplan-chosen`      as `plan-run --choose` runs it: one rank with both cores, one rank on one thread and the
                       plan's ranks measured, the split kept only when it is faster beyond the noise
                       (`fast_choice.choose_run`); the row says which (`chosen`, `reason`) and lists every trial
                       with its prediction (`trials_ms`);
* `codegen-torchrun`   the code `plan-codegen` writes for the plan, one process per used device, 1 torch thread
                       each, gloo between them, under `torchrun --standalone` (its `launch.py --repeat`); no
                       prediction: the profile calibrates the fast executor's engines and link, not torch's
                       kernels over gloo.

On the chosen row, `bound_ms` is the least any run on the host's cores can take with the calibrated op times
(`planner.cost.core_bound`: whatever the ranks and threads, transfers free) and `speedup_ceiling` the one-thread
prediction over it: how much any configuration could gain with these kernels.
`predicted_ms` is what planning predicts for a row's configuration: the plan's run advice lists one prediction per
configuration (one rank: the op times on that many threads one after the other, scaled to the whole graph's
measured run; the plan's ranks: its makespan); `plan_predicted_ms` on the chosen row is the plan's makespan in any
case.  onnxruntime's and torch's own rows have none.  `measured_vs_predicted` is the row's median over it.

Each row: `median_ms`, `spread_ms` (max - min), `ratio_to_fastest_single` (the row's median over the fastest of
`ort-1`, `torch-1` and `opplan-1-rank`: the best one process on one core does), and the busy-loop effective
parallelism of 2 processes measured at the start and at the end of the section (`effective_parallelism_start`,
`_end`; ~2 on two free cores), so that a speed-up can be read against the cores the run really had.

Models: Inception-v1 from the onnx wheel at batch 1 and 8, the bundled MoE at batch 1, 16, 64 and 256, a BERT-base-width
encoder (transformers' `BertModel`, random weights, 4 layers, sequence 128, exported with torch's dynamo
exporter) and a four-tower network written here (independent branches from one input, joined at the end).
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CORES = 2
SINGLE = ("ort-1", "torch-1", "opplan-1-rank")


def _median_ms(step: Callable[[], Any], repeat: int, warmup: int = 3) -> tuple[float, float]:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3, (max(times) - min(times)) * 1e3


# ------------------------------------------------------------------------------------------------- the models
def _rebatched(model: Path, batch: int, out: Path) -> Path:
    """`model` with its first data input's leading dimension set to `batch` (shapes inferred again); a Reshape of an
    activation to a constant shape that starts with the old batch 1 gets `batch` there too (Inception-v1 flattens
    to [1, 1024] before its classifier)."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(model))
    inits = {init.name: init for init in m.graph.initializer}
    for node in m.graph.node:
        shape = inits.get(node.input[1]) if node.op_type == "Reshape" and node.input[0] not in inits else None
        if shape is not None:
            value = numpy_helper.to_array(shape).copy()
            if value.size and value[0] == 1:
                value[0] = batch
                shape.CopyFrom(numpy_helper.from_array(value, shape.name))
    data = next(i for i in m.graph.input if i.name not in inits)  # old files list weights among the inputs
    for value in (data, *m.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = batch
    del m.graph.value_info[:]
    onnx.save(onnx.shape_inference.infer_shapes(m), str(out))
    return out


def _towers(out: Path, towers: int = 4, width: int = 256, depth: int = 6, batch: int = 64) -> Path:
    """Four independent MLP towers on one input, summed at the end: real parallelism between branches."""
    import torch

    torch.manual_seed(0)

    class Towers(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.towers = torch.nn.ModuleList(
                torch.nn.Sequential(*[m for _ in range(depth) for m in (torch.nn.Linear(width, width),
                                                                         torch.nn.GELU())])
                for _ in range(towers))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return sum(t(x) for t in self.towers)

    torch.onnx.export(Towers().eval(), (torch.randn(batch, width),), str(out), input_names=["x"],
                      output_names=["y"], dynamo=True, external_data=False)
    return out


def _encoder(out: Path, layers: int = 4, seq: int = 128) -> Path:
    """transformers' BertModel at BERT-base width (768 hidden, 12 heads, 3072 intermediate), random weights."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    config = tf.BertConfig(hidden_size=768, num_attention_heads=12, intermediate_size=3072,
                           num_hidden_layers=layers, max_position_embeddings=seq, vocab_size=1000)
    model = tf.BertModel(config).eval()

    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.inner(ids).last_hidden_state

    ids = torch.randint(0, 1000, (1, seq))
    torch.onnx.export(Hidden().eval(), (ids,), str(out), input_names=["input_ids"], output_names=["hidden"],
                      dynamo=True, external_data=False)
    return out


def _in_child(fn: Callable[[], Any], what: str) -> Any:
    """`fn()` in a forked child: torch's exporter and its kernels start thread pools that a process forked later
    (every rank of the fast executor) could inherit mid-lock, so this process never runs them itself."""
    from planner.execute.procs import run_forked

    return run_forked(1, lambda _rank: fn(), timeout_s=1200, what=what, error=RuntimeError)[0]


def bench_models(tmp: Path, quick: bool) -> dict[str, Path]:
    from experiments.bench_runtime import models as light_models
    from planner.ir.moe_model import MoEConfig, write_moe_model

    light = light_models()
    out = {"inception_v1-b1": light["inception_v1"],
           "inception_v1-b8": _rebatched(light["inception_v1"], 8, tmp / "inception_v1-b8.onnx"),
           "moe-b1": light["moe"],
           "moe-b16": write_moe_model(tmp / "moe-b16.onnx", MoEConfig(batch=16)),
           "moe-b64": write_moe_model(tmp / "moe-b64.onnx", MoEConfig(batch=64)),
           "moe-b256": write_moe_model(tmp / "moe-b256.onnx", MoEConfig(batch=256)),
           "towers": _in_child(lambda: _towers(tmp / "towers.onnx"), "exporting the towers")}
    if not quick:
        out["bert-encoder"] = _in_child(lambda: _encoder(tmp / "bert-encoder.onnx"), "exporting the encoder")
    return out


# ------------------------------------------------------------------------------------------------ the timings
def _ort_rows(model: Path, feeds: dict[str, np.ndarray], repeat: int) -> dict[str, tuple[float, float]]:
    import onnxruntime as ort

    def session(intra: int, parallel: bool) -> Callable[[], Any]:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = intra
        opts.inter_op_num_threads = 2 if parallel else 1
        opts.execution_mode = ort.ExecutionMode.ORT_PARALLEL if parallel else ort.ExecutionMode.ORT_SEQUENTIAL
        opts.log_severity_level = 3
        s = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
        return lambda: s.run(None, feeds)

    return {"ort-1": _median_ms(session(1, False), repeat), "ort-2-intra": _median_ms(session(2, False), repeat),
            "ort-parallel-2": _median_ms(session(1, True), repeat)}


def _torch_rows(model: Path, graph, feeds: dict[str, np.ndarray], repeat: int) -> dict[str, tuple[float, float]]:
    import torch

    from planner.execute.engines import TorchEngine
    from planner.execute.program import load_program, to_tensor
    from planner.execute.segments import Segment

    program = load_program(graph, model)
    base = {k: to_tensor(v) for k, v in feeds.items()}
    base.update(program.constants)
    env: dict[str, torch.Tensor] = {}
    engine = TorchEngine(Segment(tuple(op.name for op in graph.ops), (), tuple(graph.graph_outputs)), program, env)

    def step() -> None:
        env.clear()
        env.update(base)
        engine(env)

    rows = {}
    before = torch.get_num_threads()
    with torch.inference_mode():
        for threads in (1, 2):
            torch.set_num_threads(threads)
            rows[f"torch-{threads}"] = _median_ms(step, repeat)
    torch.set_num_threads(before)
    return rows


def _plan(model: Path, hw: Path, out: Path, time_limit_s: float, measured: Path | None = None) -> Path:
    from planner.cli import solve_main

    rc = solve_main(["--model", str(model), "--hw", str(hw), "--time-limit", str(time_limit_s), "--out", str(out),
                     "--no-pictures", "--quiet", "--format", "json",
                     *(["--measured", str(measured)] if measured is not None else [])])
    if rc != 0:
        raise RuntimeError(f"plan-solve failed on {model}")
    return out


def _calibrate(model: Path, profile: Path, times: Path) -> None:
    """What a user runs before planning for the fast executor: the 2-process profile with its shared-memory link
    and how much two ranks computing at once slow each other (host sharing, which plan-solve's replay of the
    candidate plans applies), and the model's op times as onnxruntime runs them (figures a plan with measured op
    times does not read are measured in quick mode)."""
    from planner.cli_calibrate import calibrate_main

    rc = calibrate_main(["--nproc", str(CORES), "--transport", "shm", "--quick", "--no-op-factors",
                         "--no-runtime-probe", "--model", str(model), "--engine", "onnxruntime",
                         "--out", str(profile), "--op-times", str(times), "--quiet"])
    if rc != 0:
        raise RuntimeError(f"plan-calibrate failed on {model}")


def repetitions(repeat: int, step_s: float, timed_s: float = 0.25, most: int = 200) -> int:
    """Repetitions per timing for a model whose step takes about `step_s` seconds: enough to time `timed_s` of
    steps, at least `repeat`, at most `most`: a median of a few sub-millisecond steps moves by tens of per cent with
    the host's noise, one of a few hundred does not."""
    if step_s <= 0:
        return max(repeat, most)
    return max(repeat, min(most, math.ceil(timed_s / step_s)))


def model_rows(name: str, model: Path, tmp: Path, repeat: int, time_limit_s: float) -> list[dict]:
    """Every configuration of one model (module docstring), one row each; each timing repeats at least `repeat`
    times (`repetitions`: more for a short step)."""
    import contextlib
    import io

    from planner.cost.measured import load_measured_times
    from planner.execute.codegen import write_code
    from planner.execute.fast_choice import RunConfig, choose_run, run_config, used_devices
    from planner.execute.program import default_feeds
    from planner.execute.runner import load_checked_plan

    profile, times_csv = tmp / f"{name}.profile.yaml", tmp / f"{name}.times.csv"
    with contextlib.redirect_stdout(io.StringIO()):
        _calibrate(model, profile, times_csv)  # it forks its own processes
        plan_path = _plan(model, profile, tmp / f"{name}.plan.json", time_limit_s, times_csv)
    op_s = load_measured_times(times_csv)
    repeat = repetitions(repeat, sum(op_s.values()))
    plan, graph = load_checked_plan(plan_path)
    feeds = default_feeds(graph)
    times = {**_in_child(lambda: _ort_rows(model, feeds, repeat), "onnxruntime's timings"),
             **_in_child(lambda: _torch_rows(model, graph, feeds, repeat), "torch's timings")}
    one, _ = run_config(plan, graph, feeds, RunConfig(1, 1), repeat=repeat)
    times["opplan-1-rank"] = (one.median_s * 1e3, one.spread_s * 1e3)
    plan_ms = plan.makespan_tick * (plan.tick_s or 1.0) * 1e3
    # what planning predicts per configuration: the plan's run advice where it has one (plan-solve on the
    # 1- and 2-thread op times), else the op times one after the other for one rank on one thread
    predicted_ms = {label: s * 1e3 for label, s in plan.run.options_s} if plan.run else {
        RunConfig(1, 1).label(): sum(op_s.values()) * 1e3}
    predicted_ms.setdefault(RunConfig(used_devices(plan), 1).label(), plan_ms)
    extra: dict[str, dict] = {"opplan-1-rank": {"engines": _engines(one), "predicted_ms": _ms(
        predicted_ms.get(one.config.label()))}}
    if plan.run is not None:
        advised, _ = run_config(plan, graph, feeds, RunConfig(plan.run.ranks, plan.run.threads), repeat=repeat)
        times["opplan-advised"] = (advised.median_s * 1e3, advised.spread_s * 1e3)
        extra["opplan-advised"] = {"chosen": advised.config.label(), "reason": plan.run.reason,
                                   "engines": _engines(advised), "predicted_ms": _ms(plan.run.predicted_s * 1e3)}
    choice = choose_run(plan, graph, feeds, cores=CORES, repeat=repeat)
    times["opplan-chosen"] = (choice.chosen.median_s * 1e3, choice.chosen.spread_s * 1e3)
    gen = tmp / f"{name}.gen"
    _in_child(lambda: bool(write_code(plan_path, gen)), "plan-codegen")
    times["codegen-torchrun"] = _torchrun_ms(gen, used_devices(plan), repeat)
    extra["codegen-torchrun"] = {"chosen": RunConfig(used_devices(plan), 1).label()}
    fastest_single = min(times[k][0] for k in SINGLE)
    bound_s = plan.run.bound_s if plan.run else None
    one_thread_ms = predicted_ms.get(RunConfig(1, 1).label())
    extra["opplan-chosen"] = {
        "bound_ms": _ms(bound_s * 1e3) if bound_s else None,
        "speedup_ceiling": round(one_thread_ms / (bound_s * 1e3), 2) if bound_s and one_thread_ms else None,
        "chosen": choice.chosen.config.label(), "reason": choice.reason,
        "predicted_ms": _ms(predicted_ms.get(choice.chosen.config.label())), "plan_predicted_ms": _ms(plan_ms),
        "engines": _engines(choice.chosen),
        "trials_ms": "; ".join(f"{t.config.label()} {t.median_s * 1e3:.3f}" + (
            f" (predicted {predicted_ms[t.config.label()]:.3f})" if t.config.label() in predicted_ms else "")
            for t in choice.trials)}
    rows = []
    for config, (ms, spread) in times.items():
        row = {"model": name, "config": config, "median_ms": round(ms, 4), "spread_ms": round(spread, 4),
               "ratio_to_fastest_single": round(ms / fastest_single, 3), "ops": len(graph.ops),
               "plan_devices_used": len({p.device for p in plan.placements}), "repeat": repeat,
               **extra.get(config, {})}
        if row.get("predicted_ms"):
            row["measured_vs_predicted"] = round(ms / row["predicted_ms"], 3)
        rows.append(row)
    return rows


def _torchrun_ms(gen: Path, ranks: int, repeat: int) -> tuple[float, float]:
    """The generated code's median and spread of step times under torchrun (its launch.py --repeat)."""
    import json
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(ranks), "launch.py", "--repeat", str(repeat)], cwd=gen, capture_output=True,
                          text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"the generated code failed under torchrun: {proc.stderr.strip()[-500:]}")
    steps = json.loads((gen / "timing.json").read_text())["steps_s"]
    return statistics.median(steps) * 1e3, (max(steps) - min(steps)) * 1e3


def _engines(trial) -> str:
    return "; ".join(f"{e} {n}" for e, n in sorted(trial.engines.items()))


def _ms(value: float | None) -> float | None:
    return round(value, 4) if value is not None else None


def bench_executor(quick: bool, only: tuple[str, ...] = ()) -> list[dict]:
    """The section's rows; `only` names the models to run (all when empty)."""
    from experiments.bench_runtime import effective_parallelism

    repeat = 3 if quick else 11
    time_limit_s = 5 if quick else 20
    start = effective_parallelism(CORES)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for name, model in bench_models(tmp, quick).items():
            if only and name not in only:
                continue
            try:
                rows.extend(model_rows(name, model, tmp, repeat, time_limit_s))
            except Exception as exc:  # noqa: BLE001 - a bench row records its failure, the others still run
                rows.append({"model": name, "config": "", "error": f"{type(exc).__name__}: {exc}"})
            print(f"   {name}: done", file=sys.stderr, flush=True)
    end = effective_parallelism(CORES)
    for row in rows:
        row.update(effective_parallelism_start=round(start, 2), effective_parallelism_end=round(end, 2))
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the section alone and print its rows: ``python -m experiments.bench_executor [--quick] [MODEL ...]``
    (every model when none is named)."""
    args = sys.argv[1:] if argv is None else argv
    rows = bench_executor("--quick" in args, tuple(a for a in args if not a.startswith("--")))
    for row in rows:
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
