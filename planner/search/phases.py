"""A search as data: a table of `Phase` records run in order by one loop, `run_phases`.

Every phase of a search does the same bookkeeping around its own algorithm: whether it applies at all, what share
of the time left it may spend, whether that share holds the startup it cannot stop, a guard (a phase that fails
must not cost the user the plan found so far), the check of its candidate, keeping the better plan, and a line in
the incumbent's history and in the progress.  `run_phases` does that once for every phase; a phase itself is only
its `run`: from the search's state and its own `Budget` to a candidate plan, or None.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from planner.errors import InfeasibleError
from planner.search.budget import Budget

ProgressFn = Callable[[str], None]
P = TypeVar("P")
T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PhaseLog:
    """A step of the search that improved the incumbent: which part (a list scheduler's name, 'decomposition',
    'cluster round', 'LNS'), the makespan it reached, and the seconds it took."""

    source: str
    makespan_tick: int
    seconds: float


@dataclass(frozen=True)
class Candidate(Generic[P]):
    """A plan a phase offers.  `source` names it in the history; `seconds` is what it took (None: the phase's run
    time); `detail` travels with the plan when it is kept (for a plan over clusters: the cluster solution behind
    it); `summary` is the phase's progress line, said before the plan is offered; `before` is a plan of the same
    phase offered first (a search in two directions of time records each direction's step)."""

    plan: P
    makespan_tick: int
    source: str
    seconds: float | None = None
    detail: object = None
    summary: str = ""
    before: Candidate[P] | None = None


@dataclass
class Incumbent(Generic[P]):
    """The best plan so far, its proven lower bound and its history.  `valid` checks a candidate before it can
    replace the plan (the validator on the instance the search plans)."""

    plan: P
    makespan_tick: int
    bound_tick: int
    valid: Callable[[P], bool]
    history: list[PhaseLog] = field(default_factory=list)
    detail: object = None

    def closed(self) -> bool:
        """Whether the plan meets its bound: it is optimal and nothing is left to search for."""
        return self.makespan_tick <= self.bound_tick

    def raise_bound(self, bound_tick: int) -> None:
        """Keep the stronger of the bounds, never above the plan in hand (a bound above it would be a bug)."""
        self.bound_tick = max(self.bound_tick, min(bound_tick, self.makespan_tick))

    def offer(self, candidate: Candidate[P], seconds: float) -> bool:
        """Keep `candidate` when it is shorter and valid (with a history step of `seconds`); True when kept."""
        if candidate.makespan_tick >= self.makespan_tick or not self.valid(candidate.plan):
            return False
        self.plan, self.makespan_tick, self.detail = candidate.plan, candidate.makespan_tick, candidate.detail
        self.history.append(PhaseLog(candidate.source, candidate.makespan_tick, seconds))
        return True


class Searching(Protocol[P]):
    """What `run_phases` needs of a search's state: its incumbent (the rest is the phases' own business)."""

    @property
    def incumbent(self) -> Incumbent[P]: ...


S = TypeVar("S", bound=Searching)


def _always(_state: object) -> bool:
    return True


def _no_startup(_state: object) -> float:
    return 0.0


@dataclass(frozen=True)
class Phase(Generic[S]):
    """One phase of a search.

    `run(state, budget)` gets a `Budget` of `share` of the time left (at least `floor_s`) and returns a candidate
    plan or None; it may also raise the state's bound.  The phase runs only when `applies(state)`, while the
    incumbent is above its bound (unless not `while_open`: a phase that proves bounds), and when more than
    `min_left_s` seconds are left (None: no such floor).  `startup_s(state)` estimates the seconds it cannot stop
    once started; it starts only when `startup_share` of the time left holds them, and otherwise says it was
    skipped for time (`startup_why`: what those seconds are for)."""

    name: str
    run: Callable[[S, Budget], Candidate | None]
    applies: Callable[[S], bool] = _always
    share: float = 1.0
    floor_s: float = 0.0
    min_left_s: float | None = None
    startup_s: Callable[[S], float] = _no_startup
    startup_share: float = 1.0
    startup_why: str = ""
    while_open: bool = True


def guarded(what: str, say: ProgressFn, run: Callable[[], T]) -> T | None:
    """run(), or None when it raises: a phase that fails is a bug, logged with its traceback, and the search goes
    on with what it has.  A phase that finds no plan (`InfeasibleError`) is no bug and no proof either (the search
    already has a valid plan when a phase runs), so it is said in one line and skipped."""
    try:
        return run()
    except InfeasibleError as exc:
        reason = " ".join(str(exc).split())
        say(f"{what} found no plan ({reason[:200]}); continuing with the incumbent")
        return None
    except Exception as exc:  # noqa: BLE001 - see the docstring: the user still gets a valid plan
        log.exception("%s failed (a bug); the search continues without it", what)
        say(f"internal error in {what} (a bug; traceback in the log): {type(exc).__name__}: {exc}; "
            f"continuing with the incumbent")
        return None


def _ready(phase: Phase[S], state: S, budget: Budget, say: ProgressFn) -> bool:
    """Whether `phase` starts now (`Phase`'s contract); says so when it is skipped for time."""
    if phase.while_open and state.incumbent.closed():
        return False
    if not phase.applies(state):
        return False
    if phase.min_left_s is not None and budget.left_s() <= phase.min_left_s:
        return False
    startup_s = phase.startup_s(state)
    if startup_s > 0 and not budget.holds(startup_s, phase.startup_share):
        offered_s = max(0.0, phase.startup_share * budget.left_s())
        whose = "left" if phase.startup_share == 1.0 else "for it"
        why = f" {phase.startup_why}" if phase.startup_why else ""
        say(f"{phase.name} skipped for time ({offered_s:.1f}s {whose}, about {startup_s:.1f}s needed{why})")
        return False
    return True


def _offer_all(incumbent: Incumbent[P], candidate: Candidate[P], seconds: float) -> None:
    """Offer `candidate.before` (and its own `before`s), then `candidate`."""
    if candidate.before is not None:
        _offer_all(incumbent, candidate.before, seconds)
    incumbent.offer(candidate, seconds if candidate.seconds is None else candidate.seconds)


def run_phase(phase: Phase[S], state: S, budget: Budget, progress: ProgressFn) -> None:
    """Run one phase when it is ready (`Phase`), guarded, and keep its candidate when it is shorter and valid."""
    if not _ready(phase, state, budget, progress):
        return
    own = budget.sub(budget.share(phase.share, phase.floor_s))
    started_s = budget.clock()
    candidate = guarded(phase.name, progress, lambda: phase.run(state, own))
    if candidate is None:
        return
    if candidate.summary:
        progress(candidate.summary)
    _offer_all(state.incumbent, candidate, budget.clock() - started_s)


def run_phases(phases: Sequence[Phase[S]], state: S, budget: Budget, progress: ProgressFn) -> None:
    """Run `phases` in order on `state` within `budget` (each as `run_phase` does).  The incumbent, its bound and
    its history in `state.incumbent` are the result; a phase that fails or finds nothing leaves them as they
    were, so the search always ends with the best valid plan it was given or found."""
    for phase in phases:
        run_phase(phase, state, budget, progress)
