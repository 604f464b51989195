"""Typed errors of the schedule layer (plans, schedules, validation, simulation).

All are `OpplanError`s: a user can cause each one with a bad plan file, a hand-written schedule or an order that
cannot run, and the CLI reports them as one line (plus, for an invalid plan, a small text picture) with status 2.
"""

from __future__ import annotations

from planner.errors import OpplanError


class ScheduleError(OpplanError):
    """A schedule (action list, action string, PyTorch CSV) is malformed or does not match its instance."""


class PlanInvalidError(OpplanError):
    """A plan breaks the instance's rules; `violations` lists what the validator found (see validate.py)."""

    def __init__(self, message: str, violations: tuple = ()) -> None:
        super().__init__(message)
        self.violations = tuple(violations)


class SimulationError(OpplanError):
    """Per-device task orders cannot be replayed (a task missing, twice, or on a device that cannot run it)."""


class DeadlockError(SimulationError):
    """Per-device orders contradict precedence: every device waits for a task that can never run first."""

    def __init__(self, message: str, stuck_tasks: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.stuck_tasks = tuple(stuck_tasks)
