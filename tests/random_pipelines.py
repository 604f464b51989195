"""Small random training pipelines with a memory cap that often binds: fixed chains, V placements and DualPipe's
two directions on two devices, with or without communication streams and all-to-alls.  Small enough for CP-SAT to
prove the full pipeline model optimal in seconds, so tests can hold a bound or a rewrite against the optimum; and
longer pipelines with uneven stages, where the search has slack to find."""

from __future__ import annotations

import dataclasses
import random

from planner.pipeline.unroll import StageCost, TrainingPipeline, uniform_pipeline


def random_pipeline(rng: random.Random) -> TrainingPipeline:
    """A pipeline on two devices drawn from `rng`: one of the three shapes, one to three ticks a task, 2-4
    micro-batches."""
    shape = rng.choice(["fixed", "v", "two chains"])
    p = 2
    n = {"fixed": 2, "v": 4, "two chains": 4}[shape]
    comm = rng.random() < 0.5
    stages = tuple(StageCost(rng.randint(1, 3), rng.randint(1, 3), rng.randint(0, 2),
                             activation_bytes=rng.randint(2, 6), param_bytes=rng.randint(0, 3),
                             activation_freed_by_b_bytes=rng.randint(0, 2),
                             a2a_tick=rng.randint(0, 2) if comm else 0) for _ in range(n))
    if shape == "fixed":
        std, chains, mb = (0, 1), ((0, 1),), rng.randint(2, 4)
    elif shape == "v":
        std, chains, mb = (0, 1, 1, 0), ((0, 1, 2, 3),), rng.randint(2, 3)
    else:  # DualPipe's two directions
        stages = stages[:2] + stages[:2]
        std, chains, mb = (0, 1, 1, 0), ((0, 1), (2, 3)), rng.randint(2, 3)
    return TrainingPipeline(stages, mb, p, std, chains, comm_tick=rng.randint(0, 2), name=shape, comm_stream=comm)


def random_cap(pipe: TrainingPipeline, rng: random.Random) -> int:
    """A cap that fits one micro-batch on every device (its parameters and every activation of its stages) and
    up to two more of the largest activation: often binding."""
    need = max(sum(int(pipe.stages[s].param_bytes) + int(pipe.stages[s].activation_bytes)
                   for s in pipe.device_stages(d)) for d in range(pipe.num_devices))
    return need + max(int(s.activation_bytes) for s in pipe.stages) * rng.randint(0, 2)


def uneven_pipeline(num_stages: int, m: int, placement: str, seed: int) -> TrainingPipeline:
    """Stages with different F, B, W and activations (slack for the search to find)."""
    rng = random.Random(seed)
    base = uniform_pipeline(num_stages, m, placement=placement)
    stages = tuple(StageCost(rng.randint(1, 4), rng.randint(1, 5), rng.randint(0, 3), rng.randint(1, 3), 0)
                   for _ in base.stages)
    return dataclasses.replace(base, stages=stages, name="uneven")
