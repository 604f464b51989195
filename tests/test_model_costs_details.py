"""A model's costs cut into pieces (`planner.compare.model_costs.ModelCosts`) on a hand-built chain of six ops on
two devices: a piece's costs, the hops between pieces (edges that skip pieces paid at every device change), and
each schedule's layout and pipeline."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from instances import make_instance

from planner.compare.model_costs import ModelCosts, model_costs
from planner.errors import InputError


def chain_costs(**kw) -> ModelCosts:
    """Ops 0..5 (forward 1..6 ticks on both devices), a chain of 8-byte edges and a 4-byte skip edge 0 -> 5;
    across devices an edge costs 3 + bytes (latency 3, one byte per tick): 11 per chain edge, 7 for the skip."""
    edges = [(i, i + 1, 0, 8) for i in range(5)] + [(0, 5, 0, 4)]
    inst = make_instance("chain", [[f, f] for f in (1, 2, 3, 4, 5, 6)], edges, latency=[0, 3],
                         bandwidth=[np.inf, 1.0], params=[1, 0, 0, 2, 0, 0], acts=[5, 1, 1, 1, 1, 1])
    kw.setdefault("comm_stream", False)
    kw.setdefault("a2a", False)
    return ModelCosts(inst, 2, ((0, 1, 2), (3, 4, 5)), ((0,), (1, 2), (3, 4), (5,)), ticks_per_unit=1, **kw)


def test_a_piece_costs_the_sums_of_its_ops_with_b_and_w_equal_to_f():
    st = chain_costs().stage_cost([0, 1, 2], 0)
    assert (st.forward_tick, st.input_grad_tick, st.weight_grad_tick) == (6, 6, 6)
    assert (st.activation_bytes, st.param_bytes, st.a2a_tick) == (7, 1, 0)


def test_hops_sum_the_edges_crossing_each_boundary_between_devices():
    mc = chain_costs()
    assert mc.hop_ticks(1, [0, 1]) == (18, 0)  # edge 2 -> 3 (11) and the skip edge (7); none after the last piece
    assert mc.hop_ticks(1, [0, 0]) == (0, 0)  # one device: no hop
    # the skip edge is paid at every device change it crosses: pieces on devices 0, 1, 1, 0
    assert mc.hop_ticks(2, (0, 1, 1, 0)) == (18, 0, 18, 0)
    assert mc.hop_ticks(2, (0, 1, 0, 1)) == (18, 18, 18, 0)


def test_the_layout_of_every_schedule():
    mc = chain_costs()
    one = mc.layout("1f1b", 2, 4)
    assert (one.pieces, one.stage_to_device, one.chains, one.microbatches, one.hops) == (
        ((0, 1, 2), (3, 4, 5)), (0, 1), ((0, 1),), 4, (18, 0))
    assert mc.layout("gpipe", 2, 4) == one
    v = mc.layout("zb-v", 2, 4)
    assert (v.pieces, v.stage_to_device, v.chains, v.microbatches, v.hops) == (
        ((0,), (1, 2), (3, 4), (5,)), (0, 1, 1, 0), ((0, 1, 2, 3),), 4, (18, 0, 18, 0))
    assert mc.layout("opplan-v", 2, 4) == mc.layout("dualpipev", 2, 4) == v
    inter = mc.layout("interleaved-1f1b", 2, 4)
    assert (inter.stage_to_device, inter.hops) == ((0, 1, 0, 1), (18, 18, 18, 0))
    dual = mc.layout("dualpipe", 2, 4)
    # the second chain runs copies of the same stages up from the last device
    assert (dual.pieces, dual.stage_to_device, dual.chains, dual.microbatches, dual.hops) == (
        ((0, 1, 2), (3, 4, 5), (0, 1, 2), (3, 4, 5)), (0, 1, 1, 0), ((0, 1), (2, 3)), 2, (18, 0, 18, 0))
    assert mc.layout("dualpipe", 2, 1).microbatches == 1


def test_a_layout_refuses_another_device_count_or_an_unknown_schedule():
    mc = chain_costs()
    with pytest.raises(InputError, match="cut for 2 devices, not 3"):
        mc.layout("1f1b", 3, 4)
    with pytest.raises(InputError, match="unknown schedule 'ring'"):
        mc.layout("ring", 2, 4)


def test_the_pipeline_of_a_schedule():
    pipe = chain_costs().pipeline("dualpipe", 2, 4)
    assert pipe.name == "dualpipe" and pipe.num_microbatches == 2 and pipe.chains == ((0, 1), (2, 3))
    assert pipe.stage_comm_tick == (18, 0, 18, 0) and pipe.comm_tick == 0 and pipe.stage_to_device == (0, 1, 1, 0)
    assert [s.forward_tick for s in pipe.stages] == [6, 15, 6, 15]
    assert not pipe.comm_stream and pipe.fb_overlap is None and pipe.overlap_tick is None
    assert chain_costs(comm_stream=True).pipeline("1f1b", 2, 4).comm_stream
    assert chain_costs(fb_overlap=0.5).pipeline("zb-v", 2, 4).fb_overlap == 0.5
    assert chain_costs(fb_overlap=1.0).pipeline("zb-v", 2, 4).fb_overlap is None


def test_no_all_to_all_without_moe_layers_and_the_expert_parallel_degree():
    mc = chain_costs(a2a=True)
    assert mc.a2a_tick([0, 1, 2]) == 0 and mc.stage_cost([0, 1, 2], 0).a2a_tick == 0
    assert mc.expert_parallel_degree == 2 and chain_costs(expert_parallel=8).expert_parallel_degree == 8
    assert mc.cut(1) == ((0, 1, 2), (3, 4, 5)) and mc.cut(2) == ((0,), (1, 2), (3, 4), (5,))


def _chain(durations):
    """A chain of ops with these forward ticks on one device."""
    return make_instance("line", [[d] for d in durations], [(i, i + 1, 0, 8) for i in range(len(durations) - 1)])


def test_each_stage_is_halved_where_the_larger_half_is_smallest_the_first_on_a_tie():
    # one device: one stage of every op, cut in two chunks
    assert model_costs(_chain([2, 1, 1, 1, 1]), 1, time_limit_s=5).chunk_positions == ((0, 1), (2, 3, 4))  # 3 | 3
    tie = model_costs(_chain([1, 2, 1]), 1, time_limit_s=5)  # 1 | 3 and 3 | 1: the first
    assert tie.stage_positions == ((0, 1, 2),) and tie.chunk_positions == ((0,), (1, 2))


def test_ticks_per_microsecond_from_the_instance_s_tick():
    line = _chain([1, 2, 1])
    assert (model_costs(line, 1, time_limit_s=5).ticks_per_unit, model_costs(line, 1, time_limit_s=5).time_unit) == (
        1, "tick")  # no tick length: the instance's own unit
    tenth = model_costs(dataclasses.replace(line, tick_s=1e-7), 1, time_limit_s=5)
    assert (tenth.ticks_per_unit, tenth.time_unit) == (10, "us")
    micro = model_costs(dataclasses.replace(line, tick_s=1e-6), 1, time_limit_s=5)
    assert (micro.ticks_per_unit, micro.time_unit) == (1, "us")


def test_model_costs_refuse_what_cannot_be_cut():
    with pytest.raises(InputError, match="--stages 0 needs 1..1 devices"):
        model_costs(_chain([1, 2, 1]), 0)
    with pytest.raises(InputError, match="--stages 2 needs 1..1 devices"):
        model_costs(_chain([1, 2, 1]), 2)
    with pytest.raises(InputError, match="the model has 1 ops, too few for 2 chunks"):
        model_costs(_chain([1]), 1)
