"""How `plan-compare`'s planned row spends its time and reads its results, as data (`ComparePolicy`): one field per
knob, the value `compare` runs with by default.  The command line builds the default; a bench or a test that tries
another value passes `dataclasses.replace(ComparePolicy(), ...)` to `planner.compare.pipelines.compare`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from formulations.pipeline_memory_bound import MemoryBoundPolicy
from planner.search.pipeline.policy import PipelineSearchPolicy


@dataclass(frozen=True)
class ComparePolicy:
    """The planned row's tuning (`planner.compare.pipelines`, `planner.compare.planned_row`)."""

    # of a placement's time on a model, what the first cut search gets (the solves get the rest: they, not the cut
    # search, order the tasks)
    cut_share: float = 0.25
    # a solve that ends within `bound_round_gap` of its cut's bound leaves nothing for a reorder to gain, so the
    # next cut round scores cuts by their bound (only a cut with a lower bound can be shorter)
    bound_round: bool = True
    bound_round_gap: float = 0.01
    # of a placement's time on a model, what the sub-chunk solve gets when granularity k > 1 (its model is k times
    # larger than the stage level's)
    fine_share: float = 0.5
    # ``auto``: a placement with the shortest warm start is solved alone also when another's bound is lower by less
    # than this fraction of its own gap (warm start - bound): a lower bound that much below a schedule that far from
    # it says nothing about which placement ends shorter, and one placement alone gets the whole budget
    bound_tie: float = 0.05
    at_cap_share: float = 0.99  # a device whose peak is at least this share of the cap counts as at the cap
    # of each formulation solve's time, what the large-neighbourhood search gets after the full model: the search
    # moves the large pipelines the full model stalls on, and hands its time back where it stalls
    lns_share: float = 0.5
    # plan-compare: when every placement the planned row solves is one torch's pipelining runtime cannot run
    # (DualPipe's two directions), the share of the solves' time set aside for a planned schedule on one it can
    # (`planner.compare.torch_runnable`): a smaller share of a second schedule, the planned row keeps the most
    runnable_share: float = 0.25
    # plan-compare's default time for the memory bound (`--bound-time`): the preset at p = 8 needed 171 s, loaded
    memory_bound_s: float = 120.0
    # the memory bound's own tuning within that time (each probe's time, where its binary search stops)
    memory_bound: MemoryBoundPolicy = field(default_factory=MemoryBoundPolicy)
    # ``--granularity auto``: the sub-chunks per piece tried, finest first; the first whose pipeline has at most
    # `fine_task_limit` compute tasks (F, B, W of every sub-chunk and micro-batch) is taken: a size whose model
    # CP-SAT builds and keeps improving within plan-compare's budget
    auto_granularities: tuple[int, ...] = (4, 3, 2)
    fine_task_limit: int = 1600
    # the cut bound's binary search stops within this fraction of the minimum (`planner.compare.cut_bound`)
    cut_bound_rel_tol: float = 1e-4
    # above this many op positions there is no cut bound: its O(n^3) levels would take minutes
    cut_bound_max_positions: int = 600
    # ops one move of the cut search carries across a boundary, largest first (`planner.compare.cut_search`)
    cut_step_ops: tuple[int, ...] = (8, 4, 2, 1)
    # the cut search tries chain moves once single moves stall (False: single moves only, to measure the difference)
    cut_chain_moves: bool = True
    # replays (evaluated cuts) one cut search runs at most, besides its deadline
    cut_max_evaluations: int = 400
    # a further cut round starts only with more than this many seconds of the placement's budget left (its replays
    # and the solve after it need them)
    cut_round_min_left_s: float = 1.0
    search: PipelineSearchPolicy = field(default_factory=PipelineSearchPolicy)  # the search's own tuning


DEFAULT_COMPARE_POLICY = ComparePolicy()  # for argument defaults
# the choices of `planner.compare.pipelines.compare`; here, beside the policy, so that plan-compare's argument
# parser reads them without loading the comparison (and its plotting)
PLACEMENTS = ("auto", "both", "warm", "dualpipe", "v", "fixed")  # `compare`'s opplan_placement
LNS_MODES = ("in-order", "reorder")  # `compare`'s lns_mode (planner.compare.pipelines' docstring)
