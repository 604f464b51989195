"""A model file made ready to plan: load it, run the passes, cost it on the hardware, apply pin/forbid rules.

    model file -> OpGraph (`planner.ir.load`) -> fold constants, drop dead code (`planner.passes`)
               -> op-level `SchedulingInstance` (`planner.cost.model`)
               -> pin/forbid rules (`planner.cost.placement_rules`)

Every command that plans or replays a model (plan-inspect, plan-solve, plan-simulate, plan-whatif, plan-compare's
model mode) starts here, so they all see the same op graph.  This module sits just above `planner/passes/` in the
layering: it needs ir, cost and passes, and nothing above them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from planner.cost.instance import SchedulingInstance
from planner.cost.model import build_instance
from planner.cost.placement_rules import apply_placement_rules
from planner.errors import InputError
from planner.ir.graph import OpGraph
from planner.ir.load import load_model
from planner.ir.topology import Topology
from planner.passes.dce import eliminate_dead_code
from planner.passes.fold import fold_constants


def run_passes(graph: OpGraph) -> OpGraph:
    """The passes every command runs before planning or executing: constant folding, then dead-code elimination."""
    return eliminate_dead_code(fold_constants(graph))


@dataclass(frozen=True)
class Prepared:
    """A model ready to plan: the graph after passes, the hardware, and the op-level instance."""

    graph: OpGraph
    topology: Topology
    instance: SchedulingInstance
    ops_before_passes: int


def prepare(model_path: str | Path, topology: Topology, *, input_shapes=None, input_values=None,
            capacity_bytes: int | None = None, measured_s: Mapping[str, float] | None = None,
            pins: Mapping[str, str] | None = None, forbids: Mapping[str, str] | None = None) -> Prepared:
    """Load the model, run the passes (constant folding, dead code), cost it on the topology, apply the rules."""
    graph = load_model(model_path, input_shapes, input_values)
    before = graph.num_ops
    unknown = [name for name in (measured_s or {}) if name not in graph.index]
    if unknown:
        raise InputError(f"the measured profile names {len(unknown)} ops that {Path(model_path).name} does not "
                         f"have, e.g. {unknown[:3]}", fix="profile the same model file")
    graph = run_passes(graph)
    # Folded and dead ops are gone from the plan; their measured times no longer matter.
    measured = {k: v for k, v in (measured_s or {}).items() if k in graph.index} if measured_s else None
    instance = build_instance(graph, topology, capacity_bytes=capacity_bytes, measured_s=measured)
    instance = apply_placement_rules(instance, pins or {}, forbids or {})
    return Prepared(graph, topology, instance, before)
