"""`make bench` section `pipeline`: every baseline and the planned schedule, side by side.

Cases: unit costs F = B = W = 1 (activation 1 per stage and micro-batch, no parameters, no communication) at
(p, m) = (4, 8), (8, 20), (16, 32); and the bundled MoE (planner/data/models/moe.onnx) cut into 8 stages on
hardware_profiles/h100-8-nvlink.yaml with 16 micro-batches
(`planner.compare.model_costs` with per-operator backward costs, `planner.cost.training_costs`: microseconds, MiB;
sends and the MoE layers' all-to-all dispatch/combine as tasks on per-device communication streams); transformers'
own Mixtral and Qwen2-MoE (top-k over softmax, Qwen2-MoE with a shared expert), PhiMoE (sparse mixer: two ArgMax
picks, no TopK), Switch Transformers' MoE encoder (top-1: one ArgMax; legacy exporter) and GPT-2 (dense)
(`experiments.hf_models`: tiny configs, random weights, exported here: `EXPORTS`) on the same profile at 4 and 8
stages with m = 2p (60 s at 4 stages, 300 s at 8: `EXPORT_LIMIT_S`); and the
DeepSeek-V3-like preset (61 layers) on h100-2x8-ib at p = 8, m = 20 and p = 16, m = 64 (300 s each:
`PRESET_LIMIT_S`; milliseconds).
The planned schedule (`opplan`) gets DualPipe's peak memory per device as its cap and 120 s (240 s on the bundled
MoE, `MOE_LIMIT_S`), on the placement that has both the shortest warm start and the lowest bound, or split between
both placements when none has (`planner.compare.pipelines`); `--quick` uses smaller sizes and 10 s.

Columns: moe_found on the model rows (the bundled MoE and the exports): the MoE layers `find_moe_layers` finds in
the graph, as `moe_found` words them (layers, experts, top-k, routing kind, shared experts; ``none`` for a dense
model), empty on the unit and preset rows; makespan and total bubble (idle time summed over devices) in
`time_unit`; bubble_ratio = total idle /
(devices x makespan); peak and parameter memory per device (max over devices) in `memory_unit`;
bubble_vs_dualpipe = this row's total bubble / DualPipe's; idle_fill / idle_mid / idle_drain: the total bubble
split into idle before each device's first task, between its tasks and after its last (`metrics.idle_parts`);
for opplan: time_to_find_s (seconds from the start of
the solve until the returned schedule was found; 0 = the warm start was not improved), bound (lower bound on the
makespan of in-order schedules on the chosen placement), gap, status, placement, warm start (a baseline, or
``greedy``: `planner.pipeline.greedy`'s list schedule), memory cap; on the model, cut_moves (boundary moves the
planned row made to its own cut, `planner.compare.cut_search`: its bound is for that cut), bound_any_cut (work /
devices, a bound for every cut) and bound_every_cut (per device heads + work, minimised over every cut of both
placements the planned row solves, `planner.compare.cut_bound`: also a bound for every cut), bound_every_cut_memory
(the same within the memory cap, `planner.compare.cut_memory_bound`) and half_bubble_unreachable_every_cut (True when
it lies above the makespan at which any cut's schedule has half DualPipe's bubble), granularity
(sub-chunks per piece of the planned row, `planner.compare.subchunks`; "1 (k=3 tried)" when the sub-chunk solve did
not beat the stage level), subchunk_tasks (its compute tasks), stage_level_makespan and stage_level_replayed (the
stage-level schedule's order replayed as the baselines are); where the row is not proven optimal, the memory
bound (`planner.compare.memory_bound_note`: memory_bound, any order; half_bubble_makespan, the largest makespan with
half DualPipe's bubble; half_bubble_unreachable, True when the memory bound is above it; half_bubble_answers, each
device's answer to that question; other_placements_bound, where it is ruled out, the other placement's bound on its
own cut); devices_at_cap, the devices whose peak is within 1 % of the cap (`pipelines.devices_at_cap`).
The MoE case runs the planned row twice: at k = 1 (row ``opplan``) and at the automatic k (row
``opplan (sub-chunks)``; DualPipe simulated again for its memory cap, the same figures).
Rerun: ``python -m experiments.bench --only pipeline`` (writes bench/results/pipeline.csv); some rows only:
``python -m experiments.bench_pipeline --rows preset:8,hf_gpt2:8`` (writes bench/results/pipeline_rows.csv; names in
`bench_pipeline`).  The memory bound gets `BOUND_S` on the model and preset rows.
Each solve of the planned row gives `planner.compare.compare_policy.ComparePolicy.lns_share` of its time to the
large-neighbourhood search (`planner.search.pipeline`); `bench_lns` measures it against the same budget without it
(``python -m experiments.bench_pipeline``, bench/results/pipeline_lns.csv).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from planner.pipeline.metrics import idle_parts

REPO = Path(__file__).resolve().parents[1]
# The bundled MoE's planned rows: 240 s, not 120: under load the search still gains between 120 s and 240 s there,
# and the bench allows up to 10 minutes a row
MOE_LIMIT_S = 240.0
# The whole section runs in one `make bench` run of about an hour on two cores, so the rows where the search
# keeps improving with time get 300 s each and the memory bound 120 s: the transformers exports' planned rows 60 s
# at 4 stages (they end optimal or nearly so there), 300 s at 8
EXPORT_LIMIT_S = {4: 60.0, 8: 300.0}
# The DeepSeek-V3-like preset's planned rows: 300 s at p = 8 and p = 16
PRESET_LIMIT_S = {8: 300.0, 16: 300.0}
# The memory bound's time on the model and preset rows (`plan-compare --bound-time`; its default is 120 s): it first
# asks every distinct device, then every distinct pair, whether half of DualPipe's bubble is reachable
BOUND_S = 120.0
# the rows `bench_pipeline(only=...)` knows, as CASE:P (without --quick)
ROW_NAMES = ("unit:4", "unit:8", "unit:16", "unit-overlap:4", "moe:8", "hf_mixtral:4", "hf_mixtral:8",
             "hf_qwen2_moe:4", "hf_qwen2_moe:8", "hf_phimoe:4", "hf_phimoe:8", "hf_switch_encoder:4",
             "hf_switch_encoder:8", "hf_gpt2:4", "hf_gpt2:8", "preset:8", "preset:16", "preset-h200:8",
             "preset-h200:16")
# the transformers exports of `_exported_rows`, in row order: one per kind of router (top-k over softmax, the same
# beside a shared expert, sparse mixer, top-1) and a dense model; each an `HF_MODELS` or `HF_ROUTER_ARCHITECTURES`
# entry of `experiments.hf_models`
EXPORTS = ("hf_mixtral", "hf_qwen2_moe", "hf_phimoe", "hf_switch_encoder", "hf_gpt2")
# The preset's attention, experts, mlp and head as one H200 timed them (`python -m experiments.gpu_preset_costs`;
# docs/layers/compare.md, `presets.py`): the ``preset-h200`` rows price the preset on these
H200_OP_TIMES = REPO / "experiments" / "measured" / "h200_preset_fbw.csv"
MOE = REPO / "planner" / "data" / "models" / "moe.onnx"
HW = REPO / "hardware_profiles" / "h100-8-nvlink.yaml"


def moe_found(structure) -> str:
    """The MoE finding of a model row (`planner.ir.moe_structure.MoEStructure`) in words: ``2 layers, 4 experts,
    top-2, sparse mixer routing`` (values that differ between layers joined by ``/``), then ``with noise``, the
    expert-choice capacity and the shared experts per layer where there are; ``none`` without MoE layers."""
    layers = structure.layers
    if not layers:
        return "none"

    def values(xs) -> str:
        return "/".join(str(x) for x in sorted(set(xs)))

    kinds = "/".join(sorted({x.routing + (f" (capacity {x.capacity})" if x.capacity else "") +
                             (" with noise" if x.noisy else "") for x in layers}))
    words = (f"{len(layers)} layer{'s' if len(layers) != 1 else ''}, {values(x.experts for x in layers)} experts, "
             f"top-{values(x.top_k for x in layers)}, {kinds} routing")
    if any(x.shared_experts for x in layers):
        words += f", {values(x.shared_experts for x in layers)} shared expert(s) per layer"
    return words


def _rows(case: str, p: int, m: int, cmp, time_unit: str, memory_unit: str, moe: str = "") -> list[dict]:
    """One row per schedule of `cmp` (module docstring's columns); `moe`: the model's `moe_found` words."""
    sc = cmp.scales
    dp = next((r for r in cmp.ok_rows() if r.name == "dualpipe"), None)
    dp_bubble = dp.figures.bubble_tick if dp is not None else None
    out = []
    for r in cmp.ok_rows():
        f = r.figures
        v = cmp.values(r)
        parts = idle_parts(r.pipeline, r.timeline)  # where the bubble sits: fill, middle, drain
        row = {"case": case, "moe_found": moe, "p": p, "m": m, "schedule": r.name, "time_unit": time_unit,
               "makespan": round(v["makespan"], 4), "total_bubble": round(f.bubble_tick / sc.ticks_per_unit, 4),
               "bubble_ratio": v["bubble_ratio"], "memory_unit": memory_unit,
               "peak_memory": round(v["peak_memory"], 6), "param_memory": round(v["param_memory"], 6),
               "bubble_vs_dualpipe": (round(f.bubble_tick / dp_bubble, 4) if dp_bubble else ""),
               "idle_fill": round(sum(x.fill_tick for x in parts) / sc.ticks_per_unit, 4),
               "idle_mid": round(sum(x.mid_tick for x in parts) / sc.ticks_per_unit, 4),
               "idle_drain": round(sum(x.drain_tick for x in parts) / sc.ticks_per_unit, 4),
               "time_to_find_s": "", "bound": "", "gap": "", "status": "", "placement": "", "warm_start": "",
               "memory_cap": "", "cut_moves": "", "bound_any_cut": "", "bound_every_cut": "",
               "bound_every_cut_memory": "", "half_bubble_unreachable_every_cut": "", "granularity": "",
               "subchunk_tasks": "",
               "stage_level_makespan": "", "stage_level_replayed": "", "memory_bound": "",
               "half_bubble_makespan": "", "half_bubble_unreachable": "", "half_bubble_answers": "",
               "other_placements_bound": "", "devices_at_cap": ""}
        if r.name == "opplan":
            n = r.notes
            row.update({"time_to_find_s": round(float(n["time_to_best_s"]), 2),
                        "bound": round(float(n["bound_units"]), 4), "gap": round(float(n["gap"]), 4),
                        "status": n["status"], "placement": n["placement"], "warm_start": n["warm_start"],
                        "memory_cap": round(cmp.memory_cap_units, 6) if cmp.memory_cap_units is not None else "",
                        "devices_at_cap": " ".join(str(d) for d in n.get("devices_at_cap", ()))})
            cut = n.get("cut")
            if isinstance(cut, dict):  # on a model: the planned row's own cut (`planner.compare.cut_search`)
                any_cut = cut.get("any_cut_bound_units")
                row.update({"cut_moves": cut["moves"],
                            "bound_any_cut": round(float(any_cut), 4) if any_cut is not None else ""})
            every = n.get("every_cut")  # on a model or a preset: `planner.compare.cut_bound`, both placements
            if isinstance(every, dict) and every.get("bound_units") is not None:
                row["bound_every_cut"] = round(float(every["bound_units"]), 4)
            every_mem = n.get("every_cut_memory")  # `planner.compare.cut_memory_bound`: every cut, with the cap
            if isinstance(every_mem, dict) and every_mem.get("bound_units") is not None:
                row.update({"bound_every_cut_memory": round(float(every_mem["bound_units"]), 4),
                            "half_bubble_unreachable_every_cut": every_mem["half_bubble_unreachable"]})
            mem = n.get("memory_bound")  # `planner.compare.memory_bound_note`: one device at a time, with the cap
            if isinstance(mem, dict) and "bound_units" in mem:
                half = mem.get("half_bubble_units")
                row.update({"memory_bound": round(float(mem["bound_units"]), 4),
                            "half_bubble_makespan": "" if half is None else round(float(half), 4),
                            "half_bubble_unreachable": mem["half_bubble_unreachable"],
                            "half_bubble_answers": mem.get("half_bubble_answers", ""),
                            # where 0.5 is ruled out on the row's placement: the other placement's bound
                            "other_placements_bound": "; ".join(
                                f"{pl} {round(v, 4)}" for pl, v in mem.get("other_placements_units", {}).items())})
            gran = n.get("granularity")
            if isinstance(gran, dict) and "tasks" in gran:  # sub-chunks tried (`planner.compare.subchunks`)
                row.update({"granularity": gran["k"] if gran["kept"] != "stage level" else f"1 (k={gran['k']} tried)",
                            "subchunk_tasks": gran["tasks"],
                            "stage_level_makespan": round(float(gran["stage_level_makespan_units"]), 4),
                            "stage_level_replayed": round(float(gran["stage_level_replayed_units"]), 4)})
            else:
                row["granularity"] = 1
        out.append(row)
    return out


def bench_pipeline(quick: bool, only: Sequence[str] = ()) -> list[dict]:
    """The rows of the module docstring; `only`: just the rows named ``CASE:P`` (`ROW_NAMES`; e.g. ``preset:8``),
    every row when empty.  With `quick`, the exports run are hf_mixtral's, or those `only` names."""
    from planner.compare.pipelines import compare
    from planner.pipeline.registry import UnitCosts

    def wanted(case: str, p: int) -> bool:
        return not only or f"{case}:{p}" in only

    limit = 10.0 if quick else 120.0
    rows: list[dict] = []
    for p, m in ((4, 8), (8, 16)) if quick else ((4, 8), (8, 20), (16, 32)):
        if not wanted("unit", p):
            continue
        cmp = compare(p, m, UnitCosts(f=1, b=1, w=1), time_limit_s=limit)
        rows += _rows("unit F=B=W=1", p, m, cmp, "F", "activation of one stage")
        print(f"   unit p={p} m={m}\n{cmp.table()}", flush=True)
    # DualPipe's own setting: overlapped F&B pairs (X = 0.5) and MoE all-to-alls (0.5 F each) on the comm streams
    p, m = 4, 8
    if wanted("unit-overlap", p):
        cmp = compare(p, m, UnitCosts(f=1, b=1, w=1, fb_overlap=0.5, a2a=0.5), time_limit_s=limit)
        rows += _rows("unit F=B=W=1, fb-overlap 0.5, a2a 0.5", p, m, cmp, "F", "activation of one stage")
        print(f"   unit overlap+a2a p={p} m={m}\n{cmp.table()}", flush=True)
    rows += _moe_rows(quick, wanted)
    rows += _exported_rows(quick, wanted, EXPORTS if only or not quick else ("hf_mixtral",))
    rows += _preset_rows(quick, wanted)
    return rows


def _moe_rows(quick: bool, wanted: Callable[[str, int], bool]) -> list[dict]:
    """The bundled MoE at 8 stages, m = 16 (quick: 4, 8), the planned row at stage granularity and with
    sub-chunks."""
    from planner.compare.pipelines import compare

    p, m = (4, 8) if quick else (8, 16)
    if not wanted("moe", p):
        return []
    rows: list[dict] = []
    # per-operator backward costs; the all-to-all needs the MoE layers, found from the graph (as plan-compare does)
    costs = _model_costs_of(MOE, p)
    limit = 10.0 if quick else MOE_LIMIT_S
    # the planned row at stage granularity (k = 1) and with sub-chunks (k chosen by `auto_granularity`), one run
    cmp = compare(p, m, costs, time_limit_s=limit, granularity=1, bound_time_s=_bound_s(quick))
    found = moe_found(costs.moe)
    rows += _rows("moe.onnx on h100-8-nvlink", p, m, cmp, costs.time_unit, costs.memory_unit, found)
    print(f"   moe p={p} m={m}, granularity 1 (MoE: {found})\n{cmp.table()}", flush=True)
    fine = compare(p, m, costs, schedules=("dualpipe",), time_limit_s=limit, granularity=None)
    rows += [dict(r, schedule="opplan (sub-chunks)") for r in _rows("moe.onnx on h100-8-nvlink", p, m, fine,
                                                                      costs.time_unit, costs.memory_unit, found)
             if r["schedule"] == "opplan"]
    print(f"   moe p={p} m={m}, granularity auto\n{fine.table()}", flush=True)
    return rows


def _bound_s(quick: bool) -> float:
    """The memory bound's time on a model or preset row (`BOUND_S`; 10 s quick)."""
    return 10.0 if quick else BOUND_S


def _model_costs_of(path: Path, p: int):
    """`plan-compare --model` 's costs for `path` on HW cut for `p` stages (per-operator backward, MoE found)."""
    from planner.compare.model_costs import model_costs
    from planner.cost.training_costs import training_costs
    from planner.ir.hardware import load_topology
    from planner.ir.moe_structure import find_moe_layers
    from planner.prepare import prepare

    prepared = prepare(path, load_topology(HW))
    training = training_costs(prepared.graph, prepared.topology, prepared.instance)
    return dataclasses.replace(model_costs(prepared.instance, p, training=training),
                               moe=find_moe_layers(prepared.graph))


def _exported_rows(quick: bool, wanted: Callable[[str, int], bool], names: Sequence[str] = EXPORTS) -> list[dict]:
    """The transformers exports `names` (`EXPORTS`: tiny configs, random weights, exported by `_export`) at 4 and
    8 stages (quick: 4), m = 2p, `EXPORT_LIMIT_S` for the planned row (60 s at 4 stages, 300 s at 8; quick 10 s);
    each row's case names its exporter and its `moe_found` column the MoE layers found; skipped without
    transformers."""
    import importlib.util
    import tempfile

    from planner.compare.pipelines import compare

    if importlib.util.find_spec("transformers") is None:
        print("   transformers exports skipped: transformers is not installed (pip install -e '.[test]')")
        return []
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            stages = [p for p in ((4,) if quick else (4, 8)) if wanted(name, p)]
            if not stages:
                continue
            path, exporter = _export(name, Path(tmp))
            for p in stages:
                m = 2 * p
                costs = _model_costs_of(path, p)
                found = moe_found(costs.moe)
                cmp = compare(p, m, costs, time_limit_s=10.0 if quick else EXPORT_LIMIT_S[p],
                              bound_time_s=_bound_s(quick))
                rows += _rows(f"{name} (transformers, {exporter}) on h100-8-nvlink", p, m, cmp, costs.time_unit,
                              costs.memory_unit, found)
                print(f"   {name} p={p} m={m} (MoE: {found})\n{cmp.table()}", flush=True)
    return rows


def _export(name: str, folder: Path) -> tuple[Path, str]:
    """`experiments.hf_models`' `HF_MODELS` or `HF_ROUTER_ARCHITECTURES` entry `name` exported to
    ``folder/NAME.onnx`` as that module exports it: the file and the exporter (dynamo or legacy)."""
    from experiments.hf_models import HF_MODELS, HF_ROUTER_ARCHITECTURES, export_hf_architecture, export_hf_model

    path = folder / f"{name}.onnx"
    model = next((x for x in HF_MODELS if x.name == name), None)
    if model is not None:
        return export_hf_model(model, path), "dynamo"
    arch = next((x for x in HF_ROUTER_ARCHITECTURES if x.name == name), None)
    if arch is None:
        known = [x.name for x in HF_MODELS] + [x.name for x in HF_ROUTER_ARCHITECTURES]
        raise ValueError(f"{name!r} is no export of experiments/hf_models.py; choose from {', '.join(known)}")
    return export_hf_architecture(arch, path)[0], arch.exporter


def _preset_rows(quick: bool, wanted: Callable[[str, int], bool]) -> list[dict]:
    """The DeepSeek-V3-like preset (61 layers, 4096 tokens per micro-batch) on h100-2x8-ib at p = 8, m = 20 and
    p = 16, m = 64 (`plan-compare --preset deepseek-v3`), `PRESET_LIMIT_S` for the planned row (300 s at p = 8
    and at p = 16); 8 layers, p = 4, m = 8 quick.  Then the same on the op times one H200 measured
    (`H200_OP_TIMES`; rows ``preset-h200``, not in quick mode)."""
    from planner.compare.pipelines import compare
    from planner.compare.presets import load_op_times, preset_costs
    from planner.ir.hardware import load_topology

    topology = load_topology(HW.parent / "h100-2x8-ib.yaml")
    rows: list[dict] = []
    for case, op_times, what in (("preset", None, ""),
                                 ("preset-h200", load_op_times(H200_OP_TIMES), ", op times measured on an H200")):
        for p, m, layers in ((4, 8, 8),) if quick else ((8, 20, None), (16, 64, None)):
            if not wanted(case, p) or (quick and op_times is not None):
                continue
            costs = preset_costs("deepseek-v3", topology, p, num_layers=layers, op_times=op_times)
            cmp = compare(p, m, costs, time_limit_s=10.0 if quick else PRESET_LIMIT_S[p],
                          bound_time_s=_bound_s(quick))
            rows += _rows(f"deepseek-v3 preset ({costs.num_layers} layers{what}) on h100-2x8-ib", p, m, cmp,
                          costs.time_unit, costs.memory_unit)
            print(f"   {case} p={p} m={m}\n{cmp.table()}", flush=True)
    return rows


def _side_by_side_cases(quick: bool, tmp: Path, exports: Sequence[str], exports_when_quick: bool,
                        preset: bool) -> list[tuple[str, int, int, Any, float]]:
    """The cases the side-by-side benches below run, as (case, p, m, costs, seconds): the bundled MoE (p = 8,
    m = 16, 120 s; quick: p = 4, m = 8, 10 s), the transformers `exports` named (same p and m, 60 s; exported to
    `tmp`; only when transformers is installed, and with `quick` only if `exports_when_quick`) and, with `preset`,
    the DeepSeek-V3-like preset at p = 16, m = 64 on h100-2x8-ib (120 s; quick: 8 layers, p = 4, m = 8, 10 s)."""
    import importlib.util

    from planner.compare.presets import preset_costs
    from planner.ir.hardware import load_topology

    p = 4 if quick else 8
    cases: list[tuple[str, int, int, Any, float]] = [
        ("moe.onnx on h100-8-nvlink", p, 2 * p, _model_costs_of(MOE, p), 10.0 if quick else 120.0)]
    if (exports_when_quick or not quick) and importlib.util.find_spec("transformers") is not None:
        from experiments.hf_models import HF_MODELS, export_hf_model

        for model in (x for x in HF_MODELS if x.name in exports):
            path = export_hf_model(model, tmp / f"{model.name}.onnx")
            cases.append((f"{model.name} (transformers, dynamo) on h100-8-nvlink", p, 2 * p, _model_costs_of(path, p),
                          10.0 if quick else 60.0))
    if preset:
        topology = load_topology(HW.parent / "h100-2x8-ib.yaml")
        pp, m, layers = (4, 8, 8) if quick else (16, 64, None)
        costs = preset_costs("deepseek-v3", topology, pp, num_layers=layers)
        cases.append((f"deepseek-v3 preset ({costs.num_layers} layers) on h100-2x8-ib", pp, m, costs,
                      10.0 if quick else 120.0))
    return cases


def _opplan_rows(case: str, p: int, m: int, cmp, costs) -> list[dict]:
    """The planned row of `cmp` as `_rows` writes it (none when it was skipped)."""
    return [r for r in _rows(case, p, m, cmp, costs.time_unit, costs.memory_unit) if r["schedule"] == "opplan"]


def bench_lns(quick: bool = False, time_limit_s: float | None = None) -> list[dict]:
    """The large-neighbourhood search (`planner.search.pipeline`) measured: each case planned twice in one run,
    with the same budget, without the search (``lns_share`` 0: the full model gets the whole solve) and with it
    (`ComparePolicy.lns_share`): the bundled MoE (8 stages, m = 16, 120 s), transformers' Mixtral export
    at 8 stages (m = 16, 60 s) and the DeepSeek-V3-like preset at p = 16, m = 64 (h100-2x8-ib, 120 s).  One row per
    (case, setting): makespan, bubble / DualPipe's, bound, gap, what the search gained.  Rerun:
    ``python -m experiments.bench_pipeline`` (writes bench/results/pipeline_lns.csv; ``--quick``: small sizes, 10 s)."""
    import tempfile

    from planner.compare.compare_policy import ComparePolicy
    from planner.compare.pipelines import compare

    tmp = tempfile.TemporaryDirectory()
    cases = _side_by_side_cases(quick, Path(tmp.name), ("hf_mixtral",), exports_when_quick=True, preset=True)
    rows: list[dict] = []
    for case, p, m, costs, seconds in cases:
        for share in (0.0, ComparePolicy().lns_share):
            limit = seconds if time_limit_s is None else time_limit_s
            print(f"   {case} p={p} m={m}, {limit:g} s, lns share {share}", flush=True)
            cmp = compare(p, m, costs, time_limit_s=limit, lns_share=share,
                          progress=lambda line: print(line, flush=True))
            print(cmp.table(), flush=True)
            for row in _opplan_rows(case, p, m, cmp, costs):
                lns = cmp.row("opplan").notes.get("lns")
                row.update({"lns_share": share, "seconds": limit,
                            "lns": "" if not isinstance(lns, dict) else
                            f"{lns['from_units']:.6g} -> {lns['to_units']:.6g} (replayed {lns['replayed_units']:.6g}; "
                            f"{lns['gains']} gains, {lns['steps']} steps)"})
                rows.append(row)
    tmp.cleanup()
    return rows


def bench_lns_mode(quick: bool = False) -> list[dict]:
    """The search's mode (`planner.compare.pipelines.compare`'s ``lns_mode``) measured side by side in one run, the
    same budget each: ``in-order`` (the default: every neighbourhood keeps micro-batch order and models every
    stream's middle) against ``reorder`` (micro-batches may leave order inside a neighbourhood; the
    streams it does not touch are fixed).  Cases: the bundled MoE (8 stages, m = 16, 120 s), transformers' Mixtral
    and GPT-2 exports at 8 stages (m = 16, 60 s), the DeepSeek-V3-like preset at p = 16, m = 64 (120 s); ``--quick``:
    the MoE and the preset at p = 4 (10 s).  Rerun: ``python -m experiments.bench_pipeline --mode`` (writes
    bench/results/pipeline_lns_mode.csv)."""
    import tempfile

    from planner.compare.pipelines import compare

    tmp = tempfile.TemporaryDirectory()
    cases = _side_by_side_cases(quick, Path(tmp.name), ("hf_mixtral", "hf_gpt2"), exports_when_quick=False,
                                preset=True)
    rows: list[dict] = []
    for case, p, m, costs, seconds in cases:
        for mode in ("in-order", "reorder"):
            print(f"   {case} p={p} m={m}, {seconds:g} s, lns mode {mode}", flush=True)
            cmp = compare(p, m, costs, time_limit_s=seconds, lns_mode=mode)
            print(cmp.table(), flush=True)
            for row in _opplan_rows(case, p, m, cmp, costs):
                lns = cmp.row("opplan").notes.get("lns")
                row.update({"lns_mode": mode, "seconds": seconds,
                            "lns": "" if not isinstance(lns, dict) else
                            f"{lns['from_units']:.6g} -> {lns['to_units']:.6g} ({lns['gains']} gains, "
                            f"{lns['steps']} steps, in order: {lns['in_order']})"})
                rows.append(row)
    tmp.cleanup()
    return rows


def bench_cut_moves(quick: bool = False) -> list[dict]:
    """The cut search's chain moves (`ComparePolicy.cut_chain_moves`) measured side by side in one run, the
    same budget each: single moves only (the search before chain moves) against single moves then chain moves.
    Cases: the bundled MoE (8 stages, m = 16, 120 s), transformers' Mixtral and GPT-2 exports at 8 stages (m = 16,
    60 s); ``--quick``: the MoE at p = 4, m = 8, 10 s.  One row per (case, setting): the planned row's makespan,
    bubble / DualPipe's, bound (for its cut) and gap, its cut's moves, and its per-device work (the compute
    streams' busy time in the planned timeline, max and min over devices).  Rerun:
    ``python -m experiments.bench_pipeline --cut`` (writes bench/results/pipeline_cut_moves.csv)."""
    import tempfile

    from planner.compare.compare_policy import ComparePolicy
    from planner.compare.pipelines import compare

    tmp = tempfile.TemporaryDirectory()
    cases = _side_by_side_cases(quick, Path(tmp.name), ("hf_mixtral", "hf_gpt2"), exports_when_quick=False,
                                preset=False)
    rows: list[dict] = []
    try:
        for case, p, m, costs, seconds in cases:
            for chain in (False, True):
                policy = dataclasses.replace(ComparePolicy(), cut_chain_moves=chain)
                print(f"   {case} p={p} m={m}, {seconds:g} s, chain moves {chain}", flush=True)
                cmp = compare(p, m, costs, time_limit_s=seconds, policy=policy)
                print(cmp.table(), flush=True)
                opp = cmp.row("opplan")
                for row in _opplan_rows(case, p, m, cmp, costs):
                    tl = opp.timeline
                    assert tl is not None  # an ok row has its timeline
                    busy = [tl.makespan_tick - int(tl.idle_tick[d]) for d in range(p)]
                    note = opp.notes.get("cut")
                    cut: dict = note if isinstance(note, dict) else {}
                    row.update({"chain_moves": chain, "seconds": seconds,
                                "cut_chain_moves": cut.get("chain_moves", ""),
                                "cut_simulations": cut.get("simulations", ""),
                                "work_max": round(max(busy) / cmp.scales.ticks_per_unit, 4),
                                "work_min": round(min(busy) / cmp.scales.ticks_per_unit, 4)})
                    rows.append(row)
    finally:
        tmp.cleanup()
    return rows


def bench_placement(quick: bool = False, reps: int = 1) -> list[dict]:
    """The planned row's placement defaults measured side by side in one run, the same budget each:
    ``old`` (`compare(opplan_placement="both")`: both placements, half the time each, and no cut round scored by
    the bound: `ComparePolicy.bound_round` off) against ``new`` (the default:
    ``auto`` solves a placement alone when it has both the shortest warm start and the lowest bound, and a solve
    within 1 % of its cut's bound is followed by cut rounds scored by the bound).  Cases: the bundled MoE (8
    stages, m = 16, 120 s), transformers' Qwen2-MoE and Mixtral exports at 4 stages (m = 8, 60 s), unit costs
    F = B = W = 1 at p = 4, m = 8 and the same with overlapped pairs (0.5) and all-to-alls (0.5) (120 s, as in
    `bench_pipeline`); `reps` times each, old then new; ``--quick``: the MoE at p = 4, m = 8 and the unit rows,
    10 s.  Rerun: ``python -m experiments.bench_pipeline --placement [--reps N]`` (writes
    bench/results/pipeline_placement.csv)."""
    import importlib.util
    import subprocess
    import sys
    import tempfile

    from planner.compare.compare_policy import ComparePolicy
    from planner.compare.pipelines import compare
    from planner.pipeline.registry import UnitCosts

    tmp = tempfile.TemporaryDirectory()
    cases = _side_by_side_cases(quick, Path(tmp.name), (), exports_when_quick=False, preset=False)
    if not quick and importlib.util.find_spec("transformers") is not None:
        for name in ("hf_qwen2_moe", "hf_mixtral"):
            # exported in a process of its own: the first run of this bench, with torch loaded beside CP-SAT,
            # aborted once in a solve ("free(): invalid pointer", exit 134); this keeps torch out of the solves
            path = Path(tmp.name) / f"{name}.onnx"
            subprocess.run([sys.executable, "-c", "import sys; from experiments.hf_models import HF_MODELS, "
                            "export_hf_model; export_hf_model(next(x for x in HF_MODELS if x.name == sys.argv[1]), "
                            "sys.argv[2])", name, str(path)], check=True, cwd=REPO)
            cases.append((f"{name} (transformers, dynamo) on h100-8-nvlink", 4, 8, _model_costs_of(path, 4), 60.0))
    unit_s = 10.0 if quick else 120.0
    cases += [("unit F=B=W=1", 4, 8, UnitCosts(f=1, b=1, w=1), unit_s),
              ("unit F=B=W=1, fb-overlap 0.5, a2a 0.5", 4, 8, UnitCosts(f=1, b=1, w=1, fb_overlap=0.5, a2a=0.5),
               unit_s)]
    rows: list[dict] = []
    try:
        for rep in range(reps):
            for case, p, m, costs, seconds in cases:
                for setting, placement, bound_round in (("old", "both", False), ("new", "auto", True)):
                    print(f"   rep {rep} {case} p={p} m={m}, {seconds:g} s, {setting}", flush=True)
                    started = time.monotonic()
                    cmp = compare(p, m, costs, time_limit_s=seconds, opplan_placement=placement,
                                  policy=ComparePolicy(bound_round=bound_round))
                    wall = time.monotonic() - started
                    print(cmp.table(), flush=True)
                    unit, mem = ("F", "activation of one stage") if isinstance(costs, UnitCosts) else \
                        (costs.time_unit, costs.memory_unit)
                    opp = cmp.row("opplan")
                    for row in (r for r in _rows(case, p, m, cmp, unit, mem) if r["schedule"] == "opplan"):
                        note = opp.notes.get("cut")
                        cut: dict = note if isinstance(note, dict) else {}
                        best_base = min(r.figures.makespan_tick for r in cmp.ok_rows()  # type: ignore[union-attr]
                                        if r.name != "opplan") / cmp.scales.ticks_per_unit
                        row.update({"rep": rep, "setting": setting, "seconds": seconds, "wall_s": round(wall, 1),
                                    "tried": "+".join(opp.notes.get("tried", {})),  # type: ignore[arg-type]
                                    "bound_rounds": cut.get("bound_rounds", ""),
                                    "best_baseline": round(best_base, 4),
                                    "uptime": os.getloadavg()[0]})
                        rows.append(row)
    finally:
        tmp.cleanup()
    return rows


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line, parsed before anything runs: `--help` prints it, an unknown flag or row is an error (exit
    2), never a bench run (the default run takes over an hour)."""
    ap = argparse.ArgumentParser(prog="python -m experiments.bench_pipeline",
                                 description="Pipeline benchmarks; default: the search against the same "
                                             "budget without it (bench/results/pipeline_lns.csv).")
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--rows", type=lambda x: x.split(","), default=[],
                      help=f"some rows of `make bench`'s pipeline section, comma-separated: {', '.join(ROW_NAMES)}")
    what.add_argument("--placement", action="store_true", help="the placement choice (pipeline_placement.csv)")
    what.add_argument("--cut", action="store_true", help="the cut moves with and without chains")
    what.add_argument("--mode", action="store_true", help="the search's in-order and reorder modes")
    ap.add_argument("--reps", type=int, default=1, help="repetitions (--placement only)")
    ap.add_argument("--quick", action="store_true", help="small sizes and budgets (tests, smoke runs)")
    args = ap.parse_args(argv)
    unknown = [x for x in args.rows if x not in ROW_NAMES]
    if unknown:
        ap.error(f"--rows: unknown row {', '.join(unknown)}; choose from {', '.join(ROW_NAMES)}")
    if args.reps < 1:
        ap.error(f"--reps must be >= 1, got {args.reps}")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    import csv

    args = _arguments(argv)
    mode, cut, place, quick, only = args.mode, args.cut, args.placement, args.quick, args.rows
    if only:
        found = bench_pipeline(quick, only)
    elif place:
        found = bench_placement(quick=quick, reps=args.reps)
    else:
        run = bench_cut_moves if cut else bench_lns_mode if mode else bench_lns
        found = run(quick=quick)
    name = "pipeline_rows.csv" if only else "pipeline_placement.csv" if place else \
        "pipeline_cut_moves.csv" if cut else "pipeline_lns_mode.csv" if mode else "pipeline_lns.csv"
    out = REPO / "bench" / "results" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(found[0]))
        writer.writeheader()
        writer.writerows(found)
    for r in found:
        if only:
            print(f"{r['case']:<52} p={r['p']:<3} m={r['m']:<3} {r['schedule']:<17} makespan {r['makespan']:<10} "
                  f"bubble/dp {r['bubble_vs_dualpipe']:<7} peak {r['peak_memory']:<10} status {r['status'] or '-'} "
                  f"bound {r['bound']:<10} memory bound {r['memory_bound']:<10} "
                  f"half-bubble makespan {r['half_bubble_makespan']:<10} unreachable {r['half_bubble_unreachable']} "
                  f"({r['half_bubble_answers']}) other placements {r['other_placements_bound']} "
                  f"at the cap: {r['devices_at_cap'] or '-'}" + (f"; MoE: {r['moe_found']}" if r["moe_found"] else ""))
            continue
        if place:
            print(f"{r['case']:<52} p={r['p']:<3} m={r['m']:<3} rep {r['rep']} {r['setting']:<4} makespan "
                  f"{r['makespan']:<10} bubble/dp {r['bubble_vs_dualpipe']:<7} bound {r['bound']:<10} gap "
                  f"{r['gap']:<7} peak {r['peak_memory']} cap {r['memory_cap']} best baseline {r['best_baseline']} "
                  f"tried {r['tried']} bound rounds {r['bound_rounds']} wall {r['wall_s']} s load {r['uptime']:.2f}")
            continue
        if cut:
            print(f"{r['case']:<52} p={r['p']:<3} m={r['m']:<3} chain {r['chain_moves']!s:<5} makespan "
                  f"{r['makespan']:<10} bubble/dp {r['bubble_vs_dualpipe']:<7} bound {r['bound']:<10} gap "
                  f"{r['gap']:<7} work max/min {r['work_max']}/{r['work_min']} placement {r['placement']} cut moves "
                  f"{r['cut_moves']} (chain {r['cut_chain_moves']}, {r['cut_simulations']} simulations)")
            continue
        setting = f"mode {r['lns_mode']:<8}" if mode else f"lns {r['lns_share']:<4}"
        print(f"{r['case']:<52} p={r['p']:<3} m={r['m']:<3} {setting} makespan {r['makespan']:<10} "
              f"bubble/dp {r['bubble_vs_dualpipe']:<7} bound {r['bound']:<10} gap {r['gap']:<7} {r['lns']}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
