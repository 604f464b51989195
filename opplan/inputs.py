"""What every study starts from: a model (`load_model`) and a hardware profile (`load_hardware`).

A `Model` is loaded once and costed on each `Hardware` it is planned on (`costed`), through the same
`planner.prepare.prepare` every command runs (constant folding, dead-code elimination, the cost model), so a model
costed here is the instance ``plan-solve``, ``plan-whatif`` and ``plan-compare --model`` plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from planner.bundled_profiles import DEFAULT_PROFILE, bundled_profile_names
from planner.cost.model import build_instance
from planner.errors import InputError
from planner.ir.graph import OpGraph
from planner.ir.hardware import load_topology
from planner.ir.load import load_model as _load_graph
from planner.ir.topology import Topology
from planner.prepare import Prepared, prepare, run_passes

__all__ = ["Hardware", "Model", "bundled_profile_names", "costed", "load_hardware", "load_model"]


@dataclass(frozen=True)
class Model:
    """A model as loaded: its op graph before the passes, the file it came from (None: built in Python), and the
    shapes and values its dynamic inputs were bound to (ONNX only)."""

    graph: OpGraph
    path: Path | None = None
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    input_values: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.name if self.path is not None else self.graph.name

    @property
    def num_ops(self) -> int:
        """Ops as loaded, before constant folding and dead-code elimination."""
        return self.graph.num_ops


@dataclass(frozen=True)
class Hardware:
    """A hardware profile: its `Topology` (devices, speeds, memory, links) and the file it was read from."""

    topology: Topology

    @property
    def name(self) -> str:
        return self.topology.name

    @property
    def num_devices(self) -> int:
        return self.topology.num_devices

    @property
    def device_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.topology.devices)

    @property
    def path(self) -> Path | None:
        return Path(self.topology.source_path) if self.topology.source_path else None


def load_model(path_or_graph: str | Path | OpGraph, input_shapes: Mapping[str, Sequence[int]] | None = None,
               input_values: Mapping[str, Sequence[float]] | None = None) -> Model:
    """Load an ONNX model, a task-graph JSON or an STG file (by extension), or wrap an `OpGraph` built in Python.

    `input_shapes` fixes dynamic ONNX input dimensions (name -> dims, e.g. ``{"tokens": (1, 128)}``), `input_values`
    binds inputs to known values (name -> values); both apply to files only.  Raises `planner.errors.InputError`
    (one line naming the file) for a file that cannot be read."""
    shapes = {k: tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()}
    values = {k: tuple(float(x) for x in v) for k, v in (input_values or {}).items()}
    if isinstance(path_or_graph, OpGraph):
        if shapes or values:
            raise InputError("input_shapes and input_values apply to model files, not to a graph built in Python")
        return Model(path_or_graph)
    path = Path(path_or_graph)
    return Model(_load_graph(path, shapes or None, values or None), path, shapes, values)


def load_hardware(name_or_path: str | Path = DEFAULT_PROFILE) -> Hardware:
    """Read a hardware profile: a YAML path, or a bundled profile's name with or without ``.yaml``
    (`bundled_profile_names()`; default: ``cpu-4.yaml``).  Raises `InputError` for a missing or invalid profile."""
    return Hardware(load_topology(name_or_path))


def costed(model: Model, hw: Hardware, *, capacity_bytes: int | None = None) -> Prepared:
    """`model` after the passes, costed on `hw` (op-level `SchedulingInstance`), every device's memory overridden by
    `capacity_bytes` when given: the instance the commands plan."""
    if model.path is not None:
        return prepare(model.path, hw.topology, input_shapes=dict(model.input_shapes) or None,
                       input_values=dict(model.input_values) or None, capacity_bytes=capacity_bytes)
    graph = run_passes(model.graph)
    instance = build_instance(graph, hw.topology, capacity_bytes=capacity_bytes)
    return Prepared(graph, hw.topology, instance, model.graph.num_ops)
