"""Plan a model from Python: load a model and a hardware profile, plan, and read the plan.

    python docs/examples/plan_a_model.py [--model M.onnx] [--hw cpu-4.yaml] [--time-limit 10]

The README's Python example is this script's `plan_model` function; `tests/test_readme_examples.py` runs it.  To get a
plan file that `plan-run`, `plan-simulate` and `plan-codegen` accept (model and hardware hashes included), use
`plan-solve --out plan.json`.
"""

from __future__ import annotations

import argparse
from collections import Counter

from planner.data import BUNDLED_MODEL
from planner.ir.hardware import load_topology
from planner.prepare import prepare
from planner.solve import SolveOptions, plan_instance


def plan_model(model: str, hw: str, time_limit_s: float) -> None:
    topology = load_topology(hw)  # a YAML path, or the name of a bundled profile
    prepared = prepare(model, topology)  # import, fold constants, drop dead code, cost every op in integer ticks
    outcome = plan_instance(prepared.instance, SolveOptions(time_limit_s=time_limit_s))
    plan = outcome.op_plan  # one placement per op, checked by the validator
    us = prepared.instance.tick_s * 1e6  # microseconds per tick (ONNX models: ticks of `tick_s` seconds)
    print(f"{prepared.graph.num_ops} ops on {topology.num_devices} devices: makespan {plan.makespan_tick * us:.1f} us, "
          f"lower bound {plan.lower_bound_tick * us:.1f} us, gap {plan.gap:.1%} ({plan.status}), "
          f"found by {outcome.found_by}")
    ops_per_device = Counter(p.device for p in plan.placements)
    for device, name in enumerate(plan.device_names):
        print(f"  {name}: {ops_per_device[device]} ops")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(BUNDLED_MODEL), help="ONNX model (default: the bundled MoE)")
    parser.add_argument("--hw", default="cpu-4.yaml", help="hardware profile: a path or a bundled profile's name")
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds for the search")
    args = parser.parse_args(argv)
    plan_model(args.model, args.hw, args.time_limit)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
