"""The constructive list schedule (`planner.pipeline.greedy`) on hand-timed cases: hop delays, one micro-batch in
flight when the cap holds one activation, and the range of in-flight limits `best_greedy` tries."""

from __future__ import annotations

from planner.pipeline.greedy import best_greedy, greedy_times
from planner.pipeline.unroll import StageCost, TrainingPipeline, uniform_pipeline


def test_hops_delay_the_next_stage():
    # F = B = W = 1, hop 2: 1F0 waits for 0F0 (ends 1) + 2; 0B0 for 1B0 (ends 5) + 2; 1F1 (ready 4) waits for
    # 1B0 (the backward first); device 1 runs its W's after the B's, device 0 its W after each B
    times = greedy_times(uniform_pipeline(2, 2, comm_tick=2), [9, 9], 2)
    assert times == {"0F0": 0, "0F1": 1, "1F0": 3, "1B0": 4, "1F1": 5, "1B1": 6, "0B0": 7, "1W0": 7, "0W0": 8,
                     "1W1": 8, "0B1": 9, "0W1": 10}


def test_a_cap_of_one_activation_runs_one_micro_batch_at_a_time():
    # the cap holds one activation: best_greedy tries max_in_flight = 1 only; 0F1 waits for 0W0 to end
    best = best_greedy(uniform_pipeline(2, 2), [1, 1])
    assert best is not None
    times, span = best
    assert span == 10
    assert times == {"0F0": 0, "1F0": 1, "1B0": 2, "0B0": 3, "1W0": 3, "0W0": 4, "0F1": 5, "1F1": 6, "1B1": 7,
                     "0B1": 8, "1W1": 8, "0W1": 9}


def test_best_greedy_tries_no_more_in_flight_than_the_cap_holds_after_parameters():
    # a stage's parameters (1) take room from the cap (3): room 2 holds one activation of 2, so only
    # max_in_flight = 1 is tried, although B frees the whole activation and 2 in flight would be shorter
    st = StageCost(1, 1, 1, activation_bytes=2, param_bytes=1, activation_freed_by_b_bytes=2)
    pipe = TrainingPipeline((st, st), 3, 2, (0, 1), ((0, 1),))
    one, two = greedy_times(pipe, [3, 3], 1), greedy_times(pipe, [3, 3], 2)
    assert max(one.values()) + 1 == 15 and max(two.values()) + 1 == 13
    assert best_greedy(pipe, [3, 3]) == (one, 15)


def test_best_greedy_keeps_the_shortest_limit():
    # no cap to speak of: limits 1..2m are tried and the shortest schedule kept
    pipe = uniform_pipeline(2, 3)
    spans = {k: max(t + 1 for t in greedy_times(pipe, [99, 99], k).values()) for k in range(1, 7)}
    times, span = best_greedy(pipe, [99, 99])
    assert span == min(spans.values()) < spans[1]


def test_no_placement_gives_no_greedy_schedule():
    pipe = uniform_pipeline(2, 2, placement="free")
    assert greedy_times(pipe, [9, 9], 2) is None and best_greedy(pipe, [9, 9]) is None
