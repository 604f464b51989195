"""Pipeline-stage formulation: hand-derived optima, brute force over every contiguous split (and every stage map for
FREE placement) on every backend, the exact DP, constraint counts per family, and infeasibility reports.

Brute force (independent of `planner.heuristics.stage_dp`): positions follow `inst.topological_order`; choose the S-1
cut positions and the map, then add durations per stage, each edge's delay `inst.comm` on every boundary it
crosses (sender pays), and check memory = param_copies x params + inflight x activations per stage.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from instances import make_instance

from formulations.backends import available_backends, get_backend
from formulations.stages import build_stage_model, solve_stages
from planner.cost.instance import INELIGIBLE, SchedulingInstance
from planner.errors import InfeasibleError, InputError
from planner.heuristics.stage_dp import StagePlacement, StagePlan, stage_data, stages_dp

BACKENDS = available_backends()
FIXED, FREE = StagePlacement.FIXED, StagePlacement.FREE


def _solve(inst, S, backend="cpsat", **kw) -> StagePlan:
    kw.setdefault("time_limit_s", 10)
    plan = solve_stages(inst, S, backend=backend, threads=2, **kw)
    _check(inst, plan)
    return plan


# ------------------------------------------------------------------------------------------------ oracle
def _measure(inst, S, stage_of_pos, devices, copies=1, inflight=1):
    """Bottleneck of a split, or None when it breaks memory or eligibility (independent of the module)."""
    order = inst.topological_order
    stage = {t: stage_of_pos[i] for i, t in enumerate(order)}
    infl = [inflight] * S if isinstance(inflight, int) else list(inflight)
    compute, comm, mem = [0] * S, [0] * S, [0] * S
    for t in range(inst.num_tasks):
        s, d = stage[t], devices[stage[t]]
        if inst.duration_tick[t, d] >= INELIGIBLE:
            return None
        compute[s] += int(inst.duration_tick[t, d])
        mem[s] += copies * int(inst.param_bytes[t]) + infl[s] * int(inst.activation_bytes[t])
    for k, (u, v) in enumerate(inst.edges):
        for s in range(stage[u], stage[v]):
            comm[s] += inst.comm(k, devices[s], devices[s + 1])
    if any(mem[s] > inst.capacity_bytes[devices[s]] for s in range(S)):
        return None
    return max(c + m for c, m in zip(compute, comm))


def _brute(inst, S, placement, copies=1, inflight=1):
    n = inst.num_tasks
    if placement is FIXED:
        maps = [tuple(range(S))]
    elif placement is FREE:
        maps = list(itertools.permutations(range(inst.num_devices), S))
    else:
        maps = [tuple(placement)]
    best = None
    for cuts in itertools.combinations(range(1, n), S - 1):
        split = [sum(1 for c in cuts if i >= c) for i in range(n)]
        for mp in maps:
            val = _measure(inst, S, split, mp, copies, inflight)
            if val is not None and (best is None or val < best):
                best = val
    return best


def _check(inst, plan: StagePlan) -> None:
    """The plan's own numbers agree with an independent measurement."""
    order = inst.topological_order
    split = [plan.stage_of[inst.task_names[t]] for t in order]
    assert split[0] == 0 and split[-1] == plan.num_stages - 1
    assert all(b - a in (0, 1) for a, b in zip(split, split[1:]))
    assert len(set(plan.stage_device)) == plan.num_stages
    val = _measure(inst, plan.num_stages, split, plan.stage_device, plan.param_copies,
                   list(plan.inflight_microbatches))
    assert val == plan.bottleneck_tick
    assert plan.lower_bound_tick <= plan.bottleneck_tick
    assert (plan.status == "optimal") == (plan.lower_bound_tick == plan.bottleneck_tick)


def _random_instance(seed: int, hetero: bool, tight: bool) -> SchedulingInstance:
    rng = random.Random(seed)
    n = rng.randint(4, 8)
    nd = 3
    edges = []
    for v in range(1, n):
        for u in rng.sample(range(v), k=min(v, rng.randint(1, 2))):
            edges.append((u, v, rng.randint(0, 3), rng.choice([0, 100, 400])))
    if hetero:
        speed = [1, 2, 3]
        durations = [[rng.randint(1, 6) * speed[d] for d in range(nd)] for _ in range(n)]
    else:
        durations = [[rng.randint(1, 6)] * nd for _ in range(n)]
    link_class = [[0, 1, 2], [1, 0, 2], [2, 2, 0]]
    params = [rng.randint(1, 5) for _ in range(n)]
    acts = [rng.randint(0, 3) for _ in range(n)]
    total = sum(params) + sum(acts)
    capacity = rng.randint(total // 3, (2 * total) // 3) if tight else 10**6  # tight: memory shapes the split
    return make_instance(f"rand{seed}", durations, edges, link_class=link_class, latency=[0, 1, 3],
                         bandwidth=[np.inf, 100.0, 50.0], params=params, acts=acts,
                         capacity=[capacity, capacity, capacity + rng.randint(0, 6)])


# ------------------------------------------------------------------------------------------------ hand-derived
# Chain of 6 unit tasks into 3 stages, no communication: 6 ticks of work over 3 stages is at least 2 each, and
# the split 2 + 2 + 2 reaches it.  Bottleneck 2.
@pytest.mark.parametrize("backend", BACKENDS)
def test_equal_chain_splits_evenly(backend: str) -> None:
    inst = SchedulingInstance.uniform("chain6", [1] * 6, [(i, i + 1, 0) for i in range(5)], 3)
    plan = _solve(inst, 3, backend, warm_start=False)
    assert plan.bottleneck_tick == 2 and plan.status == "optimal"
    assert plan.compute_tick == (2, 2, 2)
    assert plan.stage_tasks == (("t0", "t1"), ("t2", "t3"), ("t4", "t5"))
    assert stages_dp(inst, 3).bottleneck_tick == 2


# Chain 4, 1, 1, 1, 1 into 2 stages: the 4 is a lower bound (one task), and {4} | {1,1,1,1} reaches it; every
# other split puts 4 + 1 in the first stage.  Bottleneck 4 with an uneven 1 + 4 split.
@pytest.mark.parametrize("backend", BACKENDS)
def test_heavy_task_forces_uneven_split(backend: str) -> None:
    inst = SchedulingInstance.uniform("heavy", [4, 1, 1, 1, 1], [(i, i + 1, 0) for i in range(4)], 2)
    plan = _solve(inst, 2, backend, warm_start=False)
    assert plan.bottleneck_tick == 4
    assert plan.stage_tasks == (("t0",), ("t1", "t2", "t3", "t4"))


# Chain of 4 unit tasks, 2 stages; the edges t0->t1 and t1->t2 cost 3 across devices, t2->t3 costs 0.  The sender
# pays: cut after t0: max(1 + 3, 3) = 4; after t1 (even): max(2 + 3, 2) = 5; after t2: max(3 + 0, 1) = 3.
# Optimum 3: the cut moves to the free edge.
@pytest.mark.parametrize("backend", BACKENDS)
def test_communication_moves_cut_to_cheap_edge(backend: str) -> None:
    inst = SchedulingInstance.uniform("comm", [1] * 4, [(0, 1, 3), (1, 2, 3), (2, 3, 0)], 2)
    plan = _solve(inst, 2, backend, warm_start=False)
    assert plan.bottleneck_tick == 3
    assert plan.stage_tasks == (("t0", "t1", "t2"), ("t3",))
    assert plan.comm_tick == (0, 0)


# t0 -> t1 -> t2 and a skip edge t0 -> t2 costing 2; three unit tasks in three stages (the only split).  The skip
# edge is forwarded through stage 1, so it counts on both boundaries: stage times 1 + 2, 1 + 2, 1.  Bottleneck 3.
@pytest.mark.parametrize("backend", BACKENDS)
def test_skip_edge_counts_on_every_boundary(backend: str) -> None:
    inst = SchedulingInstance.uniform("skip", [1, 1, 1], [(0, 1, 0), (1, 2, 0), (0, 2, 2)], 3)
    plan = _solve(inst, 3, backend, warm_start=False)
    assert plan.comm_tick == (2, 2, 0) and plan.bottleneck_tick == 3


# Chain of 4 unit tasks, 2 stages, parameters 1, 1, 4, 4 bytes, 6 bytes per device.  The even split needs
# 4 + 4 = 8 > 6 in stage 1; {t0}|{t1,t2,t3} needs 9; {t0,t1,t2}|{t3} needs 6 and 4.  Bottleneck 3 (not 2).
# With param_copies = 2 (DualPipe) that split needs 12 > 6 too: no split fits.
@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_forces_a_different_split(backend: str) -> None:
    free = SchedulingInstance.uniform("mem", [1] * 4, [(i, i + 1, 0) for i in range(3)], 2, param_bytes=[1, 1, 4, 4])
    assert _solve(free, 2, backend, warm_start=False).bottleneck_tick == 2
    tight = SchedulingInstance.uniform("mem", [1] * 4, [(i, i + 1, 0) for i in range(3)], 2,
                                       param_bytes=[1, 1, 4, 4], capacity_bytes=6)
    plan = _solve(tight, 2, backend, warm_start=False)
    assert plan.bottleneck_tick == 3 and plan.stage_tasks[1] == ("t3",)
    assert plan.memory_bytes == (6, 4) and plan.param_bytes == (6, 4)
    with pytest.raises(InfeasibleError):
        _solve(tight, 2, backend, param_copies=2, warm_start=False)


# Activations: 0, 0, 2, 2 bytes, 6 bytes per device, per-stage in-flight micro-batches (1F1B: S - s = 2, 1).
# Stage 0 holds 2 x its activations, stage 1 one: even split needs 0 and 4: fits, bottleneck 2.  With 2 in flight
# for both stages the even split needs 8 > 6, {t0,t1,t2}|{t3} needs 4 and 4: bottleneck 3.
def test_inflight_activations_per_stage() -> None:
    inst = SchedulingInstance.uniform("act", [1] * 4, [(i, i + 1, 0) for i in range(3)], 2,
                                      activation_bytes=[0, 0, 2, 2], capacity_bytes=6)
    plan = _solve(inst, 2, inflight_microbatches=[2, 1], warm_start=False)
    assert plan.bottleneck_tick == 2 and plan.memory_bytes == (0, 4)
    plan = _solve(inst, 2, inflight_microbatches=2, warm_start=False)
    assert plan.bottleneck_tick == 3 and plan.memory_bytes == (4, 4)


# Two tasks t0 -> t1, 2 stages, three devices; device 1 is twice as fast (t0: 8 / 4 / 8, t1: 2 / 1 / 2).  FIXED
# (stage s on device s): max(8, 1) = 8.  FREE: t0's stage on device 1 gives max(4, 2) = 4, and every map with
# stage 0 elsewhere has >= 8.  Devices 0 and 2 are interchangeable, so the canonical answer is (1, 0).
@pytest.mark.parametrize("backend", BACKENDS)
def test_free_placement_puts_heavy_stage_on_fast_device(backend: str) -> None:
    inst = make_instance("hetero", [[8, 4, 8], [2, 1, 2]], [(0, 1, 0)])
    assert _solve(inst, 2, backend, warm_start=False).bottleneck_tick == 8
    plan = _solve(inst, 2, backend, placement=FREE, warm_start=False)
    assert plan.bottleneck_tick == 4 and plan.stage_device == (1, 0)
    assert plan.device_names == ("d1", "d0")
    assert stages_dp(inst, 2, placement=FREE).bottleneck_tick == 4
    assert _solve(inst, 2, backend, placement=["d1", "d2"]).stage_device == (1, 2)


# Five unit tasks in a chain, 2 stages, no delays; the edge t1->t2 carries 100 bytes, t2->t3 10 bytes.  Cuts
# after t1 and after t2 both give bottleneck 3; the traffic tie-break picks the 10-byte cut.
def test_comm_tiebreak_picks_the_lighter_cut() -> None:
    inst = make_instance("tie", [[1, 1]] * 5, [(0, 1, 0, 1000), (1, 2, 0, 100), (2, 3, 0, 10), (3, 4, 0, 1000)])
    plan = _solve(inst, 2, comm_tiebreak=True)
    assert plan.bottleneck_tick == 3 and plan.comm_bytes == (10, 0)
    assert plan.status == "optimal"


# ------------------------------------------------------------------------------------------------ brute force
CASES = [(seed, hetero, tight) for seed in range(8) for hetero, tight in ((False, False), (True, True))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("placement", [FIXED, FREE], ids=["fixed", "free"])
def test_formulation_equals_brute_force(backend: str, placement: StagePlacement) -> None:
    for seed, hetero, tight in CASES:
        inst = _random_instance(seed, hetero, tight)
        S = 2 + seed % 2
        want = _brute(inst, S, placement)
        if want is None:
            with pytest.raises(InfeasibleError):
                solve_stages(inst, S, placement=placement, backend=backend, time_limit_s=10, threads=2,
                             warm_start=False)
            continue
        plan = _solve(inst, S, backend, placement=placement, warm_start=False)
        assert plan.bottleneck_tick == want, (inst.name, S, backend)
        # CP-SAT always proves these; a MILP backend has (rarely) stopped with an incumbent and a weak bound.
        assert plan.status == "optimal" or backend != "cpsat"


@pytest.mark.parametrize("placement", [FIXED, FREE], ids=["fixed", "free"])
def test_dp_and_warm_started_solve_equal_brute_force(placement: StagePlacement) -> None:
    for seed in range(16):
        inst = _random_instance(seed, hetero=seed % 2 == 1, tight=seed % 3 == 0)
        S = 2 + seed % 2
        kw = {"param_copies": 1 + seed % 2, "inflight_microbatches": 1 + (seed // 2) % 2}
        want = _brute(inst, S, placement, kw["param_copies"], kw["inflight_microbatches"])
        if want is None:
            with pytest.raises(InfeasibleError):
                stages_dp(inst, S, placement=placement, **kw)
            with pytest.raises(InfeasibleError):
                solve_stages(inst, S, placement=placement, time_limit_s=5, threads=2, **kw)
            continue
        dp = stages_dp(inst, S, placement=placement, **kw)
        _check(inst, dp)
        assert dp.bottleneck_tick == want
        plan = _solve(inst, S, placement=placement, **kw)
        assert plan.bottleneck_tick == want and plan.status == "optimal"


def test_given_map_equals_brute_force() -> None:
    for seed in range(6):
        inst = _random_instance(seed, hetero=True, tight=False)
        mp = (2, 0, 1)[: 2 + seed % 2]
        want = _brute(inst, len(mp), mp)
        assert stages_dp(inst, len(mp), placement=mp).bottleneck_tick == want
        assert _solve(inst, len(mp), placement=list(mp), warm_start=False).bottleneck_tick == want


# Chain 3, 1, 1, 1 into 2 stages: without pins {t0} | {t1,t2,t3} gives 3.  With t1 ineligible on device 1
# (stage 1 under FIXED) t1 must stay in stage 0: {t0,t1} | {t2,t3} gives 4, {t0,t1,t2} | {t3} gives 5.  Optimum 4.
def test_ineligible_task_is_kept_off_its_device() -> None:
    free = make_instance("nopin", [[3, 3], [1, 1], [1, 1], [1, 1]], [(0, 1, 0), (1, 2, 0), (2, 3, 0)])
    assert stages_dp(free, 2).bottleneck_tick == 3
    inst = make_instance("pin", [[3, 3], [1, None], [1, 1], [1, 1]], [(0, 1, 0), (1, 2, 0), (2, 3, 0)])
    for backend in BACKENDS:
        plan = _solve(inst, 2, backend, warm_start=False)
        assert plan.stage_tasks == (("t0", "t1"), ("t2", "t3")) and plan.bottleneck_tick == 4
    assert stages_dp(inst, 2).bottleneck_tick == _brute(inst, 2, FIXED) == 4
    assert _solve(inst, 2, placement=FREE, warm_start=False).bottleneck_tick == _brute(inst, 2, FREE) == 3


# ------------------------------------------------------------------------------------------------ counts
# Chain of 6 tasks, 3 stages: position i can only be in stages max(0, i-(n-S)) .. min(i, S-1), so each of the 2
# boundaries has n - S = 3 free positions: 6 booleans.  mono rows where both sides are free: (S-1)(n-S-1) = 4;
# step rows (S-2)(n-S) = 3; period S = 3; mem: capacity 7 < 12 bytes of parameters, one row per stage = 3.
def test_family_counts_fixed() -> None:
    inst = SchedulingInstance.uniform("c6", [1] * 6, [(i, i + 1, 1) for i in range(5)], 3, param_bytes=[2] * 6,
                                      capacity_bytes=7)
    data = stage_data(inst, 3)
    m = build_stage_model(inst, get_backend("cpsat").new_builder(), data, 3, (0, 1, 2), lower_bound=2,
                          upper_bound=10)
    assert m.builder.family_counts() == {"mono": 4, "step": 3, "period": 3, "mem": 3}
    assert sum(1 for v in m.builder.variables if v.is_bool) == 6


# Same chain, FREE on 3 devices where d0-d1 is one link level and d0-d2, d1-d2 another (different delays):
# assign 3, inject 3, work S x D = 9, link per boundary: level 1 from d0 and d1 (2 rows) + level 2 from d0, d1, d2
# (3 rows) = 5, x 2 boundaries = 10; comm 2 boundaries x 2 levels = 4; devices 0 and 1 are interchangeable: one
# sym_used and one sym_order; unbounded memory: no mem rows.
def test_family_counts_free() -> None:
    inst = make_instance("c6f", [[1, 1, 1]] * 6, [(i, i + 1, 0, 100) for i in range(5)],
                         link_class=[[0, 1, 2], [1, 0, 2], [2, 2, 0]], latency=[0, 1, 5],
                         bandwidth=[np.inf, 100.0, 10.0])
    data = stage_data(inst, 3)
    m = build_stage_model(inst, get_backend("cpsat").new_builder(), data, 3, None, lower_bound=2, upper_bound=40)
    assert m.builder.family_counts() == {"mono": 4, "step": 3, "assign": 3, "inject": 3, "link": 10, "work": 9,
                                         "comm": 4, "period": 3, "sym_used": 1, "sym_order": 1}
    # Per edge 1 + 100/100 = 2 ticks over level 1, 5 + 100/10 = 15 over level 2; the solve matches brute force.
    plan = _solve(inst, 3, placement=FREE, warm_start=False)
    assert plan.bottleneck_tick == _brute(inst, 3, FREE)


# ------------------------------------------------------------------------------------------------ errors
# Four tasks of 4 parameter bytes, 2 stages, 7 bytes per device: any split has a stage of >= 8 bytes, and the
# even split needs exactly 8: the report names 8 bytes as the smallest capacity.
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("placement", [FIXED, FREE], ids=["fixed", "free"])
def test_infeasible_memory_names_smallest_capacity(backend: str, placement: StagePlacement) -> None:
    inst = SchedulingInstance.uniform("big", [1] * 4, [(i, i + 1, 0) for i in range(3)], 3, param_bytes=[4] * 4,
                                      capacity_bytes=7)
    for warm in (True, False):
        with pytest.raises(InfeasibleError, match="smallest capacity that could fit is 8 bytes"):
            solve_stages(inst, 2, placement=placement, backend=backend, time_limit_s=5, threads=2, warm_start=warm)
    with pytest.raises(InfeasibleError, match="stage 0 needs 8 bytes .* 1 bytes over"):
        stages_dp(inst, 2, placement=placement)


def test_bad_arguments() -> None:
    inst = SchedulingInstance.uniform("small", [1] * 3, [(0, 1, 0), (1, 2, 0)], 2)
    with pytest.raises(InfeasibleError, match="3 stages need 3 distinct devices"):
        solve_stages(inst, 3)
    with pytest.raises(InfeasibleError, match="non-empty"):
        stages_dp(inst, 4, placement=[0, 1, 0, 1])
    with pytest.raises(InputError, match="twice"):
        stages_dp(inst, 2, placement=[1, 1])
    with pytest.raises(InputError, match="unknown device"):
        stages_dp(inst, 2, placement=["p0", "gpu9"])
    with pytest.raises(ValueError):
        stages_dp(inst, 0)


def test_larger_instance_free_placement_is_valid() -> None:
    """A 60-task random DAG on 6 devices in 2 link levels, 4 stages: a valid plan, never worse than the DP warm
    start, with a bound at least the trivial one."""
    rng = random.Random(7)
    n, nd = 60, 6
    edges = [(u, v, rng.randint(0, 2), rng.randint(0, 500)) for v in range(1, n)
             for u in rng.sample(range(max(0, v - 5), v), k=min(v, 2))]
    dur = [[rng.randint(1, 9) * (1 + d % 2) for d in range(nd)] for _ in range(n)]
    lc = [[0 if a == b else (1 if a // 3 == b // 3 else 2) for b in range(nd)] for a in range(nd)]
    inst = make_instance("r60", dur, edges, link_class=lc, latency=[0, 1, 4], bandwidth=[np.inf, 200.0, 50.0],
                         params=[rng.randint(1, 9) for _ in range(n)], capacity=120)
    plan = _solve(inst, 4, placement=FREE, time_limit_s=5)
    assert plan.lower_bound_tick >= max(-(-sum(min(r) for r in dur) // 4), max(min(r) for r in dur))
    dp_fixed = stages_dp(inst, 4)
    assert plan.bottleneck_tick <= dp_fixed.bottleneck_tick
