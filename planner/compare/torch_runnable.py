"""Which of `plan-compare`'s schedules torch's pipelining runtime can run, and the planned schedule it can run when
the planned row's own cannot (`runnable_row`), with the line that tells the user which file to take (`torch_line`).

torch's runtime (``torch.distributed.pipelining``'s ``_PipelineScheduleRuntime``, checked against torch 2.13) runs
one chain of stages ``0 .. S-1``: stage s feeds stage s + 1, every stage runs every micro-batch, and each stage sits
on one rank, the rank whose CSV row holds its actions (it infers that mapping from the CSV, so any placement of the
chain runs: the fixed one, stage d on rank d, and the V, stages d and 2p-1-d on rank d).  DualPipe's two-direction
placement is two chains (two copies of the model, m/2 micro-batches each way, whose gradients must be summed), which
torch refuses (`planner.execute.torch_pipelining`).  So a schedule is runnable when its pipeline is one chain in
stage order (`torch_runs`), and the planned row on the V or the fixed placement always is.
"""

from __future__ import annotations

import dataclasses

from planner.compare.compare_row import CompareRow
from planner.compare.placement_choice import warmest
from planner.compare.planned_row import PlacementJob, RowSearch, plan_placement
from planner.compare.table_text import figure_text

__all__ = ["RUNNABLE_NAME", "TORCH_PLACEMENTS", "runnable_row", "torch_line", "torch_runs"]

# the planned row's placements whose schedules are one chain of stages (torch runs them)
TORCH_PLACEMENTS = ("v", "fixed")
# the row (and ``<name>.torch.csv``) of the planned schedule torch runs, written when the planned row's is not
RUNNABLE_NAME = "opplan-runnable"


def torch_runs(row: CompareRow) -> bool:
    """Whether torch's pipelining runtime can run `row`'s schedule: its pipeline is one chain of its stages in
    order (module docstring)."""
    pipe = row.pipeline
    return pipe is not None and pipe.chains == (tuple(range(len(pipe.stages))),)


def runnable_row(job: PlacementJob, solved: dict[str, CompareRow], budget_s: float,
                 search: RowSearch) -> CompareRow:
    """The planned schedule torch runs, named `RUNNABLE_NAME`: the shortest row already solved on a placement of
    `TORCH_PLACEMENTS` (`solved`: placement -> its row; no solve then), else a solve of the one of them whose
    baselines run shortest within the cap (`placement_choice.warmest`) within `budget_s`; a skipped row with the
    solver's reason when no schedule fits."""
    done = [r for r in solved.values() if r.figures is not None and torch_runs(r)]
    if done:
        row = min(done, key=lambda r: r.figures.makespan_tick)  # type: ignore[union-attr]
        return dataclasses.replace(row, name=RUNNABLE_NAME, notes={**row.notes, "solved": "with the planned row"})
    placement = warmest(list(TORCH_PLACEMENTS), job.p, job.m, job.costs, job.scales, job.baselines, job.cap_bytes)
    label = f"{placement}, runnable by torch"  # the solve's progress lines say what it is for
    row = plan_placement(dataclasses.replace(job, placement=placement, listed=None,
                                             search=dataclasses.replace(search, placement=label)), budget_s)
    return dataclasses.replace(row, name=RUNNABLE_NAME, notes={**row.notes, "solved": "on its own"})


def torch_line(planned: CompareRow, runnable: CompareRow | None, time_unit: str, ticks_per_unit: float) -> str:
    """One line: whether ``opplan.torch.csv`` runs in torch's pipelining runtime, and when it does not, which file
    does (`runnable`, written as ``opplan-runnable.torch.csv``) and why the planned one cannot."""
    pipe = planned.pipeline
    assert pipe is not None and planned.figures is not None
    if torch_runs(planned):
        return (f"torch: opplan.torch.csv runs in torch.distributed.pipelining's runtime (one chain of "
                f"{len(pipe.stages)} stages, the {planned.notes.get('placement')} placement)")
    why = ("opplan.torch.csv cannot: it runs two model copies in two directions (DualPipe's placement) and torch's "
           "runtime runs one chain of stages" if len(pipe.chains) > 1 else
           "opplan.torch.csv cannot: its stages are not one chain in stage order, which torch's runtime needs")
    if runnable is None:  # not asked for, or the user stopped the search first
        return f"torch: {why}; --placement v or fixed plans a schedule it runs"
    if runnable.figures is None:
        return f"torch: {why}; no planned schedule on a placement torch runs ({runnable.skipped})"
    longer = runnable.figures.makespan_tick / planned.figures.makespan_tick - 1
    return (f"torch: {RUNNABLE_NAME}.torch.csv runs in torch.distributed.pipelining's runtime (the planned schedule "
            f"on the {runnable.notes.get('placement')} placement, makespan "
            f"{figure_text(runnable.figures.makespan_tick / ticks_per_unit)} {time_unit}, {longer:+.1%} against "
            f"opplan's); {why}")
