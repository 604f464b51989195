"""The operator graph (`OpGraph`): the immutable dataflow graph every later stage reads.

An op is one ONNX node, or one task of a plain task-graph file.  An edge carries one tensor from the op that
produces it to one op that consumes it; a tensor consumed by three ops is three edges.  Graph inputs and
initializers (weights) are tensors without a producing op, so they make no edges: an op's weights are counted in
its `param_bytes`.

Workload fields describe what an op does, not how long it takes: time is the cost model's job
(`planner/cost/`).  Task-graph inputs carry a given `duration` (and per-edge `comm`) in the file's abstract time
unit instead of FLOPs and bytes; the cost model uses those as they are.

Units are in the names: `_bytes`, `flops` (floating point operations, FLOPs = 2 x multiply-accumulates).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """A tensor's static type: shape (all dims known), element type name (ONNX names: 'float', 'int64'...)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    size_bytes: int


@dataclass(frozen=True, slots=True)
class Op:
    """One schedulable operator with its workload.

    `inputs` and `outputs` are tensor names in the op's own argument order ('' for an omitted optional input), so
    that a pass can rewire an op and the ONNX writer can rebuild the node.  `estimated` is True when no cost rule
    knows the op type: its time then comes from the bytes it moves only, and reports list it as estimated (never
    silently zero).  `duration` is set only for task-graph inputs.
    """

    name: str
    op_type: str
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    param_bytes: int = 0
    output_bytes: int = 0
    estimated: bool = False
    duration: float | None = None
    domain: str = ""
    dtype: str = "float"
    origin: str = ""  # for a clone made by a pass: the name of the op it copies ("" for original ops)
    implicit_inputs: tuple[str, ...] = ()  # tensors read by a subgraph (If/Loop/Scan body) from the outer scope

    @property
    def reads(self) -> tuple[str, ...]:
        """Every distinct tensor the op reads: its inputs without '' and repeats, then its implicit inputs."""
        return tuple(dict.fromkeys(t for t in (*self.inputs, *self.implicit_inputs) if t))

    @property
    def writes(self) -> tuple[str, ...]:
        """Every tensor the op produces (omitted optional outputs left out)."""
        return tuple(t for t in self.outputs if t)


@dataclass(frozen=True, slots=True)
class Edge:
    """Tensor `tensor` flows from op `src` to op `dst`.

    `size_bytes` is the tensor's size.  `comm` is a given transfer time (task-graph inputs, abstract time unit) paid
    only when src and dst run on different devices; None for ONNX inputs, whose transfer time comes from bytes.
    """

    src: str
    dst: str
    tensor: str
    size_bytes: int = 0
    comm: float | None = None


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """Where a graph came from: file path, its SHA-256, its kind ('onnx' or 'taskgraph') and time unit, and the
    import options it was made with (sorted (input name, shape) and (input name, values) pairs)."""

    path: str
    sha256: str
    kind: str
    time_unit: str = "s"
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    input_values: tuple[tuple[str, tuple[float, ...]], ...] = ()


@dataclass(frozen=True)
class OpGraph:
    """An immutable DAG of ops, `ops` in a topological order.

    Construct through `OpGraph.build`, which checks names are unique, every edge endpoint exists and the graph is
    acyclic, and stores the ops in topological order (stable with respect to the given order).
    """

    name: str
    ops: tuple[Op, ...]
    edges: tuple[Edge, ...]
    tensors: Mapping[str, TensorInfo] = field(default_factory=dict)
    graph_inputs: tuple[str, ...] = ()
    graph_outputs: tuple[str, ...] = ()
    initializers: frozenset[str] = frozenset()
    source: SourceInfo | None = None

    @classmethod
    def build(
        cls,
        name: str,
        ops: Iterable[Op],
        edges: Iterable[Edge],
        *,
        tensors: Mapping[str, TensorInfo] | None = None,
        graph_inputs: Iterable[str] = (),
        graph_outputs: Iterable[str] = (),
        initializers: Iterable[str] = (),
        source: SourceInfo | None = None,
    ) -> OpGraph:
        """Check and sort; raises ValueError for duplicate names, dangling edges or a cycle (internal bugs)."""
        ops = list(ops)
        edges = list(edges)
        position: dict[str, int] = {}
        for i, op in enumerate(ops):
            if op.name in position:
                raise ValueError(f"duplicate op name {op.name!r}")
            position[op.name] = i
        succs: list[list[int]] = [[] for _ in ops]
        indeg = [0] * len(ops)
        for e in edges:
            if e.src not in position or e.dst not in position:
                raise ValueError(f"edge {e.src!r} -> {e.dst!r} names an unknown op")
            if e.src == e.dst:
                raise ValueError(f"self-loop on op {e.src!r}")
            succs[position[e.src]].append(position[e.dst])
            indeg[position[e.dst]] += 1
        # Kahn's algorithm with a heap keeps the given order where the dependencies allow it.
        ready = [i for i, d in enumerate(indeg) if d == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for j in succs[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    heapq.heappush(ready, j)
        if len(order) != len(ops):
            stuck = [ops[i].name for i, d in enumerate(indeg) if d > 0][:5]
            raise ValueError(f"graph {name!r} has a cycle through {stuck}")
        return cls(
            name=name,
            ops=tuple(ops[i] for i in order),
            edges=tuple(edges),
            tensors=dict(tensors or {}),
            graph_inputs=tuple(graph_inputs),
            graph_outputs=tuple(graph_outputs),
            initializers=frozenset(initializers),
            source=source,
        )

    # ----- lookups (computed once; the graph is immutable) -----
    @cached_property
    def index(self) -> Mapping[str, int]:
        """Op name -> position in `ops` (a topological position)."""
        return {op.name: i for i, op in enumerate(self.ops)}

    @cached_property
    def edge_src_dst(self) -> tuple[tuple[int, int], ...]:
        """Edges as (src position, dst position), parallel to `edges`."""
        idx = self.index
        return tuple((idx[e.src], idx[e.dst]) for e in self.edges)

    @cached_property
    def successors(self) -> tuple[tuple[int, ...], ...]:
        """Per op position, the positions of the ops that consume its outputs (unique, sorted)."""
        out: list[set[int]] = [set() for _ in self.ops]
        for s, d in self.edge_src_dst:
            out[s].add(d)
        return tuple(tuple(sorted(x)) for x in out)

    @cached_property
    def predecessors(self) -> tuple[tuple[int, ...], ...]:
        """Per op position, the positions of the ops it consumes from (unique, sorted)."""
        out: list[set[int]] = [set() for _ in self.ops]
        for s, d in self.edge_src_dst:
            out[d].add(s)
        return tuple(tuple(sorted(x)) for x in out)

    def subgraph(self, keep: Iterable[str], *, extra_initializers: Iterable[str] = ()) -> OpGraph:
        """The ops named in `keep` with the edges among them; tensors no kept op touches are dropped.

        `extra_initializers` names tensors that become constants (e.g. outputs of folded ops).
        """
        keep = set(keep)
        ops = [op for op in self.ops if op.name in keep]
        used = {t for op in ops for t in (*op.reads, *op.writes)} | set(self.graph_outputs) | set(self.graph_inputs)
        initializers = (set(self.initializers) | set(extra_initializers)) & used
        return OpGraph.build(
            self.name,
            ops,
            (e for e in self.edges if e.src in keep and e.dst in keep),
            tensors={k: v for k, v in self.tensors.items() if k in used},
            graph_inputs=self.graph_inputs,
            graph_outputs=self.graph_outputs,
            initializers=initializers,
            source=self.source,
        )

    def op(self, name: str) -> Op:
        return self.ops[self.index[name]]

    def to_networkx(self) -> nx.MultiDiGraph:
        """A networkx view: nodes are op names with the Op under 'op', edges carry the Edge under 'edge'."""
        g = nx.MultiDiGraph(name=self.name)
        for op in self.ops:
            g.add_node(op.name, op=op)
        for e in self.edges:
            g.add_edge(e.src, e.dst, key=e.tensor, edge=e)
        return g

    # ----- totals -----
    @property
    def num_ops(self) -> int:
        return len(self.ops)

    @cached_property
    def total_flops(self) -> int:
        return sum(op.flops for op in self.ops)

    @cached_property
    def param_bytes(self) -> int:
        """Bytes of all initializers consumed by some op, each counted once even when shared."""
        seen: set[str] = set()
        total = 0
        for op in self.ops:
            for t in op.reads:
                if t in self.initializers and t not in seen:
                    seen.add(t)
                    info = self.tensors.get(t)
                    total += info.size_bytes if info else 0
        if not self.initializers:  # task graphs: memory is per task
            total = sum(op.param_bytes for op in self.ops)
        return total

    @cached_property
    def activation_bytes(self) -> int:
        """Sum of every op's output bytes (all activations of one step, none freed)."""
        return sum(op.output_bytes for op in self.ops)
