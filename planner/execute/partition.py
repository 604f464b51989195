"""From a plan to per-rank work: which ops each rank runs in which order, and every tensor that crosses ranks.

No torch here: this is plain data, tested on its own.

Order.  One global order of all ops: a topological order of the graph that follows the plan (priority: the
task's planned start, its end, its device, its position; members of a cluster in their listed order).  Each rank
runs the global order restricted to its ops.  This cannot deadlock: a rank only ever waits for a tensor made by an
op earlier in the global order, and the earliest op not yet run can always run (its inputs come from earlier ops,
its rank has finished its earlier ops, and sends never block).

Transfers.  A tensor produced on rank A and read on rank B != A is sent once from A to B, right after the op that
makes it; graph outputs made off rank 0 are sent to rank 0, which collects the outputs.  For each ordered pair
(A, B) the transfers are numbered in A's production order (`seq`); B receives them in that order, buffering any it
does not need yet, so the matching is the same for backends that match by tag (gloo) and by order (NCCL).  Each
transfer has a unique `tag`, and the shape and dtype the receiver allocates come from the graph's static shapes.

Devices and ranks.  One rank per planned device by default; with fewer processes, device d runs on rank d % N;
more processes than devices are refused (they would have nothing to run).
"""

from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass, field

from planner.errors import InputError
from planner.ir.graph import OpGraph
from planner.schedule.plan import Plan

__all__ = ["Transfer", "Partition", "partition_plan", "release_after", "used_devices_only"]


@dataclass(frozen=True)
class Transfer:
    """Tensor `tensor` (shape, ONNX dtype name) goes from rank `src` to rank `dst`; `seq` numbers the transfers of
    the pair (src, dst) in send order; `tag` is unique in the run; `producer` is the op that makes it."""

    tensor: str
    src: int
    dst: int
    seq: int
    tag: int
    shape: tuple[int, ...]
    dtype: str
    producer: str
    size_bytes: int


@dataclass(frozen=True)
class Partition:
    world_size: int
    device_names: tuple[str, ...]
    rank_of_device: tuple[int, ...]
    order: tuple[str, ...]  # the global op order
    rank_ops: tuple[tuple[str, ...], ...]  # per rank, its ops in order
    transfers: tuple[Transfer, ...]
    rank_of_op: dict[str, int]
    outputs: tuple[str, ...]
    # transfer tag -> the receiving rank's op before which its receive is posted (absent: at the repetition's
    # start); see `recv_post_points`
    post_before: dict[int, str] = field(default_factory=dict)
    # transfer tag (B -> A) -> the highest seq of A -> B transfers that B has received before it made this one
    # (-1: none); see `send_acknowledgements`
    acks: dict[int, int] = field(default_factory=dict)

    def sends_after(self, rank: int) -> dict[str, list[Transfer]]:
        """op name -> the transfers `rank` starts right after running it (in send order)."""
        out: dict[str, list[Transfer]] = {}
        for t in self.transfers:
            if t.src == rank:
                out.setdefault(t.producer, []).append(t)
        for v in out.values():
            v.sort(key=lambda t: (t.dst, t.seq))
        return out

    def incoming(self, rank: int) -> dict[int, list[Transfer]]:
        """source rank -> the transfers `rank` receives from it, in seq order."""
        out: dict[int, list[Transfer]] = {}
        for t in self.transfers:
            if t.dst == rank:
                out.setdefault(t.src, []).append(t)
        for v in out.values():
            v.sort(key=lambda t: t.seq)
        return out


def _op_assignment(plan: Plan, graph: OpGraph, where: str) -> tuple[dict[str, int], dict[str, tuple]]:
    """op -> planned device, and op -> its priority key."""
    device: dict[str, int] = {}
    key: dict[str, tuple] = {}
    for pos, p in enumerate(plan.placements):
        members = plan.task_ops.get(p.task, (p.task,)) if plan.task_ops else (p.task,)
        for m, op in enumerate(members):
            if op not in graph.index:
                raise InputError(f"the plan names op {op!r}, which the prepared model does not have", path=where,
                                 fix="re-plan with plan-solve (same model and --input-shape)")
            if op in device:
                raise InputError(f"the plan places op {op!r} twice", path=where)
            device[op] = p.device
            key[op] = (p.start_tick, p.end_tick, p.device, pos, m)
    missing = [op.name for op in graph.ops if op.name not in device]
    if missing:
        raise InputError(f"the plan does not place {len(missing)} op(s) of the model, e.g. {missing[:3]}",
                         path=where, fix="re-plan with plan-solve (same model and --input-shape)")
    return device, key


def partition_plan(plan: Plan, graph: OpGraph, nproc: int | None = None, where: str = "<plan>") -> Partition:
    """Ranks, per-rank op orders and transfers for running `plan` (a plan of `graph`) on `nproc` ranks."""
    num_devices = len(plan.device_names)
    world = num_devices if nproc is None else nproc  # not `nproc or ...`: 0 is an error, not "the default"
    if world < 1:
        raise InputError(f"--nproc {world}: must be at least 1")
    if world > num_devices:  # a rank with no device would have no ops: refuse rather than idle in silence
        raise InputError(f"--nproc {world}: the plan has {num_devices} devices, so at most {num_devices} ranks "
                         "have work", path=where, fix=f"use --nproc {num_devices} or fewer, or re-plan on more devices")
    rank_of_device = tuple(d % world for d in range(num_devices))
    device, key = _op_assignment(plan, graph, where)
    # Global order: Kahn's algorithm with the plan's priority.
    preds = graph.predecessors
    succs = graph.successors
    indeg = [len(p) for p in preds]
    heap = [(key[graph.ops[i].name], i) for i in range(len(graph.ops)) if indeg[i] == 0]
    heapq.heapify(heap)
    order: list[str] = []
    while heap:
        _, i = heapq.heappop(heap)
        order.append(graph.ops[i].name)
        for j in succs[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(heap, (key[graph.ops[j].name], j))
    rank_of_op = {op: rank_of_device[device[op]] for op in order}
    rank_ops = tuple(tuple(op for op in order if rank_of_op[op] == r) for r in range(world))
    # Transfers in the producers' order.
    producer = {t: op.name for op in graph.ops for t in op.writes}
    needs: dict[str, list[int]] = {}
    for name in order:
        op = graph.op(name)
        r = rank_of_op[name]
        for t in op.reads:
            src = producer.get(t)
            if src is not None and rank_of_op[src] != r and r not in needs.setdefault(t, []):
                needs[t].append(r)
    for t in graph.graph_outputs:
        src = producer.get(t)
        if src is not None and rank_of_op[src] != 0 and 0 not in needs.setdefault(t, []):
            needs[t].append(0)
        if src is None and t not in graph.graph_inputs:
            raise InputError(f"graph output {t!r} is a constant; the runtime expects outputs made by ops",
                             path=where)
    seq: dict[tuple[int, int], int] = {}
    transfers: list[Transfer] = []
    for name in order:
        op = graph.op(name)
        for t in op.writes:
            for dst in sorted(needs.get(t, ())):
                src_rank = rank_of_op[name]
                n = seq.get((src_rank, dst), 0)
                seq[(src_rank, dst)] = n + 1
                info = graph.tensors[t]
                transfers.append(Transfer(t, src_rank, dst, n, len(transfers), tuple(info.shape), info.dtype, name,
                                          info.size_bytes))
    return Partition(world, tuple(plan.device_names), rank_of_device, tuple(order), rank_ops, tuple(transfers),
                     rank_of_op, tuple(graph.graph_outputs), recv_post_points(transfers, rank_ops, graph, key),
                     send_acknowledgements(transfers, rank_ops, graph))


def send_acknowledgements(transfers: list[Transfer], rank_ops: tuple[tuple[str, ...], ...], graph: OpGraph
                          ) -> dict[int, int]:
    """transfer tag -> the highest `seq` of the transfers back (dst -> src) that the sender had received before it
    made the tensor: a rank reads a received tensor only after completing its receive (and every earlier one from
    the same sender), so when A receives X from B, B holds every A -> B transfer up to that seq, and A may wait on
    those sends at no cost and free their buffers.  (gloo's send handles do not report completion before `wait`,
    so without this a sender would hold every send buffer to the end of the repetition.)"""
    back: dict[tuple[int, int], dict[str, int]] = {}  # (A, B) -> tensor sent A -> B -> seq
    for tr in transfers:
        back.setdefault((tr.src, tr.dst), {})[tr.tensor] = tr.seq
    out: dict[int, int] = {}
    for tr in transfers:
        sent_back = back.get((tr.dst, tr.src), {})
        best = -1
        if sent_back:
            for name in rank_ops[tr.src]:
                if name == tr.producer:
                    break
                for t in graph.op(name).reads:
                    best = max(best, sent_back.get(t, -1))
        out[tr.tag] = best
    return out


def recv_post_points(transfers: list[Transfer], rank_ops: tuple[tuple[str, ...], ...], graph: OpGraph,
                     key: dict[str, tuple]) -> dict[int, str]:
    """transfer tag -> the receiving rank's op before which the receive is posted: the first op there that the
    plan starts no earlier than the producer ends (when the plan has the data arrive at the soonest), and never
    after the first op that reads it.  A receive buffer is memory, so posting every receive at the start of a
    repetition would hold each received tensor longer than the plan's memory model does (from its arrival);
    transfers whose point is the rank's first op are posted at the start (absent from the mapping)."""
    out: dict[int, str] = {}
    for tr in transfers:
        ops = rank_ops[tr.dst]
        produced_end = key[tr.producer][1]
        readers = [i for i, name in enumerate(ops) if tr.tensor in graph.op(name).reads]
        limit = readers[0] if readers else len(ops)
        point = next((i for i in range(limit) if key[ops[i]][0] >= produced_end), limit)
        if 0 < point < len(ops):
            out[tr.tag] = ops[point]
    return out


def release_after(partition: Partition, graph: OpGraph, rank: int) -> dict[str, tuple[str, ...]]:
    """op name -> the activations `rank` may drop right after running that op (and starting its sends).

    A tensor is dropped after its last reader on this rank; one the rank makes and never reads again is dropped
    right after the op that makes it (a send keeps its own reference until the transfer completes).  Never dropped:
    graph inputs and initializers (held for the whole step, as the plan's memory model holds parameters) and, on
    rank 0, the graph outputs it returns.  So a rank holds each activation about as long as the plan's memory model
    says its device does (module `planner.schedule.memory`)."""
    keep = set(graph.graph_inputs) | set(graph.initializers)
    if rank == 0:
        keep |= set(partition.outputs)
    last: dict[str, str] = {}
    for name in partition.rank_ops[rank]:
        op = graph.op(name)
        for t in (*op.reads, *op.writes):  # a later read moves the release point on; a write sets the first one
            if t not in keep:
                last[t] = name
    out: dict[str, list[str]] = {}
    for t, name in last.items():
        out.setdefault(name, []).append(t)
    return {k: tuple(v) for k, v in out.items()}


def used_devices_only(plan: Plan) -> Plan:
    """The plan on the devices it places work on, renumbered in their order: a device with no op would be a rank
    that only waits, so the code gets one rank per used device (ranks may still share devices with --nproc)."""
    used = sorted({p.device for p in plan.placements})
    if len(used) == len(plan.device_names):
        return plan
    index = {d: i for i, d in enumerate(used)}
    return dataclasses.replace(plan, device_names=tuple(plan.device_names[d] for d in used),
                               placements=tuple(dataclasses.replace(p, device=index[p.device])
                                                for p in plan.placements))
