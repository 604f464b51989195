"""One solve driver for every formulation: build, hint, solve, read back, and decide what the result means.

A formulation (`Formulation`) knows its model and nothing about solving: it builds the model on a `ModelBuilder`,
hints a known solution, reads a solution back from a `SolveResult`, says why the model is infeasible, and turns
the solver's objective bound into a bound in ticks.  `solve_formulation` owns everything else, the same way for
every formulation:

* the budget: the time left of `time_limit_s` counted from `started_s` (the caller's own preparation, e.g. a DP
  warm start, spends the same budget), at least 0.1 s; threads, seed, determinism, relative gap, progress;
* hints: `hint` (any solution, valid or not) is handed to `Formulation.hint`;
* status mapping: MODEL_INVALID -> RuntimeError naming the formulation (a bug in it or in the adapter);
  INFEASIBLE -> `InfeasibleError` with the formulation's reason — except when a *known* solution (`known`, one
  the caller checked) exists: then the model cannot be infeasible, unless a MILP backend's conservative memory
  bound (`cumulative` counts every buffer at once; `Backend.exact_cumulative` False) cut it off, and a
  formulation that uses `cumulative` gets the known solution back as FEASIBLE with the bound `lower_bound_tick`
  (the solver proved nothing about the real problem); otherwise the disagreement is a bug (RuntimeError);
* the fallback: without a solver solution, the known solution (OpplanError when there is none); with one, the
  known solution when it is strictly better (`value_tick`; the solver's own wins ties);
* the bound: max(`lower_bound_tick`, the solver's bound rounded by `ceil_tick`, the ONE rounding rule), raised to
  the solver solution's value when the solver proved it optimal with no gap, and never above the returned value;
* the status: OPTIMAL iff the bound meets the returned value (PlanStatus.FEASIBLE otherwise).

A formulation whose objective is not its value in ticks (a weighted objective, a second lexicographic phase)
says so with `objective_is_value = False`: the solver's bound is then not converted, solutions are not compared
with the known one, and OPTIMAL means the solver proved its own objective optimal.

The result, `Solved`, is generic in the formulation's solution type: the solution, the `PlanStatus`, the lower
bound in ticks, the solver's name and version, the seconds spent since `started_s`, whether the solution came
from the solver or from the known solution (`SolutionSource`), and when the solver first found it.
"""

from __future__ import annotations

import enum
import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

from formulations.backends import Backend, get_backend
from formulations.model_api import (
    DEFAULT_SOLVE_POLICY,
    ModelBuilder,
    ProgressCallback,
    SolveParams,
    SolvePolicy,
    SolveResult,
    SolveStatus,
)
from planner.errors import InfeasibleError, OpplanError
from planner.schedule.plan import PlanStatus

ModelT = TypeVar("ModelT")
SolutionT = TypeVar("SolutionT")

BOUND_TOLERANCE = 1e-6
"""A solver's bound within this of an integer is that integer (MILP solvers return 9.9999999 for 10).  Not a
knob: the floating-point noise of the solvers' bounds, part of the one rounding rule `ceil_tick`."""


def ceil_tick(value: float) -> int:
    """The one rounding rule for solver bounds: the smallest integer >= `value`, with `BOUND_TOLERANCE`."""
    return math.ceil(value - BOUND_TOLERANCE)


class SolutionSource(enum.Enum):
    """Where a returned solution came from."""

    SOLVER = "solver"
    KNOWN = "known"  # the known (warm-start) solution: the solver had none, or a worse one


class Formulation(ABC, Generic[ModelT, SolutionT]):
    """What a formulation gives the driver: its model, its read-back, and a few facts about its objective."""

    name: ClassVar[str]  # 'placement', 'stage', 'pipeline': in messages ("the placement model of ...")
    solution_noun: ClassVar[str] = "solution"  # "found no <noun> for ..."
    uses_cumulative: ClassVar[bool] = False  # its model has a `cumulative` (bounded conservatively on MILP)
    objective_is_value: bool = True  # the objective is `value_tick` (times a positive factor)
    subject: str = ""  # what is solved (an instance's or a pipeline's name), in messages

    @abstractmethod
    def build(self, builder: ModelBuilder) -> ModelT:
        """Create the variables, constraints and objective on `builder`; return what `read` and `hint` need."""

    def hint(self, model: ModelT, solution: SolutionT) -> None:
        """Hint every variable from `solution` (need not be valid: a solver repairs or ignores a bad hint)."""

    @abstractmethod
    def read(self, model: ModelT, result: SolveResult) -> SolutionT:
        """The solution in `result` (which has one); raise RuntimeError when it is not valid."""

    @abstractmethod
    def value_tick(self, solution: SolutionT) -> int:
        """The quantity the bound bounds, in ticks (makespan, bottleneck)."""

    def bound_tick(self, solver_bound: float) -> int:
        """The solver's objective bound as a bound on `value_tick` (only called when `objective_is_value`)."""
        return ceil_tick(solver_bound)

    def explain_infeasible(self, backend: Backend) -> str:
        """Why the model has no solution (the message of the `InfeasibleError`)."""
        return f"the {self.name} model of {self.subject!r} is infeasible"


@dataclass(frozen=True)
class Solved(Generic[SolutionT]):
    """The driver's answer (module docstring)."""

    solution: SolutionT
    status: PlanStatus  # OPTIMAL or FEASIBLE
    lower_bound_tick: int  # never above the solution's value_tick
    solver: str
    solver_version: str
    solve_time_s: float  # since `started_s`
    source: SolutionSource
    time_to_best_s: float = 0.0  # since `started_s`, until the solver first found this solution (0: known)
    solver_status: SolveStatus = SolveStatus.UNKNOWN


def _improvement_recorder(
    t0: float, progress: ProgressCallback | None
) -> tuple[list[tuple[float, float]], ProgressCallback]:
    """A progress callback that records (seconds since t0, incumbent) at each improvement into the returned list
    and forwards every call to `progress`."""
    found: list[tuple[float, float]] = []

    def on_progress(wall_s: float, incumbent: float | None, bound: float | None, gap: float | None) -> None:
        if incumbent is not None and (not found or incumbent < found[-1][1]):
            found.append((time.monotonic() - t0, incumbent))
        if progress is not None:
            progress(wall_s, incumbent, bound, gap)

    return found, on_progress


def _known_stands(formulation: Formulation[ModelT, SolutionT], be: Backend, status: SolveStatus,
                  known: SolutionT | None) -> bool:
    """For a model the backend rejects or calls infeasible: True when `known` stands as the answer (a backend whose
    cumulative is not exact may reject a model a valid solution satisfies); raises otherwise."""
    if status is SolveStatus.MODEL_INVALID:
        raise RuntimeError(f"{be.name} rejected the {formulation.name} model of {formulation.subject!r} "
                           f"(a formulation bug)")
    if known is None:
        raise InfeasibleError(formulation.explain_infeasible(be))
    if formulation.uses_cumulative and not be.exact_cumulative:
        return True
    raise RuntimeError(f"{be.name} calls the {formulation.name} model of {formulation.subject!r} infeasible, "
                       f"but a known solution satisfies it (a formulation bug)")


def _known_verdict(formulation: Formulation[ModelT, SolutionT], known: SolutionT, bound: int
                   ) -> tuple[PlanStatus, int]:
    """(status, bound) of answering with the known solution: the bound never above its value."""
    value = formulation.value_tick(known)
    bound = min(bound, value)
    return _status(bound, value), bound


def _pick_solution(
    formulation: Formulation[ModelT, SolutionT], model: ModelT, result: SolveResult, known: SolutionT | None,
    bound: int, rel_gap: float, found: list[tuple[float, float]],
) -> tuple[SolutionT, PlanStatus, int, SolutionSource, float]:
    """(solution, status, bound, source, seconds to the best) from a solver result that holds a solution: the
    solver's, or `known` where it is strictly better by value."""
    by_value = formulation.objective_is_value
    solution = formulation.read(model, result)
    value = formulation.value_tick(solution)
    proven = result.status is SolveStatus.OPTIMAL
    if by_value and proven and rel_gap == 0:
        bound = max(bound, value)
    to_best = next((t for t, v in found if result.objective is not None and v <= result.objective
                    + BOUND_TOLERANCE), 0.0)
    source = SolutionSource.SOLVER
    if by_value and known is not None and formulation.value_tick(known) <= value:
        to_best = 0.0  # the known solution was as good from the start
        if formulation.value_tick(known) < value:
            solution, value, source = known, formulation.value_tick(known), SolutionSource.KNOWN
    bound = min(bound, value)
    if by_value:
        status = _status(bound, value)
    else:
        status = PlanStatus.OPTIMAL if proven else PlanStatus.FEASIBLE
    return solution, status, bound, source, to_best


def solve_formulation(
    formulation: Formulation[ModelT, SolutionT],
    *,
    backend: str | Backend = "cpsat",
    time_limit_s: float = 60.0,
    rel_gap: float = 0.0,
    threads: int = 8,
    seed: int = 0,
    deterministic: bool = True,
    progress: ProgressCallback | None = None,
    hint: SolutionT | None = None,
    known: SolutionT | None = None,
    lower_bound_tick: int = 0,
    started_s: float | None = None,
    policy: SolvePolicy = DEFAULT_SOLVE_POLICY,
) -> Solved[SolutionT]:
    """Solve `formulation` (module docstring).  `known`: a solution the caller checked (valid); `hint`: what to
    hint (default `known`); `lower_bound_tick`: a bound proven without the solver; `started_s`: the
    `time.monotonic()` at which the caller's budget started (default now); `policy`: the least time a solve gets
    and the backends' knobs."""
    t0 = time.monotonic() if started_s is None else started_s
    be = get_backend(backend) if isinstance(backend, str) else backend
    builder = be.new_builder()
    model = formulation.build(builder)
    if hint is None:
        hint = known
    if hint is not None:
        formulation.hint(model, hint)
    found, on_progress = _improvement_recorder(t0, progress)
    remaining = max(policy.min_solve_s, time_limit_s - (time.monotonic() - t0))
    result = builder.solve(SolveParams(time_limit_s=remaining, rel_gap=rel_gap, threads=threads, seed=seed,
                                       deterministic=deterministic, progress=on_progress, policy=policy))

    def answer(solution: SolutionT, status: PlanStatus, bound: int, source: SolutionSource,
               to_best: float = 0.0) -> Solved[SolutionT]:
        return Solved(solution, status, bound, be.name, be.version, time.monotonic() - t0, source, to_best,
                      result.status)

    if result.status in (SolveStatus.MODEL_INVALID, SolveStatus.INFEASIBLE):
        if _known_stands(formulation, be, result.status, known):
            assert known is not None  # _known_stands raises without one
            return answer(known, *_known_verdict(formulation, known, lower_bound_tick), SolutionSource.KNOWN)

    bound = lower_bound_tick
    if formulation.objective_is_value and result.best_bound is not None and math.isfinite(result.best_bound):
        bound = max(bound, formulation.bound_tick(result.best_bound))
    if not result.has_solution:
        if known is None:
            raise OpplanError(f"{be.name} found no {formulation.solution_noun} for {formulation.subject!r} within "
                              f"{time_limit_s:g} s and no valid warm start was given",
                              fix="raise the time limit or pass a warm start")
        return answer(known, *_known_verdict(formulation, known, bound), SolutionSource.KNOWN)
    return answer(*_pick_solution(formulation, model, result, known, bound, rel_gap, found))


def _status(bound: int, value: int) -> PlanStatus:
    return PlanStatus.OPTIMAL if bound >= value else PlanStatus.FEASIBLE
