"""SCIP through OR-Tools' pywraplp (the MILP translation is in `_milp.py`).

* time limit: ``SetTimeLimit``; gap: ``RELATIVE_MIP_GAP``; seed: SCIP's ``randomization/randomseedshift``;
  threads: SCIP runs one thread here (``SetNumThreads`` is tried and ignored when refused).  SCIP is deterministic
  for a fixed seed when it ends by its gap, not by the time limit.
* hints: ``SetHint`` with every hinted column (SCIP tries them as a partial start solution and completes it).
* best bound: ``Objective().BestBound()``.  Progress: the final incumbent and bound only.
"""

from __future__ import annotations

import ortools
from ortools.linear_solver import pywraplp

from formulations.backends._milp import MilpBuilder, MilpOutcome
from formulations.model_api import SolveParams, SolveStatus

NAME = "scip"


def _make() -> pywraplp.Solver | None:
    return pywraplp.Solver.CreateSolver("SCIP")


def _version() -> str:
    s = _make()
    return s.SolverVersion() if s is not None else ""


# ortools marks only subpackages (ortools.sat, ...) typed, so mypy sees the top package as an empty namespace:
# its __version__ is real (ortools/__init__.py sets it).
VERSION = f"{_version()} (ortools {ortools.__version__})"  # type: ignore[attr-defined]


def available() -> bool:
    return _make() is not None


class ScipBuilder(MilpBuilder):
    solver_name = NAME
    solver_version = VERSION

    def _run(self, params: SolveParams) -> MilpOutcome:
        solver = _make()
        assert solver is not None
        inf = solver.infinity()
        cols = [solver.BoolVar(v.name) if v.is_bool else solver.IntVar(v.lb, v.ub, v.name) for v in self._vars]
        for r in self.rows:
            ct = solver.RowConstraint(-inf if r.lb is None else r.lb, inf if r.ub is None else r.ub, r.name)
            for j, a in r.coefs.items():
                ct.SetCoefficient(cols[j], a)
        obj = solver.Objective()
        for j, a in self.objective.terms.items():
            obj.SetCoefficient(cols[j], a)
        obj.SetOffset(self.objective.const)
        obj.SetMinimization()
        hints = self.complete_hints()
        if hints:
            solver.SetHint([cols[j] for j in hints], [float(v) for v in hints.values()])
        solver.SetTimeLimit(max(1, int(params.time_limit_s * 1000)))
        solver.SetNumThreads(max(1, params.threads))
        solver.SetSolverSpecificParametersAsString(f"randomization/randomseedshift = {int(params.seed)}\n")
        if params.log:
            solver.EnableOutput()
        mp = pywraplp.MPSolverParameters()
        mp.SetDoubleParam(pywraplp.MPSolverParameters.RELATIVE_MIP_GAP, float(params.rel_gap))
        code = solver.Solve(mp)
        if code in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
            status = SolveStatus.OPTIMAL if code == pywraplp.Solver.OPTIMAL else SolveStatus.FEASIBLE
            values = {j: c.solution_value() for j, c in enumerate(cols)}
            return MilpOutcome(status, obj.Value(), obj.BestBound(), values)
        if code == pywraplp.Solver.INFEASIBLE:
            return MilpOutcome(SolveStatus.INFEASIBLE, None, None, {})
        if code == pywraplp.Solver.MODEL_INVALID:
            return MilpOutcome(SolveStatus.MODEL_INVALID, None, None, {})
        return MilpOutcome(SolveStatus.UNKNOWN, None, None, {})


def new_builder() -> ScipBuilder:
    return ScipBuilder()
