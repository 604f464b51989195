"""The list schedule with communication streams (`planner.pipeline.stream_greedy`): its portfolio's documented
shape and the in-flight limits of a rule, on small hand-checked cases."""

from __future__ import annotations

from planner.pipeline.registry import Scales, UnitCosts, pipeline_for
from planner.pipeline.stream_greedy import (
    PORTFOLIO,
    ListRule,
    fitted_limits,
    little_limits,
    stream_list_times,
    stream_tasks,
)


def test_every_fitted_rule_keeps_no_reserve():
    # `ListRule`: fitted limits hold the activations in flight under the cap only with no reserve, which is why
    # every fitted rule of the portfolio has reserve_slots 0 (a reserve would refuse forwards the fit admits)
    fitted = [r for r in PORTFOLIO if r.fit]
    assert fitted and all(r.reserve_slots == 0 and r.little is not None for r in fitted)
    assert {r.backward_first for r in fitted} == {True, False}


def test_limits_are_at_least_one_and_fitting_to_a_roomy_cap_keeps_the_factor():
    c = UnitCosts(f=1, b=1, w=1, a2a=1.0)
    pipe = pipeline_for("zb-v", 2, 8, c, Scales.of(c))
    prepared = stream_tasks(pipe)
    assert prepared is not None
    big = [10**9] * 2
    assert stream_list_times(pipe, big, ListRule(True, 0, share=0.5), prepared) is not None
    assert little_limits(prepared, 1e-9) == [1] * pipe.num_stages  # at least one in flight
    assert fitted_limits(prepared, 1.4, big) == little_limits(prepared, 1.4)  # room for all: the factor stays
