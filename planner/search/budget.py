"""A search's time: one deadline on a monotonic clock, and what each phase may spend of what is left.

A phase is offered a share of the time left when it starts (`Budget.share`), never a share of the total: what
the phases before it spent is gone, and what they left over passes on.  Some steps cannot be stopped once started
(building a model, a bound over the whole graph, a list scheduler's first decodes); a phase with such a startup
is charged for it up front (`Budget.holds`): it starts only when the time it is offered holds that startup's
estimated seconds, and the startup is then spent out of its own share, so a phase never eats into the time of
the phases after it to get going.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

Clock = Callable[[], float]


@dataclass(frozen=True)
class Budget:
    """Time up to `deadline_s`, a reading of `clock` (seconds on a monotonic clock).  Immutable: a phase gets its
    own `Budget` (`sub`), so it cannot move the search's deadline."""

    deadline_s: float
    clock: Clock = time.monotonic

    @classmethod
    def starting_now(cls, seconds: float, clock: Clock = time.monotonic) -> Budget:
        """A budget of `seconds` from now."""
        return cls(clock() + seconds, clock)

    def left_s(self) -> float:
        """Seconds until the deadline; negative once it has passed (callers compare, so the sign is kept)."""
        return self.deadline_s - self.clock()

    def share(self, fraction: float, floor_s: float = 0.0) -> float:
        """What a phase may spend: `fraction` of the time left now, at least `floor_s` (a solver needs some time
        to return anything, even when little is left)."""
        return max(floor_s, fraction * self.left_s())

    def holds(self, startup_s: float, fraction: float = 1.0) -> bool:
        """Whether `fraction` of the time left holds a startup of `startup_s` seconds that cannot be stopped."""
        return fraction * self.left_s() >= startup_s

    def sub(self, seconds: float) -> Budget:
        """A budget of `seconds` from now on the same clock: what one phase (or one of its steps) may use."""
        return Budget.starting_now(seconds, self.clock)
