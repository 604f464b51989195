"""How to run a plan on this host: its ranks as planned, or every op on one rank with all cores as intra-op threads.

On a CPU host the real choice is between splitting the ops over ranks (each rank on its own cores, tensors
crossing in shared memory) and one process, whose kernels use every core or one thread (more threads are not
always faster for small ops).  `choose_run` measures them with the fast executor (`fast_run`, engines chosen per
segment) on the same inputs, one after the other, and keeps the split only when its median is shorter than the
faster single rank's by more than the run-to-run noise of the two (the larger interquartile range of their
repetitions); otherwise the single rank runs and the reason says why.  A plan on one device runs on one rank.

`cores_available()` is the number of cores this process may run on (its CPU affinity), the budget both
candidates share.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from planner.execute.fast_run import FastRun, FastSpec, launch_fast
from planner.execute.partition import partition_plan, used_devices_only
from planner.ir.graph import OpGraph
from planner.schedule.plan import Plan

__all__ = ["RunConfig", "Trial", "RunChoice", "cores_available", "used_devices", "run_config", "choose_run"]


def cores_available() -> int:
    return len(os.sched_getaffinity(0))


@dataclass(frozen=True)
class RunConfig:
    """Ranks, intra-op threads per rank, and the engine rule (`fast_run.ENGINE_CHOICES`)."""

    ranks: int
    threads: int
    engine: str = "auto"

    def label(self) -> str:
        ranks = f"{self.ranks} rank{'s' if self.ranks > 1 else ''}"
        return f"{ranks} x {self.threads} thread{'s' if self.threads > 1 else ''}"


@dataclass(frozen=True)
class Trial:
    """One configuration measured: its repetitions' makespans and the engines its segments ran on."""

    config: RunConfig
    makespans_s: tuple[float, ...]
    engines: Mapping[str, int]

    @property
    def median_s(self) -> float:
        return statistics.median(self.makespans_s)

    @property
    def spread_s(self) -> float:
        return max(self.makespans_s) - min(self.makespans_s)

    @property
    def noise_s(self) -> float:
        """The run-to-run noise the choice allows for: the interquartile range of the repetitions (one slow
        repetition on a shared machine does not make every difference look like noise)."""
        if len(self.makespans_s) < 4:
            return self.spread_s
        q1, _, q3 = statistics.quantiles(self.makespans_s, n=4)
        return q3 - q1


@dataclass(frozen=True)
class RunChoice:
    """The chosen configuration's trial and run, every trial, and why (module docstring)."""

    chosen: Trial
    run: FastRun
    trials: tuple[Trial, ...]
    reason: str


def used_devices(plan: Plan) -> int:
    """How many devices hold at least one op of the plan."""
    return len(used_devices_only(plan).device_names)


def run_config(plan: Plan, graph: OpGraph, feeds: Mapping[str, np.ndarray], config: RunConfig, *, repeat: int,
               warmup: int = 3, where: str = "<plan>") -> tuple[Trial, FastRun]:
    """Run the plan once in `config` (all ops on rank 0 when `config.ranks` is 1).  The plan is renumbered onto the
    devices it uses first, so that two used devices land on two ranks whatever their indices."""
    partition = partition_plan(used_devices_only(plan), graph, config.ranks, where)
    spec = FastSpec(plan.model_path, graph, partition, dict(feeds), threads=config.threads, engine=config.engine,
                    repeat=repeat, warmup=warmup)
    run = launch_fast(spec)
    return Trial(config, tuple(run.makespans_s), run.engine_counts()), run


def _measure(plan: Plan, graph: OpGraph, feeds: Mapping[str, np.ndarray], config: RunConfig, *, repeat: int,
             warmup: int, where: str, say: Callable[[str], None] | None) -> tuple[Trial, FastRun]:
    trial, run = run_config(plan, graph, feeds, config, repeat=repeat, warmup=warmup, where=where)
    if say:
        say(f"{config.label()}: {trial.median_s * 1e3:.3f} ms (spread {trial.spread_s * 1e3:.3f} ms)")
    return trial, run


def choose_run(plan: Plan, graph: OpGraph, feeds: Mapping[str, np.ndarray], *, cores: int | None = None,
               repeat: int = 10, warmup: int = 3, engine: str = "auto", where: str = "<plan>",
               say: Callable[[str], None] | None = None) -> RunChoice:
    """Measure one rank (with every core, and with one thread when there are several cores) against the plan's
    split, and keep the split only where it beats the faster single rank beyond the noise (module docstring)."""
    cores = cores or cores_available()
    singles = [_measure(plan, graph, feeds, RunConfig(1, threads, engine), repeat=repeat, warmup=warmup,
                        where=where, say=say) for threads in dict.fromkeys((cores, 1))]
    single, single_run = min(singles, key=lambda tr: tr[0].median_s)
    ranks = min(used_devices(plan), cores)
    if ranks <= 1:
        return RunChoice(single, single_run, tuple(t for t, _ in singles), "the plan uses one device")
    split, split_run = _measure(plan, graph, feeds, RunConfig(ranks, max(1, cores // ranks), engine),
                                repeat=repeat, warmup=warmup, where=where, say=say)
    trials = (*(t for t, _ in singles), split)
    noise_s = max(single.noise_s, split.noise_s)
    gain_s = single.median_s - split.median_s
    if gain_s > noise_s:
        return RunChoice(split, split_run, trials,
                         f"the plan's {ranks} ranks run {gain_s * 1e3:.3f} ms faster than one rank "
                         f"(noise {noise_s * 1e3:.3f} ms)")
    why = ("slower" if gain_s < 0 else f"faster by {gain_s * 1e3:.3f} ms only, within the noise "
           f"{noise_s * 1e3:.3f} ms")
    return RunChoice(single, single_run, trials, f"{single.config.label()}: the plan's {ranks} ranks ran {why}")
