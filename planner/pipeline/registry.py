"""Every baseline by name, with the pipeline (stage split, placement, chains) its schedule runs on.

Costs are given for the model cut into p stages, one per device (`UnitCosts`, in the user's unit).  Schedules
that give each device two chunks (interleaved 1F1B, ZB-V, DualPipeV) cut every stage in half: each chunk costs
half of F, B, W, activation and parameters, so every schedule runs the same model on the same p devices.
DualPipe keeps p chunks at full cost but holds two copies (one per direction) and sends m/2 micro-batches each
way.  Ticks: one unit is `ticks_per_unit` ticks (even, so halves are whole); memory likewise `bytes_per_unit`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner.errors import InputError
from planner.pipeline.dualpipe import dualpipe, dualpipe_v
from planner.pipeline.generators import gpipe, interleaved_1f1b, one_f_one_b
from planner.pipeline.unroll import StageCost, TrainingPipeline, fixed_placement, v_placement
from planner.pipeline.zero_bubble import zb_h1, zb_h2, zb_v
from planner.schedule.program import Schedule


@dataclass(frozen=True)
class UnitCosts:
    """Per stage of the model cut into p stages: F, B (input grad), W (weight grad) in time units; activation and
    parameters in memory units; `comm` per hop; `fb_overlap` = duration of an overlapped F&B pair as a fraction
    of running its two halves one after the other."""

    f: float = 1.0
    b: float = 1.0
    w: float = 1.0
    activation: float = 1.0
    param: float = 0.0
    comm: float = 0.0
    fb_overlap: float = 1.0
    comm_stream: bool = False  # hops as send tasks on per-device communication streams (`unroll` docstring)
    a2a: float = 0.0  # one MoE all-to-all (dispatch or combine) of a stage, one micro-batch (`unroll` docstring)

    def __post_init__(self) -> None:
        for k in ("f", "b", "w", "activation", "param", "comm", "a2a"):
            if getattr(self, k) < 0:
                raise InputError(f"--{k.replace('_', '-')} must be >= 0, got {getattr(self, k)}")
        if not 0 < self.fb_overlap <= 1:
            raise InputError(f"--fb-overlap must be in (0, 1], got {self.fb_overlap}")


def _scale(values: list[float]) -> int:
    """Smallest of 2, 4, 10, 20, 100, 200, 1000 that makes every value (and its half) a whole number."""
    for k in (2, 4, 10, 20, 100, 200, 1000):
        if all(abs(v * k - round(v * k)) < 1e-9 and round(v * k) % 2 == 0 for v in values):
            return k
    return 1000


@dataclass(frozen=True)
class Scales:
    ticks_per_unit: int
    bytes_per_unit: int

    @classmethod
    def of(cls, c: UnitCosts) -> Scales:
        # overlapped pairs (F&B, F&BW) are whole too, so --fb-overlap is not lost to rounding
        pairs = [c.fb_overlap * (c.f + c.b + c.w), c.fb_overlap * (c.f + c.b)] if c.fb_overlap < 1 else []
        return cls(_scale([c.f, c.b, c.w, c.comm, c.a2a, *pairs]), _scale([c.activation, c.param]))


def _stage(c: UnitCosts, sc: Scales, split: int) -> StageCost:
    t = sc.ticks_per_unit // split
    mem = sc.bytes_per_unit // split
    return StageCost(round(c.f * t), round(c.b * t), round(c.w * t), round(c.activation * mem),
                     round(c.param * mem), a2a_tick=round(c.a2a * t))


def _pipe(c: UnitCosts, sc: Scales, name: str, p: int, num_mb: int, split: int, std, chains) -> TrainingPipeline:
    st = _stage(c, sc, split)
    stages = tuple(st for _ in range(len(std)))
    overlap = round(c.fb_overlap * (st.forward_tick + st.bw_tick))
    return TrainingPipeline(stages, num_mb, p, tuple(std), chains, round(c.comm * sc.ticks_per_unit), name,
                            overlap, comm_stream=c.comm_stream, fb_overlap=c.fb_overlap)


def pipeline_for(name: str, p: int, m: int, c: UnitCosts, sc: Scales | None = None) -> TrainingPipeline:
    """The pipeline schedule `name` runs on for p devices, m micro-batches in total."""
    sc = sc or Scales.of(c)
    if name in ("gpipe", "1f1b", "zb-h1", "zb-h2"):
        return _pipe(c, sc, name, p, m, 1, fixed_placement(p, p), (tuple(range(p)),))
    if name == "interleaved-1f1b":
        return _pipe(c, sc, name, p, m, 2, fixed_placement(2 * p, p), (tuple(range(2 * p)),))
    if name in ("zb-v", "dualpipev", "opplan-v"):
        return _pipe(c, sc, name, p, m, 2, v_placement(p), (tuple(range(2 * p)),))
    if name == "dualpipe":
        return _pipe(c, sc, name, p, max(m // 2, 1), 1, v_placement(p), (tuple(range(p)), tuple(range(p, 2 * p))))
    raise InputError(f"unknown schedule {name!r}", fix=f"use one of {', '.join(GENERATORS)}")


GENERATORS: dict[str, Callable[[int, int], Schedule]] = {
    "gpipe": gpipe,
    "1f1b": one_f_one_b,
    "interleaved-1f1b": interleaved_1f1b,
    "zb-h1": zb_h1,
    "zb-h2": zb_h2,
    "zb-v": zb_v,
    "dualpipe": dualpipe,
    "dualpipev": dualpipe_v,
}
