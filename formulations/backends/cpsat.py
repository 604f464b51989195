"""OR-Tools CP-SAT adapter (the default backend).

* ``no_overlap``: optional interval variables + ``AddNoOverlap`` (native; `ordered_pairs` is ignored).
* ``cumulative``: ``AddCumulative`` (native, exact), also when `redundant`.
* ``add_if``: ``OnlyEnforceIf``.
* ``hint``: ``AddHint``.  A complete, feasible hint becomes the first incumbent.
* Interval bounds and the cumulative capacity must be affine in CP-SAT; a longer expression gets an auxiliary
  integer variable (``aux`` constraint, not counted in the formulation's families).
* Determinism (`SolveParams.deterministic`, the default): ``interleave_search`` (the subsolvers run in fixed
  batches, so the search does not depend on thread timing) with ``num_workers = threads``, a fixed
  ``random_seed``, and ``max_deterministic_time = time_limit_s`` besides the wall-clock limit.  A solve that ends
  by its proof (or its gap) returns the same plan run after run; one cut by a time limit can differ, because the
  wall clock usually binds first (interleaved search accrues deterministic time slower than wall time).  With
  ``deterministic=False`` the portfolio runs its workers freely in parallel (often faster, not reproducible).
* ``num_workers = min(threads, INTERLEAVED_WORKERS_MAX)`` (2) in the deterministic mode: CP-SAT 9.13 to 9.15
  corrupt their heap under interleaved search with more workers (``free(): invalid next size``, the process
  aborted, within minutes on an 8-stage pipeline at 8 workers); at 1 or 2 workers it does not happen.
* ``interleave_batch_size = min(workers, 4)``: a batch ends when its slowest subsolver chunk does, and with 8
  chunks sharing 2 cores a solve that had already met its bound waited seconds for the batch to end.  (Stopping
  from the solution callback instead crashes CP-SAT 9.15 when presolve alone solves the model.)
* Progress: a solution callback reports each incumbent with the bound at that moment; ``best_bound_callback``
  reports bound improvements between incumbents.
"""

from __future__ import annotations

import math
import threading
import time

import ortools
from ortools.sat.python import cp_model

from formulations.model_api import (
    Interval,
    LinearConstraint,
    LinExpr,
    Literal,
    ModelBuilder,
    SolveParams,
    SolveResult,
    SolveStatus,
    Var,
)
from formulations.stop import controlled, stoppable

NAME = "cpsat"
# ortools marks only subpackages (ortools.sat, ...) typed, so mypy sees the top package as an empty namespace:
# its __version__ is real (ortools/__init__.py sets it).
VERSION = ortools.__version__  # type: ignore[attr-defined]

_STATUS = {
    cp_model.OPTIMAL: SolveStatus.OPTIMAL,
    cp_model.FEASIBLE: SolveStatus.FEASIBLE,
    cp_model.INFEASIBLE: SolveStatus.INFEASIBLE,
    cp_model.UNKNOWN: SolveStatus.UNKNOWN,
    cp_model.MODEL_INVALID: SolveStatus.MODEL_INVALID,
}


def _gap(obj: float | None, bound: float | None) -> float | None:
    if obj is None or bound is None:
        return None
    return abs(obj - bound) / max(1.0, abs(obj))


class _Progress(cp_model.CpSolverSolutionCallback):
    def __init__(self, params: SolveParams, t0: float) -> None:
        super().__init__()
        self._params, self._t0 = params, t0
        self.incumbent: float | None = None
        self.bound: float | None = None

    def on_solution_callback(self) -> None:
        self.incumbent = self.objective_value
        self.bound = self.best_objective_bound
        if self._params.progress is not None:
            self._params.progress(time.monotonic() - self._t0, self.incumbent, self.bound,
                                  _gap(self.incumbent, self.bound))

    def on_bound(self, bound: float) -> None:
        if self.bound is not None and bound <= self.bound:
            return
        self.bound = bound
        if self._params.progress is not None:
            self._params.progress(time.monotonic() - self._t0, self.incumbent, bound, _gap(self.incumbent, bound))


# CP-SAT 9.13 to 9.15 corrupt their heap under interleaved (deterministic) search with more than 2 workers: the
# deterministic mode runs at most this many.  Not a knob: a safety limit around the
# solver's crash, as the one below
INTERLEAVED_WORKERS_MAX = 2

# CP-SAT 9.15 aborts the process (a failed check in its postsolve) when stop_search reaches a solve in its first
# moments, while the hint is repaired and presolve runs; a stop that comes then waits until the solve is this old.
# Not a knob: a safety limit around the solver's crash, which no setting trades for quality
STOP_AFTER_START_S = 1.0


def _stop_after_start(solver: cp_model.CpSolver, t0: float) -> None:
    """Stop `solver`'s running solve (started at `t0`) now, or once it is `STOP_AFTER_START_S` old; a stop that
    arrives after the solve has returned does nothing (`CpSolver.stop_search` then finds no solve)."""
    wait_s = t0 + STOP_AFTER_START_S - time.monotonic()
    if wait_s <= 0:
        solver.stop_search()
        return
    timer = threading.Timer(wait_s, solver.stop_search)
    timer.daemon = True
    timer.start()


class CpSatBuilder(ModelBuilder):
    def __init__(self) -> None:
        super().__init__()
        self.model = cp_model.CpModel()
        self._cp: list[cp_model.IntVar] = []
        self._aux: list[tuple[cp_model.IntVar, LinExpr]] = []
        self._largest_reservoir = 0  # events of the largest reservoir (decides how CP-SAT takes reservoirs)

    # ---- translation helpers
    def _new_var(self, var: Var) -> None:
        if var.is_bool:
            self._cp.append(self.model.new_bool_var(var.name))
        else:
            self._cp.append(self.model.new_int_var(var.lb, var.ub, var.name))

    def _expr(self, e: LinExpr):
        if not e.terms:
            return e.const
        idx = list(e.terms)
        return cp_model.LinearExpr.weighted_sum([self._cp[i] for i in idx], [e.terms[i] for i in idx]) + e.const

    def _affine(self, e: LinExpr):
        if len(e.terms) <= 1:
            return self._expr(e)
        lo, hi = e.bounds()
        aux = self.model.new_int_var(lo, hi, f"aux{len(self._aux)}")
        self.model.add(aux == self._expr(e))
        self._aux.append((aux, e))
        return aux

    def _lit(self, lit: Literal):
        v = self._cp[lit.var.index]
        return v.negated() if lit.negated else v

    def _linear(self, c: LinearConstraint):
        expr = self._expr(c.expr) if c.expr.terms else 0
        lo = -math.inf if c.lb is None else c.lb
        hi = math.inf if c.ub is None else c.ub
        if c.lb is not None and c.ub is not None:
            return self.model.add_linear_constraint(expr, c.lb, c.ub)
        if c.lb is not None:
            return self.model.add(expr >= lo)
        return self.model.add(expr <= hi)

    def _size(self, iv: Interval):
        """The interval's size, affine; an auxiliary size variable is >= 0 and tied to its expression only while
        the interval is present (an absent interval constrains nothing)."""
        e = iv.size
        if len(e.terms) <= 1:
            return self._expr(e)
        lo, hi = e.bounds()
        aux = self.model.new_int_var(max(0, lo), max(0, hi), f"aux{len(self._aux)}")
        ct = self.model.add(aux == self._expr(e))
        if iv.presence is not None:
            ct.only_enforce_if(self._lit(iv.presence))
        self._aux.append((aux, e))
        return aux

    def _interval(self, iv: Interval):
        start, size, end = self._affine(iv.start), self._size(iv), self._affine(iv.end)
        if iv.presence is None:
            return self.model.new_interval_var(start, size, end, iv.name)
        return self.model.new_optional_interval_var(start, size, end, self._lit(iv.presence), iv.name)

    # ---- ModelBuilder hooks
    def _add(self, constraint: LinearConstraint, name: str) -> None:
        self._linear(constraint).with_name(name)

    def _add_if(self, literals: list[Literal], constraint: LinearConstraint, name: str) -> None:
        ct = self._linear(constraint)
        ct.only_enforce_if([self._lit(x) for x in literals])
        ct.with_name(name)

    def _no_overlap(self, intervals: list[Interval], name: str, ordered: set[tuple[int, int]]) -> None:
        self.model.add_no_overlap([self._interval(iv) for iv in intervals]).with_name(name)

    def _cumulative(self, intervals: list[Interval], demands: list[int], capacity: LinExpr, name: str,
                    redundant: bool) -> None:
        if not intervals:
            return
        self.model.add_cumulative([self._interval(iv) for iv in intervals], demands,
                                  self._affine(capacity)).with_name(name)

    def _reservoir(self, times: list[LinExpr], changes: list[int], max_level: int, name: str) -> None:
        self._largest_reservoir = max(self._largest_reservoir, len(times))
        if times:
            self.model.add_reservoir_constraint([self._affine(t) for t in times], changes, 0,
                                                max_level).with_name(name)

    def _minimize(self, expr: LinExpr) -> None:
        self.model.minimize(self._expr(expr))

    def _hint(self, var: Var, value: int) -> None:
        self.model.add_hint(self._cp[var.index], value)

    def _hint_aux(self) -> None:
        """Hint each auxiliary variable whose defining expression is fully hinted (keeps the hint complete)."""
        for aux, e in self._aux:
            if all(i in self._hints for i in e.terms):
                lo, hi = aux.proto.domain[0], aux.proto.domain[-1]
                self.model.add_hint(aux, min(max(int(e.value(self._hints)), lo), hi))

    def solve(self, params: SolveParams) -> SolveResult:
        if self._hints:
            self._hint_aux()
        solver = cp_model.CpSolver()
        p = solver.parameters
        p.max_time_in_seconds = float(params.time_limit_s)
        p.relative_gap_limit = float(params.rel_gap)
        p.num_workers = max(1, int(params.threads))
        p.random_seed = int(params.seed)
        p.log_search_progress = bool(params.log)
        # a caller that handles Ctrl-C stops the solve through `stoppable` (CP-SAT's own handler would leave SIGINT
        # at SIG_DFL afterwards: formulations.stop)
        p.catch_sigint_signal = not controlled()
        # CP-SAT's presolve expands a reservoir into a Boolean per pair of events: on a few dozen events that proves
        # infeasibility faster than the native propagator, but on a few hundred the quadratic number of Booleans
        # keeps the presolve running past the time limit, where the propagator finds a schedule at once
        p.expand_reservoir_constraints = self._largest_reservoir <= params.policy.reservoir_expand_max_events
        if params.deterministic:
            p.interleave_search = True
            p.num_workers = min(p.num_workers, INTERLEAVED_WORKERS_MAX)
            p.interleave_batch_size = min(p.num_workers, 4)
            p.max_deterministic_time = float(params.time_limit_s)
        t0 = time.monotonic()
        cb = _Progress(params, t0)
        solver.best_bound_callback = cb.on_bound
        with stoppable(lambda: _stop_after_start(solver, t0)):
            code = solver.solve(self.model, cb)
        wall = time.monotonic() - t0
        status = _STATUS.get(code, SolveStatus.UNKNOWN)
        values: dict[int, float] = {}
        objective = bound = None
        if status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
            sol = solver.response_proto.solution
            values = {v.index: float(sol[self._cp[v.index].index]) for v in self._vars}
            objective = solver.objective_value
            bound = solver.best_objective_bound
        elif status is SolveStatus.UNKNOWN:
            bound = solver.best_objective_bound
            if not math.isfinite(bound):
                bound = None
        if params.progress is not None and objective is not None:
            params.progress(wall, objective, bound, _gap(objective, bound))
        return SolveResult(status, objective, bound, wall, NAME, VERSION, values)


def new_builder() -> CpSatBuilder:
    return CpSatBuilder()
