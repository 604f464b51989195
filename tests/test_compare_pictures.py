"""plan-compare's pictures name every row and say what each label means: read from the matplotlib objects."""

from __future__ import annotations

from planner.compare.pipelines import compare
from planner.compare.plot import KIND_WORDS, LABEL_GRAMMAR, action_group, schedule_figure, side_by_side_figure
from planner.pipeline.registry import UnitCosts


def _comparison():
    return compare(4, 8, UnitCosts(comm=0.5, comm_stream=True, a2a=0.3), schedules=("1f1b", "zb-h1", "dualpipe"),
                   opplan=False)


def test_action_groups_leave_out_stage_and_microbatch():
    assert action_group("3F4") == "F" and action_group("0BW1") == "BW" and action_group("1F0&2B1") == "F&B"
    assert action_group("0COMBINE_B3") == "COMBINE_B" and action_group("12SEND_F40") == "SEND_F"
    assert action_group("/layer1/attn/MatMul") == "layer1"


def test_side_by_side_names_every_row_and_explains_every_kind():
    cmp = _comparison()
    fig = side_by_side_figure(cmp)
    panels = [ax for ax in fig.axes if ax.get_title(loc="left")]
    assert len(panels) == 3
    for ax, row in zip(panels, cmp.ok_rows()):
        names = [t.get_text() for t in ax.get_yticklabels()]
        assert len(names) == row.timeline.num_devices == 8
        assert names == ["p0", "p1", "p2", "p3", "p0/comm", "p1/comm", "p2/comm", "p3/comm"]
        assert min(t.get_fontsize() for t in ax.get_yticklabels()) >= 9  # readable, not 6 pt
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    drawn = {action_group(p.task) for r in cmp.ok_rows() for p in r.timeline.placements}
    assert legend == [KIND_WORDS[k] for k in KIND_WORDS if k in drawn]  # every kind drawn, in words
    assert {"F", "B", "W", "BW", "F&B"} <= drawn
    assert LABEL_GRAMMAR in [t.get_text() for t in fig.texts]
    # no empty band: the first panel starts right under the legend
    assert fig.axes[0].get_position().y1 > 0.9


def test_schedule_picture_names_rows_and_explains_labels():
    cmp = _comparison()
    row = cmp.row("dualpipe")
    fig = schedule_figure(cmp, row)
    gantt = fig.axes[0]
    assert [t.get_text() for t in gantt.get_yticklabels()][4:] == ["p0/comm", "p1/comm", "p2/comm", "p3/comm"]
    legend = [t.get_text() for t in gantt.get_legend().get_texts()]
    for kind in ("F", "B", "W", "BW", "F&B", "SEND_F", "DISPATCH_F"):
        assert KIND_WORDS[kind] in legend
    assert LABEL_GRAMMAR in [t.get_text() for t in fig.texts]
