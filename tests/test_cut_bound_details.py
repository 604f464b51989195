"""The bound over every cut (`planner.compare.cut_bound`) by hand on the chain of six ops of
tests/test_model_costs_details.py (forward 1..6 ticks, B = W = F, 18 ticks across any boundary between devices:
a chain edge 11 and the skip edge 0 -> 5 7): positions' work, hops, each term T_i, the minimum over cuts and the
cut meeting it, and where there is no bound."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from instances import make_instance
from test_model_costs_details import chain_costs

from planner.compare.compare_policy import ComparePolicy
from planner.compare.cut_bound import (
    crossing_ticks,
    every_cut_bound_tick,
    family_best_cut,
    family_cut_bound_tick,
    family_terms,
    op_arrays,
)
from planner.compare.model_costs import ModelCosts
from planner.compare.presets import preset_costs
from planner.ir.hardware import load_topology


def test_positions_work_and_hops():
    f, fbw = op_arrays(chain_costs())
    assert f.tolist() == [1, 2, 3, 4, 5, 6] and fbw.tolist() == [3, 6, 9, 12, 15, 18]
    assert crossing_ticks(chain_costs()).tolist() == [0, 18, 18, 18, 18, 18, 0]


def test_dualpipe_terms_hold_both_pieces_of_a_device():
    # K = 2 pieces, c = m/2 = 2 per chain; T_0 = max(h_0 + c (G_0 + G_1), h_1 + c G_1) = max(0 + 2 x 63, ...)
    assert family_terms(chain_costs(), "dualpipe", 2, 4, (0, 3, 6)) == [126]  # h_1 = 6 + 18: 24 + 90 below
    assert family_terms(chain_costs(), "dualpipe", 2, 4, (0, 5, 6)) == [126]


def test_v_terms_by_hand():
    # K = 4 chunks, c = 4; pieces [0,1) [1,3) [3,5) [5,6): G = 3, 15, 27, 18; F prefix 0 1 3 6 10 15 21
    # T_0 (chunks 0 and 3 on device 0): max(0 + 4 (3 + 18), h_3(5) + 4 x 18), h_3(5) = 15 + 18 + 18 (its hop and one
    #   earlier hop at least hop_min) = 51: max(84, 123) = 123
    # T_1 (chunks 1 and 2 on device 1, no hop between them): max(h_1(1) + 4 (15 + 27), h_2(3) + 4 x 27),
    #   h_1(1) = 1 + 18, h_2(3) = 6 + 18: max(187, 132) = 187
    assert family_terms(chain_costs(), "v", 2, 4, (0, 1, 3, 5, 6)) == [123, 187]


def test_the_least_over_every_cut_and_a_cut_that_meets_it():
    mc = chain_costs()
    brute = min(max(family_terms(mc, "v", 2, 4, (0, *inner, 6))) for inner in itertools.combinations(range(1, 6), 3))
    assert brute == 144
    assert family_cut_bound_tick(mc, "v", 2, 4) == 144
    cut = family_best_cut(mc, "v", 2, 4)
    assert cut == (0, 3, 4, 5, 6) and max(family_terms(mc, "v", 2, 4, cut)) == 144
    assert family_cut_bound_tick(mc, "v", 2, 8) == 288  # c = 8: device 0's work of chunks 0 and 3, 8 x 36
    # DualPipe: every cut puts the whole model on each device, c = m/2 times: work / devices
    assert family_cut_bound_tick(mc, "dualpipe", 2, 4) == 126
    assert every_cut_bound_tick(mc, 2, 4) == (126, {"dualpipe": 126, "v": 144})
    assert every_cut_bound_tick(mc, 2, 4, families=("v",)) == (144, {"v": 144})


def test_dualpipe_with_an_odd_number_of_micro_batches_runs_m_minus_one():
    # m = 5: two chains of 2 micro-batches: the bound is that of m = 4, not work / devices at m = 5 (158)
    assert family_cut_bound_tick(chain_costs(), "dualpipe", 2, 5) == 126
    assert family_cut_bound_tick(chain_costs(), "dualpipe", 2, 1) == 63  # one per chain, two in all
    bound, per_family = every_cut_bound_tick(chain_costs(), 2, 5)  # DualPipe is not solved at an odd m
    assert set(per_family) == {"v"} and bound == per_family["v"]


def test_a_coarser_tolerance_stays_a_bound():
    got = family_cut_bound_tick(chain_costs(), "v", 2, 4, ComparePolicy(cut_bound_rel_tol=0.5))
    assert got is not None and 126 <= got <= 144  # never below work / devices, never above the least
    # from lo = 125 (below work / devices) the upper end doubles its distance to 157, the first feasible; 157 - 125
    # is within half of 157, so the search stops there and returns lo + 1
    assert got == 126


def test_where_there_is_no_bound():
    mc = chain_costs()
    assert family_cut_bound_tick(mc, "v", 2, 4, ComparePolicy(cut_bound_max_positions=5)) is None  # too large
    assert family_cut_bound_tick(mc, "v", 2, 4, ComparePolicy(cut_bound_max_positions=6)) == 144  # just fits
    assert family_cut_bound_tick(mc, "v", 4, 4) is None  # 8 chunks of 6 positions
    assert family_cut_bound_tick(mc, "dualpipe", 1, 4) is None  # one piece: no pair
    assert family_cut_bound_tick(dataclasses.replace(mc, fb_overlap=0.5), "v", 2, 4) is None  # pairs gain
    assert every_cut_bound_tick(dataclasses.replace(mc, fb_overlap=0.5), 2, 4) == (None, {"dualpipe": None,
                                                                                         "v": None})
    with pytest.raises(ValueError, match="unknown placement family 'ring'"):
        family_terms(mc, "ring", 2, 4, (0, 3, 6))


def test_devices_that_differ_give_no_bound():
    inst = make_instance("uneven", [[1, 2], [2, 2], [3, 3]], [(0, 1, 0, 8), (1, 2, 0, 8)], latency=[0, 3],
                         bandwidth=[np.inf, 1.0])
    mc = ModelCosts(inst, 2, ((0,), (1, 2)), ((0,), (1,), (2,)), ticks_per_unit=1)
    assert op_arrays(mc) is None and family_terms(mc, "dualpipe", 2, 4, (0, 1, 3)) == []
    assert family_cut_bound_tick(mc, "dualpipe", 2, 4) is None


def test_the_turn_of_the_v_pays_no_hop_of_its_own():
    # edge 2 -> 3 carries 20 bytes: 30 ticks across boundary 3, 18 elsewhere (hop_min).  At m = 1, cut 0 | 2 | 3 | 5:
    # chunk 2 starts at the V's turn (boundary 3, on the device of chunk 1), so its head is F(0..2) + one earlier hop
    # at least hop_min, 6 + 18, not the 30 of a boundary between two devices:
    # T_1 = max(h_1(2) + (G_1 + G_2), h_2(3) + G_2) = max(3 + 18 + 9 + 27, 24 + 27) = 57
    edges = [(0, 1, 0, 8), (1, 2, 0, 8), (2, 3, 0, 20), (3, 4, 0, 8), (4, 5, 0, 8), (0, 5, 0, 4)]
    inst = make_instance("heavy turn", [[f, f] for f in (1, 2, 3, 4, 5, 6)], edges, latency=[0, 3],
                         bandwidth=[np.inf, 1.0])
    mc = ModelCosts(inst, 2, ((0, 1, 2), (3, 4, 5)), ((0,), (1, 2), (3, 4), (5,)), ticks_per_unit=1)
    assert crossing_ticks(mc).tolist() == [0, 18, 18, 30, 18, 18, 0]
    # T_0 = max(0 + 9 + 18, h_3(5) + 18), h_3(5) = 15 + 18 + 18 (its own hop, and one earlier hop at least hop_min)
    assert family_terms(mc, "v", 2, 1, (0, 2, 3, 5, 6)) == [69, 57]
    # chunk 1 starting at position 3 crosses the heavy boundary between two devices: h_1(3) = 6 + 30
    assert family_terms(mc, "v", 2, 1, (0, 3, 4, 5, 6)) == [69, 36 + 12 + 15]


def test_a_v_on_one_device_holds_both_chunks():
    # K = 2 chunks on device 0, c = 4: all the work, 4 x 63
    assert family_cut_bound_tick(chain_costs(), "v", 1, 4) == 252


def test_the_preset_s_positions_are_its_units_rounded_down():
    costs = preset_costs("deepseek-v3", load_topology("hardware_profiles/cpu-4.yaml"), 2, num_layers=2)
    arrays = op_arrays(costs)
    assert arrays is not None
    dev = costs.topology.devices[0]
    secs = [[sum(costs.priced_seconds(op, dev)[i] for op in unit) for i in range(3)] for unit in costs.units]
    assert arrays[0].tolist() == [math.floor(s[0] / costs.tick_s) for s in secs]
    assert arrays[1].tolist() == [sum(math.floor(x / costs.tick_s) for x in s) for s in secs]
