"""Schedule IR: action strings, the Schedule type, PyTorch CSV import/export, glue to instances."""

from __future__ import annotations

import csv

import pytest
from hypothesis import given
from hypothesis import strategies as st
from instances import pipeline_instance

from planner.cost.instance import SchedulingInstance
from planner.schedule.actions import (
    COMM_KINDS,
    COMPUTE_KINDS,
    Action,
    ActionKind,
    OverlapAction,
    from_torch_str,
    parse_action,
    to_torch_str,
    try_parse_action,
)
from planner.schedule.errors import ScheduleError
from planner.schedule.program import Schedule, schedule_from_plan, schedule_to_instance_order
from planner.schedule.simulate import simulate_schedule
from planner.schedule.torch_csv import read_torch_csv, schedule_to_torch_rows, write_torch_csv
from planner.schedule.validate import validate_plan

SINGLE_KINDS = sorted(COMPUTE_KINDS | COMM_KINDS, key=lambda k: k.value)
idx = st.integers(min_value=0, max_value=10_000)
singles = st.builds(Action, idx, st.sampled_from(SINGLE_KINDS), idx)
pairs = st.builds(
    OverlapAction,
    st.builds(Action, idx, st.just(ActionKind.F), idx),
    st.builds(Action, idx, st.sampled_from([ActionKind.B, ActionKind.BW]), idx),
)
actions = st.one_of(singles, pairs)


@given(actions)
def test_action_string_round_trips(a):
    s = str(a)
    assert parse_action(s) == a
    assert str(parse_action(s)) == s


@given(actions)
def test_torch_string_round_trips(a):
    assert from_torch_str(to_torch_str(a)) == a


def test_examples_of_our_strings_and_pytorch_letters():
    assert str(Action(3, ActionKind.F, 4)) == "3F4"
    assert parse_action("3F4&5B2") == OverlapAction(Action(3, ActionKind.F, 4), Action(5, ActionKind.B, 2))
    assert parse_action("3SEND_F4") == Action(3, ActionKind.SEND_F, 4)
    # our B (input grad) is PyTorch's I; our BW (full backward) is PyTorch's B
    assert to_torch_str(parse_action("1B0")) == "1I0"
    assert to_torch_str(parse_action("2BW1")) == "2B1"
    assert to_torch_str(parse_action("1W0")) == "1W0"
    assert to_torch_str(parse_action("0F3&1B0")) == "(0F3;1I0)OVERLAP_F_B"
    assert from_torch_str("2B1") == Action(2, ActionKind.BW, 1)


@pytest.mark.parametrize("bad", ["", "F4", "3F", "3X4", "03F4", "3F4&", "3B4&5F2", "3F4&5W2", "3 F4", "-1F2"])
def test_malformed_strings_are_rejected(bad):
    with pytest.raises(ScheduleError):
        parse_action(bad)
    assert try_parse_action(bad) is None


def test_unmodelled_torch_actions_are_rejected():
    for s in ("0UNSHARD", "1RESHARD", "2REDUCE_GRAD"):
        with pytest.raises(ScheduleError, match="not modelled"):
            from_torch_str(s)


# ----- a 2-stage, 3-micro-batch 1F1B schedule with split backward and one overlapped pair -----
ROWS = [
    ["0F0", "0F1", "0B0", "0F2", "0W0", "0B1", "0W1", "0B2", "0W2"],
    ["1F0", "1F1&1BW0", "1F2&1BW1", "1BW2"],
]


def test_build_infers_shape_and_placement():
    s = Schedule.build([["0F0", "0SEND_F0", "0RECV_B0", "0BW0"], ["1RECV_F0", "1F0", "1BW0", "1SEND_B0"]])
    assert (s.p, s.num_stages, s.num_microbatches, s.stage_to_device) == (2, 2, 1, (0, 1))
    s.check_complete()
    assert s.strings()[1] == ("1RECV_F0", "1F0", "1BW0", "1SEND_B0")


def test_schedule_rejects_stage_on_two_devices_and_wrong_placement():
    with pytest.raises(ScheduleError, match="stage 0 has actions on devices 0 and 1"):
        Schedule.build([["0F0"], ["0BW0"]])
    with pytest.raises(ScheduleError, match="stage 1 lives on device 0"):
        Schedule.build([["0F0"], ["1F0"]], stage_to_device=[0, 0])
    with pytest.raises(ScheduleError, match="micro-batch 5"):
        Schedule.build([["0F5"]], num_microbatches=2)


def test_check_complete_reports_missing_and_misordered():
    with pytest.raises(ScheduleError, match="0F1 is missing"):
        Schedule.build([["0F0", "0BW0", "0BW1"]]).check_complete()
    with pytest.raises(ScheduleError, match="0W0 comes before 0B0"):
        Schedule.build([["0F0", "0W0", "0B0"]]).check_complete()


def test_torch_csv_round_trip(tmp_path):
    s = Schedule.build([["0F0", "0SEND_F0", "0B0", "0W0"], ["1RECV_F0", "1F0&1BW0"]], num_microbatches=2)
    path = tmp_path / "sched.csv"
    write_torch_csv(s, path, compute_only=False)
    back = read_torch_csv(path, num_microbatches=2)
    assert back.actions == s.actions and back.stage_to_device == s.stage_to_device
    write_torch_csv(s, path)  # compute only: sends/receives dropped
    assert read_torch_csv(path, num_microbatches=2).strings() == (("0F0", "0B0", "0W0"), ("1F0&1BW0",))
    assert path.read_text().splitlines()[0] == "0F0,0I0,0W0"


def test_read_torch_csv_names_file_and_cell(tmp_path):
    from planner.errors import InputError

    path = tmp_path / "bad.csv"
    path.write_text("0F0,0I0\n1F0,1X0\n")
    with pytest.raises(InputError, match=r"bad\.csv.*row 1 .*cell 1"):
        read_torch_csv(path)
    with pytest.raises(InputError, match="cannot read"):
        read_torch_csv(tmp_path / "missing.csv")


def test_exported_csv_parses_with_torch(tmp_path):
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    if not hasattr(schedules, "_Action") or not hasattr(schedules, "_validate_schedule"):
        pytest.skip("this torch has no _Action/_validate_schedule")
    s = Schedule.build(ROWS)
    s.check_complete()
    path = tmp_path / "sched.csv"
    write_torch_csv(s, path)
    with open(path, newline="") as fh:  # what PipelineScheduleMulti._load_csv does
        parsed = {rank: [schedules._Action.from_str(c) for c in row] for rank, row in enumerate(csv.reader(fh))}
    assert [[str(a) for a in row] for row in parsed.values()] == schedule_to_torch_rows(s)
    mapping = schedules._validate_schedule(parsed, s.p, s.num_stages, s.num_microbatches)
    assert mapping == dict(enumerate(s.stage_to_device))
    pair = parsed[1][2]
    assert pair.computation_type == schedules.OVERLAP_F_B
    assert [str(x) for x in pair.sub_actions] == ["1F2", "1B1"]  # torch B = our BW


def _pipeline_instance(num_stages: int, num_mb: int, *, split: bool) -> SchedulingInstance:
    """Stage s on device s; F: 2 ticks, B: 2, W: 1, BW: 3; 1 tick between stages."""
    return pipeline_instance(num_stages, num_mb, split_backward=split)


def test_schedule_to_instance_order_and_simulation():
    inst = _pipeline_instance(2, 3, split=True)
    s = Schedule.build(ROWS)
    # the pair 1F1&1BW0 names a full backward, but this instance splits B/W: 1BW0 has no task
    with pytest.raises(ScheduleError, match="1BW0"):
        schedule_to_instance_order(s, inst)


def test_simulate_1f1b_split_backward():
    # 2 stages, 2 micro-batches:
    # dev0: 0F0[0,2) 0F1[2,4) 0B0 waits for 1B0: 1F0 [3,5), 1B0 [5,7), arrives 8 -> 0B0 [8,10) 0W0[10,11)
    #       0B1 needs 1B1: 1F1 [5?] dev1 busy until 7 -> 1F1 [7,9), 1B1 [9,11), arrive 12 -> 0B1 [12,14), 0W1 [14,15)
    inst = _pipeline_instance(2, 2, split=True)
    s = Schedule.build([["0F0", "0F1", "0B0", "0W0", "0B1", "0W1"], ["1F0", "1B0", "1W0", "1F1", "1B1", "1W1"]])
    s.check_complete()
    tl = simulate_schedule(inst, s)
    got = {p.task: (p.start_tick, p.end_tick) for p in tl.placements}
    assert got["1F0"] == (3, 5) and got["1B0"] == (5, 7) and got["1W0"] == (7, 8)
    assert got["1F1"] == (8, 10) and got["1B1"] == (10, 12)
    assert got["0B0"] == (8, 10) and got["0W0"] == (10, 11) and got["0B1"] == (13, 15) and got["0W1"] == (15, 16)
    assert tl.makespan_tick == 16
    assert {p.task: p.stage for p in tl.placements}["1W1"] == 1
    plan = tl.to_plan(method="1f1b")
    validate_plan(inst, plan)
    assert schedule_from_plan(plan).actions == s.actions


def test_overlapped_pair_as_one_task_or_two_halves():
    inst = _pipeline_instance(1, 2, split=False)  # tasks 0F0, 0BW0, 0F1, 0BW1 on one device
    s = Schedule.build([["0F0", "0F1&0BW0", "0BW1"]])
    orders = schedule_to_instance_order(s, inst)
    assert [inst.task_names[t] for t in orders[0]] == ["0F0", "0F1", "0BW0", "0BW1"]
    tl = simulate_schedule(inst, s)
    assert tl.makespan_tick == 2 + 2 + 3 + 3
