"""Write the bundled MoE transformer (or a variant of it) as ONNX; works from any directory.

    python -m planner.data.make_moe [--out moe.onnx] [--layers 2 --experts 4 ...]

With no shape options it writes the default `MoEConfig`, which is what the bundled `planner/data/models/moe.onnx`
holds (a test checks the bundled file equals a fresh build; regenerate it in a source checkout with
``--out planner/data/models/moe.onnx``).  The default output is ``moe.onnx`` in the working directory, never the
installed package's own copy.  Prints size, node count and op-type histogram.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from planner.ir.moe_model import MoEConfig, describe_model, expert_capacity, write_moe_model

DEFAULT_OUT = Path("moe.onnx")


def parse_args(argv: list[str] | None = None) -> tuple[Path, MoEConfig]:
    defaults = MoEConfig()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output file (default {DEFAULT_OUT} here)")
    for field in dataclasses.fields(MoEConfig):
        flag = "--" + field.name.replace("_", "-")
        default = getattr(defaults, field.name)
        if isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default,
                                help=f"(default {default})")
        else:
            parser.add_argument(flag, type=type(default), default=default, help=f"(default {default})")
    args = parser.parse_args(argv)
    config = MoEConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(MoEConfig)})
    return args.out, config


def main(argv: list[str] | None = None) -> int:
    out, config = parse_args(argv)
    path = write_moe_model(out, config)
    summary = describe_model(path)
    summary["config"] = dataclasses.asdict(config)
    summary["expert_capacity"] = expert_capacity(config)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
