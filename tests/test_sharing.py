"""Processor sharing between the ranks of one host (`planner.cost.sharing`, `simulate(..., sharing=)`):
hand-checked schedules of 2 ranks on one host, profiles without the figure unchanged, the profile field."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from instances import random_instance, round_robin_orders

from planner.cost.instance import SchedulingInstance
from planner.cost.sharing import SharedHosts, effective_parallelism, load_shared_hosts, shared_hosts
from planner.errors import InputError
from planner.ir.hardware import Profile, load_topology, topology_from_profile
from planner.schedule.errors import DeadlockError, SimulationError
from planner.schedule.simulate import simulate

# 2 ranks on one host with one core's throughput (E = 1), figures measured with both computing (n = 2): each
# priced duration is twice the solo work
ONE_CORE = SharedHosts((0, 0), (1.0,), (2,))


def _times(tl) -> dict[str, tuple[int, int, int]]:
    return {p.task: (p.device, p.start_tick, p.end_tick) for p in tl.placements}


def test_speed_is_min_one_e_over_k() -> None:
    hosts = SharedHosts((0, 0, 0, -1), (1.5,), (3,))
    assert hosts.speed(0, 1) == 1.0
    assert hosts.speed(0, 2) == 0.75
    assert hosts.speed(0, 3) == 0.5
    assert hosts.calibrated_speed(0) == 0.5
    assert hosts.speed(-1, 4) == 1.0 and hosts.calibrated_speed(-1) == 1.0
    assert SharedHosts((0, 0), (4.0,), (2,)).speed(0, 2) == 1.0  # enough cores: nobody slows down
    assert effective_parallelism(2, 40e9, 80e9) == 1.0
    with pytest.raises(ValueError):
        effective_parallelism(2, 0.0, 1.0)
    with pytest.raises(ValueError):
        SharedHosts((0, 1), (1.0,), (2,))


def test_one_rank_alone_runs_at_solo_speed() -> None:
    # a chain of two tasks of 100 priced ticks on one device, the other idle: solo work 50 each
    inst = SchedulingInstance.uniform("chain", [100, 100], [(0, 1, 0)], 2)
    tl = simulate(inst, [[0, 1], []], sharing=ONE_CORE)
    assert _times(tl) == {"t0": (0, 0, 50), "t1": (0, 50, 100)}
    assert simulate(inst, [[0, 1], []]).makespan_tick == 200  # the plain replay: as priced


def test_both_ranks_busy_run_as_priced() -> None:
    # two independent tasks of 100 priced ticks, one per device: both compute throughout, at the calibration's
    # concurrency, so the times are the priced ones
    inst = SchedulingInstance.uniform("pair", [100, 100], [], 2)
    tl = simulate(inst, [[0], [1]], sharing=ONE_CORE)
    assert _times(tl) == {"t0": (0, 0, 100), "t1": (1, 0, 100)}


def test_rates_change_when_the_other_rank_stops() -> None:
    # t0 (priced 100: solo work 50) on p0, t1 (priced 40: solo work 20) on p1.  Both at half speed until t1 ends
    # at 40 (20 solo ticks done on each); t0 has 30 solo ticks left, alone at full speed: ends at 70
    inst = SchedulingInstance.uniform("mixed", [100, 40], [], 2)
    tl = simulate(inst, [[0], [1]], sharing=ONE_CORE)
    assert _times(tl) == {"t0": (0, 0, 70), "t1": (1, 0, 40)}
    # with a core per rank (E = 2) nothing is shared: the plain times
    two_cores = SharedHosts((0, 0), (2.0,), (2,))
    assert _times(simulate(inst, [[0], [1]], sharing=two_cores)) == _times(simulate(inst, [[0], [1]]))


def test_transfer_wait_then_both_busy() -> None:
    # t0 (priced 20) on p0 -> t2 on p1 across a comm of 10; t1 (priced 60) on p0 after t0; t2 (priced 40) on p1.
    # 0-10: t0 alone (solo work 10) ends at 10; t1 starts at 10 alone; t2's input arrives at 20.
    # 10-20: t1 alone, 10 of its 30 solo ticks done.  From 20 both run at half speed: t2 (solo 20) and t1 (20
    # left) end together at 60.
    inst = SchedulingInstance.uniform("wait", [20, 60, 40], [(0, 2, 10)], 2)
    tl = simulate(inst, [[0, 1], [2]], sharing=ONE_CORE)
    assert _times(tl) == {"t0": (0, 0, 10), "t1": (0, 10, 60), "t2": (1, 20, 60)}
    (x,) = tl.transfers
    assert (x.start_tick, x.end_tick) == (10, 20)


def test_a_device_on_its_own_host_is_never_slowed() -> None:
    hosts = SharedHosts((0, -1), (1.0,), (2,))
    inst = SchedulingInstance.uniform("own", [100, 100], [], 2)
    assert _times(simulate(inst, [[0], [1]], sharing=hosts)) == {"t0": (0, 0, 50), "t1": (1, 0, 100)}


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 10), st.integers(1, 3), st.booleans(), st.booleans())
def test_sharing_with_a_core_per_rank_is_the_plain_replay(seed, tasks, devices, hetero, contention) -> None:
    inst = random_instance(seed, tasks, devices, heterogeneous=hetero)
    orders = round_robin_orders(inst)
    plain = simulate(inst, orders, link_contention=contention)
    enough = SharedHosts(tuple([0] * devices), (float(devices),), (devices,))
    shared = simulate(inst, orders, link_contention=contention, sharing=enough)
    assert _times(shared) == _times(plain)
    assert shared.makespan_tick == plain.makespan_tick


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 10), st.integers(1, 3))
def test_sharing_keeps_order_and_precedence(seed, tasks, devices) -> None:
    inst = random_instance(seed, tasks, devices, heterogeneous=True)
    orders = round_robin_orders(inst)
    one = SharedHosts(tuple([0] * devices), (1.0,), (devices,))
    tl = simulate(inst, orders, sharing=one)
    by = tl.by_task()
    for d, row in enumerate(orders):
        names = [inst.task_names[t] for t in row]
        for a, b in zip(names, names[1:]):
            assert by[a].end_tick <= by[b].start_tick + 1  # rounding of continuous times to ticks
    for x in tl.transfers:
        assert by[x.dst_task].start_tick >= x.end_tick - 1
    # never faster than the solo work of all tasks at the host's one core's throughput
    solo_work = sum(int(inst.duration_tick[t, by[n].device]) for t, n in enumerate(inst.task_names)) / devices
    assert tl.makespan_tick >= solo_work - devices


def test_deadlock_and_wrong_device_count_under_sharing() -> None:
    inst = SchedulingInstance.uniform("dl", [5, 5], [(0, 1, 0), (1, 0, 0)][:1], 2)
    with pytest.raises(DeadlockError):
        simulate(inst, [[1, 0], []], sharing=ONE_CORE)
    with pytest.raises(SimulationError):
        simulate(inst, [[0, 1], []], sharing=SharedHosts((0,), (1.0,), (2,)))


# --------------------------------------------------------------------------------------------- the profile
def _profile(sharing: dict | None) -> dict:
    host: dict = {"name": "node0", "devices": [{"kind": "cpu-process", "count": 2, "name_prefix": "cpu",
                                                "peak_flops": {"float": "20GFLOPS"}, "memory": "1GiB",
                                                "memory_bandwidth": "2GB/s", "launch_overhead": "20us"}]}
    if sharing is not None:
        host["sharing"] = sharing
    return {"name": "t", "hosts": [host], "links": {"intra_host": {"latency": "100us", "bandwidth": "1GB/s"}}}


def test_profile_sharing_block_reads_and_prices_the_same(tmp_path) -> None:
    with_block = Profile.model_validate(_profile({"effective_parallelism": 0.96, "measured_ranks": 2}))
    without = Profile.model_validate(_profile(None))
    assert topology_from_profile(with_block).devices == topology_from_profile(without).devices
    hosts = shared_hosts(with_block, topology_from_profile(with_block))
    assert hosts == SharedHosts((0, 0), (0.96,), (2,))
    assert shared_hosts(without, topology_from_profile(without)) is None
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(_profile({"effective_parallelism": 1.1, "measured_ranks": 2})))
    assert load_shared_hosts(path, load_topology(path)) == SharedHosts((0, 0), (1.1,), (2,))
    assert load_shared_hosts(tmp_path / "missing.yaml", load_topology(path)) is None


@pytest.mark.parametrize("bad", [{"effective_parallelism": 0, "measured_ranks": 2},
                                 {"effective_parallelism": 1.0, "measured_ranks": 0},
                                 {"effective_parallelism": 1.0},
                                 {"effective_parallelism": 1.0, "measured_ranks": 2, "cores": 1}])
def test_bad_sharing_block_is_refused(tmp_path, bad) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_profile(bad)))
    with pytest.raises(InputError, match="sharing"):
        load_topology(path)
