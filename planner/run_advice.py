"""plan-solve's advice on how to run a plan on a CPU host: its ranks, or one process with every core.

On a CPU host the real choice is between splitting the ops over ranks (each rank on its own core, tensors
crossing in shared memory) and one process whose kernels use every core as intra-op threads.  With op times
measured for one thread and for k threads (`plan-calibrate --engine onnxruntime --nproc k` writes both:
`planner.cost.measured.load_thread_times`), each configuration has a prediction:

* one rank with t threads: the ops' t-thread times one after the other (the times are scaled so that they sum to
  the whole graph's measured run, `planner.execute.engine_times`);
* the plan's ranks with one thread each: the plan's predicted makespan (the runtime replay's where plan-solve
  chose by it, else the placement model's).

The split is advised only when it predicts at least `RunAdvicePolicy.min_gain` shorter than the best single rank;
otherwise the fastest single rank is, and the reason says why.  Without thread columns there is nothing to choose
and no advice.  Beside the advice stands what no run on the host's cores can beat with these op times, whatever its
ranks and threads (`planner.cost.core_bound`): how far any configuration could still go.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from planner.cost.core_bound import core_bound
from planner.cost.measured import load_thread_times
from planner.ir.graph import OpGraph
from planner.schedule.plan import Plan, RunAdvice, run_label

__all__ = ["RunAdvicePolicy", "advise_run", "advise_from_measured"]


@dataclass(frozen=True)
class RunAdvicePolicy:
    """How much a predicted gain must be before the split is advised."""

    # fraction of the best single rank's prediction; repeated sets of runs on a shared host differ by 5-10 %
    min_gain: float = 0.10


def advise_run(plan_s: float, plan_ranks: int, thread_times: Mapping[int, Mapping[str, float]],
               ops: Iterable[str], policy: RunAdvicePolicy = RunAdvicePolicy()) -> RunAdvice | None:
    """The advised configuration (module docstring): `plan_s` is the plan's predicted makespan in seconds on its
    `plan_ranks` used devices, `thread_times` intra-op threads -> op -> seconds, `ops` the ops a run executes.
    None when `thread_times` holds one thread count only."""
    if len(thread_times) < 2:
        return None
    names = tuple(ops)
    singles = {threads: sum(times.get(op, 0.0) for op in names) for threads, times in sorted(thread_times.items())}
    options = {run_label(1, threads): s for threads, s in singles.items()}
    threads, single_s = min(singles.items(), key=lambda kv: (kv[1], kv[0]))
    best = RunAdvice(1, threads, single_s)
    if plan_ranks > 1:
        options[run_label(plan_ranks, 1)] = plan_s
        gain = 1.0 - plan_s / single_s if single_s > 0 else 0.0
        if gain >= policy.min_gain:
            reason = (f"the plan's {plan_ranks} ranks are predicted {100 * gain:.0f}% shorter than "
                      f"{best.label()}")
            return RunAdvice(plan_ranks, 1, plan_s, tuple(options.items()), reason)
        why = ("longer" if gain < 0 else
               f"only {100 * gain:.0f}% shorter, under the {100 * policy.min_gain:.0f}% a split must gain")
        reason = f"the plan's {plan_ranks} ranks are predicted {why}"
    else:
        reason = "the plan uses one device"
    return RunAdvice(1, threads, single_s, tuple(options.items()),
                     f"{best.label()} is predicted fastest: {reason}")


def advise_from_measured(measured: Path | None, plan: Plan, choice: Mapping[str, Any],
                         say: Callable[[str], None] | None = None,
                         policy: RunAdvicePolicy = RunAdvicePolicy(), graph: OpGraph | None = None
                         ) -> RunAdvice | None:
    """plan-solve's step after `runtime_choice.choose_plan`: the advice for `plan` (the op-level plan chosen) from
    the thread columns of the measured times file, its prediction the chosen figure's (`choice`, else the
    placement model's makespan), with the bound of `graph` (the planned graph) on the host's cores where given;
    None without a file or without thread columns."""
    if measured is None:
        return None
    thread_times = load_thread_times(measured)
    if len(thread_times) < 2:
        return None
    tick_s = plan.tick_s or 1.0
    plan_s = (float(choice["candidates"][choice["chosen"]]["score_s"]) if choice
              else plan.makespan_tick * tick_s)
    ops = [op for p in plan.placements for op in plan.task_ops.get(p.task, (p.task,))]
    advice = advise_run(plan_s, len({p.device for p in plan.placements}), thread_times, ops, policy)
    if advice is not None and graph is not None:
        advice = replace(advice, bound_s=core_bound(graph, thread_times).bound_s)
    if advice is not None and say is not None:
        options = "; ".join(f"{label} {s * 1e3:.3g} ms" for label, s in advice.options_s)
        say(f"run: {advice.label()} ({advice.reason}); predicted {options}")
        if advice.bound_s:
            one = dict(advice.options_s).get(run_label(1, 1))
            ceiling = f" ({one / advice.bound_s:.2f}x one thread)" if one else ""
            say(f"no run on {max(thread_times)} cores is shorter than {advice.bound_s * 1e3:.3g} ms{ceiling} with "
                "these op times, even with free transfers")
    return advice
