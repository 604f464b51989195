"""CBC through PuLP's ``PULP_CBC_CMD`` (the CBC binary bundled with PuLP; MILP translation in `_milp.py`).

* PuLP 4 no longer bundles CBC: there ``COIN_CMD`` uses a ``cbc`` found on PATH (else the backend is
  unavailable).
* time limit: ``timeLimit``; gap: ``gapRel``; threads: 1 when deterministic (CBC is then deterministic with its
  default seed), else ``threads``; the seed is not passed (CBC's default seed is fixed).
* hints: ``var.setInitialValue`` + ``warmStart=True`` (PuLP writes a MIP-start file; CBC completes a partial start).
* best bound: parsed from CBC's log (``Lower bound:`` / ``best possible``); an optimal solve's bound is its
  objective.  Progress: final values only.
"""

from __future__ import annotations

import os
import re
import tempfile
import warnings

import pulp

from formulations.backends._milp import MilpBuilder, MilpOutcome
from formulations.model_api import SolveParams, SolveStatus

NAME = "cbc"
VERSION = f"CBC (bundled with PuLP {pulp.__version__})"


def _cmd(**kwargs):
    """PuLP's bundled CBC (PULP_CBC_CMD, PuLP 2-3), else a CBC found on PATH (COIN_CMD, PuLP 4)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cls = getattr(pulp, "PULP_CBC_CMD", None) or pulp.COIN_CMD
        return cls(**kwargs)


def available() -> bool:
    try:
        return bool(_cmd(msg=False).available())
    except Exception:  # noqa: BLE001 - any failure means "not installed"
        return False


_BOUND = re.compile(r"(?:Lower bound:\s*|best possible\s+)(-?[0-9.eE+-]+)")


class CbcBuilder(MilpBuilder):
    solver_name = NAME
    solver_version = VERSION

    def _run(self, params: SolveParams) -> MilpOutcome:
        prob = pulp.LpProblem("opplan", pulp.LpMinimize)
        cols = []
        for v in self._vars:
            cat = pulp.LpBinary if v.is_bool else pulp.LpInteger
            if hasattr(prob, "add_variable"):  # PuLP >= 3.3; LpVariable(...) is deprecated there
                cols.append(prob.add_variable(f"v{v.index}", v.lb, v.ub, cat=cat))
            else:
                cols.append(pulp.LpVariable(f"v{v.index}", v.lb, v.ub, cat=cat))
        prob += pulp.LpAffineExpression([(cols[j], a) for j, a in self.objective.terms.items()],
                                        constant=self.objective.const)
        for k, r in enumerate(self.rows):
            expr = pulp.LpAffineExpression([(cols[j], a) for j, a in r.coefs.items()])
            if r.lb is not None and r.ub is not None and r.lb == r.ub:
                prob += (expr == r.lb), f"c{k}"
                continue
            if r.lb is not None:
                prob += (expr >= r.lb), f"c{k}l"
            if r.ub is not None:
                prob += (expr <= r.ub), f"c{k}u"
        hints = self.complete_hints()
        for j, val in hints.items():
            cols[j].setInitialValue(val)
        with tempfile.TemporaryDirectory(prefix="opplan-cbc-") as tmp:
            log_path = os.path.join(tmp, "cbc.log")
            cmd = _cmd(msg=False, timeLimit=max(1, int(round(params.time_limit_s))), gapRel=params.rel_gap,
                       threads=1 if params.deterministic else max(1, params.threads), warmStart=bool(hints),
                       logPath=log_path)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prob.solve(cmd)
            log = open(log_path, errors="replace").read() if os.path.exists(log_path) else ""
            if params.log:
                print(log)
        sol_status = prob.sol_status
        if sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
            objective = pulp.value(prob.objective)
            objective = float(objective) if objective is not None else float(self.objective.const)
            optimal = sol_status == pulp.LpSolutionOptimal and prob.status == pulp.LpStatusOptimal
            bound = objective if optimal else None
            m = _BOUND.findall(log)
            if not optimal and m:
                try:
                    bound = float(m[-1])
                except ValueError:
                    bound = None
            values = {j: float(c.varValue if c.varValue is not None else 0.0) for j, c in enumerate(cols)}
            return MilpOutcome(SolveStatus.OPTIMAL if optimal else SolveStatus.FEASIBLE, objective, bound, values)
        if prob.status == pulp.LpStatusInfeasible or sol_status == pulp.LpSolutionInfeasible:
            return MilpOutcome(SolveStatus.INFEASIBLE, None, None, {})
        return MilpOutcome(SolveStatus.UNKNOWN, None, None, {})


def new_builder() -> CbcBuilder:
    return CbcBuilder()
