"""The MILP side of the modelling interface, shared by the SCIP, CBC and HiGHS adapters.

`MilpBuilder` turns every operation into plain rows ``lb <= sum(a_j x_j) <= ub`` over integer/binary columns; a
subclass only passes the rows to its solver (`_run`).

* ``add_if(lits, lb <= e <= ub)``: with ``L = sum over lits of (1 - lit)`` (0 exactly when all hold), the rows
  ``e <= ub + M_ub * L`` and ``e >= lb - M_lb * L``, where ``M_ub = max(e) - ub`` and ``M_lb = lb - min(e)`` come
  from the variables' bounds (the formulation keeps those tight: the horizon bounds every time variable).  A side
  that always holds is skipped.
* ``no_overlap``: for every unordered pair (i, j) of intervals not listed in `ordered_pairs`, one order binary o
  and ``end_i <= start_j`` if (o and both present), ``end_j <= start_i`` if (not o and both present), both big-M
  as above.  Pairs listed in `ordered_pairs` are already ordered by other constraints and cost nothing.  Each
  interval's own ``end = start + size`` (when present) is added unless the expressions make it an identity.
* ``cumulative``: a SAFE bound, not an exact resource constraint: ``sum_i demand_i * presence_i <= capacity``
  (every present interval is assumed to coexist with every other).  It never lets a schedule overload the
  resource, but it may reject schedules whose intervals do not in fact overlap; so on memory-limited instances a
  MILP backend can report a longer makespan, or infeasibility, where CP-SAT finds a plan.  ``redundant=True``
  constraints are dropped.
* ``hint``: collected; order binaries get derived hints when the intervals' times are hinted.  Each subclass
  hands them to its solver as an initial solution (see there).
"""

from __future__ import annotations

import time
from abc import abstractmethod
from dataclasses import dataclass

from formulations.model_api import (
    Interval,
    LinearConstraint,
    LinExpr,
    Literal,
    ModelBuilder,
    SolveParams,
    SolveResult,
    SolveStatus,
    as_expr,
    as_literal,
    linear,
)


@dataclass(frozen=True)
class Row:
    coefs: dict[int, int]
    lb: float | None
    ub: float | None
    name: str


@dataclass(frozen=True)
class MilpOutcome:
    status: SolveStatus
    objective: float | None
    bound: float | None
    values: dict[int, float]


# Objectives are sums of integer coefficients; a bound within this of the incumbent is the same number in floats.
_ABS_GAP_TOL = 1e-6


def closed_gap_is_optimal(out: MilpOutcome, rel_gap: float) -> MilpOutcome:
    """An incumbent whose proven bound meets it (within `rel_gap`) is optimal, whatever stopped the solver.

    Why: CBC stopped by its time limit (a starved machine) reports "integer feasible" even when its log's best
    possible value equals the incumbent; that is a proof all the same, and callers read OPTIMAL as one.
    """
    if out.status is not SolveStatus.FEASIBLE or out.objective is None or out.bound is None:
        return out
    if out.objective - out.bound > max(_ABS_GAP_TOL, rel_gap * abs(out.objective)):
        return out
    return MilpOutcome(SolveStatus.OPTIMAL, out.objective, out.bound, out.values)


class MilpBuilder(ModelBuilder):
    solver_name = "milp"
    solver_version = ""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[Row] = []
        self.objective: LinExpr = LinExpr({}, 0, {})
        self._orders: list[tuple[int, Interval, Interval]] = []  # (order var index, i, j)
        self._n_order = 0

    # ---- rows
    def _row(self, expr: LinExpr, lb: int | None, ub: int | None, name: str) -> None:
        if not expr.terms:
            c = expr.const
            if (lb is not None and c < lb) or (ub is not None and c > ub):
                # An empty row that cannot hold: keep it so the solver reports infeasibility.
                self.rows.append(Row({}, None if lb is None else lb - c, None if ub is None else ub - c, name))
            return
        self.rows.append(Row(dict(expr.terms), None if lb is None else lb - expr.const,
                             None if ub is None else ub - expr.const, name))

    def _add(self, constraint: LinearConstraint, name: str) -> None:
        self._row(constraint.expr, constraint.lb, constraint.ub, name)

    def _add_if(self, literals: list[Literal], constraint: LinearConstraint, name: str) -> None:
        if not literals:
            self._add(constraint, name)
            return
        # L = sum(1 - lit): 0 when every literal holds.
        slack = linear([(1, ~lit) for lit in literals])
        e = constraint.expr
        lo, hi = e.bounds()
        if constraint.ub is not None and hi > constraint.ub:
            big_m = hi - constraint.ub
            self._row(e - big_m * slack, None, constraint.ub, name + "#ub" if constraint.lb is not None else name)
        if constraint.lb is not None and lo < constraint.lb:
            big_m = constraint.lb - lo
            self._row(e + big_m * slack, constraint.lb, None, name + "#lb" if constraint.ub is not None else name)

    def _presence(self, iv: Interval) -> list[Literal]:
        return [] if iv.presence is None else [iv.presence]

    def _interval_semantics(self, iv: Interval, name: str) -> None:
        gap = iv.end - iv.start - iv.size
        if gap.terms or gap.const:
            self._add_if(self._presence(iv), LinearConstraint.of(gap, 0, 0), f"{name}#len")

    def _no_overlap(self, intervals: list[Interval], name: str, ordered: set[tuple[int, int]]) -> None:
        for iv in intervals:
            self._interval_semantics(iv, name)
        n = len(intervals)
        for i in range(n):
            for j in range(i + 1, n):
                a, b = intervals[i], intervals[j]
                if (i, j) in ordered:
                    continue
                if (j, i) in ordered:
                    continue
                self._n_order += 1
                o = self.bool_var(f"order{self._n_order}")
                self._orders.append((o.index, a, b))
                both = self._presence(a) + self._presence(b)
                self._add_if([as_literal(o)] + both, LinearConstraint.of(a.end - b.start, None, 0),
                             f"{name}#{i},{j}")
                self._add_if([~o] + both, LinearConstraint.of(b.end - a.start, None, 0), f"{name}#{j},{i}")

    def _cumulative(self, intervals: list[Interval], demands: list[int], capacity: LinExpr, name: str,
                    redundant: bool) -> None:
        if redundant:
            return
        load = linear([(d, iv.presence) for d, iv in zip(demands, intervals) if iv.presence is not None],
                      sum(d for d, iv in zip(demands, intervals) if iv.presence is None))
        self._row(load - capacity, None, 0, name)

    def _minimize(self, expr: LinExpr) -> None:
        self.objective = expr

    # ---- hints
    def complete_hints(self) -> dict[int, int]:
        """The hints given, plus order binaries derived from hinted interval times."""
        hints = dict(self._hints)
        for idx, a, b in self._orders:
            try:
                end_a = as_expr(a.end).value(hints)
                start_b = as_expr(b.start).value(hints)
            except KeyError:
                continue
            hints[idx] = 1 if end_a <= start_b else 0
        return hints

    # ---- solving
    def solve(self, params: SolveParams) -> SolveResult:
        t0 = time.monotonic()
        out = closed_gap_is_optimal(self._run(params), params.rel_gap)
        wall = time.monotonic() - t0
        if params.progress is not None and out.objective is not None:
            gap = None
            if out.bound is not None:
                gap = abs(out.objective - out.bound) / max(1.0, abs(out.objective))
            params.progress(wall, out.objective, out.bound, gap)
        return SolveResult(out.status, out.objective, out.bound, wall, self.solver_name, self.solver_version,
                           out.values)

    @abstractmethod
    def _run(self, params: SolveParams) -> MilpOutcome: ...

