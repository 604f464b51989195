"""Run one training step of a pipeline `Schedule` on forked gloo ranks of this host: `run_training_schedule`.

One process per schedule device (``fork`` start, TCP rendezvous on 127.0.0.1, ``torch.set_num_threads(1)``,
gloo with ``comm_timeout_s`` as the process-group timeout).  Each rank builds the same model from the seed, runs
its actions (`runtime.run_rank_actions`) and pipes back its losses, gradients (numpy) and timings.  The launcher
waits on every rank's pipe and process sentinel until ``timeout_s``; the first rank that raises, dies or is late
ends the run: the other ranks are terminated (then killed), and `TrainRunFailed` names the failing rank and its
error.  Children also get ``PR_SET_PDEATHSIG`` so none outlives a killed launcher.

**Gradients of several copies.**  A parameter held by more than one stage copy (DualPipe: stage p+j is a second
copy of chunk j, on another rank) gets the *sum* of its copies' gradients — each copy saw a disjoint half of the
micro-batches, and the loss is a sum over micro-batches, so the sum is the gradient of the one logical parameter.
A real DualPipe deployment all-reduces the two copies' gradients between ranks r and p-1-r before the optimizer
step; here the launcher adds them (in rank order) when it collects the results.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from planner.errors import OpplanError
from planner.execute.train.model import MoEConfig
from planner.execute.train.runtime import (
    PeerCommError,
    RankOutput,
    StageLayout,
    TrainFault,
    comm_call,
    run_rank_actions,
)
from planner.schedule.program import Schedule

__all__ = ["TrainResult", "TrainRunFailed", "run_training_schedule"]


class TrainRunFailed(OpplanError):
    """A training rank raised, died or was late; the message names the rank and its error."""

    exit_status = 1


@dataclass
class TrainResult:
    """One training step: the loss (sum over micro-batches of each one's loss / micro-batch count, added in
    micro-batch order), each micro-batch's part, every parameter's gradient, and each rank's output (timings)."""

    schedule_name: str
    loss: float
    microbatch_losses: tuple[float, ...]
    grads: dict[str, np.ndarray]
    ranks: list[RankOutput]

    @property
    def step_s(self) -> tuple[float, ...]:
        return tuple(r.step_s for r in self.ranks)

    @property
    def busy_s(self) -> tuple[float, ...]:
        return tuple(r.busy_s for r in self.ranks)


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _rank_main(rank: int, world: int, init: str, schedule: Schedule, layout: StageLayout, cfg: MoEConfig,
               comm_timeout_s: float, fault: TrainFault | None, warmup_steps: int, conn, parent: int) -> None:
    status = 0
    try:
        _die_with_parent()
        if os.getppid() != parent:
            os._exit(1)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                                timeout=timedelta(seconds=comm_timeout_s))
        try:
            out = run_rank_actions(rank, schedule, layout, cfg, comm_timeout_s=comm_timeout_s, fault=fault,
                                   warmup_steps=warmup_steps)
            # no rank tears down its connections while a peer still reads from them
            comm_call(f"rank {rank}: the final barrier", dist.barrier)
        finally:
            dist.destroy_process_group()
        conn.send(("ok", out))
    except BaseException as exc:  # noqa: BLE001 - every failure goes to the launcher
        status = 1
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        except Exception:  # noqa: BLE001
            pass
    finally:
        try:
            conn.close()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status)  # a forked child never runs the parent's atexit handlers or pytest's teardown


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _how_it_ended(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _shut_down(procs) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    end = time.monotonic() + 3.0
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5.0)


_GRACE_S = 2.0  # after a first failure, how long to wait for the others to report theirs


def _collect(name: str, procs, conns, timeout_s: float) -> dict[int, RankOutput]:
    """Every rank's output, or `TrainRunFailed` for the root cause of a failure.

    A rank that fails makes its peers fail too (their receives break or time out), sometimes before the launcher
    hears of the first one.  So after the first failure the launcher waits up to `_GRACE_S` for the others and
    reports, in this order of preference: a rank that died without reporting, a rank that raised anything but a
    `PeerCommError`, then the first to report.  The others' errors follow in one line each."""
    from multiprocessing.connection import wait

    world = len(procs)
    outputs: dict[int, RankOutput] = {}
    failures: dict[int, tuple[int, str]] = {}  # rank -> (preference, message); lower is preferred
    deadline = time.monotonic() + timeout_s
    grace_end: float | None = None
    while len(outputs) + len(failures) < world:
        waiting = [r for r in range(world) if r not in outputs and r not in failures]
        end = deadline if grace_end is None else min(deadline, grace_end)
        left = end - time.monotonic()
        ready = wait([conns[r] for r in waiting] + [procs[r].sentinel for r in waiting],
                     timeout=left) if left > 0 else []
        if not ready:
            if grace_end is None:
                raise TrainRunFailed(f"training step of schedule {name!r} timed out after {timeout_s:.0f}s; ranks "
                                     f"{waiting} had not finished")
            break
        for r in waiting:
            if conns[r] in ready or conns[r].poll():
                try:
                    msg = conns[r].recv()
                except EOFError:
                    msg = None
                if msg is not None and msg[0] == "ok":
                    outputs[r] = msg[1]
                    continue
                if msg is not None:
                    frames = [ln.strip() for ln in msg[2].splitlines() if ln.strip().startswith("File ")]
                    where = f" (at {frames[-1]})" if frames else ""
                    secondary = msg[1].startswith(PeerCommError.__name__ + ":")
                    failures[r] = (2 if secondary else 1, f"rank {r} failed: {msg[1]}{where}")
                else:
                    procs[r].join(1.0)
                    failures[r] = (0, f"rank {r} {_how_it_ended(procs[r].exitcode)} before reporting a result")
            elif procs[r].sentinel in ready:
                procs[r].join(1.0)
                failures[r] = (0, f"rank {r} {_how_it_ended(procs[r].exitcode)} before reporting a result")
        if failures and grace_end is None:
            grace_end = time.monotonic() + _GRACE_S
    if failures:
        order = sorted(failures, key=lambda r: failures[r][0])
        text = failures[order[0]][1]
        if len(order) > 1:
            text += "; then " + "; ".join(failures[r][1] for r in order[1:])
        raise TrainRunFailed(text)
    return outputs


def _combine(outputs: list[RankOutput], total_microbatches: int) -> tuple[tuple[float, ...], dict[str, np.ndarray]]:
    losses: dict[int, float] = {}
    grads: dict[str, np.ndarray] = {}
    for out in outputs:  # rank order
        losses.update(out.microbatch_losses)
        for name, g in out.grads.items():
            grads[name] = g.copy() if name not in grads else grads[name] + g
    missing = [g for g in range(total_microbatches) if g not in losses]
    if missing:
        raise TrainRunFailed(f"no loss came back for micro-batches {missing}")
    return tuple(losses[g] for g in range(total_microbatches)), grads


def run_training_schedule(
    schedule: Schedule,
    model_config: MoEConfig,
    *,
    world_size: int | None = None,
    timeout_s: float = 60.0,
    chains: tuple[tuple[int, ...], ...] | None = None,
    comm_timeout_s: float | None = None,
    fault: TrainFault | None = None,
    warmup_steps: int = 0,
) -> TrainResult:
    """Run one training step of `schedule` on `world_size` (= ``schedule.p``) forked gloo ranks.

    `chains`: the stage chains micro-batches walk (default one chain 0..S-1; DualPipe:
    ``((0..p-1), (p..2p-1))``, see `runtime.StageLayout`).  `timeout_s` bounds the whole run;
    `comm_timeout_s` (default `timeout_s`) each receive, send and barrier; `warmup_steps` un-timed steps run
    first (their gradients are discarded), so that `TrainResult.ranks[r].timings` show the steady state.  Raises
    `TrainRunFailed` naming the rank that failed first (see `_collect`) or the ranks that did not finish in time;
    no rank outlives the call."""
    import multiprocessing as mp

    world = schedule.p if world_size is None else int(world_size)
    if world != schedule.p:
        raise ValueError(f"schedule {schedule.name!r} has {schedule.p} devices; world_size {world} must equal it")
    schedule.check_complete()
    layout = StageLayout.of(schedule, chains)
    comm_timeout_s = float(timeout_s if comm_timeout_s is None else comm_timeout_s)
    ctx = mp.get_context("fork")
    init = f"tcp://127.0.0.1:{_free_port()}"
    parent = os.getpid()
    procs, conns = [], []
    try:
        for r in range(world):
            recv_end, send_end = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_rank_main, name=f"opplan-train-rank{r}", daemon=True,
                               args=(r, world, init, schedule, layout, model_config, comm_timeout_s, fault,
                                     warmup_steps, send_end, parent))
            proc.start()
            send_end.close()
            procs.append(proc)
            conns.append(recv_end)
        outputs = _collect(schedule.name, procs, conns, timeout_s)
    finally:
        _shut_down(procs)
        for c in conns:
            c.close()
    ranks = [outputs[r] for r in range(world)]
    losses, grads = _combine(ranks, layout.total_microbatches)
    return TrainResult(schedule.name, float(sum(losses)), losses, grads, ranks)
