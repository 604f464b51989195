"""What plan-compare's pictures read (`planner.compare.plot`): the kind of every label, one colour per kind, the row
names of a pipeline's streams, and the memory profile under the pipeline accounting, tick by tick."""

from __future__ import annotations

import dataclasses

import pytest

from planner.compare.baselines import scales_of, simulate_baseline
from planner.compare.pipelines import Comparison
from planner.compare.plot import (
    KIND_WORDS,
    action_group,
    kind_color,
    pipeline_memory_profile,
    row_names,
    side_by_side_figure,
)
from planner.pipeline.registry import UnitCosts
from planner.pipeline.streams import simulate_pipeline
from planner.pipeline.unroll import StageCost, TrainingPipeline
from planner.schedule.program import Schedule


@pytest.mark.parametrize("task,kind", [("0F3", "F"), ("12BW7", "BW"), ("3F4&5B2", "F&B"), ("0W0", "W"),
                                       ("0COMBINE_B3", "COMBINE_B"), ("1SEND_F0", "SEND_F"),
                                       ("2DISPATCH_F11", "DISPATCH_F"), ("conv1", "conv")])
def test_the_kind_of_a_label(task, kind):
    assert action_group(task) == kind


def test_every_kind_has_its_own_colour_and_others_are_grey():
    colours = [kind_color(k) for k in KIND_WORDS]
    assert len(set(colours)) == len(colours)
    assert kind_color("SEND_B") == "0.35" and kind_color("COMBINE_B") == "#e6550d"
    assert kind_color("conv") == "0.5"


STAGE = StageCost(2, 3, 1, activation_bytes=4, param_bytes=10, activation_freed_by_b_bytes=1)
ORDER = Schedule.build([["0F0", "0F1", "0B0", "0W0", "0B1", "0W1"], ["1F0", "1B0", "1W0", "1F1", "1B1", "1W1"]],
                       name="split")


def test_memory_profile_allocates_at_f_frees_part_at_b_and_the_rest_at_w():
    pipe = TrainingPipeline((STAGE, STAGE), 2, 2, (0, 1), ((0, 1),))
    _inst, tl = simulate_pipeline(pipe, ORDER)
    prof = pipeline_memory_profile(pipe, tl)
    # device 0: parameters 10; F at 0 and 2 (+4 each); B ends at 10 and 16 (-1), W at 11 and 17 (-3)
    assert prof.steps[0] == ((0, 10), (0, 14), (2, 18), (10, 17), (11, 14), (16, 13), (17, 10))
    # device 1: W0 ends as F1 starts (8): the free and the allocation net out in one step
    assert prof.steps[1] == ((0, 10), (2, 14), (7, 13), (8, 14), (13, 13), (14, 10))
    assert prof.peak_bytes == (18, 14) and prof.peak_tick == (2, 2)
    assert prof.device_names == tl.device_names


def test_communication_streams_hold_nothing_and_rows_name_them():
    pipe = TrainingPipeline((STAGE, STAGE), 2, 2, (0, 1), ((0, 1),), comm_tick=1, comm_stream=True)
    _inst, tl = simulate_pipeline(pipe, ORDER)
    prof = pipeline_memory_profile(pipe, tl)
    assert prof.peak_bytes[2:] == (0, 0) and prof.steps[3] == ((0, 0),)
    assert row_names(2, tl) == ("p0", "p1", "p0/comm", "p1/comm")
    plain = dataclasses.replace(tl, device_names=("a", "b", "c", "d"))
    assert row_names(2, plain) == ("p0", "p1", "p0/comm", "p1/comm")
    assert row_names(3, plain) == ("p0", "p1", "p2", "p0/comm")
    assert row_names(4, plain) == ("a", "b", "c", "d")
    # a timeline's own names are kept where they say which rows are communication streams
    own = dataclasses.replace(tl, device_names=("gpu0", "gpu1", "gpu0/comm", "gpu1/comm"))
    assert row_names(2, own) == ("gpu0", "gpu1", "gpu0/comm", "gpu1/comm")


def test_side_by_side_panels_share_the_time_axis_and_only_the_last_says_its_unit():
    costs = UnitCosts()
    sc = scales_of(costs)
    cmp = Comparison(2, 4, costs, sc, [simulate_baseline(n, 2, 4, costs, sc) for n in ("1f1b", "zb-v")])
    fig = side_by_side_figure(cmp)
    panels = [ax for ax in fig.axes if ax.get_title(loc="left")]
    assert [ax.get_title(loc="left") for ax in panels] == [
        "1f1b: makespan 15 unit, bubble 20.0%, peak memory 2 unit",
        "zb-v: makespan 12.5 unit, bubble 4.0%, peak memory 2 unit"]
    assert [ax.get_xlabel() for ax in panels] == ["", "time (unit)"]
    assert all(ax.get_xlim() == (0.0, 15.0) for ax in panels)  # the longest schedule's end, in units
    assert [t.get_text() for t in panels[0].get_yticklabels()] == ["p0", "p1"]
    # two panels of 2 rows (0.3 in a row + 0.5), 0.6 in between each, 0.9 for the legend, 0.75 for the caption
    assert fig.get_size_inches()[1] == pytest.approx(2 * 1.1 + 2 * 0.6 + 0.9 + 0.75)
    assert panels[0].get_gridspec().hspace == pytest.approx(2 * 0.6 / 2.2)
