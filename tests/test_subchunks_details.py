"""Sub-chunks (`planner.compare.subchunks`) on hand-built models: where a piece is cut, what each sub-chunk costs
(B and W spread to at least one tick), the fine pipeline's hops and chains, a schedule expanded action by action,
and the granularity chosen."""

from __future__ import annotations

import dataclasses

import pytest
from instances import make_instance
from test_model_costs_details import chain_costs

from planner.compare.compare_policy import ComparePolicy
from planner.compare.model_costs import ModelCosts
from planner.compare.subchunks import (
    auto_granularity,
    expand_schedule,
    fine_pipeline,
    moe_boundaries,
    split_piece,
    subchunk_costs,
)
from planner.errors import InputError
from planner.ir.moe_structure import MoELayer, MoEStructure
from planner.pipeline.dualpipe import dualpipe
from planner.pipeline.generators import one_f_one_b
from planner.pipeline.unroll import uniform_pipeline


def test_a_piece_is_halved_where_the_larger_half_is_smallest():
    mc = chain_costs()  # F + B + W per op: 3, 6, 9, 12, 15, 18
    assert split_piece(mc, (0, 1, 2), 0, 2) == ((0, 1), (2,))  # 9 | 9
    assert split_piece(mc, (3, 4, 5), 0, 2) == ((3, 4), (5,))  # 27 | 18
    # 30 | 33, then the heavier run (ops 4, 5) is halved
    assert split_piece(mc, tuple(range(6)), 0, 3) == ((0, 1, 2, 3), (4,), (5,))
    assert split_piece(mc, tuple(range(6)), 0, 9) == tuple((i,) for i in range(6))  # at most one op each
    assert split_piece(mc, (2, 3), 1, 1) == ((2, 3),)


def test_b_and_w_of_sub_chunks_get_at_least_one_tick_from_the_largest():
    inst = make_instance("zeros", [[0, 0], [4, 4], [0, 0], [1, 1]], [(0, 1, 0, 0), (1, 2, 0, 0), (2, 3, 0, 0)])
    mc = ModelCosts(inst, 2, ((0, 1), (2, 3)), ((0,), (1,), (2,), (3,)), ticks_per_unit=1, comm_stream=False,
                    a2a=False)
    first, second = subchunk_costs(mc, ((0,), (1,)), 0)
    assert (first.forward_tick, first.input_grad_tick, first.weight_grad_tick) == (0, 1, 1)
    assert (second.forward_tick, second.input_grad_tick, second.weight_grad_tick) == (4, 3, 3)
    with pytest.raises(InputError, match="a piece of 1 ticks cannot be split into 2 sub-chunks"):
        subchunk_costs(mc, ((2,), (3,)), 0)
    with pytest.raises(InputError, match="unknown all-to-all placement 'nowhere'"):
        subchunk_costs(mc, ((0,), (1,)), 0, a2a_at="nowhere")
    # the fine pipeline keeps such a piece whole
    fine = fine_pipeline(mc, "1f1b", 2, 2, 2)
    assert fine.subs == ((0, 1), (2,)) and fine.positions == (((0,), (1,)), ((2, 3),))


def test_the_fine_pipeline_s_stages_hops_and_chains():
    fine = fine_pipeline(chain_costs(), "1f1b", 2, 4, 2)
    pipe = fine.pipeline
    assert fine.subs == ((0, 1), (2, 3)) and fine.positions == (((0, 1), (2,)), ((3, 4), (5,))) and fine.k == 2
    assert [(s.forward_tick, s.input_grad_tick, s.activation_bytes, s.param_bytes) for s in pipe.stages] == [
        (3, 3, 6, 1), (3, 3, 1, 0), (9, 9, 2, 2), (6, 6, 1, 0)]
    # inside a piece no hop; from its last sub-chunk the piece's hop
    assert pipe.stage_comm_tick == (0, 18, 0, 0) and pipe.stage_to_device == (0, 0, 1, 1)
    assert pipe.chains == ((0, 1, 2, 3),) and pipe.name == "1f1b-k2" and pipe.num_microbatches == 4
    assert fine.num_compute_tasks == 3 * 4 * 4
    with pytest.raises(InputError, match="granularity must be >= 1, got 0"):
        fine_pipeline(chain_costs(), "1f1b", 2, 4, 0)


def test_expansion_runs_forwards_in_chain_order_and_backwards_in_reverse():
    fine = fine_pipeline(chain_costs(), "1f1b", 2, 4, 2)
    rows = [" ".join(r) for r in expand_schedule(one_f_one_b(2, 4), fine).strings()]
    assert rows == ["0F0 1F0 0F1 1F1 1BW0 0BW0 0F2 1F2 1BW1 0BW1 0F3 1F3 1BW2 0BW2 1BW3 0BW3",
                    "2F0 3F0 3BW0 2BW0 2F1 3F1 3BW1 2BW1 2F2 3F2 3BW2 2BW2 2F3 3F3 3BW3 2BW3"]
    assert expand_schedule(one_f_one_b(2, 4), fine).name == "1f1b"
    assert expand_schedule(one_f_one_b(2, 4), fine, "mine").name == "mine"


def test_expansion_unpairs_overlapped_pairs_and_keeps_both_chains_devices():
    fine = fine_pipeline(chain_costs(), "dualpipe", 2, 4, 2)
    assert fine.subs == ((0, 1), (2, 3), (4, 5), (6, 7))
    sch = expand_schedule(dualpipe(2, 4), fine)
    assert " ".join(sch.strings()[0]) == ("0F0 1F0 6F0 7F0 0F1 1F1 7BW0 6BW0 6F1 7F1 1BW0 0BW0 7BW1 6BW1 1B1 0B1 "
                                          "1W1 0W1")
    assert tuple(sch.stage_to_device) == (0, 0, 1, 1, 1, 1, 0, 0) and sch.num_microbatches == 2


@pytest.mark.parametrize("stages,m,k", [(4, 8, 4), (8, 32, 2), (16, 32, 1), (8, 16, 4), (8, 20, 3)])
def test_auto_granularity_is_the_finest_within_the_task_limit(stages, m, k):
    # 3 S m compute tasks at stage level; the default limit 1600 and granularities 4, 3, 2
    assert auto_granularity(uniform_pipeline(stages, m)) == k


def test_auto_granularity_accepts_exactly_the_limit():
    pipe = uniform_pipeline(4, 8)  # 96 tasks
    assert auto_granularity(pipe, ComparePolicy(fine_task_limit=384)) == 4
    assert auto_granularity(pipe, ComparePolicy(fine_task_limit=383)) == 3
    assert auto_granularity(pipe, ComparePolicy(fine_task_limit=100, auto_granularities=(3, 2))) == 1


def test_without_moe_layers_there_are_no_moe_boundaries():
    assert moe_boundaries(chain_costs(), (0, 1, 2)) == []
    assert split_piece(chain_costs(), (0, 1, 2, 3), 0, 2) == ((0, 1, 2), (3,))  # 18 | 12


def _one_moe_layer(dispatch: str, combine: str) -> MoEStructure:
    return MoEStructure((MoELayer(router_ops=(), topk_op="", experts=2, top_k=1, tokens=1, hidden=1, element_bytes=1,
                                  expert_branches=(), shared_ops=(), dispatch_ops=(dispatch,),
                                  combine_ops=(combine,), dispatch_bytes=8, combine_bytes=8, gathered=False,
                                  anchor_bytes={dispatch: 8}),))


def test_moe_boundaries_are_before_a_dispatch_and_after_a_combine():
    mc = dataclasses.replace(chain_costs(), moe=_one_moe_layer("t2", "t3"))
    assert moe_boundaries(mc, tuple(range(6))) == [2, 4]
    assert moe_boundaries(mc, (1, 2, 3)) == [1]  # after the combine is the piece's end: no boundary
    # MoE boundaries first, the one that leaves the lighter heaviest sub-chunk first (4: 30 | 33), then 2
    assert split_piece(mc, tuple(range(6)), 0, 3) == ((0, 1), (2, 3), (4, 5))
    assert split_piece(mc, tuple(range(6)), 0, 2) == ((0, 1, 2, 3), (4, 5))
