"""The baseline generators case by case: exact per-device orders on small p, m (derived by hand from each
generator's rule in its module docstring), the edges of their requirements and the wording of a refusal, and the
registry's cost scaling and pipelines."""

from __future__ import annotations

import pytest

from planner.errors import InputError, OpplanError
from planner.pipeline.dualpipe import dualpipe, dualpipe_v
from planner.pipeline.generators import RequirementError, gpipe, interleaved_1f1b, one_f_one_b
from planner.pipeline.registry import GENERATORS, Scales, UnitCosts, pipeline_for
from planner.pipeline.unroll import v_placement
from planner.pipeline.zero_bubble import zb_h1, zb_h2, zb_v


def _rows(schedule):
    return [" ".join(r) for r in schedule.strings()]


# ------------------------------------------------------------------------------------------- GPipe, 1F1B


def test_gpipe_runs_every_forward_then_every_backward_in_micro_batch_order():
    assert _rows(gpipe(2, 2)) == ["0F0 0F1 0BW0 0BW1", "1F0 1F1 1BW0 1BW1"]


def test_1f1b_warms_up_with_p_minus_1_minus_d_forwards_then_alternates():
    # device 0: one warm-up forward, then F, BW pairs, then the last BW; device 1 (the last) alternates at once
    assert _rows(one_f_one_b(2, 3)) == ["0F0 0F1 0BW0 0F2 0BW1 0BW2", "1F0 1BW0 1F1 1BW1 1F2 1BW2"]


def test_1f1b_with_one_device_and_one_micro_batch():
    assert _rows(one_f_one_b(1, 1)) == ["0F0 0BW0"]


def test_1f1b_accepts_m_equal_to_p_and_refuses_one_fewer():
    assert _rows(one_f_one_b(3, 3))[0] == "0F0 0F1 0F2 0BW0 0BW1 0BW2"
    with pytest.raises(RequirementError, match="m >= p"):
        one_f_one_b(3, 2)


def test_a_refusal_names_the_schedule_the_condition_and_both_numbers():
    with pytest.raises(RequirementError) as exc:
        one_f_one_b(3, 2)
    assert str(exc.value).startswith("1F1B requires m >= p (a steady state of one forward and one backward) "
                                     "(got p = 3 devices, m = 2 micro-batches)")
    assert isinstance(exc.value, OpplanError)


@pytest.mark.parametrize("gen", [gpipe, one_f_one_b, interleaved_1f1b, zb_h1, zb_h2, zb_v])
@pytest.mark.parametrize("p,m", [(0, 1), (1, 0), (0, 0)])
def test_no_generator_accepts_zero_devices_or_micro_batches(gen, p, m):
    with pytest.raises(RequirementError):
        gen(p, m)


# ------------------------------------------------------------------------------------------- interleaved 1F1B


def test_interleaved_with_as_many_micro_batches_as_devices():
    # device 0 warms up with 2(p-1) + (v-1)p = 4 forwards: all of them; device 1 with 2 (its chunk-0 forwards)
    assert _rows(interleaved_1f1b(2, 2)) == ["0F0 0F1 2F0 2F1 2BW0 2BW1 0BW0 0BW1",
                                             "1F0 1F1 3F0 3BW0 3F1 3BW1 1BW0 1BW1"]


def test_interleaved_runs_groups_of_p_micro_batches_chunk_by_chunk():
    # p = 2, m = 4, v = 2: forwards go (chunk 0: mb 0, 1), (chunk 1: mb 0, 1), (chunk 0: mb 2, 3), (chunk 1: 2, 3);
    # backwards the same with the chunks reversed; device 0 (stages 0 and 2) warms up with 4 forwards, device 1
    # (stages 1 and 3) with 2
    rows = _rows(interleaved_1f1b(2, 4))
    assert rows[0] == "0F0 0F1 2F0 2F1 0F2 2BW0 0F3 2BW1 2F2 0BW0 2F3 0BW1 2BW2 2BW3 0BW2 0BW3"
    assert rows[1] == "1F0 1F1 3F0 3BW0 3F1 3BW1 1F2 1BW0 1F3 1BW1 3F2 3BW2 3F3 3BW3 1BW2 1BW3"


def test_interleaved_with_three_chunks_caps_the_warm_up_at_every_forward():
    rows = _rows(interleaved_1f1b(2, 2, v=3))
    assert rows[0] == "0F0 0F1 2F0 2F1 4F0 4F1 4BW0 4BW1 2BW0 2BW1 0BW0 0BW1"
    assert rows[1] == "1F0 1F1 3F0 3F1 5F0 5BW0 5F1 5BW1 3BW0 3BW1 1BW0 1BW1"


def test_interleaved_places_stage_s_on_device_s_mod_p():
    sch = interleaved_1f1b(3, 3)
    assert sch.num_stages == 6 and list(sch.stage_to_device) == [0, 1, 2, 0, 1, 2]


def test_interleaved_requirements():
    with pytest.raises(RequirementError, match="v >= 2"):
        interleaved_1f1b(2, 2, v=1)
    with pytest.raises(RequirementError, match="multiple of p"):
        interleaved_1f1b(2, 3)
    assert interleaved_1f1b(1, 3).num_microbatches == 3


# ------------------------------------------------------------------------------------------- ZB-H1, ZB-H2, ZB-V


def test_zb_h1_delays_device_d_s_w_by_d_backwards():
    assert _rows(zb_h1(2, 2)) == ["0F0 0F1 0B0 0W0 0B1 0W1", "1F0 1B0 1F1 1B1 1W0 1W1"]


def test_zb_h2_warms_up_twice_as_long_and_delays_by_2d():
    assert _rows(zb_h2(2, 3)) == ["0F0 0F1 0F2 0B0 0W0 0B1 0W1 0B2 0W2",
                                  "1F0 1B0 1F1 1B1 1F2 1B2 1W0 1W1 1W2"]


def test_zero_bubble_schedules_on_one_device():
    assert _rows(zb_h1(1, 2)) == ["0F0 0B0 0W0 0F1 0B1 0W1"]
    assert _rows(zb_h2(1, 1)) == ["0F0 0B0 0W0"]


def test_zero_bubble_requirement_edges():
    assert zb_h1(3, 3).num_microbatches == 3
    with pytest.raises(RequirementError, match="m >= p"):
        zb_h1(3, 2)
    assert zb_h2(3, 5).num_microbatches == 5
    with pytest.raises(RequirementError, match="2p-1"):
        zb_h2(3, 4)
    assert zb_v(2, 4).num_microbatches == 4
    with pytest.raises(RequirementError, match="m >= 2p"):
        zb_v(2, 3)


def test_zb_v_on_one_device_runs_its_eight_steps():
    # r = 0, a = 0, chunk 0 = stage 0, chunk 1 = stage 1: F0 (step 1), FBW of chunk 1 (3), FBW of both chunks (4),
    # the last chunk-0 backward and its W (7)
    assert _rows(zb_v(1, 2)) == ["0F0 1F0 1B0 1W0 0F1 0B0 0W0 1F1 1B1 1W1 0B1 0W1"]


def test_zb_v_on_two_devices():
    # device 0 (a = 1): 3 chunk-0 forwards, 2 FBW of chunk 1, 1 steady round, step 5 once, step 7 twice;
    # device 1 (a = 0): 1 forward, one (F1, F0), one FBW of chunk 1, 2 steady rounds, one (B0, B1), step 7 once,
    # then the waiting W's, chunk 1's first
    rows = _rows(zb_v(2, 4))
    assert rows[0] == ("0F0 0F1 0F2 3F0 3B0 3W0 3F1 3B1 3W1 0F3 0B0 0W0 3F2 3B2 3W2 0B1 0W1 3F3 3B3 3W3 "
                       "0B2 0W2 0B3 0W3")
    assert rows[1] == ("1F0 2F0 1F1 2F1 2B0 2W0 1F2 1B0 1W0 2F2 2B1 2W1 1F3 1B1 1W1 2F3 2B2 2W2 1B2 2B3 1B3 "
                       "1W2 2W3 1W3")
    assert list(zb_v(2, 4).stage_to_device) == list(v_placement(2))


def test_dualpipe_v_on_one_device():
    # r = 0 = p-1: steps 2 (F0, F1), 4 split on the last device (F0, then BW1; F1&B0), 6 (BW1, then B0 with its
    # W queued since k is even), 8 (that W)
    assert _rows(dualpipe_v(1, 2)) == ["0F0 1F0 0F1 1BW0 1F1&0BW0 1BW1 0B1 0W1"]


def test_dualpipe_v_on_two_devices():
    # device 0 (k = 0, a = 1) runs every step once, two warm-up forwards; device 1 (k = 1, odd) splits its first
    # step-4 repetition and turns to zero-bubble backwards from the middle of step 6 with B1 first
    rows = _rows(dualpipe_v(2, 4))
    assert rows[0] == "0F0 0F1 0F2 3F0 3B0 3W0 3F1 0F3&3BW1 3F2&0BW0 3BW2 3F3&0BW1 3BW3 0B2 0W2 0B3 0W3"
    assert rows[1] == "1F0 2F0 1F1 2F1 1F2 2BW0 2F2&1BW0 1F3&2BW1 2F3&1BW1 2BW2 1BW2 2B3 1B3 2W3 1W3"


def test_dualpipe_on_two_devices_gives_the_second_half_its_up_stage_as_phase_0():
    # m = 4: two micro-batches from each end; both devices are next to the middle (k = p/2-1), so both split
    assert _rows(dualpipe(2, 4)) == ["0F0 3F0 0F1 3BW0 3F1&0BW0 3BW1 0B1 0W1",
                                     "2F0 1F0 2F1 1BW0 1F1&2BW0 1BW1 2B1 2W1"]


def test_dualpipe_requirement_edges():
    assert dualpipe(2, 4).num_microbatches == 2
    with pytest.raises(RequirementError, match="m >= 2p"):
        dualpipe(2, 2)
    with pytest.raises(RequirementError, match="even number of micro-batches"):
        dualpipe(2, 5)
    with pytest.raises(RequirementError, match="even number of devices"):
        dualpipe(0, 4)
    assert dualpipe_v(2, 4).num_microbatches == 4
    with pytest.raises(RequirementError, match="m >= 2p"):
        dualpipe_v(2, 3)
    with pytest.raises(RequirementError, match="p >= 1"):
        dualpipe_v(0, 4)


# ------------------------------------------------------------------------------------------- registry


def test_unit_costs_refuse_negative_values_and_overlaps_outside_0_1():
    with pytest.raises(InputError, match="--a2a must be >= 0"):
        UnitCosts(a2a=-1)
    with pytest.raises(InputError, match="--f must be >= 0"):
        UnitCosts(f=-0.5)
    with pytest.raises(InputError, match=r"--fb-overlap must be in \(0, 1\]"):
        UnitCosts(fb_overlap=0)
    with pytest.raises(InputError, match="--fb-overlap"):
        UnitCosts(fb_overlap=1.5)
    assert UnitCosts(fb_overlap=1).fb_overlap == 1
    assert UnitCosts(f=0, b=0, w=0).f == 0


@pytest.mark.parametrize("costs,ticks", [
    (UnitCosts(), 2),                                # whole units: halves need 2
    (UnitCosts(f=0.5), 4),                           # 0.5 * 2 = 1 is odd (no whole half); * 4 = 2
    (UnitCosts(f=0.3), 20),                          # 0.3 * 10 = 3 is odd; * 20 = 6
    (UnitCosts(f=0.25), 200),                        # * 4 = 1, * 20 = 5, * 100 = 25 are odd; * 200 = 50
    (UnitCosts(f=1 / 3), 1000),                      # nothing makes a third whole: the finest scale
    (UnitCosts(fb_overlap=0.5), 4),                  # the pairs 1.5 and 1.0 must be whole and even too
    (UnitCosts(comm=0.1), 20),
    # an overlapped pair of 0.25 x (F + B + W) = 0.75 is whole and even only at 200 (F, B, W alone: 4)
    (UnitCosts(f=0.5, b=1.5, w=1, fb_overlap=0.25), 200),
    # a pair without W, 0.25 x (F + B) = 0.25, likewise (its F + B + W pair 0.5 alone: 4)
    (UnitCosts(f=0.5, b=0.5, w=1, fb_overlap=0.25), 200),
])
def test_ticks_per_unit_is_the_smallest_scale_with_whole_even_values(costs, ticks):
    assert Scales.of(costs).ticks_per_unit == ticks


def test_bytes_per_unit_reads_activation_and_parameters_only():
    assert Scales.of(UnitCosts(activation=0.5, f=0.3)).bytes_per_unit == 4
    assert Scales.of(UnitCosts(param=0.1)).bytes_per_unit == 20
    assert Scales.of(UnitCosts(f=0.5)).bytes_per_unit == 2


def test_one_stage_per_device_pipelines_use_whole_stages():
    pipe = pipeline_for("1f1b", 3, 6, UnitCosts(f=1, b=2, w=3, activation=2, param=1, comm=0.5))
    assert pipe.num_stages == 3 and pipe.num_devices == 3 and pipe.num_microbatches == 6
    assert pipe.stage_to_device == (0, 1, 2) and pipe.chains == ((0, 1, 2),)
    st = pipe.stages[0]
    # ticks per unit 2 (comm 0.5 -> 1 is odd, so 4): F = 4, B = 8, W = 12; bytes per unit 2
    assert (st.forward_tick, st.input_grad_tick, st.weight_grad_tick) == (4, 8, 12)
    assert (st.activation_bytes, st.param_bytes) == (4, 2)
    assert pipe.comm_tick == 2 and pipe.name == "1f1b"
    assert pipe.overlap_tick == 4 + 20  # fb_overlap 1: a pair lasts its two halves


def test_two_chunk_pipelines_halve_every_stage():
    c = UnitCosts(f=1, b=1, w=1, activation=1, a2a=1)
    for name in ("interleaved-1f1b", "zb-v", "dualpipev", "opplan-v"):
        pipe = pipeline_for(name, 2, 4, c)
        assert pipe.num_stages == 4 and pipe.num_devices == 2 and pipe.num_microbatches == 4
        st = pipe.stages[0]
        assert (st.forward_tick, st.input_grad_tick, st.activation_bytes, st.a2a_tick) == (1, 1, 1, 1)
    assert pipeline_for("interleaved-1f1b", 2, 4, c).stage_to_device == (0, 1, 0, 1)
    assert pipeline_for("zb-v", 2, 4, c).stage_to_device == (0, 1, 1, 0)


def test_dualpipe_sends_half_the_micro_batches_each_way_on_two_chains():
    pipe = pipeline_for("dualpipe", 2, 6, UnitCosts())
    assert pipe.num_microbatches == 3 and pipe.chains == ((0, 1), (2, 3))
    assert pipe.stages[0].forward_tick == 2  # full stages: one unit is 2 ticks
    assert pipeline_for("dualpipe", 2, 1, UnitCosts()).num_microbatches == 1


def test_the_overlap_of_a_pair_is_rounded_from_fb_overlap():
    pipe = pipeline_for("zb-v", 2, 4, UnitCosts(fb_overlap=0.5))
    # ticks per unit 4, halved: F = B = W = 2 per chunk; a pair lasts 0.5 * (F + BW) = 3
    assert pipe.overlap_tick == 3 and pipe.fb_overlap == 0.5 and pipe.pairs_gain


def test_comm_stream_reaches_the_pipeline():
    assert pipeline_for("gpipe", 2, 2, UnitCosts(comm=1, comm_stream=True)).comm_stream
    assert not pipeline_for("gpipe", 2, 2, UnitCosts(comm=1)).comm_stream


def test_an_unknown_schedule_is_an_input_error_naming_the_known_ones():
    with pytest.raises(InputError, match="unknown schedule 'pipedream'") as exc:
        pipeline_for("pipedream", 2, 2, UnitCosts())
    assert all(name in str(exc.value.fix) for name in GENERATORS)
