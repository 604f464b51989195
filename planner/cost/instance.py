"""`SchedulingInstance`: what every formulation, heuristic, coarsener, validator and simulator works on.

A set of tasks (ops, clusters, or pipeline units), each with an integer duration in ticks on each device, and
precedence edges whose transfer time depends on the pair of devices chosen.  All times are integer ticks; one tick
is `tick_s` of `time_unit` ('s' for ONNX models, the file's own unit for task graphs; `tick_s` None means 1).

Communication.  Edge e carries the tensors `edge_tensors[e]` (sizes in `tensor_bytes`) plus a given fixed delay
`edge_fixed_tick[e]` (task-graph `comm`).  Devices a != b talk over a link of class `link_class[a, b]` (0 only on
the diagonal: same device, free) with latency `link_latency_tick[c]` and bandwidth `link_bytes_per_tick[c]`:

    comm_tick[e, c] = 0                                                     if c == 0
                    = edge_fixed_tick[e] + ceil(latency[c] + bytes[e] / bandwidth[c])   otherwise

Keeping tensors (not just byte counts) lets a coarsener aggregate edges between clusters and send a tensor that is
consumed several times inside one cluster once.

Memory, in bytes: `param_bytes[t]` is held on the task's device for the whole step; `activation_bytes[t]` is the
task's output, live from the task's start until its last consumer on that device has ended (and, when sent, on the
receiving device from the arrival until its consumers there have ended); `peak_internal_bytes[t]` is extra working
memory while the task runs.  `capacity_bytes[d]` is device d's memory.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

INELIGIBLE = np.iinfo(np.int64).max // 4
"""Duration marking a task that may not run on a device (pins, forbids, unsupported kinds)."""

UNBOUNDED_BYTES = 2**62


@dataclass(frozen=True, eq=False)
class SchedulingInstance:
    """Immutable scheduling problem in integer ticks.  Arrays must not be modified after construction."""

    name: str
    task_names: tuple[str, ...]
    device_names: tuple[str, ...]
    duration_tick: np.ndarray  # int64 [n_tasks, n_devices]; INELIGIBLE where a task may not run
    edges: tuple[tuple[int, int], ...]  # (src task, dst task), unique pairs
    edge_tensors: tuple[tuple[str, ...], ...]  # per edge, the tensors it carries
    tensor_bytes: Mapping[str, int]
    edge_fixed_tick: np.ndarray  # int64 [n_edges]
    link_class: np.ndarray  # int64 [n_devices, n_devices]; 0 exactly on the diagonal
    link_latency_tick: np.ndarray  # float64 [n_link_classes]; entry 0 unused (same device)
    link_bytes_per_tick: np.ndarray  # float64 [n_link_classes]; inf = free
    param_bytes: np.ndarray  # int64 [n_tasks]
    activation_bytes: np.ndarray  # int64 [n_tasks]
    peak_internal_bytes: np.ndarray  # int64 [n_tasks]
    capacity_bytes: np.ndarray  # int64 [n_devices]
    tick_s: float | None = None  # time units per tick (seconds for ONNX models); None means 1
    time_unit: str = "tick"
    task_ops: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # task -> member op names, if coarsened
    link_names: tuple[str, ...] = ()  # per link class, for reports

    def __post_init__(self) -> None:
        n, d = len(self.task_names), len(self.device_names)
        if self.duration_tick.shape != (n, d):
            raise ValueError(f"duration_tick has shape {self.duration_tick.shape}, expected {(n, d)}")
        if len(self.edge_tensors) != len(self.edges) or self.edge_fixed_tick.shape != (len(self.edges),):
            raise ValueError("edge arrays do not match the number of edges")
        if self.link_class.shape != (d, d):
            raise ValueError(f"link_class has shape {self.link_class.shape}, expected {(d, d)}")
        off_diag = self.link_class[~np.eye(d, dtype=bool)]
        if np.any(np.diag(self.link_class) != 0) or np.any(off_diag == 0):
            raise ValueError("link_class must be 0 exactly on the diagonal")
        for arr, size in ((self.param_bytes, n), (self.activation_bytes, n), (self.peak_internal_bytes, n),
                          (self.capacity_bytes, d)):
            if arr.shape != (size,):
                raise ValueError(f"a per-task or per-device array has shape {arr.shape}, expected {(size,)}")

    # ----- sizes -----
    @property
    def num_tasks(self) -> int:
        return len(self.task_names)

    @property
    def num_devices(self) -> int:
        return len(self.device_names)

    @property
    def num_link_classes(self) -> int:
        return len(self.link_latency_tick)

    # ----- communication -----
    @cached_property
    def edge_bytes(self) -> np.ndarray:
        """int64 [n_edges]: bytes each edge moves (each tensor once)."""
        return np.array([sum(self.tensor_bytes[t] for t in ts) for ts in self.edge_tensors], dtype=np.int64)

    @cached_property
    def comm_tick(self) -> np.ndarray:
        """int64 [n_edges, n_link_classes]: delay of each edge over each class of link (column 0 = same device)."""
        e, c = len(self.edges), self.num_link_classes
        out = np.zeros((e, c), dtype=np.int64)
        for k in range(1, c):
            bw = self.link_bytes_per_tick[k]
            transfer = self.edge_bytes / bw if np.isfinite(bw) else np.zeros(e)
            out[:, k] = self.edge_fixed_tick + np.ceil(self.link_latency_tick[k] + transfer - 1e-9).astype(np.int64)
        return out

    def comm(self, edge: int, src_device: int, dst_device: int) -> int:
        """Ticks between the end of edge's source task on src_device and the earliest start on dst_device."""
        return int(self.comm_tick[edge, self.link_class[src_device, dst_device]])

    def eligible(self, task: int, device: int) -> bool:
        return int(self.duration_tick[task, device]) < INELIGIBLE

    # ----- structure -----
    @cached_property
    def successors(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        """Per task, the (dst task, edge index) pairs leaving it."""
        out: list[list[tuple[int, int]]] = [[] for _ in self.task_names]
        for k, (s, t) in enumerate(self.edges):
            out[s].append((t, k))
        return tuple(tuple(x) for x in out)

    @cached_property
    def predecessors(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        """Per task, the (src task, edge index) pairs entering it."""
        out: list[list[tuple[int, int]]] = [[] for _ in self.task_names]
        for k, (s, t) in enumerate(self.edges):
            out[t].append((s, k))
        return tuple(tuple(x) for x in out)

    @cached_property
    def task_index(self) -> Mapping[str, int]:
        return {name: i for i, name in enumerate(self.task_names)}

    @cached_property
    def topological_order(self) -> tuple[int, ...]:
        """Task indices in a topological order (smallest index first among ready tasks)."""
        indeg = [len(p) for p in self.predecessors]
        ready = [i for i, k in enumerate(indeg) if k == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for j, _ in self.successors[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    heapq.heappush(ready, j)
        if len(order) != self.num_tasks:
            raise ValueError(f"instance {self.name!r} is not acyclic")
        return tuple(order)

    # ----- symmetry -----
    def interchangeable_device_classes(self) -> list[list[int]]:
        """The classes of interchangeable devices, each in index order, the classes ordered by first member.

        Devices a and b are interchangeable when exchanging their labels maps the instance onto itself: every
        task lasts as long on a as on b (eligibility included: pins and exclusions are INELIGIBLE durations),
        they hold the same memory, and their links agree — a's link to every third device k is of the same
        class as b's, in both directions, and the link a -> b is of the same class as b -> a.  The link class
        is all the instance knows about a link (latency, bandwidth and every edge's delay are per class), and
        durations, capacities and links are all it knows about a device, so this is exactly "the swap (a b) is
        a symmetry of the instance": any schedule maps to one of equal makespan and memory on the swapped
        devices, which is what symmetry breaking and the canonical stage maps rely on.

        Why comparing a device with one member of a class suffices: swaps that are symmetries compose, and
        (a c) = (a b)(b c)(a b), so interchangeability is an equivalence relation (transitive), and a class is
        one of its equivalence classes — any permutation inside it is a symmetry.
        """
        lc, dur, cap = self.link_class, self.duration_tick, self.capacity_bytes
        nd = self.num_devices

        def swappable(a: int, b: int) -> bool:
            if cap[a] != cap[b] or lc[a, b] != lc[b, a] or not np.array_equal(dur[:, a], dur[:, b]):
                return False
            return all(lc[a, k] == lc[b, k] and lc[k, a] == lc[k, b] for k in range(nd) if k not in (a, b))

        classes: list[list[int]] = []
        for d in range(nd):
            home = next((cl for cl in classes if swappable(cl[0], d)), None)
            if home is None:
                classes.append([d])
            else:
                home.append(d)
        return classes

    # ----- bounds -----
    def mean_duration_tick(self) -> np.ndarray:
        """float64 [n_tasks]: each task's mean duration over its eligible devices (0 where none)."""
        ok = self.duration_tick < INELIGIBLE
        count = ok.sum(axis=1)
        total = np.where(ok, self.duration_tick, 0).sum(axis=1).astype(np.float64)
        return np.divide(total, count, out=np.zeros(len(total)), where=count > 0)

    def min_duration_tick(self) -> np.ndarray:
        """Per task, its duration on its fastest eligible device."""
        return self.duration_tick.min(axis=1)

    def critical_path_tick(self) -> int:
        """Longest path with every task at its fastest duration and zero communication (a lower bound)."""
        fastest = self.min_duration_tick().tolist()  # plain ints: numpy scalars per task cost ~0.5 s at 100k ops
        finish = [0] * self.num_tasks
        for t in self.topological_order:
            start = max([finish[s] for s, _ in self.predecessors[t]], default=0)
            finish[t] = start + fastest[t]
        return max(finish, default=0)

    def work_bound_tick(self) -> int:
        """Total work / total speed, a lower bound on the makespan of any schedule.

        Give device d the relative speed s_d = max_t fastest[t] / dur[t, d], so dur[t, d] >= fastest[t] / s_d for
        every task.  Any schedule then has sum_t fastest[t] <= sum_d s_d * busy(d) <= makespan * sum_d s_d.
        For identical devices s_d = 1 and this is ceil(total work / n).
        """
        if self.num_tasks == 0:
            return 0
        fastest = self.min_duration_tick().astype(np.float64)
        dur = self.duration_tick.astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(dur > 0, fastest[:, None] / dur, 0.0)
        rel_speed = ratio.max(axis=0)
        total_speed = float(rel_speed.sum())
        if total_speed <= 0:
            return 0
        return int(np.ceil(fastest.sum() / total_speed - 1e-9))

    def trivial_lower_bound_tick(self) -> int:
        """max(critical path, total work / total speed): every reported bound is at least this."""
        return max(self.critical_path_tick(), self.work_bound_tick())

    # ----- construction for task graphs and tests -----
    @classmethod
    def uniform(
        cls,
        name: str,
        durations: Sequence[int],
        edges: Sequence[tuple[int, int, int]],
        num_devices: int,
        *,
        param_bytes: Sequence[int] | None = None,
        activation_bytes: Sequence[int] | None = None,
        capacity_bytes: int = UNBOUNDED_BYTES,
        task_names: Sequence[str] | None = None,
        time_unit: str = "tick",
    ) -> SchedulingInstance:
        """Identical, fully connected devices; `edges` are (src, dst, comm ticks paid across devices).

        Parallel edges between the same pair are merged, their delays added.
        """
        n = len(durations)
        merged: dict[tuple[int, int], int] = {}
        for s, t, c in edges:
            merged[(s, t)] = merged.get((s, t), 0) + int(c)
        pairs = tuple(merged)
        names = tuple(task_names) if task_names is not None else tuple(f"t{i}" for i in range(n))
        d = num_devices
        return cls(
            name=name,
            task_names=names,
            device_names=tuple(f"p{i}" for i in range(d)),
            duration_tick=np.repeat(np.asarray(durations, dtype=np.int64)[:, None], d, axis=1),
            edges=pairs,
            edge_tensors=tuple(() for _ in pairs),
            tensor_bytes={},
            edge_fixed_tick=np.array([merged[p] for p in pairs], dtype=np.int64),
            link_class=(1 - np.eye(d, dtype=np.int64)),
            link_latency_tick=np.zeros(2),
            link_bytes_per_tick=np.array([np.inf, np.inf]),
            param_bytes=np.asarray(param_bytes if param_bytes is not None else [0] * n, dtype=np.int64),
            activation_bytes=np.asarray(activation_bytes if activation_bytes is not None else [0] * n,
                                        dtype=np.int64),
            peak_internal_bytes=np.zeros(n, dtype=np.int64),
            capacity_bytes=np.full(d, capacity_bytes, dtype=np.int64),
            time_unit=time_unit,
        )
