"""Own pipeline-training runtime: one gloo rank runs its device's ordered actions of a `Schedule`.

**Layout** (`StageLayout`).  Stage s lives on rank ``schedule.stage_to_device[s]``.  Micro-batches walk *chains*
of stages (the word of `planner.pipeline.unroll`): one chain ``(0, 1, ..., S-1)`` unless given.  Every chain has
the same length C, the number of model chunks, and the i-th stage of any chain runs model chunk i
(`planner.execute.train.model`).  Micro-batch k of chain c is global micro-batch ``c * M + k``
(M = ``schedule.num_microbatches``), so DualPipe — chains ``(0..p-1)`` and ``(p..2p-1)``, stage p+j a second copy
of chunk j — trains ``2M`` micro-batches, M entering at each end.  Several stages per rank are fine
(interleaved: stage c*p+d on rank d; V-shape: rank i holds stages i and 2p-1-i); a hand-off between two stages of
one rank is a local tensor, not a message.

**Actions** (the letters of `planner.schedule.actions`; PyTorch's F, I, W, B):

* ``sFk`` — forward of chunk(s) on micro-batch k.  Its input is the tokens (first stage of a chain) or the
  boundary activation from the previous stage, made a fresh leaf (``detach().requires_grad_()``) so that each
  stage's autograd graph ends at its own input.  The last stage of a chain also computes the micro-batch loss
  (`model.microbatch_loss`, already divided by the number of micro-batches).  The output is sent at once to the
  next stage's rank.  The graph and the input leaf stay saved until the weight gradient is done.
* ``sBk`` — input gradient only: ``torch.autograd.grad(out, [input], grad_outputs=dy, retain_graph=True)``;
  dy is the gradient received from the next stage (none for the loss).  The result is sent upstream at once.  On
  the first stage of a chain (input = token ids, no gradient) B has nothing to compute.
* ``sWk`` — weight gradient: ``torch.autograd.grad(out, params, grad_outputs=dy)`` with the graph released
  afterwards, each result added into ``param.grad``.  Autograd only runs the nodes on paths to the requested
  inputs, so B skips the weight products and W skips the input product of the stage's first layer; W does
  re-walk the stage's inner activation-gradient chain (the price of a split without hooks into autograd's
  intermediate gradients; timings, not numbers, show it).
* ``sBWk`` — both at once: ``torch.autograd.grad(out, [input] + params, dy)``.
* ``sFk&tBj`` / ``&tBWj`` (DualPipe's overlapped pair) — overlap is a *scheduling* notion: it says the two halves
  may share the device's time (computation of one chunk hiding the communication of the other).  This runtime
  runs the forward half, sends its output, then runs the backward half.  That only releases the forward's
  output earlier than a pair treated as one task would, so it adds no dependency.
* ``SEND_*`` / ``RECV_*`` actions, if a schedule has them, are ignored: the runtime derives every transfer from the
  compute actions (below).

**Communication rule.**  A transfer exists for every chain edge whose two stages sit on different ranks: the
activation of ``F(s, k)`` to ``F(next(s), k)`` and the input gradient of ``B|BW(next(s), k)`` to
``B|BW(s, k)``.  Each is identified by its tag ``2 * (consumer_stage * M + k) + (0 activation | 1 gradient)``,
unique per message, and its shape and dtype are known beforehand (`MoEConfig.residual_shape`, float32).

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

from planner.execute.train.model import build_model, chunk_param_names, make_batches, microbatch_loss
from planner.ir.moe_config import MoEConfig
from planner.schedule.actions import Action, ActionKind, OverlapAction, ScheduleAction
from planner.schedule.program import Schedule

__all__ = ["PeerCommError", "comm_call", "StageLayout", "TrainFault", "ActionTiming", "RankOutput",
           "run_rank_actions"]

_ACT, _GRAD = 0, 1


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

    def tag(self, kind: int, consumer: int, k: int) -> int:
        return 2 * (consumer * self.num_microbatches + k) + kind


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
    leaf: torch.Tensor | None  # the stage's input leaf (None on the first stage of a chain)
    out: torch.Tensor  # boundary activation, or the loss on the last stage of a chain
    dy: torch.Tensor | None = None
    input_grad_done: bool = False


def comm_call(what: str, fn, *args, **kw):
    """Call a torch.distributed function; its failure (a peer gone, a timeout) becomes a `PeerCommError`."""
    try:
        return fn(*args, **kw)
    except Exception as exc:  # noqa: BLE001 - named and re-raised
        raise PeerCommError(f"{what} failed ({type(exc).__name__}: {exc})") from None


def _parts(a: ScheduleAction) -> tuple[Action, ...]:
    return (a.forward, a.backward) if isinstance(a, OverlapAction) else (a,)


class _RankProgram:
    def __init__(self, rank: int, schedule: Schedule, layout: StageLayout, cfg: MoEConfig,
                 comm_timeout_s: float) -> None:
        self.rank = rank
        self.schedule = schedule
        self.layout = layout
        self.cfg = cfg
        self.timeout = timedelta(seconds=comm_timeout_s)
        self.model = build_model(cfg)
        self.tokens, self.targets = make_batches(cfg, layout.total_microbatches)
        self.stages = tuple(s for s in range(layout.num_stages) if layout.stage_to_device[s] == rank)
        params = dict(self.model.named_parameters())
        self.param_names = {s: chunk_param_names(self.model, layout.chunk_of[s], layout.num_chunks)
                            for s in self.stages}
        self.params = {s: [params[n] for n in names] for s, names in self.param_names.items()}
        self.saved: dict[tuple[int, int], _Saved] = {}
        self.local: dict[tuple[int, int, int], torch.Tensor] = {}
        self.inbox: dict[tuple[int, int, int], tuple[torch.Tensor, dist.Work, int]] = {}
        self.sends: list[tuple[dist.Work, torch.Tensor, str]] = []
        self.losses: dict[int, float] = {}
        self.wait_s = 0.0

    def reset(self) -> None:
        """Forget a finished step: gradients, losses, wait time (the model's weights are never updated)."""
        for p in self.model.parameters():
            p.grad = None
        self.losses.clear()
        self.wait_s = 0.0

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
                if src != self.rank:
                    buf = torch.empty(self.cfg.residual_shape, dtype=torch.float32)
                    work = comm_call(f"rank {self.rank}: posting a receive from rank {src}", dist.irecv, buf,
                                     src=src, tag=lay.tag(*key))
                    self.inbox[key] = (buf, work, src)

    def _take(self, key: tuple[int, int, int]) -> torch.Tensor:
        if key in self.local:
            return self.local.pop(key)
        if key not in self.inbox:
            what = "activation" if key[0] == _ACT else "gradient"
            raise RuntimeError(f"rank {self.rank}: no {what} for stage {key[1]} micro-batch {key[2]} was expected "
                               f"here (it was produced on this rank later in the order, or never)")
        buf, work, src = self.inbox.pop(key)
        t0 = time.perf_counter()
        try:
            work.wait(self.timeout)
        except Exception as exc:  # noqa: BLE001 - named and re-raised
            what = "activation" if key[0] == _ACT else "gradient"
            raise PeerCommError(f"rank {self.rank}: receiving the {what} for stage {key[1]} micro-batch {key[2]} "
                               f"from rank {src} failed or timed out after {self.timeout.total_seconds():.0f}s "
                               f"({type(exc).__name__}: {exc})") from None
        self.wait_s += time.perf_counter() - t0
        return buf

    def _give(self, key: tuple[int, int, int], value: torch.Tensor, consumer: int) -> None:
        value = value.detach()
        if tuple(value.shape) != self.cfg.residual_shape or value.dtype != torch.float32:
            raise RuntimeError(f"rank {self.rank}: boundary tensor for stage {consumer} is {tuple(value.shape)} "
                               f"{value.dtype}, expected {self.cfg.residual_shape} float32")
        dst = self._device(consumer)
        if dst == self.rank:
            self.local[key] = value
            return
        buf = value.contiguous()
        what = f"{'activation' if key[0] == _ACT else 'gradient'} for stage {consumer} micro-batch {key[2]}"
        work = comm_call(f"rank {self.rank}: sending the {what} to rank {dst}", dist.isend, buf, dst=dst,
                         tag=self.layout.tag(*key))
        self.sends.append((work, buf, f"{what} to rank {dst}"))

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
        if lay.prev_of[s] is None:
            leaf, x = None, self.tokens[g]
        else:
            leaf = self._take((_ACT, s, k)).detach().requires_grad_(True)
            x = leaf
        out = self.model.forward_chunk(lay.chunk_of[s], lay.num_chunks, x)
        nxt = lay.next_of[s]
        if nxt is None:
            out = microbatch_loss(out, self.targets[g], lay.total_microbatches)
            self.losses[g] = float(out.detach())
        else:
            self._give((_ACT, nxt, k), out, nxt)
        self.saved[(s, k)] = _Saved(leaf, out)

    def _saved(self, s: int, k: int, what: str) -> _Saved:
        st = self.saved.get((s, k))
        if st is None:
            raise RuntimeError(f"rank {self.rank}: {what} of stage {s} micro-batch {k} runs before its forward "
                               f"(or twice)")
        return st

    def _grad_output(self, st: _Saved, s: int, k: int) -> None:
        if st.dy is None and self.layout.next_of[s] is not None:
            st.dy = self._take((_GRAD, s, k))

    def _send_input_grad(self, s: int, k: int, dx: torch.Tensor | None) -> None:
        prv = self.layout.prev_of[s]
        if prv is not None:
            if dx is None:
                raise RuntimeError(f"stage {s}: its output does not depend on its input")
            self._give((_GRAD, prv, k), dx, prv)

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
        if st.leaf is not None:
            (dx,) = torch.autograd.grad(st.out, [st.leaf], grad_outputs=st.dy, retain_graph=True, allow_unused=True)
            self._send_input_grad(s, k, dx)
        st.input_grad_done = True

    def weight_grad(self, s: int, k: int) -> None:
        st = self._saved(s, k, "W")
        if not st.input_grad_done:
            raise RuntimeError(f"rank {self.rank}: {s}W{k} runs before {s}B{k}")
        grads = torch.autograd.grad(st.out, self.params[s], grad_outputs=st.dy, allow_unused=True)
        self._accumulate(s, grads)
        del self.saved[(s, k)]

    def full_backward(self, s: int, k: int) -> None:
        st = self._saved(s, k, "BW")
        self._grad_output(st, s, k)
        inputs = ([st.leaf] if st.leaf is not None else []) + self.params[s]
        grads = torch.autograd.grad(st.out, inputs, grad_outputs=st.dy, allow_unused=True)
        if st.leaf is not None:
            self._send_input_grad(s, k, grads[0])
            grads = grads[1:]
        self._accumulate(s, grads)
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
                     warmup_steps: int = 0) -> RankOutput:
    """Run rank `rank`'s ordered actions of `schedule` for one training step (the process group must be up, with
    one rank per schedule device).  Returns its micro-batch losses, its parameters' gradients and timings.

    `warmup_steps` whole steps run first and are thrown away (gradients reset), so that the timings of the step
    returned do not include first-call costs (kernel selection, allocator growth); the numbers are the same."""
    if dist.is_initialized() and dist.get_world_size() != schedule.p:
        raise RuntimeError(f"the process group has {dist.get_world_size()} ranks, schedule {schedule.name!r} "
                           f"{schedule.p} devices")
    prog = _RankProgram(rank, schedule, layout, cfg, comm_timeout_s)
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
