"""The pipeline search's tuning, as data: one frozen record per part of the search, each field a knob with the value
the search runs with by default.  Callers pass a policy down (`solve_pipeline_lns(policy=...)`, `compare(policy=...)`);
a bench or a test that tries another value builds one with `dataclasses.replace`, never by patching a module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from formulations.model_api import SolvePolicy
from formulations.pipeline_periodic import PeriodicModelPolicy


@dataclass(frozen=True)
class PipelineLnsPolicy:
    """The steps of the large-neighbourhood search (`planner.search.pipeline.lns.improve_pipeline`) and the shape of
    its neighbourhoods (`planner.search.pipeline.neighbourhoods`)."""

    step_s: float = 4.0  # solver time of one step, besides its build: on a whole pipeline shorter steps gain less
    min_step_s: float = 1.0  # no step starts with less time left (what is left goes back to the caller)
    initial_size: int = 64  # tasks of the first neighbourhood; `grow` and `shrink` fit the size to the pipeline
    min_size: int = 8  # tasks: a smaller neighbourhood has nothing left to reorder
    grow: float = 1.25  # size factor after a step proven optimal within its time: that size was too easy
    shrink: float = 0.8  # size factor after a step cut by its time limit without a gain: that size was too hard
    decay: float = 0.9  # weight factor of a kind after a step without a gain: kinds that gain get drawn more
    min_weight: float = 0.05  # a kind's weight never decays below this: every kind keeps being drawn now and then
    microbatches: int = 4  # consecutive micro-batches a ``microbatches`` neighbourhood draws from: a steady-state span
    ends_share: float = 0.17  # of the tasks, what a ``head`` / ``tail`` step frees: the whole fill or drain at once
    # a ``critical`` neighbourhood frees a stretch of the critical chain of at most 1 / this of its tasks, and the
    # rest around it on the stretch's streams: the chain alone has too little room to reorder
    critical_part: int = 4


@dataclass(frozen=True)
class HalfSearchPolicy:
    """The search on a mirror half (`planner.search.pipeline.half`): a first phase of short steps on few workers,
    a second of longer steps on the caller's workers, and rounds of one step on each end of the schedule (the fill,
    ``head``, and the drain, ``tail``) between parts of the second phase.  Short steps gain early, long steps later;
    a drain the search has just built leaves the most to repack, and a drain repacked halfway is built on by the
    steps after it."""

    step_s: float = 0.5  # step limit of the first phase: many small steps while gains are cheap
    threads: int = 4  # CP-SAT workers of the first phase's steps, at most (a caller's smaller `threads` stays)
    first_share: float = 0.5  # of the search's time (less the ends'), what the first phase gets
    step_share: float = 0.5  # of the caller's step limit, the second phase's steps
    second_threads: int | None = None  # workers of the second phase's steps, at most (None: the caller's `threads`)
    ends: bool = True  # run the ends' steps (False: the two phases alone)
    ends_step_s: float = 60.0  # limit of one end's step: a whole drain re-solved can take most of a minute
    ends_time_share: float = 0.1  # of the search's time, at most, for each end's step: a short search keeps the rest
    ends_rounds: int = 2  # rounds of the ends' steps, the second phase's time split evenly before them
    # CP-SAT's deterministic mode in the half's steps: it interleaves its strategies in batches and stops at a
    # deterministic-time limit that comes well before a sub-second wall-clock limit, so the default portfolio finds
    # more per short step (on one worker it is one seeded search, repeatable when not cut by its limit)
    deterministic: bool = False


@dataclass(frozen=True)
class PeriodicPolicy:
    """The periodic start of a mirror half's search (`planner.search.pipeline.periodic.periodic_start`): a periodic
    schedule of the half (`formulations.pipeline_periodic`) plans the steady state across all devices at once, which
    no neighbourhood of the search's size reaches; it is taken only where its replay ends before the warm start's."""

    # above the period bound (the busiest stream's work per micro-batch), each tried in turn: at the bound itself
    # the memory rarely fits, a little above it the steady state is tight and still fits
    margins: tuple[float, ...] = (0.01, 0.025)
    share: float = 0.15  # of the search's time, for all the periodic solves together (0: no periodic start)
    model: PeriodicModelPolicy = field(default_factory=PeriodicModelPolicy)  # the periodic model's own tuning


@dataclass(frozen=True)
class PipelineSearchPolicy:
    """Everything `planner.search.pipeline.solve.solve_pipeline_lns` decides: the search's parts' policies, and when
    the full model runs before and after the search."""

    lns: PipelineLnsPolicy = field(default_factory=PipelineLnsPolicy)
    half: HalfSearchPolicy = field(default_factory=HalfSearchPolicy)
    periodic: PeriodicPolicy = field(default_factory=PeriodicPolicy)
    # steps in a row without a gain after which the search hands its time back to the full model: on a small
    # pipeline a stalled search means the full model was close, and only the full model can prove it
    stall_steps: int = 40
    min_resolve_s: float = 2.0  # the full model is solved again only with at least this much time left
    # above this many tasks (with a warm start) the search starts at once from the warm start, without the first
    # full solve: the full model of such a pipeline neither moves its warm start nor lifts the trivial bound within
    # any budget plan-compare gives it, while the pipelines it improves stay far below
    full_solve_max_tasks: int = 5_000
    # the formulations' knobs (the least solve time) in the full model's solves
    solve: SolvePolicy = field(default_factory=SolvePolicy)
    # CP-SAT's deterministic (interleaved) mode in the full model's solves and the search's steps (the mirror half's
    # steps follow `HalfSearchPolicy.deterministic`): repeatable where a solve ends by its proof.  False: the free
    # portfolio (all 8 workers; the interleaved mode runs at most 2, `formulations.backends.cpsat`)
    deterministic: bool = True


# the defaults, one instance each, for argument defaults
DEFAULT_LNS_POLICY = PipelineLnsPolicy()
DEFAULT_PERIODIC_POLICY = PeriodicPolicy()
DEFAULT_SEARCH_POLICY = PipelineSearchPolicy()
