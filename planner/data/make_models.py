"""Write a real-size transformer (Mixtral-, Llama- or DeepSeek-V3-like) as ONNX whose weights take no disk.

    python -m planner.data.make_models --preset mixtral-8x7b --out mixtral.onnx [--layers 2 --batch 1 ...]
    python -m planner.data.make_models --list

Writes ``<out>`` (the graph: kilobytes to a few megabytes) and ``<out minus .onnx>.weights`` beside it, a sparse
file of the weights' full length that occupies no disk blocks (see `planner.ir.llm_model`).  Keep the two files
together; ``plan-inspect <out>`` then shows the model's true parameter bytes.  Any field of the preset can be
overridden (``--layers 1`` for a quick look).  Prints a JSON summary: files, parameters, nodes, expert capacity.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from planner.ir.llm_model import (
    PRESETS,
    LLMConfig,
    expert_capacity,
    node_count,
    parameter_bytes,
    parameter_count,
    preset,
    write_llm_model,
)
from planner.ir.units import format_bytes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="mixtral-8x7b",
                        help="model family and size (default mixtral-8x7b)")
    parser.add_argument("--out", type=Path, default=None, help="output .onnx file (default <preset>.onnx here)")
    parser.add_argument("--list", action="store_true", help="print the presets and exit")
    for field in dataclasses.fields(LLMConfig):
        if field.name == "name":
            continue
        kind = type(field.default)
        parser.add_argument("--" + field.name.replace("_", "-"), type=kind, default=None,
                            help=f"override the preset's {field.name}")
    return parser.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> LLMConfig:
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(LLMConfig)
                 if f.name != "name" and getattr(args, f.name) is not None}
    return preset(args.preset, **overrides)


def summary(config: LLMConfig) -> dict[str, object]:
    return {"preset": config.name, "layers": config.layers, "parameters": parameter_count(config),
            "parameter_bytes": parameter_bytes(config), "parameter_size": format_bytes(parameter_bytes(config)),
            "tokens": config.tokens, **({"expert_capacity": expert_capacity(config)} if config.experts else {})}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        print(json.dumps({name: summary(c) for name, c in PRESETS.items()}, indent=2))
        return 0
    try:
        config = config_from_args(args)
    except ValueError as exc:  # LLMConfig's own checks name the field and the rule
        print(f"error: make_models: {exc} (fix the flag or leave it out to keep the preset's value)", file=sys.stderr)
        return 2
    out = args.out if args.out is not None else Path(f"{config.name}.onnx")
    try:
        model_path, data_path = write_llm_model(out, config)
    except OSError as exc:
        print(f"error: make_models: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(json.dumps({**summary(config), "model_file": str(model_path),
                      "model_file_bytes": model_path.stat().st_size, "weights_file": str(data_path),
                      "nodes": node_count(model_path), "config": dataclasses.asdict(config)},
                     indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
