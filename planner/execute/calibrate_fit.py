"""Fits of `plan-calibrate`'s measurements: per-op-type cost factors, and the link's latency and bandwidth line.

Per-op-type cost factors: fit the measured times of representative ops against the calibrated roofline.

No torch here (the timings are `planner.execute.calibrate`).  The cost model prices an op as

    time_s = factor(op_type) x max(flops / peak, bytes / bandwidth) + launch_overhead      (`planner.cost.compute`)

so for each representative op the fit sets its measured time net of the launch overhead against its roofline
term (the same `compute_time_s` with the profile's own figures and no factors), net / roofline, and per op type:

    factor = the geometric mean of its ops' ratios, over the ops whose roofline is at least the launch overhead,
             when those ratios agree within `FitPolicy.agreement` (max / min); 1 (the roofline alone) when they disagree
             or no op is left.

Why ratios and agreement, not least squares in seconds: the suite has one to six ops per type, and a
least-squares factor in seconds is the ratio of the type's largest op.  Representatives of one type can run at
very different multiples of their roofline (a dense 3x3 convolution near it, a depthwise one several times above
it), and one factor fitted to the largest would price the type's other shapes far off.  Where the representatives
disagree that much, one factor cannot describe the type, and the roofline of the calibrated figures is the better
price; where they agree, the factor is kept.  An op whose roofline is below
the launch overhead measures the overhead, not its type (a 16 x 64 matmul at 4.6, a small LayerNormalization at
106), so it does not vote.  The factor is clamped to [`FitPolicy.min_factor`, `.max_factor`] (an op measured
faster than its launch overhead has a ratio below zero).  Each op's own ratio is kept beside it, so that the
provenance shows how well one factor fits a type's shapes.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from planner.cost.compute import compute_time_s
from planner.ir.graph import Op
from planner.ir.topology import Device

__all__ = ["OpSample", "FactorFit", "fit_factor", "fit_op_cost_factors", "roofline_s", "robust_line", "round_sig",
           "profile_factor_table", "FitPolicy", "DEFAULT_FIT_POLICY"]


@dataclass(frozen=True)
class FitPolicy:
    """How an op type's factor is fitted from its representatives' ratios."""

    # a ratio below is a measurement faster than the launch overhead allows: noise, not a cheaper op
    min_factor: float = 0.05
    # a ratio above is an op the roofline does not describe at all; clamped so that one op cannot dominate
    max_factor: float = 1000.0
    # a type's representatives must agree within this ratio (max / min) for one factor to describe it
    agreement: float = 3.0


DEFAULT_FIT_POLICY = FitPolicy()


@dataclass(frozen=True)
class OpSample:
    """One representative op: its type, its label, its roofline term and its measured seconds (median of repeats
    x ranks, launch overhead included)."""

    op_type: str
    label: str
    roofline_s: float
    measured_s: float


@dataclass(frozen=True)
class FactorFit:
    """The fitted factor of one op type and, per representative op, measured net of launch / roofline."""

    op_type: str
    factor: float
    ratios: dict[str, float]

    def describe(self) -> str:
        """One line for the profile's provenance: the factor and each op's own ratio."""
        parts = ", ".join(f"{label} {ratio:.3g}" for label, ratio in self.ratios.items())
        return (f"{self.factor:.4g} (geometric mean of the ratios of the ops whose roofline is at least the launch "
                f"overhead, 1 where they disagree by more than {DEFAULT_FIT_POLICY.agreement:g}x; per op, net time / "
                f"roofline: {parts})")


def roofline_s(op: Op, device: Device) -> float:
    """The op's roofline term on `device`: `compute_time_s` without the launch overhead and without any factor."""
    plain = dataclasses.replace(device, launch_overhead_s=0.0, op_cost_factors={})
    return compute_time_s(op, plain)


def fit_factor(pairs: Iterable[tuple[float, float]], min_roofline_s: float = 0.0,
               policy: FitPolicy = DEFAULT_FIT_POLICY) -> float:
    """The factor of one op type from its (roofline_s, net_s) pairs (module docstring): the geometric mean of
    net / roofline (each clamped to [min_factor, max_factor]) over the pairs whose roofline is positive and at least
    `min_roofline_s`; 1.0 when none is left or when they disagree by more than `policy.agreement`."""
    lo, hi = policy.min_factor, policy.max_factor
    ratios = [min(hi, max(lo, net / roof)) for roof, net in pairs
              if roof > 0 and roof >= min_roofline_s and math.isfinite(net / roof)]
    if not ratios or max(ratios) > policy.agreement * min(ratios):
        return 1.0
    return min(hi, max(lo, math.exp(statistics.fmean(math.log(r) for r in ratios))))


def fit_op_cost_factors(samples: Iterable[OpSample], launch_overhead_s: float) -> dict[str, FactorFit]:
    """op type -> its fit (module docstring), in the order the op types first appear."""
    by_type: dict[str, list[OpSample]] = {}
    for s in samples:
        by_type.setdefault(s.op_type, []).append(s)
    out: dict[str, FactorFit] = {}
    for op_type, group in by_type.items():
        pairs = [(s.roofline_s, s.measured_s - launch_overhead_s) for s in group]
        ratios = {s.label: (net / roof if roof > 0 else float("nan")) for s, (roof, net) in zip(group, pairs,
                                                                                               strict=True)}
        out[op_type] = FactorFit(op_type, round_sig(fit_factor(pairs, launch_overhead_s)), ratios)
    return out


def robust_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) of the Theil-Sen line through the points: slope = the median of the slopes of all pairs
    with distinct x, intercept = the median of y - slope x.  One wild point (a message size hit by a transport
    delay, milliseconds among tens of microseconds) moves neither, where it drags a least-squares line.  Fewer than
    two distinct x: slope 0, intercept the median y."""
    pairs = [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs))
             if xs[j] != xs[i]]
    slope = statistics.median(pairs) if pairs else 0.0
    return statistics.median(y - slope * x for x, y in zip(xs, ys, strict=True)), slope


def round_sig(x: float, digits: int = 4) -> float:
    """`x` to `digits` significant digits (what the profile writes, so that a re-read profile prices the same)."""
    return float(f"{x:.{digits}g}")


def profile_factor_table(fits: Mapping[str, FactorFit]) -> dict[str, float]:
    """The profile's `op_cost_factors` table: op type -> factor."""
    return {op_type: fit.factor for op_type, fit in fits.items()}
