"""The solver-neutral modelling interface every formulation is written against.

A formulation creates variables, linear constraints and a few *meaningful* scheduling operations through a
`ModelBuilder`; a backend (``formulations/backends/``) implements the builder for one solver.  Nothing here imports a
solver library.

Expressions.  `Var` (integer or boolean), `Literal` (a boolean or its negation, ``~x``) and `LinExpr` combine with
``+ - *`` (integer coefficients only: CP-SAT is an integer solver and floats would be rounded silently) and compare
with ``<= >= ==`` into a `LinearConstraint` (``lb <= expr <= ub``).  `linear(terms, const)` builds a sum explicitly
(faster for long sums).

Operations and what each backend makes of them (the backends' docstrings repeat the details):

==============================  ===============================  ==============================================
operation                       CP-SAT                           MILP (SCIP, CBC, HiGHS)
==============================  ===============================  ==============================================
``add(c, name)``                linear constraint                row
``add_if(lits, c, name)``       ``OnlyEnforceIf(lits)``          big-M row per side, M from the variable bounds
``no_overlap(ivs, name)``       optional intervals +             per unordered pair: one order binary and two
                                ``AddNoOverlap``                 big-M rows (pairs in `ordered_pairs` skipped)
``cumulative(ivs, dem, cap)``   ``AddCumulative`` (exact)        SAFE bound: sum of demand x presence of every
                                                                 interval <= capacity, i.e. all intervals are
                                                                 assumed to coexist (never admits an overload,
                                                                 may reject feasible schedules)
``cumulative(redundant=True)``  ``AddCumulative``                dropped (an implied constraint only helps the
                                                                 solver; its safe bound would be wrong)
``hint(var, value)``            ``AddHint``                      initial solution (SCIP ``SetHint``, CBC
                                                                 ``warmStart``, HiGHS ``setSolution``)
==============================  ===============================  ==============================================

Names.  Every constraint carries a structured name ``family[key=value,...]`` (e.g. ``prec[i=3,j=5]``); the
builder counts constraints per family (`family_counts`) so tests can count them and an infeasibility report can
point at a family.  A `no_overlap` or `cumulative` counts as one constraint of its family whatever a backend
expands it into.
"""

from __future__ import annotations

import enum
import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

ProgressCallback = Callable[[float, "float | None", "float | None", "float | None"], None]
"""progress(elapsed_s, incumbent, bound, gap): called whenever the incumbent or the bound improves."""

_INT_TYPES = (int, np.integer)


class UnsupportedConstraint(NotImplementedError):
    """A backend cannot express a constraint family (e.g. `ModelBuilder.reservoir` on a MILP backend)."""


def _check_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, _INT_TYPES):
        raise TypeError(f"{what} must be an integer, got {value!r} ({type(value).__name__})")
    return int(value)


# ----------------------------------------------------------------------------------------------- expressions
class _ExprOps:
    """Arithmetic shared by Var, Literal and LinExpr (everything becomes a LinExpr)."""

    def _lin(self) -> LinExpr:  # pragma: no cover - overridden
        raise NotImplementedError

    def __add__(self, other: object) -> LinExpr:
        return self._lin()._plus(as_expr(other), 1)

    __radd__ = __add__

    def __sub__(self, other: object) -> LinExpr:
        return self._lin()._plus(as_expr(other), -1)

    def __rsub__(self, other: object) -> LinExpr:
        return as_expr(other)._plus(self._lin(), -1)

    def __neg__(self) -> LinExpr:
        return self._lin()._scaled(-1)

    def __mul__(self, k: object) -> LinExpr:
        return self._lin()._scaled(_check_int(k, "a coefficient"))

    __rmul__ = __mul__

    def __le__(self, other: object) -> LinearConstraint:  # type: ignore[override]
        return LinearConstraint.of(self._lin()._plus(as_expr(other), -1), None, 0)

    def __ge__(self, other: object) -> LinearConstraint:  # type: ignore[override]
        return LinearConstraint.of(self._lin()._plus(as_expr(other), -1), 0, None)

    def __eq__(self, other: object) -> LinearConstraint:  # type: ignore[override]
        return LinearConstraint.of(self._lin()._plus(as_expr(other), -1), 0, 0)

    __hash__ = object.__hash__


class Var(_ExprOps):
    """A decision variable: an integer in [lb, ub], or a boolean (lb=0, ub=1, `is_bool`)."""

    __slots__ = ("index", "name", "lb", "ub", "is_bool")

    def __init__(self, index: int, name: str, lb: int, ub: int, is_bool: bool) -> None:
        self.index, self.name, self.lb, self.ub, self.is_bool = index, name, lb, ub, is_bool

    def _lin(self) -> LinExpr:
        return LinExpr({self.index: 1}, 0, {self.index: self})

    def __invert__(self) -> Literal:
        if not self.is_bool:
            raise TypeError(f"~ needs a boolean, {self.name} is an integer variable")
        return Literal(self, True)

    def __repr__(self) -> str:
        return f"Var({self.name})"

    __hash__ = object.__hash__


class Literal(_ExprOps):
    """A boolean variable or its negation; as an expression ``~x`` is ``1 - x``."""

    __slots__ = ("var", "negated")

    def __init__(self, var: Var, negated: bool) -> None:
        self.var, self.negated = var, negated

    def _lin(self) -> LinExpr:
        return (1 - self.var._lin()) if self.negated else self.var._lin()

    def __invert__(self) -> Literal:
        return Literal(self.var, not self.negated)

    def __repr__(self) -> str:
        return f"~{self.var.name}" if self.negated else self.var.name

    __hash__ = object.__hash__


def as_literal(lit: Var | Literal) -> Literal:
    if isinstance(lit, Literal):
        return lit
    if isinstance(lit, Var) and lit.is_bool:
        return Literal(lit, False)
    raise TypeError(f"expected a boolean literal, got {lit!r}")


class LinExpr(_ExprOps):
    """sum(coef * var) + const with integer coefficients; `vars` maps a variable index to its `Var`."""

    __slots__ = ("terms", "const", "vars")

    def __init__(self, terms: dict[int, int], const: int, vars: dict[int, Var]) -> None:
        self.terms, self.const, self.vars = terms, const, vars

    def _lin(self) -> LinExpr:
        return self

    def _plus(self, other: LinExpr, sign: int) -> LinExpr:
        terms = dict(self.terms)
        vars_ = dict(self.vars)
        for i, c in other.terms.items():
            v = terms.get(i, 0) + sign * c
            if v:
                terms[i] = v
            else:
                terms.pop(i, None)
            vars_[i] = other.vars[i]
        return LinExpr(terms, self.const + sign * other.const, vars_)

    def _scaled(self, k: int) -> LinExpr:
        if k == 0:
            return LinExpr({}, 0, {})
        return LinExpr({i: c * k for i, c in self.terms.items()}, self.const * k, dict(self.vars))

    def items(self) -> Iterable[tuple[Var, int]]:
        """(variable, coefficient) pairs."""
        return ((self.vars[i], c) for i, c in self.terms.items())

    def bounds(self) -> tuple[int, int]:
        """Smallest and largest value the expression can take given the variables' bounds."""
        lo = hi = self.const
        for v, c in self.items():
            if c > 0:
                lo += c * v.lb
                hi += c * v.ub
            else:
                lo += c * v.ub
                hi += c * v.lb
        return lo, hi

    def value(self, values: Mapping[int, float]) -> float:
        return self.const + sum(c * values[i] for i, c in self.terms.items())

    def __repr__(self) -> str:
        parts = [f"{c}*{self.vars[i].name}" for i, c in self.terms.items()]
        return " + ".join(parts + [str(self.const)]) if parts else str(self.const)

    __hash__ = object.__hash__


ExprLike = LinExpr | Var | Literal | int


def as_expr(x: object) -> LinExpr:
    if isinstance(x, LinExpr):
        return x
    if isinstance(x, (Var, Literal)):
        return x._lin()
    return LinExpr({}, _check_int(x, "a constant"), {})


def linear(terms: Iterable[tuple[int, Var | Literal]], const: int = 0) -> LinExpr:
    """sum(coef * var for coef, var in terms) + const, built in one pass."""
    out: dict[int, int] = {}
    vars_: dict[int, Var] = {}
    c0 = _check_int(const, "a constant")
    for coef, v in terms:
        k = _check_int(coef, "a coefficient")
        if k == 0:
            continue
        if isinstance(v, Literal):
            if v.negated:
                c0 += k
                k = -k
            v = v.var
        out[v.index] = out.get(v.index, 0) + k
        vars_[v.index] = v
    return LinExpr({i: c for i, c in out.items() if c}, c0, vars_)


@dataclass(frozen=True)
class LinearConstraint:
    """lb <= expr <= ub (a side may be None); the expression's constant is folded into the sides."""

    expr: LinExpr
    lb: int | None
    ub: int | None

    @classmethod
    def of(cls, expr: LinExpr, lb: int | None, ub: int | None) -> LinearConstraint:
        c = expr.const
        body = LinExpr(dict(expr.terms), 0, dict(expr.vars))
        return cls(body, None if lb is None else lb - c, None if ub is None else ub - c)

    def __bool__(self) -> bool:
        raise TypeError("a LinearConstraint has no truth value (did you compare expressions in an `if`?)")


@dataclass(frozen=True)
class Interval:
    """An interval [start, end) of length `size` on some resource, present iff `presence` (None: always).

    `size` is an int or an expression; the builder enforces end = start + size when the interval is present.
    """

    start: LinExpr
    size: LinExpr
    end: LinExpr
    presence: Literal | None
    name: str


def interval(start: ExprLike, size: ExprLike, end: ExprLike, presence: Var | Literal | None, name: str) -> Interval:
    return Interval(as_expr(start), as_expr(size), as_expr(end),
                    None if presence is None else as_literal(presence), name)


# ----------------------------------------------------------------------------------------------- names
_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\[[^\[\]]*\])?$")


def family_of(name: str) -> str:
    """`prec[i=3,j=5]` -> `prec`; raises on a name that is not `family` or `family[...]`."""
    m = _NAME.match(name)
    if not m:
        raise ValueError(f"constraint name {name!r} is not of the form family[key=value,...]")
    return m.group(1)


def cname(family: str, **keys: object) -> str:
    """cname('prec', i=3, j=5) -> 'prec[i=3,j=5]'."""
    if not keys:
        return family
    return f"{family}[{','.join(f'{k}={v}' for k, v in keys.items())}]"


# ----------------------------------------------------------------------------------------------- solving
class SolveStatus(enum.Enum):
    OPTIMAL = "optimal"  # proven optimal (within the requested relative gap)
    FEASIBLE = "feasible"  # an incumbent, not proven optimal
    INFEASIBLE = "infeasible"  # proven: no solution
    UNKNOWN = "unknown"  # stopped (time limit) without an incumbent and without a proof
    MODEL_INVALID = "model_invalid"  # the backend rejected the model (a bug in the formulation or the adapter)


@dataclass(frozen=True)
class SolvePolicy:
    """The formulations' tuning, as data: the solve driver's, the backends' and the models' knobs, each with the
    value they run with by default.  A caller that tries another value passes ``dataclasses.replace(SolvePolicy(),
    knob=value)`` (the searches nest one: `planner.search.policy.SearchPolicy.solve`), never a patched module."""

    # least seconds a solve gets even when the preparation spent the whole budget: a first solution of a small
    # model still comes in a tenth of a second, and a solver needs a positive limit
    min_solve_s: float = 0.1
    # a CP-SAT reservoir of at most this many events is expanded in presolve (a Boolean per pair of events): that
    # proves infeasibility faster on a few dozen events, while on a few hundred the presolve runs past the limit
    reservoir_expand_max_events: int = 100
    # above this many tasks the cumulative model leaves out its ancestor/descendant energy bounds: their sets take
    # n^2 bytes and time to build
    energy_bound_max_tasks: int = 3000
    # a conservative speed of the stage model's numpy DP (cells per second), to size its FREE warm start in cells
    # rather than seconds: the same maps on a fast and a slow machine
    dp_cells_per_s: int = 2 * 10**7


DEFAULT_SOLVE_POLICY = SolvePolicy()  # for argument defaults


@dataclass(frozen=True)
class SolveParams:
    """What every backend honours as far as its solver allows (each backend's docstring says how); `policy`: the
    backends' knobs (`SolvePolicy`)."""

    time_limit_s: float = 60.0
    rel_gap: float = 0.0
    threads: int = 8
    seed: int = 0
    deterministic: bool = True
    progress: ProgressCallback | None = None
    log: bool = False
    policy: SolvePolicy = DEFAULT_SOLVE_POLICY


@dataclass(frozen=True)
class SolveResult:
    """Outcome of `ModelBuilder.solve`. `values` maps variable index -> value (empty without an incumbent)."""

    status: SolveStatus
    objective: float | None
    best_bound: float | None
    wall_time_s: float
    solver_name: str
    solver_version: str
    values: Mapping[int, float] = field(default_factory=dict)

    @property
    def has_solution(self) -> bool:
        return self.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE) and bool(self.values)

    def int_value(self, x: ExprLike) -> int:
        """Value of a variable or expression, rounded to the nearest integer."""
        return int(round(as_expr(x).value(self.values)))

    def bool_value(self, x: Var | Literal) -> bool:
        """Value of a boolean literal, read as > 0.5 (never == 1: MILP solvers return 0.9999999)."""
        lit = as_literal(x)
        v = self.values[lit.var.index] > 0.5
        return (not v) if lit.negated else v


class ModelBuilder(ABC):
    """Creates variables and constraints for one solver; see the module docstring for the semantics."""

    def __init__(self) -> None:
        self._vars: list[Var] = []
        self._families: Counter[str] = Counter()
        self._names: set[str] = set()
        self._hints: dict[int, int] = {}

    # ---- variables
    def int_var(self, lb: int, ub: int, name: str) -> Var:
        lb, ub = _check_int(lb, "lb"), _check_int(ub, "ub")
        if lb > ub:
            raise ValueError(f"variable {name}: empty domain [{lb}, {ub}]")
        v = Var(len(self._vars), name, lb, ub, False)
        self._vars.append(v)
        self._new_var(v)
        return v

    def bool_var(self, name: str) -> Var:
        v = Var(len(self._vars), name, 0, 1, True)
        self._vars.append(v)
        self._new_var(v)
        return v

    @property
    def variables(self) -> Sequence[Var]:
        return tuple(self._vars)

    # ---- constraints
    def _register(self, name: str) -> None:
        fam = family_of(name)
        if name in self._names:
            raise ValueError(f"constraint name {name!r} used twice")
        self._names.add(name)
        self._families[fam] += 1

    def add(self, constraint: LinearConstraint, name: str) -> None:
        if not isinstance(constraint, LinearConstraint):
            raise TypeError(f"{name}: expected a LinearConstraint, got {type(constraint).__name__}")
        self._register(name)
        self._add(constraint, name)

    def add_if(self, literals: Var | Literal | list[Var | Literal] | tuple[Var | Literal, ...],
               constraint: LinearConstraint, name: str) -> None:
        """`constraint` must hold when every literal in `literals` (one, or a list or tuple) is true."""
        lits = [as_literal(x) for x in (literals if isinstance(literals, (list, tuple)) else [literals])]
        self._register(name)
        self._add_if(lits, constraint, name)

    def no_overlap(self, intervals: Sequence[Interval], name: str,
                   ordered_pairs: Iterable[tuple[int, int]] = ()) -> None:
        """No two present intervals overlap.  `ordered_pairs` (i, j): other constraints already force interval i to
        end before interval j starts whenever both are present; a backend may skip those pairs."""
        self._register(name)
        if len(intervals) > 1:
            self._no_overlap(list(intervals), name, set(ordered_pairs))

    def cumulative(self, intervals: Sequence[Interval], demands: Sequence[int], capacity: ExprLike, name: str,
                   *, redundant: bool = False) -> None:
        """At every moment, the demands of the present intervals sum to at most `capacity`.  `redundant`: the
        constraint is implied by the others (it only helps the solver); a backend without an exact version drops it."""
        if len(intervals) != len(demands):
            raise ValueError(f"{name}: {len(intervals)} intervals but {len(demands)} demands")
        self._register(name)
        self._cumulative(list(intervals), [_check_int(d, "a demand") for d in demands], as_expr(capacity), name,
                         redundant)

    def reservoir(self, times: Sequence[ExprLike], changes: Sequence[int], max_level: int, name: str) -> None:
        """A level that starts at 0 and moves by `changes[i]` at `times[i]` stays within [0, `max_level`] at every
        moment (the changes at one moment apply together).  Stronger than a cumulative of variable-length intervals
        where each holding starts and ends at task boundaries (CP-SAT proves far more with it); backends without it
        raise `UnsupportedConstraint`."""
        if len(times) != len(changes):
            raise ValueError(f"{name}: {len(times)} times but {len(changes)} changes")
        self._register(name)
        self._reservoir([as_expr(t) for t in times], [_check_int(c, "a level change") for c in changes],
                        _check_int(max_level, "a level"), name)

    def minimize(self, expr: ExprLike) -> None:
        self._minimize(as_expr(expr))

    def hint(self, var: Var, value: int) -> None:
        """A suggested value (a warm start); solvers may ignore it or use it as a starting solution."""
        self._hints[var.index] = _check_int(value, "a hint")
        self._hint(var, int(value))

    def family_counts(self) -> dict[str, int]:
        """Number of constraints per family, as named by the formulation."""
        return dict(self._families)

    # ---- backend hooks
    def _new_var(self, var: Var) -> None:  # noqa: B027 - optional hook
        pass

    def _hint(self, var: Var, value: int) -> None:  # noqa: B027 - optional hook
        pass

    @abstractmethod
    def _add(self, constraint: LinearConstraint, name: str) -> None: ...

    @abstractmethod
    def _add_if(self, literals: list[Literal], constraint: LinearConstraint, name: str) -> None: ...

    @abstractmethod
    def _no_overlap(self, intervals: list[Interval], name: str, ordered: set[tuple[int, int]]) -> None: ...

    @abstractmethod
    def _cumulative(self, intervals: list[Interval], demands: list[int], capacity: LinExpr, name: str,
                    redundant: bool) -> None: ...

    def _reservoir(self, times: list[LinExpr], changes: list[int], max_level: int, name: str) -> None:
        raise UnsupportedConstraint(f"{name}: the {type(self).__name__} backend has no reservoir constraint")

    @abstractmethod
    def _minimize(self, expr: LinExpr) -> None: ...

    @abstractmethod
    def solve(self, params: SolveParams) -> SolveResult: ...
