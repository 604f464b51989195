"""HiGHS through its own Python binding ``highspy`` (MILP translation in `_milp.py`).

* time limit: ``time_limit``; gap: ``mip_rel_gap``; threads: ``threads`` (the process-wide HiGHS scheduler is
  reset first, so do not run two HiGHS solves concurrently in one process); seed: ``random_seed``.  HiGHS's MIP
  solver is deterministic for a fixed seed when it ends by its gap, not by the time limit.
* hints: ``setSolution`` with the hinted columns (sparse; HiGHS fixes the hinted integer columns and tries to
  complete them into a feasible start).
* best bound: ``info.mip_dual_bound``.  Progress: final values only.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _pkg_version

import highspy
import numpy as np

from formulations.backends._milp import MilpBuilder, MilpOutcome
from formulations.model_api import SolveParams, SolveStatus

NAME = "highs"
try:
    VERSION = f"HiGHS {_pkg_version('highspy')}"
except PackageNotFoundError:  # pragma: no cover - a source build
    VERSION = "HiGHS"


def available() -> bool:
    return True


class HighsBuilder(MilpBuilder):
    solver_name = NAME
    solver_version = VERSION

    def _run(self, params: SolveParams) -> MilpOutcome:
        h = highspy.Highs()
        h.setOptionValue("output_flag", bool(params.log))
        h.setOptionValue("time_limit", float(params.time_limit_s))
        h.setOptionValue("mip_rel_gap", float(params.rel_gap))
        # HiGHS keeps one process-wide thread pool and refuses to run when `threads` differs from the size it was
        # first created with: reset it so every solve gets the threads it asks for.
        highspy.Highs.resetGlobalScheduler(True)
        h.setOptionValue("threads", max(1, int(params.threads)))
        h.setOptionValue("random_seed", int(params.seed))
        inf = highspy.kHighsInf
        n = len(self._vars)
        lb = np.array([v.lb for v in self._vars], dtype=np.float64)
        ub = np.array([v.ub for v in self._vars], dtype=np.float64)
        h.addVars(n, lb, ub)
        h.changeColsIntegrality(n, np.arange(n, dtype=np.int32),
                                np.full(n, highspy.HighsVarType.kInteger, dtype=np.uint8))
        if self.objective.terms:
            idx = np.array(list(self.objective.terms), dtype=np.int32)
            h.changeColsCost(len(idx), idx, np.array([self.objective.terms[i] for i in idx], dtype=np.float64))
        h.changeObjectiveOffset(float(self.objective.const))
        if self.rows:
            lower = np.array([-inf if r.lb is None else r.lb for r in self.rows], dtype=np.float64)
            upper = np.array([inf if r.ub is None else r.ub for r in self.rows], dtype=np.float64)
            starts: list[int] = []
            index: list[int] = []
            value: list[int] = []
            for r in self.rows:
                starts.append(len(index))
                index.extend(r.coefs)
                value.extend(r.coefs.values())
            h.addRows(len(self.rows), lower, upper, len(index), np.array(starts, dtype=np.int32),
                      np.array(index, dtype=np.int32), np.array(value, dtype=np.float64))
        hints = self.complete_hints()
        if hints:
            h.setSolution(len(hints), np.array(list(hints), dtype=np.int32),
                          np.array(list(hints.values()), dtype=np.float64))
        h.run()
        ms = h.getModelStatus()
        info = h.getInfo()
        has_sol = info.primal_solution_status == 2  # kSolutionStatusFeasible
        if ms == highspy.HighsModelStatus.kInfeasible:
            return MilpOutcome(SolveStatus.INFEASIBLE, None, None, {})
        if ms in (highspy.HighsModelStatus.kModelError, highspy.HighsModelStatus.kLoadError):
            return MilpOutcome(SolveStatus.MODEL_INVALID, None, None, {})
        if has_sol:
            col = h.getSolution().col_value
            values = {j: float(col[j]) for j in range(n)}
            bound = float(info.mip_dual_bound)
            status = SolveStatus.OPTIMAL if ms == highspy.HighsModelStatus.kOptimal else SolveStatus.FEASIBLE
            return MilpOutcome(status, float(info.objective_function_value),
                               bound if np.isfinite(bound) else None, values)
        return MilpOutcome(SolveStatus.UNKNOWN, None, None, {})


def new_builder() -> HighsBuilder:
    return HighsBuilder()
