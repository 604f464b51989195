"""How `plan-compare`'s planned row spends its time and reads its results, as data (`ComparePolicy`): one field per
knob, the value `compare` runs with by default.  The command line builds the default; a bench or a test that tries
another value passes `dataclasses.replace(ComparePolicy(), ...)` to `planner.compare.pipelines.compare`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    search: PipelineSearchPolicy = field(default_factory=PipelineSearchPolicy)  # the search's own tuning


DEFAULT_COMPARE_POLICY = ComparePolicy()  # for argument defaults
# the choices of `planner.compare.pipelines.compare`; here, beside the policy, so that plan-compare's argument
# parser reads them without loading the comparison (and its plotting)
PLACEMENTS = ("auto", "both", "warm", "dualpipe", "v", "fixed")  # `compare`'s opplan_placement
LNS_MODES = ("in-order", "reorder")  # `compare`'s lns_mode (planner.compare.pipelines' docstring)
