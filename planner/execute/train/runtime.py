"""Own pipeline-training runtime: one gloo rank runs its device's ordered actions of a `Schedule`.

**Layout** (`StageLayout`).  Stage s lives on rank ``schedule.stage_to_device[s]``.  Micro-batches walk *chains*
of stages (the word of `planner.pipeline.unroll`): one chain ``(0, 1, ..., S-1)`` unless given.  Every chain has
the same length C, the number of model chunks, and the i-th stage of any chain runs model chunk i: the units
``[cut[i], cut[i+1])`` of a *cut* of the model (`planner.execute.train.model`; default `layer_cut`, whole layers;
any cut down to single operator clusters — attention | dispatch | experts | combine — works the same way).
Micro-batch k of chain c is global micro-batch ``c * M + k``
(M = ``schedule.num_microbatches``), so DualPipe — chains ``(0..p-1)`` and ``(p..2p-1)``, stage p+j a second copy
of chunk j — trains ``2M`` micro-batches, M entering at each end.  Several stages per rank are fine
(interleaved: stage c*p+d on rank d; V-shape: rank i holds stages i and 2p-1-i; sub-chunks: consecutive stages
of a chain on one rank, e.g. ``(0, 0, 1, 1)``); a hand-off between two stages of one rank is a local tensor (the
producer's output, detached), not a message, and no receive is posted for it.

**Boundary tensors.**  What crosses a chunk boundary is the tuple of tensors `model.boundary_slots` names for the
unit after the cut: the residual stream between layers and between attention and dispatch, five tensors
(residual, dispatched tokens or expert outputs, gates, token rows, expert counts) inside the MoE part.  Shapes and
dtypes are fixed by the config, so every receive is posted with its buffer beforehand; gradients come back for the
differentiable ones only.

**Actions** (the letters of `planner.schedule.actions`; PyTorch's F, I, W, B):

* ``sFk`` — forward of chunk(s) on micro-batch k.  Its input is the tokens (first stage of a chain) or the
  boundary tensors from the previous stage, the differentiable ones made fresh leaves
  (``detach().requires_grad_()``) so that each stage's autograd graph ends at its own inputs.  The last stage of
  a chain also computes the micro-batch loss (`model.microbatch_loss`, already divided by the number of
  micro-batches).  The outputs are sent at once to the next stage's rank (or kept for it, on this rank).  The
  graph and the input leaves stay saved until the weight gradient is done.
* ``sBk`` — input gradient only: ``torch.autograd.grad(outs, inputs, grad_outputs=dys, retain_graph=True)`` over
  the differentiable boundary tensors; dys are the gradients received from the next stage (none for the loss).  An
  input no output depends on gets a zero gradient.  The result is sent upstream at once.  On the first stage of
  a chain (input = token ids, no gradient) B has nothing to compute.
* ``sWk`` — weight gradient: ``torch.autograd.grad(outs, params, grad_outputs=dys)`` with the graph released
  afterwards, each result added into ``param.grad``.  Autograd only runs the nodes on paths to the requested
  inputs, so B skips the weight products and W skips the input product of the stage's first layer; W does
  re-walk the stage's inner activation-gradient chain (the price of a split without hooks into autograd's
  intermediate gradients; timings, not numbers, show it).  A chunk without parameters (a lone ``combine``) has an
  empty W that only releases the saved graph.
* ``sBWk`` — both at once: ``torch.autograd.grad(outs, inputs + params, dys)``.
* ``sFk&tBj`` / ``&tBWj`` (DualPipe's overlapped pair) — overlap is a *scheduling* notion: it says the two halves
  may share the device's time (computation of one chunk hiding the communication of the other).  This runtime
  runs the forward half, sends its output, then runs the backward half.  That only releases the forward's
  output earlier than a pair treated as one task would, so it adds no dependency.
* ``SEND_*`` / ``RECV_*`` actions, if a schedule has them, are ignored: the runtime derives every transfer from the
  compute actions (below).

**Communication rule.**  A transfer exists for every chain edge whose two stages sit on different ranks: the
activations of ``F(s, k)`` to ``F(next(s), k)`` and the input gradients of ``B|BW(next(s), k)`` to
``B|BW(s, k)``, one message per boundary tensor.  Each is identified by its tag
``(2 * (consumer_stage * M + k) + (0 activation | 1 gradient)) * MAX_SLOTS + slot``, unique per message, and its
shape and dtype are known beforehand (`model.boundary_slots`).  Hops between two stages of one rank have none.

1. A rank posts *all* its receives (``irecv`` with source and tag) before its first action; gloo matches a
   message to the receive with the same source and tag, whatever the order in which they are sent or waited.
2. A rank sends with ``isend`` as soon as a result is produced and never waits for a send until its program is
   done.
3. A rank blocks only in ``wait`` on the receive of an input its next action needs.

Why this cannot deadlock for a valid schedule: by 1 and 2 no send waits for the receiver and no receive waits for
another receive, so a rank is blocked only on a true data dependency of the unrolled task graph (F -> next F,
B -> previous B, F -> own B, B -> own W; `planner.pipeline.unroll`).  A schedule is valid when its per-device
orders together with those dependencies are acyclic — exactly when the simulator can replay it.  Then the
action that runs first in the simulated replay among the ones not yet done always has its inputs sent already,
so some rank can always make progress.  A cyclic (invalid) schedule shows as a receive that times out, with the
waiting rank, the action and the peer in the message.  Every wait is bounded by ``comm_timeout_s``.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from planner.execute.train.model import (
    Slot,
    boundary_slots,
    build_model,
    check_cut,
    layer_cut,
    make_batches,
    microbatch_loss,
    unit_param_names,
)
from planner.ir.moe_config import MoEConfig
from planner.schedule.actions import Action, ActionKind, OverlapAction, ScheduleAction
from planner.schedule.program import Schedule

__all__ = ["PeerCommError", "comm_call", "StageLayout", "TrainFault", "ActionTiming", "RankOutput",
           "run_rank_actions"]

_ACT, _GRAD = 0, 1
MAX_SLOTS = 5
"""Most tensors crossing one boundary (`model.boundary_slots` inside the MoE part); spaces the message tags."""


class PeerCommError(RuntimeError):
    """A receive or send with another rank failed or timed out: usually the *consequence* of a peer's failure
    (the launcher prefers to report the peer) or of a cyclic, invalid order."""


@dataclass(frozen=True)
class StageLayout:
    """Which chunk each stage runs, its neighbours in its chain, and the global micro-batch numbering."""

    num_stages: int
    num_microbatches: int  # per chain (the schedule's)
    stage_to_device: tuple[int, ...]
    chains: tuple[tuple[int, ...], ...]
    chunk_of: tuple[int, ...]
    chain_of: tuple[int, ...]
    prev_of: tuple[int | None, ...]
    next_of: tuple[int | None, ...]

    @classmethod
    def of(cls, schedule: Schedule, chains: tuple[tuple[int, ...], ...] | None = None) -> StageLayout:
        s_count = schedule.num_stages
        chains = tuple(tuple(int(s) for s in c) for c in (chains or (tuple(range(s_count)),)))
        if sorted(s for c in chains for s in c) != list(range(s_count)):
            raise ValueError(f"chains {chains} must cover the schedule's stages 0..{s_count - 1} once each")
        if len({len(c) for c in chains}) != 1:
            raise ValueError(f"chains {chains} must all have the same length (the number of model chunks)")
        chunk_of = [0] * s_count
        chain_of = [0] * s_count
        prev_of: list[int | None] = [None] * s_count
        next_of: list[int | None] = [None] * s_count
        for ci, chain in enumerate(chains):
            for i, s in enumerate(chain):
                chunk_of[s], chain_of[s] = i, ci
                prev_of[s] = chain[i - 1] if i > 0 else None
                next_of[s] = chain[i + 1] if i + 1 < len(chain) else None
        return cls(s_count, schedule.num_microbatches, tuple(schedule.stage_to_device), chains, tuple(chunk_of),
                   tuple(chain_of), tuple(prev_of), tuple(next_of))

    @property
    def num_chunks(self) -> int:
        return len(self.chains[0])

    @property
    def total_microbatches(self) -> int:
        return len(self.chains) * self.num_microbatches

    def global_microbatch(self, stage: int, k: int) -> int:
        return self.chain_of[stage] * self.num_microbatches + k

    def tag(self, kind: int, consumer: int, k: int, slot: int = 0) -> int:
        if not 0 <= slot < MAX_SLOTS:
            raise ValueError(f"slot {slot} is not in 0..{MAX_SLOTS - 1}")
        return (2 * (consumer * self.num_microbatches + k) + kind) * MAX_SLOTS + slot


@dataclass(frozen=True)
class TrainFault:
    """Test hook: rank `rank` raises (or SIGKILLs itself, ``kind='kill'``) just before its action named `action`
    (our string form, e.g. ``'1F2'``; None: its first compute action)."""

    rank: int
    action: str | None = None
    kind: str = "raise"


@dataclass(frozen=True)
class ActionTiming:
    """One executed compute action: seconds from the rank's step start; `wait_s` of it spent blocked on receives."""

    action: str
    start_s: float
    end_s: float
    wait_s: float


@dataclass
class RankOutput:
    rank: int
    stages: tuple[int, ...]
    microbatch_losses: dict[int, float]  # global micro-batch -> its loss (divided by the micro-batch count)
    grads: dict[str, np.ndarray]  # parameter name -> this rank's gradient (float32)
    timings: list[ActionTiming] = field(default_factory=list)
    step_s: float = 0.0

    @property
    def busy_s(self) -> float:
        return sum(t.end_s - t.start_s - t.wait_s for t in self.timings)


@dataclass
class _Saved:
    leaves: tuple[torch.Tensor, ...]  # the stage's differentiable input leaves (none on a chain's first stage)
    outs: tuple[torch.Tensor, ...]  # differentiable boundary outputs, or the loss on a chain's last stage
    dys: tuple[torch.Tensor, ...] | None = None  # their gradients, received (None for the loss)
    input_grad_done: bool = False


def comm_call(what: str, fn, *args, **kw):
    """Call a torch.distributed function; its failure (a peer gone, a timeout) becomes a `PeerCommError`."""
    try:
        return fn(*args, **kw)
    except Exception as exc:  # noqa: BLE001 - named and re-raised
        raise PeerCommError(f"{what} failed ({type(exc).__name__}: {exc})") from None


def _parts(a: ScheduleAction) -> tuple[Action, ...]:
    return (a.forward, a.backward) if isinstance(a, OverlapAction) else (a,)


def _what(kind: int) -> str:
    return "activation" if kind == _ACT else "gradient"


class _RankProgram:
    def __init__(self, rank: int, schedule: Schedule, layout: StageLayout, cfg: MoEConfig,
                 comm_timeout_s: float, cut: tuple[int, ...] | None) -> None:
        self.rank = rank
        self.schedule = schedule
        self.layout = layout
        self.cfg = cfg
        self.cut = check_cut(cfg, cut) if cut is not None else layer_cut(cfg, layout.num_chunks)
        if len(self.cut) != layout.num_chunks + 1:
            raise ValueError(f"cut {self.cut} has {len(self.cut) - 1} chunks, the chains {layout.num_chunks}")
        self.timeout = timedelta(seconds=comm_timeout_s)
        self.model = build_model(cfg)
        self.tokens, self.targets = make_batches(cfg, layout.total_microbatches)
        self.stages = tuple(s for s in range(layout.num_stages) if layout.stage_to_device[s] == rank)
        params = dict(self.model.named_parameters())
        self.param_names = {s: unit_param_names(self.model, *self.units(s)) for s in self.stages}
        self.params = {s: [params[n] for n in names] for s, names in self.param_names.items()}
        self.saved: dict[tuple[int, int], _Saved] = {}
        self.local: dict[tuple[int, int, int], tuple[torch.Tensor, ...]] = {}
        self.inbox: dict[tuple[int, int, int], tuple[list[torch.Tensor], list[dist.Work], int]] = {}
        self.sends: list[tuple[dist.Work, torch.Tensor, str]] = []
        self.losses: dict[int, float] = {}
        self.wait_s = 0.0

    def reset(self) -> None:
        """Forget a finished step: gradients, losses, wait time (the model's weights are never updated)."""
        for p in self.model.parameters():
            p.grad = None
        self.losses.clear()
        self.wait_s = 0.0

    def units(self, stage: int) -> tuple[int, int]:
        c = self.layout.chunk_of[stage]
        return self.cut[c], self.cut[c + 1]

    def slots(self, key: tuple[int, int, int]) -> tuple[Slot, ...]:
        """The tensors of message `key`: the boundary before stage key[1] (activation), or the differentiable ones
        of the boundary after it (gradient)."""
        kind, s, _k = key
        if kind == _ACT:
            return boundary_slots(self.cfg, self.units(s)[0])
        return tuple(x for x in boundary_slots(self.cfg, self.units(s)[1]) if x.differentiable)

    # ----------------------------------------------------------------------------------- communication
    def _device(self, stage: int) -> int:
        return self.layout.stage_to_device[stage]

    def post_receives(self) -> None:
        lay = self.layout
        for a in self.schedule.actions[self.rank]:
            for part in _parts(a):
                s, k = part.stage, part.microbatch
                prev, nxt = lay.prev_of[s], lay.next_of[s]
                if part.kind is ActionKind.F and prev is not None:
                    src = self._device(prev)
                    key = (_ACT, s, k)
                elif part.kind in (ActionKind.B, ActionKind.BW) and nxt is not None:
                    src = self._device(nxt)
                    key = (_GRAD, s, k)
                else:
                    continue
                if src == self.rank:  # a local hand-off: nothing to receive
                    continue
                bufs, works = [], []
                for i, slot in enumerate(self.slots(key)):
                    buf = torch.empty(slot.shape, dtype=slot.dtype)
                    works.append(comm_call(f"rank {self.rank}: posting a receive from rank {src}", dist.irecv,
                                           buf, src=src, tag=lay.tag(*key, i)))
                    bufs.append(buf)
                self.inbox[key] = (bufs, works, src)

    def _take(self, key: tuple[int, int, int]) -> tuple[torch.Tensor, ...]:
        if key in self.local:
            return self.local.pop(key)
        if key not in self.inbox:
            raise RuntimeError(f"rank {self.rank}: no {_what(key[0])} for stage {key[1]} micro-batch {key[2]} is "
                               f"there when it is needed: its producer, on this rank, runs later in the order or "
                               f"never")
        bufs, works, src = self.inbox.pop(key)
        t0 = time.perf_counter()
        for work in works:
            try:
                work.wait(self.timeout)
            except Exception as exc:  # noqa: BLE001 - named and re-raised
                raise PeerCommError(f"rank {self.rank}: receiving the {_what(key[0])} for stage {key[1]} "
                                    f"micro-batch {key[2]} from rank {src} failed or timed out after "
                                    f"{self.timeout.total_seconds():.0f}s ({type(exc).__name__}: {exc})") from None
        self.wait_s += time.perf_counter() - t0
        return tuple(bufs)

    def _give(self, key: tuple[int, int, int], values: tuple[torch.Tensor, ...], consumer: int) -> None:
        slots = self.slots(key)
        values = tuple(v.detach() for v in values)
        if len(values) != len(slots) or any(tuple(v.shape) != x.shape or v.dtype != x.dtype
                                            for v, x in zip(values, slots, strict=False)):
            got = [(tuple(v.shape), v.dtype) for v in values]
            raise RuntimeError(f"rank {self.rank}: boundary tensors for stage {consumer} are {got}, expected "
                               f"{[(x.shape, x.dtype) for x in slots]}")
        dst = self._device(consumer)
        if dst == self.rank:
            self.local[key] = values
            return
        what = f"{_what(key[0])} for stage {consumer} micro-batch {key[2]}"
        for i, value in enumerate(values):
            buf = value.contiguous()
            work = comm_call(f"rank {self.rank}: sending the {what} to rank {dst}", dist.isend, buf, dst=dst,
                             tag=self.layout.tag(*key, i))
            self.sends.append((work, buf, f"{what} ({slots[i].name}) to rank {dst}"))

    def finish_sends(self) -> None:
        for work, _buf, what in self.sends:
            try:
                work.wait(self.timeout)
            except Exception as exc:  # noqa: BLE001
                raise PeerCommError(f"rank {self.rank}: sending the {what} failed or timed out "
                                    f"({type(exc).__name__}: {exc})") from None
        self.sends.clear()

    # ----------------------------------------------------------------------------------- compute
    def forward(self, s: int, k: int) -> None:
        lay = self.layout
        g = lay.global_microbatch(s, k)
        lo, hi = self.units(s)
        if lay.prev_of[s] is None:
            leaves: tuple[torch.Tensor, ...] = ()
            xs: torch.Tensor | tuple[torch.Tensor, ...] = self.tokens[g]
        else:
            got = self._take((_ACT, s, k))
            slots = boundary_slots(self.cfg, lo)
            xs = tuple(t.detach().requires_grad_(True) if x.differentiable else t for t, x in zip(got, slots,
                                                                                                  strict=True))
            leaves = tuple(t for t, x in zip(xs, slots, strict=True) if x.differentiable)
        out = self.model.forward_units(lo, hi, xs)
        nxt = lay.next_of[s]
        if nxt is None:
            loss = microbatch_loss(out[0], self.targets[g], lay.total_microbatches)
            self.losses[g] = float(loss.detach())
            outs: tuple[torch.Tensor, ...] = (loss,)
        else:
            self._give((_ACT, nxt, k), out, nxt)
            outs = tuple(t for t, x in zip(out, boundary_slots(self.cfg, hi), strict=True) if x.differentiable)
        self.saved[(s, k)] = _Saved(leaves, outs)

    def _saved(self, s: int, k: int, what: str) -> _Saved:
        st = self.saved.get((s, k))
        if st is None:
            raise RuntimeError(f"rank {self.rank}: {what} of stage {s} micro-batch {k} runs before its forward "
                               f"(or twice)")
        return st

    def _grad_output(self, st: _Saved, s: int, k: int) -> None:
        if st.dys is None and self.layout.next_of[s] is not None:
            st.dys = self._take((_GRAD, s, k))

    def _send_input_grads(self, s: int, k: int, st: _Saved, dxs) -> None:
        prv = self.layout.prev_of[s]
        if prv is not None:
            # an input no output depends on (none in this model's units) has a zero gradient
            grads = tuple(torch.zeros_like(x) if g is None else g for g, x in zip(dxs, st.leaves, strict=True))
            self._give((_GRAD, prv, k), grads, prv)

    def _accumulate(self, s: int, grads) -> None:
        for p, g in zip(self.params[s], grads, strict=True):
            if g is None:
                continue  # e.g. an expert that got no token of this micro-batch
            p.grad = g.detach().clone() if p.grad is None else p.grad + g

    def input_grad(self, s: int, k: int) -> None:
        st = self._saved(s, k, "B")
        if st.input_grad_done:
            raise RuntimeError(f"rank {self.rank}: {s}B{k} runs twice")
        self._grad_output(st, s, k)
        if st.leaves:
            dxs = torch.autograd.grad(st.outs, st.leaves, grad_outputs=st.dys, retain_graph=True, allow_unused=True)
            self._send_input_grads(s, k, st, dxs)
        st.input_grad_done = True

    def weight_grad(self, s: int, k: int) -> None:
        st = self._saved(s, k, "W")
        if not st.input_grad_done:
            raise RuntimeError(f"rank {self.rank}: {s}W{k} runs before {s}B{k}")
        if self.params[s]:
            grads = torch.autograd.grad(st.outs, self.params[s], grad_outputs=st.dys, allow_unused=True)
            self._accumulate(s, grads)
        del self.saved[(s, k)]

    def full_backward(self, s: int, k: int) -> None:
        st = self._saved(s, k, "BW")
        self._grad_output(st, s, k)
        inputs = list(st.leaves) + self.params[s]
        if inputs:
            grads = torch.autograd.grad(st.outs, inputs, grad_outputs=st.dys, allow_unused=True)
            n = len(st.leaves)
            if n:
                self._send_input_grads(s, k, st, grads[:n])
            self._accumulate(s, grads[n:])
        del self.saved[(s, k)]

    def run(self, part: Action) -> None:
        kind, s, k = part.kind, part.stage, part.microbatch
        if kind is ActionKind.F:
            self.forward(s, k)
        elif kind is ActionKind.B:
            self.input_grad(s, k)
        elif kind is ActionKind.W:
            self.weight_grad(s, k)
        elif kind is ActionKind.BW:
            self.full_backward(s, k)
        # SEND_*/RECV_*: transfers are derived from the compute actions (module docstring)

    def named_grads(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        params = dict(self.model.named_parameters())
        for s in self.stages:
            for name in self.param_names[s]:
                p = params[name]
                g = p.grad if p.grad is not None else torch.zeros_like(p)
                out[name] = g.detach().numpy().copy()
        return out


def _inject(fault: TrainFault, action: str) -> None:
    if fault.kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError(f"injected fault before action {action}")


def run_rank_actions(rank: int, schedule: Schedule, layout: StageLayout, cfg: MoEConfig, *,
                     comm_timeout_s: float = 30.0, fault: TrainFault | None = None,
                     warmup_steps: int = 0, cut: tuple[int, ...] | None = None) -> RankOutput:
    """Run rank `rank`'s ordered actions of `schedule` for one training step (the process group must be up, with
    one rank per schedule device).  Returns its micro-batch losses, its parameters' gradients and timings.

    `cut`: the model's unit boundaries, one chunk per chain position (`model.check_cut`); None: whole layers
    (`model.layer_cut`).

    `warmup_steps` whole steps run first and are thrown away (gradients reset), so that the timings of the step
    returned do not include first-call costs (kernel selection, allocator growth); the numbers are the same."""
    if dist.is_initialized() and dist.get_world_size() != schedule.p:
        raise RuntimeError(f"the process group has {dist.get_world_size()} ranks, schedule {schedule.name!r} "
                           f"{schedule.p} devices")
    prog = _RankProgram(rank, schedule, layout, cfg, comm_timeout_s, cut)
    if fault is not None and fault.rank != rank:
        fault = None
    compute = [a for a in schedule.actions[rank] if a.is_compute]
    fault_at = (fault.action or (str(compute[0]) if compute else None)) if fault else None
    for step in range(warmup_steps + 1):
        if step:
            prog.reset()
        if dist.is_initialized():
            comm_call(f"rank {rank}: the barrier before step {step}", dist.barrier)
        t0 = time.perf_counter()
        prog.post_receives()
        timings: list[ActionTiming] = []
        for a in compute:
            name = str(a)
            if fault is not None and (name == fault_at or any(str(p) == fault_at for p in _parts(a))):
                _inject(fault, name)
            start, waited = time.perf_counter(), prog.wait_s
            for part in _parts(a):
                prog.run(part)
            timings.append(ActionTiming(name, start - t0, time.perf_counter() - t0, prog.wait_s - waited))
        prog.finish_sends()
        step_s = time.perf_counter() - t0
        if prog.saved or prog.local or prog.inbox:
            left = [f"{s}F{k}" for s, k in prog.saved] + [f"{k}" for k in list(prog.local) + list(prog.inbox)]
            raise RuntimeError(f"rank {rank}: the schedule left work or messages unconsumed: {left[:8]}")
    return RankOutput(rank, prog.stages, dict(prog.losses), prog.named_grads(), timings, step_s)
