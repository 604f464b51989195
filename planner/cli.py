"""Command-line entry points.  Thin: parse arguments, call the library, print or write the result.

Every user error is an `OpplanError`: printed as one line `error: ...` on stderr, exit status 2, no traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from planner.errors import OpplanError

DEFAULT_MODEL = Path(__file__).resolve().parents[1] / "experiments" / "models" / "moe.onnx"


def _run(main: Callable[[argparse.Namespace], int], parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    args = parser.parse_args(argv)
    try:
        return main(args)
    except OpplanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, default=None,
                        help="ONNX model, task-graph JSON or STG file (default: the bundled MoE)")
    parser.add_argument("--hw", type=Path, default=None,
                        help="hardware profile YAML (default: hardware_profiles/cpu-4.yaml)")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=AxBxC",
                        help="fix a dynamic input's shape (repeatable)")


def _load_model_and_hw(args: argparse.Namespace):
    from planner.cost.model import build_instance
    from planner.ir.hardware import DEFAULT_PROFILE, load_topology
    from planner.ir.load import load_model, parse_input_shape

    shapes = dict(parse_input_shape(s) for s in args.input_shape)
    graph = load_model(args.model or DEFAULT_MODEL, shapes or None)
    topology = load_topology(args.hw or DEFAULT_PROFILE)
    return graph, topology, build_instance(graph, topology)


def _inspect(args: argparse.Namespace) -> int:
    from planner.report import inspect_summary

    graph, _topology, instance = _load_model_and_hw(args)
    summary = inspect_summary(graph, instance, top=args.top)
    if args.format == "json":
        print(json.dumps(summary, indent=2))
    else:
        from planner.report_format import print_inspect_table

        print_inspect_table(summary)
    return 0


def inspect_main(argv: Sequence[str] | None = None) -> int:
    """plan-inspect: op count, FLOPs, parameter and activation bytes, bounds on the hardware, heaviest ops."""
    parser = argparse.ArgumentParser(prog="plan-inspect", description=inspect_main.__doc__)
    _add_model_args(parser)
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("--top", type=int, default=10, help="how many of the heaviest ops to list")
    return _run(_inspect, parser, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(inspect_main())
