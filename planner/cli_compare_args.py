"""The arguments of ``plan-compare``: one parser, built in four groups (the model, the unit costs and their
communication, the planned schedule's search, the outputs) in the order ``--help`` lists them.

`planner.cli_compare` parses with it and runs the comparison; this module only declares the flags, their types
and their help text.
"""

from __future__ import annotations

from pathlib import Path

from planner.cli_args import (
    ArgumentParser,
    fraction,
    nonnegative_float,
    overlap_fraction,
    positive_float,
    positive_int,
    positive_seconds,
)
from planner.compare.compare_policy import LNS_MODES, PLACEMENTS, ComparePolicy
from planner.compare.presets import PRESETS, MicroBatch

__all__ = ["DEFAULT_OUT", "compare_parser", "parse_granularity"]

# Like plan-solve (out/plan.json) and plan-whatif (out/whatif): a run without --out still leaves its results.
DEFAULT_OUT = "out/compare"


def parse_granularity(text: str) -> int | None:
    """``--granularity``: a positive K, or ``auto`` (None: `planner.compare.subchunks.auto_granularity`)."""
    return None if text == "auto" else positive_int(text)


def compare_parser(description: str) -> ArgumentParser:
    """The parser of ``plan-compare`` with every flag; ``description`` heads its ``--help``."""
    parser = ArgumentParser(prog="plan-compare", description=description)
    _add_model_arguments(parser)
    _add_cost_arguments(parser)
    _add_planned_arguments(parser)
    _add_output_arguments(parser)
    return parser


def _add_model_arguments(parser: ArgumentParser) -> None:
    """What is compared: the pipeline's size and the model (unit costs, an ONNX file or a preset)."""
    parser.add_argument("--stages", type=positive_int, required=True, help="pipeline devices p (the model in p stages)")
    parser.add_argument("--microbatches", type=positive_int, required=True, help="micro-batches m per step")
    parser.add_argument("--model", default=None, help="ONNX model (model mode; needs --hw)")
    parser.add_argument("--hw", default=None, help="hardware profile YAML (model and preset mode)")
    parser.add_argument("--preset", default=None, metavar="NAME",
                        help=f"a published architecture instead of --model: {', '.join(PRESETS)} (needs --hw)")
    parser.add_argument("--layers", type=positive_int, default=None,
                        help="preset mode: number of layers (default: the published count, 61 for deepseek-v3)")
    parser.add_argument("--seq-len", type=positive_int, default=None,
                        help=f"preset mode: tokens per sequence (default {MicroBatch.seq_len})")
    parser.add_argument("--microbatch-seqs", type=positive_int, default=None,
                        help=f"preset mode: sequences per micro-batch (default {MicroBatch.seqs}); a micro-batch is "
                        "seq-len x microbatch-seqs tokens")
    parser.add_argument("--preset-times", type=Path, default=None, metavar="CSV",
                        help="preset mode: F, B, W milliseconds per op measured on a GPU (the preset_fbw.csv of "
                        "python -m experiments.gpu_preset_costs, or columns op,f_ms,b_ms,w_ms) instead of the "
                        "roofline; the embedding, all-to-alls and hops stay priced by the profile")
    parser.add_argument("--stage-time-limit", type=positive_seconds, default=20.0,
                        help="time limit of the stage formulation in model mode (seconds)")


def _add_cost_arguments(parser: ArgumentParser) -> None:
    """Unit costs of one stage, and how communication and MoE all-to-alls are priced in every mode."""
    parser.add_argument("--f", type=nonnegative_float, default=1.0, help="forward time of one stage")
    parser.add_argument("--b", type=nonnegative_float, default=1.0, help="input-gradient backward time of one stage")
    parser.add_argument("--w", type=nonnegative_float, default=1.0, help="weight-gradient backward time of one stage")
    parser.add_argument("--fb-overlap", type=overlap_fraction, default=1.0,
                        help="an overlapped F&B pair lasts this fraction of its halves, F + B (+ W when it runs the "
                        "full backward) (default 1: no gain); the baselines' pairs and the planned schedule's")
    parser.add_argument("--activation", type=nonnegative_float, default=1.0, help="activation memory of one stage, one "
                        "micro-batch")
    parser.add_argument("--param", type=nonnegative_float, default=0.0, help="parameter memory of one stage copy")
    parser.add_argument("--comm", type=nonnegative_float, default=0.0, help="time of one stage-to-stage transfer")
    parser.add_argument("--a2a", type=nonnegative_float, default=0.0,
                        help="unit costs: every stage has MoE layers whose all-to-all dispatch and combine each take "
                        "this long per micro-batch, forward and backward, as tasks on the device's communication "
                        "stream (two-chunk schedules: half each chunk); default 0: none")
    parser.add_argument("--no-a2a", action="store_true",
                        help="model and preset mode: no MoE all-to-all tasks (default: derived from the MoE layers' "
                        "dispatched token bytes over the profile's links)")
    parser.add_argument("--uniform-backward", action="store_true",
                        help="model mode: the old stage rule B = W = F and activation = every op output (default: "
                        "backward and stashed activations per operator, planner.cost.training_costs)")
    parser.add_argument("--expert-parallel", type=positive_int, default=None, metavar="N",
                        help="model and preset mode: the MoE experts are spread over N devices, so each device sends "
                        "(N-1)/N of its dispatched tokens in each all-to-all (default: --stages, the pipeline's "
                        "devices)")
    parser.add_argument("--comm-stream", action="store_true",
                        help="unit costs: each --comm transfer is a send task on the sender's communication stream "
                        "(sends overlap compute, one at a time per device); default: a delay on the edge")
    parser.add_argument("--no-comm-stream", action="store_true",
                        help="model and preset mode: transfers as edge delays instead of send tasks on communication "
                        "streams")


def _add_planned_arguments(parser: ArgumentParser) -> None:
    """The planned schedule: its memory cap, placement, sub-chunks, baselines to run and the search's budget."""
    parser.add_argument("--memory", type=positive_float, default=None,
                        help="memory cap per device for the planned schedule (default: DualPipe's peak)")
    parser.add_argument("--memory-sweep", default=None, metavar="LO:HI:STEP",
                        help="memory what-if: plan at each cap from LO to HI by STEP (or a,b,c), in --memory's unit "
                        "(unit costs: that of --activation and --param; model and preset: MiB, or a size such as "
                        "2GiB), and write memory_sweep.csv and memory_sweep.png (makespan against peak memory: the "
                        "baselines, computed once, as points; the planned schedule and its bound over the caps); the "
                        "caps share --time-limit; auto: a few round caps from below the smallest baseline peak to "
                        "above DualPipe's; excludes --memory")
    parser.add_argument("--placement", choices=PLACEMENTS, default="auto",
                        help="stage placement of the planned schedule: dualpipe (two copies, both directions), v "
                        "(2p half stages), fixed (one stage per device); auto (default) solves the one of dualpipe "
                        "and v that has both the shortest warm start within the cap (the list schedule counts where "
                        "there are communication streams) and the lowest bound (lower by less than "
                        f"{ComparePolicy().bound_tie * 100:.0f}%% of that warm start's gap does not count) alone, "
                        "with the time left after that choice, or both when neither has; both tries dualpipe and v, "
                        "half the time limit each, and keeps the better; warm solves only the one whose baselines "
                        "run shortest within the cap, with the whole time limit")
    parser.add_argument("--granularity", type=parse_granularity, default=1, metavar="K",
                        help="model mode: the planned schedule also splits every piece of its cut into K sub-chunks "
                        "(operator clusters: MoE experts apart from attention; planner.compare.subchunks) and "
                        "orders their F, B, W, with half its time; auto: K from the task count (2-4); default 1: "
                        "stages only")
    parser.add_argument("--subchunk-a2a", choices=("piece", "experts"), default="piece",
                        help="with --granularity > 1, where a piece's MoE all-to-alls sit: piece (at its ends, as the "
                        "baselines are measured; default) or experts (around the experts' sub-chunk, as the model "
                        "runs them: the schedule must hide them behind another micro-batch)")
    parser.add_argument("--schedules", default=None, help="comma-separated baselines (default: all)")
    parser.add_argument("--time-limit", type=positive_seconds, default=120.0,
                        help="time limit of the whole command in seconds: the stage cut, the baselines, the solves, "
                        "the memory bound and the pictures share it")
    parser.add_argument("--backend", default="cpsat", help="solver backend (default cpsat)")
    parser.add_argument("--lns-share", type=fraction, default=ComparePolicy().lns_share, metavar="X",
                        help="of each solve of the planned schedule, the share the large-neighbourhood search gets "
                        "after the full model (planner.search.pipeline; its gains are printed on stderr; 0: off; "
                        f"default {ComparePolicy().lns_share})")
    parser.add_argument("--lns-mode", choices=LNS_MODES, default="in-order",
                        help="reorder: the search may run micro-batches out of order inside a neighbourhood and "
                        "fixes the streams a neighbourhood does not touch; in-order (default): neither")
    parser.add_argument("--bound-time", type=nonnegative_float, default=ComparePolicy().memory_bound_s, metavar="S",
                        help="at most this many seconds (within --time-limit) after the solves for the memory bound of "
                        "a planned schedule not proven optimal (formulations.pipeline_memory_bound; 0: off; default "
                        "%(default)g)")


def _add_output_arguments(parser: ArgumentParser) -> None:
    """What runs and what is printed and written."""
    parser.add_argument("--no-opplan", action="store_true", help="baselines only")
    parser.add_argument("--no-pictures", action="store_true", help="skip the PNG files")
    parser.add_argument("--verbose", action="store_true",
                        help="the planned row's line also says how the search went (placement choice, cut search, "
                        "bounds, granularity, neighbourhood search, warm start, devices at the cap)")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help=f"write compare.csv, torch CSVs and pictures here (default {DEFAULT_OUT})")
