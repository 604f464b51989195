"""Fits of `plan-calibrate`'s measurements: per-op-type cost factors, and the link's latency and bandwidth line.

Per-op-type cost factors: fit the measured times of representative ops against the calibrated roofline.

No torch here (the timings are `planner.execute.calibrate`).  The cost model prices an op as

    time_s = factor(op_type) x max(flops / peak, bytes / bandwidth) + launch_overhead      (`planner.cost.compute`)

so for each representative op the fit sets its measured time net of the launch overhead against its roofline
term (the same `compute_time_s` with the profile's own figures and no factors), and per op type takes the factor
that minimises the squared error in seconds over that type's ops:

    factor = sum(roofline_i x net_i) / sum(roofline_i^2)       (least squares through the origin)

Seconds, not ratios: a plan's makespan is a sum of seconds, so the large ops of a type (where a factor moves the
makespan) weigh most, and a tiny op whose time is mostly launch overhead cannot pull the factor of its type off.
The factor is clamped to [`MIN_FACTOR`, `MAX_FACTOR`] (an op measured faster than its launch overhead would give
a negative one).  Each op's own ratio net / roofline is kept beside it, so that the provenance shows how well one
factor fits a type's shapes.
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
           "profile_factor_table", "MIN_FACTOR", "MAX_FACTOR"]

MIN_FACTOR = 0.05
MAX_FACTOR = 1000.0


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
        return f"{self.factor:.4g} (least squares in seconds; per op, net time / roofline: {parts})"


def roofline_s(op: Op, device: Device) -> float:
    """The op's roofline term on `device`: `compute_time_s` without the launch overhead and without any factor."""
    plain = dataclasses.replace(device, launch_overhead_s=0.0, op_cost_factors={})
    return compute_time_s(op, plain)


def fit_factor(pairs: Iterable[tuple[float, float]]) -> float:
    """Least-squares factor through the origin of (roofline_s, net_s) pairs, clamped to [MIN_FACTOR, MAX_FACTOR];
    1.0 when no pair has a positive roofline."""
    num = den = 0.0
    for roof, net in pairs:
        num += roof * net
        den += roof * roof
    if den <= 0 or not math.isfinite(num / den):
        return 1.0
    return min(MAX_FACTOR, max(MIN_FACTOR, num / den))


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
        out[op_type] = FactorFit(op_type, round_sig(fit_factor(pairs)), ratios)
    return out


def robust_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) of the Theil-Sen line through the points: slope = the median of the slopes of all pairs
    with distinct x, intercept = the median of y - slope x.  One wild point (a message size hit by a transport
    delay) moves neither, where it drags a least-squares line (measured: a 256-byte message at 4.3 ms among
    60-400 us ones).  Fewer than two distinct x: slope 0, intercept the median y."""
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
