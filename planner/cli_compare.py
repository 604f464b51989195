"""``plan-compare``: the baselines (GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-H2, ZB-V, DualPipe, DualPipeV) and
the planned schedule on one cost model.  Thin: parse, call `planner.compare.pipelines`, print and write files.

Three modes.  On unit costs: ``--stages`` is the number of pipeline devices p (the model cut into p stages;
two-chunk schedules cut each in half), ``--f/--b/--w`` the costs of one such stage (``--b`` the input-gradient
part), zero communication unless ``--comm``.  On a model (``--model M.onnx --hw H.yaml``): the op-level instance
is cut into p stages by the stage formulation and each stage in two chunks (`planner.compare.model_costs`: per
stage compute on its device, B and W and the stashed activations per operator (``--uniform-backward``: B = W = F,
activation = every op output), parameter bytes of its ops, link delays between stages,
MoE all-to-all from the dispatched token bytes unless ``--no-a2a``: the MoE layers are found from the graph's
structure, `planner.ir.moe_structure`, and spread over ``--expert-parallel`` devices);
times are then in microseconds and memory in MiB (``--f/--b/--w/--activation/--param/--comm`` do not apply;
``--fb-overlap`` does).  On a preset (``--preset deepseek-v3 --hw H.yaml [--layers N] [--seq-len S]
[--microbatch-seqs B]``, for users without an ONNX file): per-layer op costs from the published architecture
figures on the profile's first p devices, cut between layers or between a layer's attention and FFN
(`planner.compare.presets`); times in milliseconds, memory in MiB; ``--no-a2a``, ``--no-comm-stream`` and
``--fb-overlap`` apply as on a model.  On a model the planned schedule may also split its pieces into sub-chunks
(``--granularity K``, ``--subchunk-a2a``; `planner.compare.subchunks`).  With ``--fb-overlap X`` < 1 the planned
schedule may also run overlapped F&B pairs (`formulations.pipeline`, family 6).  Each solve of the planned
schedule gives ``--lns-share`` of its time to a large-neighbourhood search after the full model
(`planner.search.pipeline`), which prints a line on stderr at each gain; ``--lns-mode`` says whether it may
run micro-batches out of order inside a neighbourhood.  When the planned schedule is not proven optimal, the
memory bound (`formulations.pipeline_memory_bound`: one device at a time, with the memory cap) gets up to
``--bound-time`` seconds after the solves and says whether any schedule can reach half of DualPipe's bubble.
``--time-limit`` bounds the whole command: the model's stage cut, the baselines, the solves, the memory bound and
the pictures share it (`planner.compare.compare_budget`).  With ``--memory-sweep LO:HI:STEP`` the planned schedule is
planned at each of those memory caps instead, the caps sharing the time limit, and the sweep's CSV and picture are
written (`planner.cli_compare_sweep`, `planner.compare.memory_sweep`).  A line after the files says whether
``opplan.torch.csv`` runs in torch's pipelining runtime; when it does not (DualPipe's two directions), the planned
schedule on a placement torch runs is written beside it as ``opplan-runnable.torch.csv``
(`planner.compare.torch_runnable`; its solve gets `ComparePolicy.runnable_share` of the solves' time).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from planner.cli import _run, pause_point
from planner.cli_compare_args import DEFAULT_OUT, compare_parser, parse_granularity
from planner.cli_compare_sweep import run_sweep, sweep_caps
from planner.cli_interrupt import ctrl_c_in_search
from planner.cli_outputs import check_output_dir, staged_dir
from planner.compare.compare_policy import ComparePolicy
from planner.compare.presets import PRESETS, MicroBatch, PresetCosts, load_op_times, op_key, preset_costs
from planner.errors import InputError

if TYPE_CHECKING:
    from planner.compare.model_costs import ModelCosts
    from planner.pipeline.registry import UnitCosts
    from planner.prepare import Prepared

# The comparison, its plots and the model import are loaded inside `_compare`, after the arguments are parsed and
# --out checked: --help answers at once.

# The flags and their help live in `planner.cli_compare_args`; DEFAULT_OUT and parse_granularity stay importable
# from here.
__all__ = ["DEFAULT_OUT", "compare_main", "parse_granularity"]


def _compare(args: argparse.Namespace) -> int:
    started = time.monotonic()  # --time-limit counts from here: the stage cut of a model is part of the command
    check_output_dir(args.out, "--out")
    pause_point("imports")
    from planner.compare.pipelines import compare, write_outputs
    from planner.compare.torch_runnable import torch_line
    from planner.pipeline.registry import GENERATORS, UnitCosts

    costs: UnitCosts | ModelCosts | PresetCosts = UnitCosts(
        f=args.f, b=args.b, w=args.w, activation=args.activation, param=args.param, comm=args.comm,
        fb_overlap=args.fb_overlap, comm_stream=args.comm_stream, a2a=args.a2a)
    if args.preset is not None:
        costs = dataclasses.replace(_preset_costs(args), fb_overlap=args.fb_overlap, a2a=not args.no_a2a)
    elif args.layers is not None or args.seq_len is not None or args.microbatch_seqs is not None \
            or args.preset_times is not None:
        raise InputError("--layers, --seq-len, --microbatch-seqs and --preset-times apply only with --preset",
                         fix=f"add --preset {next(iter(PRESETS))} --hw H.yaml")
    caps = sweep_caps(args, None if args.model is not None else costs)  # a bad range fails before any solve
    prepared = _prepared_model(args) if args.model is not None else None
    names = tuple(args.schedules.split(",")) if args.schedules else None
    if names:
        unknown = [n for n in names if n not in GENERATORS]
        if unknown:
            raise InputError(f"unknown schedules {unknown}", fix=f"use some of {','.join(GENERATORS)}")
    policy = dataclasses.replace(ComparePolicy(), lns_share=args.lns_share)  # the defaults, with the user's share
    # the first Ctrl-C stops the solves (the model's stage cut is one) and the search ends with the schedules found so
    # far; a second aborts
    with ctrl_c_in_search(by_exception=False):
        if prepared is not None:
            costs = dataclasses.replace(_model_costs(args, prepared), fb_overlap=args.fb_overlap, a2a=not args.no_a2a)
        if caps is not None:
            return run_sweep(args, costs, caps, names, policy, started)
        cmp = compare(args.stages, args.microbatches, costs, schedules=names, opplan=not args.no_opplan,
                      memory_cap_units=args.memory, opplan_placement=args.placement,
                      time_limit_s=max(1.0, args.time_limit - (time.monotonic() - started)),
                      backend=args.backend, granularity=args.granularity, subchunk_a2a=args.subchunk_a2a,
                      lns_mode=args.lns_mode, bound_time_s=args.bound_time, policy=policy,
                      progress=lambda line: print(line, file=sys.stderr, flush=True), pictures=not args.no_pictures,
                      runnable=True)
    print(cmp.table(verbose=args.verbose))
    with staged_dir(args.out) as staging:  # every file or none, even on Ctrl-C while drawing
        written = write_outputs(cmp, staging, pictures=not args.no_pictures,
                                progress=lambda line: print(line, file=sys.stderr, flush=True))
        pause_point("writing")
    print(f"wrote {len(written)} files to {args.out} (compare.csv, <schedule>.torch.csv, pictures)")
    for r in cmp.ok_rows():
        if r.name == "opplan" and r.pipeline is not None:  # which planned file torch runs, and why
            print(torch_line(r, cmp.runnable, cmp.units()[0], cmp.scales.ticks_per_unit))
        elif r.pipeline is not None and len(r.pipeline.chains) > 1:
            # torch.distributed.pipelining runs one chain of stages per rank; DualPipe's two model copies (whose
            # gradients must be summed) are refused by its runtime (tests/test_torch_pipelining_run.py)
            print(f"note: {r.name}.torch.csv runs two model copies in two directions (DualPipe's placement), which "
                  f"torch.distributed.pipelining's runtime cannot run; the V-shaped schedules (zb-v, dualpipev) "
                  f"run there")
    return 0


def _preset_costs(args: argparse.Namespace) -> PresetCosts:
    if args.model is not None:
        raise InputError("--preset and --model exclude each other", fix="give one model: an ONNX file or a preset")
    if args.preset not in PRESETS:
        raise InputError(f"unknown preset {args.preset!r}", fix=f"use one of {', '.join(PRESETS)}")
    if args.hw is None:
        raise InputError("--preset needs --hw (the hardware profile the stages run on)")
    from planner.ir.hardware import load_topology

    mb = MicroBatch(args.seq_len or MicroBatch.seq_len, args.microbatch_seqs or MicroBatch.seqs)
    # --expert-parallel sets the preset's EP degree; without it the EP degree is the stage count
    op_times = load_op_times(args.preset_times) if args.preset_times is not None else None
    costs = preset_costs(args.preset, load_topology(args.hw), args.stages, num_layers=args.layers, microbatch=mb,
                         expert_parallel=args.expert_parallel, comm_stream=not args.no_comm_stream,
                         op_times=op_times)
    print(f"preset {args.preset}: {costs.num_layers} layers, {mb.seqs} x {mb.seq_len} tokens per micro-batch, "
          f"expert parallel {costs.expert_parallel}, on {costs.num_devices} devices of {costs.topology.name}; "
          f"layers per stage {costs.layers_per_piece(costs.stage_units)}; times in {costs.time_unit}, memory in "
          f"{costs.memory_unit}")
    if op_times is not None:
        keys = [op_key(op, costs.expert_parallel) for u in costs.units for op in u]
        used = sorted({k[0] for k in keys if any(key in op_times for key in k)})  # named by the most specific key
        print(f"op times measured ({args.preset_times}): {', '.join(used) or 'none of this model'}; the rest "
              "(embedding, all-to-alls, hops) from the profile")
    return costs


def _prepared_model(args: argparse.Namespace) -> Prepared:
    """The model of ``--model`` imported on ``--hw`` (before the search: Ctrl-C while importing aborts)."""
    from planner.ir.hardware import load_topology
    from planner.prepare import prepare

    if args.hw is None:
        raise InputError("--model needs --hw (the hardware profile the stages run on)")
    return prepare(args.model, load_topology(args.hw))


def _model_costs(args: argparse.Namespace, prepared: Prepared) -> ModelCosts:
    """The stage costs of the imported model: its stage cut solved (part of the search) and its MoE layers."""
    from planner.compare.model_costs import model_costs
    from planner.cost.training_costs import training_costs
    from planner.ir.moe_structure import find_moe_layers

    instance = prepared.instance
    training = None if args.uniform_backward else training_costs(prepared.graph, prepared.topology, instance)
    costs = model_costs(instance, args.stages, time_limit_s=args.stage_time_limit, backend=args.backend,
                        comm_stream=not args.no_comm_stream, training=training)
    moe = find_moe_layers(prepared.graph)
    costs = dataclasses.replace(costs, moe=moe, expert_parallel=args.expert_parallel)
    plan = costs.stage_plan
    assert plan is not None  # model_costs always records the cut it made
    bottleneck = plan.bottleneck_tick / costs.ticks_per_unit
    print(f"stages of {args.model}: {plan.num_stages} on {', '.join(plan.device_names)}, bottleneck "
          f"{bottleneck:.4g} {costs.time_unit} ({plan.status}); times in {costs.time_unit}, memory in "
          f"{costs.memory_unit}")
    print(moe.summary_line())
    return costs


def compare_main(argv: Sequence[str] | None = None) -> int:
    """``plan-compare``: parse ``argv`` (`planner.cli_compare_args`), compare, print and write; the exit status."""
    return _run(_compare, compare_parser(__doc__.split("\n\n")[0]), argv)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(compare_main())
