"""The constructive list schedule (planner/pipeline/greedy.py), the warm start the formulation gets when it beats
the baselines."""

from __future__ import annotations

from collections import defaultdict

import pytest

from formulations.pipeline import solve_pipeline
from planner.compare.baselines import pipeline_of, simulate_baseline
from planner.pipeline.greedy import best_greedy, greedy_times
from planner.pipeline.registry import Scales, UnitCosts
from planner.pipeline.unroll import uniform_pipeline, unroll


def _check(pipe, times, cap):
    """Precedence (with delays), one task at a time per device, in-order micro-batches, memory under the cap."""
    inst = unroll(pipe)
    std = pipe.stage_to_device

    def stage(n):
        return int(n[:len(n) - len(n.lstrip("0123456789"))])

    dur = {n: int(inst.duration_tick[t, std[stage(n)]]) for t, n in enumerate(inst.task_names)}
    for e, (u, v) in enumerate(inst.edges):
        nu, nv = inst.task_names[u], inst.task_names[v]
        assert times[nv] >= times[nu] + dur[nu] + inst.comm(e, std[stage(nu)], std[stage(nv)])
    per_dev = defaultdict(list)
    for n, t in times.items():
        per_dev[std[stage(n)]].append((t, t + dur[n]))
    for row in per_dev.values():
        row.sort()
        assert all(a[1] <= b[0] for a, b in zip(row, row[1:]))
    events = defaultdict(int)
    for s, c in enumerate(pipe.stages):
        for m in range(pipe.num_microbatches):
            events[(std[s], times[f"{s}F{m}"])] += c.activation_bytes
            events[(std[s], times[f"{s}W{m}"] + dur[f"{s}W{m}"])] -= c.activation_bytes
    for d in range(pipe.num_devices):
        level = 0
        for (_, _t), delta in sorted((k, v) for k, v in events.items() if k[0] == d):
            level += delta
            assert level <= cap
    return max(times[n] + dur[n] for n in times)


def test_two_stages_hand_derived():
    # 2 stages, 2 micro-batches, F = B = W = 1, no cap.  Device 1: 1F0 [1,2), then B before F: 1B0 [2,3),
    # 1F1 [3,4), 1B1 [4,5), 1W0 [5,6), 1W1 [6,7); device 0: 0F0, 0F1 [0,2), 0B0 [3,4) (needs 1B0), 0W0 [4,5),
    # 0B1 [5,6), 0W1 [6,7) -> 7, the optimum of tests/test_pipeline_compare.py.
    pipe = uniform_pipeline(2, 2)
    times = greedy_times(pipe, [100, 100], 2)
    assert times["1B0"] == 2 and times["1F1"] == 3 and times["0B0"] == 3 and times["0W1"] == 6
    assert _check(pipe, times, 100) == 7


def test_stuck_and_streams_give_none():
    pipe = uniform_pipeline(2, 2)
    assert greedy_times(pipe, [0, 0], 2) is None  # no forward fits
    streams = type(pipe)(**{**pipe.__dict__, "comm_tick": 1, "comm_stream": True})
    assert greedy_times(streams, [9, 9], 2) is None


@pytest.mark.parametrize("p,m", [(4, 8), (8, 16)])
def test_two_direction_greedy_beats_dualpipe_at_its_memory_and_warm_starts(p, m):
    c = UnitCosts()
    sc = Scales.of(c)
    dp = simulate_baseline("dualpipe", p, m, c, sc)
    cap = dp.figures.max_peak_memory_bytes
    pipe = pipeline_of("dualpipe", p, m, c, sc)
    times, span = best_greedy(pipe, [cap] * p)
    assert _check(pipe, times, cap) == span < dp.figures.makespan_tick
    sol = solve_pipeline(pipe, cap, warm_start=times, time_limit_s=2)
    assert sol.plan.makespan_tick <= span
