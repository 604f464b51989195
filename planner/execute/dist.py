"""The distributed inference runtime: one process (rank) per planned device on torch.distributed.

Each rank builds its share of the model (its ops' attributes and the constants they read, from the ONNX file), then
for each repetition: a barrier, then its ops in the partition's order (`partition.py`); before an op it waits for
the tensors it reads from other ranks, after it it starts non-blocking sends (`isend`) of what others read.  Send
buffers are contiguous and flat; receive buffers are allocated from the graph's static shapes and dtypes (bool
travels as uint8).  With gloo every receive is posted at the start of a repetition (transfers overlap compute); with
other backends (NCCL) receives are posted when needed, in each sender's order.  Under gloo a receive is posted
at the point of the rank's order where the plan has its data arrive (`partition.recv_post_points`), not all at the
start: a posted receive buffer is memory, held from then on.  Every wait has a timeout.
Rank 0 receives the graph outputs made elsewhere and returns all outputs.

Memory.  A rank drops each activation after its last use there (`partition.release_after`), and a send buffer as
soon as its transfer has completed (checked after every op), so it holds what the plan's memory model says its
device holds.  In its first repetition (a warm-up one unless `warmup` is 0) it samples the bytes it holds after
every op and receive (`memory_meter`); `RankResult.peak_tensor_bytes` is the largest sample.  Only that repetition
samples: walking the held tensors costs time, and the timed repetitions must not pay it.

The machine's state.  With `RunSpec.probe` every rank measures what the machine gives it (`machine_probe`) right
after the warm-up repetitions and right after the timed ones, outside the timed repetitions and all ranks at once;
`RankResult.probe_before` and `probe_after` hold its figures.

Launching: `launch_local` forks the ranks on this host (multiprocessing `fork`, TCP rendezvous on 127.0.0.1),
watches them, and if one raises or dies, kills the others at once and raises `RunFailed` naming the rank and its
error.  Children die with the parent (PR_SET_PDEATHSIG) and never outlive a failed run.  Under torchrun each rank
calls `run_rank` with `init_method="env://"` (see `planner.execute.torchrun`).
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from planner.errors import OpplanError
from planner.execute.memory_meter import TensorMeter
from planner.execute.ops import torch_dtype
from planner.execute.partition import Partition, Transfer, release_after
from planner.execute.procs import free_port, run_forked
from planner.execute.program import Program, load_program, run_node, to_tensor
from planner.ir.graph import OpGraph

__all__ = ["RunSpec", "Fault", "RankRun", "RankResult", "RunFailed", "run_rank", "launch_local"]


class RunFailed(OpplanError):
    """A rank raised, died or timed out; the message names the rank and its error."""

    exit_status = 1


@dataclass(frozen=True)
class Fault:
    """Test hook: on `rank`, before op `op` (None: its first op) of the first repetition, raise or SIGKILL itself."""

    rank: int
    op: str | None = None
    kind: str = "raise"


@dataclass
class RunSpec:
    model_path: str
    graph: OpGraph
    partition: Partition
    feeds: dict[str, np.ndarray]
    backend: str = "gloo"
    repeat: int = 1
    warmup: int = 1
    comm_timeout_s: float = 60.0  # one receive / send / barrier
    run_timeout_s: float = 600.0  # the whole launch
    fault: Fault | None = None
    threads: int = 1  # torch.set_num_threads of each rank (plan-calibrate --threads measures the same)
    # per rank, its program ready to run (plan-calibrate's runtime probe, which has no ONNX file); None: each rank
    # loads its share from model_path
    programs: tuple[Program, ...] | None = None
    # the run-time probe (`planner.execute.machine_probe`): probe(rank, world) -> figures, called by every rank
    # right before the timed repetitions and right after them (module docstring); None: no probe
    probe: Callable[[int, int], dict[str, float]] | None = None


@dataclass
class RankRun:
    """One repetition on one rank: seconds from its start barrier; events (kind, name, start_s, end_s), kind 'op'
    for compute, 'recv' for waiting on a transfer, 'send' for packing and posting the sends after op `name` (and
    reaping completed ones), 'post' for posting receives (at the start, name "", or before op `name`), 'tail' for
    the end of the repetition (receives never read, the last sends' completion)."""

    end_s: float
    events: list[tuple[str, str, float, float]] = field(default_factory=list)
    # time.perf_counter() at the start barrier's exit: CLOCK_MONOTONIC on Linux, one clock for all processes of a
    # host, so that the ranks' events can be put on one time line (a rank leaves the barrier up to milliseconds
    # after another on a loaded machine); 0.0 when unknown
    start_s: float = 0.0

    @property
    def busy_s(self) -> float:
        return sum(e - s for kind, _, s, e in self.events if kind == "op")


@dataclass
class RankResult:
    """One rank's run: build time, the measured repetitions, rank 0's outputs, and the tensor bytes it held at
    most (`peak_tensor_bytes`, of which `fixed_tensor_bytes` are its constants and inputs; module docstring)."""

    rank: int
    build_s: float
    runs: list[RankRun]
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    peak_tensor_bytes: int = 0
    fixed_tensor_bytes: int = 0
    probe_before: dict[str, float] = field(default_factory=dict)  # the run-time probe's figures (`RunSpec.probe`)
    probe_after: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------- transport
def _wire_dtype(dtype: str) -> torch.dtype:
    return torch.uint8 if dtype == "bool" else torch_dtype(dtype)


def _pack(value: torch.Tensor, tr: Transfer) -> torch.Tensor:
    if tuple(value.shape) != tr.shape or value.dtype != torch_dtype(tr.dtype):
        raise RuntimeError(f"tensor {tr.tensor!r} for rank {tr.dst} is {tuple(value.shape)} {value.dtype}, the plan "
                           f"expects {tr.shape} {tr.dtype}")
    return value.to(_wire_dtype(tr.dtype)).contiguous().reshape(-1)


def _unpack(buf: torch.Tensor, tr: Transfer) -> torch.Tensor:
    out = buf.reshape(tr.shape)
    return out.to(torch.bool) if tr.dtype == "bool" else out


class _Inbox:
    """Receives of one repetition: pre-posted (gloo) or posted on demand, always completed in each sender's order."""

    def __init__(self, incoming: dict[int, list[Transfer]], prepost: bool, timeout: timedelta,
                 post_before: dict[int, str] | None = None) -> None:
        self.incoming = incoming
        self.where = {t.tensor: (src, i) for src, lst in incoming.items() for i, t in enumerate(lst)}
        self.done = {src: 0 for src in incoming}
        self.timeout = timeout
        self.posted: dict[tuple[int, int], tuple[torch.Tensor, dist.Work | None]] = {}
        self.later: dict[str, list[tuple[int, int]]] = {}  # op -> receives to post before it (pre-posting only)
        if prepost:
            for src, lst in incoming.items():
                for i, tr in enumerate(lst):
                    op = (post_before or {}).get(tr.tag)
                    if op is None:
                        self.posted[(src, i)] = self._post(tr)
                    else:
                        self.later.setdefault(op, []).append((src, i))

    def post_before(self, op: str) -> None:
        """Post the receives planned to arrive before `op` (those not already taken on demand)."""
        for src, i in self.later.pop(op, ()):
            if i >= self.done[src] and (src, i) not in self.posted:
                self.posted[(src, i)] = self._post(self.incoming[src][i])

    @staticmethod
    def _post(tr: Transfer) -> tuple[torch.Tensor, dist.Work | None]:
        buf = torch.empty(math.prod(tr.shape), dtype=_wire_dtype(tr.dtype))
        work = dist.irecv(buf, src=tr.src, tag=tr.tag) if buf.numel() else None
        return buf, work

    def acked(self, acks: dict[int, int]) -> dict[int, int]:
        """source rank -> the highest seq of this rank's sends to it that it has received (from `acks` of the last
        transfer completed from it; nondecreasing, as a rank receives before it makes what depends on it)."""
        return {src: acks.get(self.incoming[src][n - 1].tag, -1) for src, n in self.done.items() if n}

    def has(self, tensor: str) -> bool:
        return tensor in self.where

    def get(self, tensor: str, env: dict[str, torch.Tensor]) -> None:
        """Complete receives from the tensor's sender up to it; each lands in env."""
        src, i = self.where[tensor]
        while self.done[src] <= i:
            k = self.done[src]
            tr = self.incoming[src][k]
            posted = self.posted.pop((src, k), None)
            buf, work = posted if posted is not None else self._post(tr)
            if work is not None:
                try:
                    work.wait(self.timeout)
                except Exception as exc:
                    raise RuntimeError(f"receiving {tr.tensor!r} from rank {tr.src} failed or timed out after "
                                       f"{self.timeout.total_seconds():.0f}s: {exc}") from None
            env[tr.tensor] = _unpack(buf, tr)
            self.done[src] = k + 1

    def drain(self, env: dict[str, torch.Tensor]) -> None:
        for src, lst in self.incoming.items():
            if lst and self.done[src] < len(lst):
                self.get(lst[-1].tensor, env)


# --------------------------------------------------------------------------------------------- one rank
def _build(spec: RunSpec, rank: int) -> Program:
    if spec.programs is not None:
        return spec.programs[rank]
    ops = spec.partition.rank_ops[rank]
    if ops:
        return load_program(spec.graph, spec.model_path, ops)
    return Program({}, {}, 1, spec.graph)


@dataclass
class _RankShare:
    """What one rank runs, built once before its repetitions: its program, ops, transfers and memory meter."""

    program: Program
    ops: tuple[str, ...]
    sends: dict[str, list[Transfer]]
    incoming: dict[int, list[Transfer]]
    feeds: dict[str, torch.Tensor]
    reads: dict[str, tuple[str, ...]]
    fault: Fault | None
    fault_op: str | None
    release: dict[str, tuple[str, ...]]
    held_always: set[str]
    meter: TensorMeter


def _rank_share(spec: RunSpec, rank: int, program: Program) -> _RankShare:
    """This rank's share of `spec`'s partition, with the fault it injects (if any) and a meter of its constants."""
    part = spec.partition
    ops = part.rank_ops[rank]
    sends = part.sends_after(rank)
    incoming = part.incoming(rank)
    feeds = {k: to_tensor(v) for k, v in spec.feeds.items()}
    graph = spec.graph
    reads = {name: graph.op(name).reads for name in ops}
    fault = spec.fault if spec.fault is not None and spec.fault.rank == rank else None
    fault_op = (fault.op or (ops[0] if ops else None)) if fault else None
    release = release_after(part, graph, rank)
    held_always = set(program.constants) | set(feeds)  # never released (release_after keeps them too)
    read_here = {t for name in ops for t in reads[name]}
    meter = TensorMeter([*program.constants.values(), *(v for k, v in feeds.items() if k in read_here)])
    return _RankShare(program, ops, sends, incoming, feeds, reads, fault, fault_op, release, held_always, meter)


def _repetition(spec: RunSpec, rank: int, share: _RankShare, rep: int, timeout: timedelta, keep_outputs: bool
                ) -> tuple[RankRun, dict[str, np.ndarray]]:
    """One timed repetition of this rank's ops (after a barrier): (its run, the graph outputs when `keep_outputs`
    on rank 0, else {}).  Memory is sampled in repetition 0, where the fault (if any) is injected too."""
    part = spec.partition
    program, ops, sends, reads = share.program, share.ops, share.sends, share.reads
    fault, fault_op, release, held_always, meter = (share.fault, share.fault_op, share.release, share.held_always,
                                                    share.meter)
    dist.barrier()
    t0 = time.perf_counter()
    env: dict[str, torch.Tensor] = dict(share.feeds)
    env.update(program.constants)
    s = time.perf_counter()
    inbox = _Inbox(share.incoming, spec.backend == "gloo", timeout, part.post_before)
    events: list[tuple[str, str, float, float]] = [("post", "", s - t0, time.perf_counter() - t0)]
    pending: list[tuple[dist.Work, torch.Tensor, Transfer]] = []
    metered = rep == 0
    for name in ops:
        if name == fault_op and rep == 0:
            assert fault is not None  # fault_op is set only with a fault
            _inject(fault, name)
        if name in inbox.later:  # receives planned to arrive before this op: posting costs time
            s = time.perf_counter()
            inbox.post_before(name)
            events.append(("post", name, s - t0, time.perf_counter() - t0))
        for tname in reads[name]:
            if tname not in env and inbox.has(tname):
                s = time.perf_counter()
                inbox.get(tname, env)
                events.append(("recv", tname, s - t0, time.perf_counter() - t0))
        s = time.perf_counter()
        run_node(program.nodes[name], env, program)
        e = time.perf_counter()
        events.append(("op", name, s - t0, e - t0))
        out_sends = sends.get(name, ())
        for tr in out_sends:
            buf = _pack(env[tr.tensor], tr)
            if buf.numel():
                work = dist.isend(buf, dst=tr.dst, tag=tr.tag)
                assert work is not None  # None only on a rank outside the group; this is the default one
                pending.append((work, buf, tr))
        if pending:  # before sampling: a completed send's buffer is free already
            pending = _reap(pending, timeout, inbox.acked(part.acks))
        if out_sends:  # the sender's side of its transfers: packing, posting, reaping
            events.append(("send", name, e - t0, time.perf_counter() - t0))
        if metered:
            _sample(meter, env, held_always, pending, inbox)
        for tname in release.get(name, ()):
            if tname not in held_always:
                env.pop(tname, None)
    if rank == 0:
        for out in part.outputs:
            if out not in env and inbox.has(out):
                s = time.perf_counter()
                inbox.get(out, env)
                events.append(("recv", out, s - t0, time.perf_counter() - t0))
    tail_s = time.perf_counter()
    inbox.drain(env)
    if metered:
        _sample(meter, env, held_always, pending, inbox)
    for item in pending:
        _wait_send(item, timeout)
    end_s = time.perf_counter() - t0
    events.append(("tail", "", tail_s - t0, end_s))
    outputs: dict[str, np.ndarray] = {}
    if rank == 0 and keep_outputs:
        outputs = {k: env[k].contiguous().numpy().copy() for k in part.outputs}
    return RankRun(end_s, events, t0), outputs


def run_rank(rank: int, spec: RunSpec, init_method: str, collect: bool = False
             ) -> RankResult | list[RankResult] | None:
    """Everything one rank does: join the group, build its share, run warm-up + measured repetitions.

    Returns this rank's result; with `collect` (torchrun, no launcher to collect), rank 0 returns every rank's
    result (gathered over the process group) and the other ranks return None."""
    torch.set_num_threads(spec.threads)
    part = spec.partition
    world = part.world_size
    timeout = timedelta(seconds=spec.comm_timeout_s)
    dist.init_process_group(spec.backend, init_method=init_method, rank=rank, world_size=world, timeout=timeout)
    try:
        t = time.perf_counter()
        program = _build(spec, rank)
        build_s = time.perf_counter() - t
        share = _rank_share(spec, rank, program)
        runs: list[RankRun] = []
        outputs: dict[str, np.ndarray] = {}
        total = spec.warmup + spec.repeat
        probe_before: dict[str, float] = {}
        with torch.inference_mode():
            for rep in range(total):
                if rep == spec.warmup and spec.probe is not None:
                    probe_before = spec.probe(rank, world)
                run, kept = _repetition(spec, rank, share, rep, timeout, rep == total - 1)
                runs.append(run)
                if rank == 0 and rep == total - 1:
                    outputs = kept
        probe_after = spec.probe(rank, world) if spec.probe is not None else {}
        dist.barrier()
        result = RankResult(rank, build_s, runs[spec.warmup:], outputs, share.meter.peak_bytes,
                            share.meter.fixed_bytes, probe_before, probe_after)
        if not collect:
            return result
        gathered: list | None = [None] * world if rank == 0 else None
        dist.gather_object(result, gathered, dst=0)
        return gathered
    finally:
        dist.destroy_process_group()


def _sample(meter: TensorMeter, env: dict[str, torch.Tensor], held_always: set[str],
            pending: list[tuple[dist.Work, torch.Tensor, Transfer]], inbox: _Inbox) -> None:
    """One memory sample: activations in env, send buffers in flight, receive buffers posted (memory_meter)."""
    meter.sample((v for k, v in env.items() if k not in held_always), (buf for _, buf, _ in pending),
                 (buf for buf, _ in inbox.posted.values()))


def _wait_send(item: tuple[dist.Work, torch.Tensor, Transfer], timeout: timedelta) -> None:
    work, _buf, tr = item
    try:
        work.wait(timeout)
    except Exception as exc:
        raise RuntimeError(f"sending {tr.tensor!r} to rank {tr.dst} failed or timed out: {exc}") from None


def _reap(pending: list[tuple[dist.Work, torch.Tensor, Transfer]], timeout: timedelta, acked: dict[int, int]
          ) -> list[tuple[dist.Work, torch.Tensor, Transfer]]:
    """The sends still in flight.  Completed ones — reported so, or known received (`acked`: destination rank ->
    highest seq it has received, `partition.send_acknowledgements`) — are waited on (at once; a failed one raises)
    and dropped, so their buffers are freed."""
    still = []
    for item in pending:
        tr = item[2]
        if tr.seq <= acked.get(tr.dst, -1) or item[0].is_completed():
            _wait_send(item, timeout)
        else:
            still.append(item)
    return still


def _inject(fault: Fault, op: str) -> None:
    if fault.kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError(f"injected fault before op {op!r}")


# --------------------------------------------------------------------------------------------- local launcher
# Errors that follow another rank's failure rather than cause one: a peer's closed socket, a broken or timed-out
# transfer or barrier (gloo's and our own wording).
_CONSEQUENCES = ("connection closed by peer", "connection reset", "broken pipe", "failed or timed out",
                 "timed out", "gloo/transport", "read error", "socket closed")


def is_consequence(text: str) -> bool:
    """True when a rank's error reads like the consequence of another rank's failure (see `_CONSEQUENCES`)."""
    low = text.lower()
    return any(c in low for c in _CONSEQUENCES)


def launch_local(spec: RunSpec) -> list[RankResult]:
    """Fork one process per rank on this host, run, and return every rank's result (index = rank).

    Raises RunFailed within a bounded time if any rank raises, dies or the run exceeds `spec.run_timeout_s`; the
    other ranks are killed first (`planner.execute.procs`)."""
    init = f"tcp://127.0.0.1:{free_port()}"
    return run_forked(spec.partition.world_size, lambda rank: run_rank(rank, spec, init),
                      timeout_s=spec.run_timeout_s, what="the run", error=RunFailed, secondary=is_consequence)
