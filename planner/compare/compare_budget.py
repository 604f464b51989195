"""How `plan-compare`'s ``--time-limit`` is shared, as data (`CompareBudget`): the limit bounds the whole command —
the baselines, the placement choice, the solves, the memory bound and the pictures — so the solves get what is left
after the others' shares are set aside.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CompareBudget:
    """The shares of the time limit that are not the planned row's solves (`planner.compare.pipelines.compare`)."""

    # of the time limit, at most this share is set aside for the memory bound (and never more than --bound-time):
    # the bound runs only on a row not proven optimal, and what the solves leave over goes to it as well
    bound_share: float = 0.25
    # drawing a picture costs about this much whatever its size (the figure, the text, the PNG) ...
    picture_s: float = 0.8
    # ... plus this much per bar drawn (measured on unit-cost comparisons of 3k and 22k bars)
    bar_s: float = 3e-4
    min_solve_s: float = 1.0  # a solve always gets at least this much, even when the shares above leave less
    # drawing says how far it is ("drawing 5/20 pictures") only when it is expected to take longer than this: a
    # few seconds of drawing need no account
    progress_after_s: float = 10.0


DEFAULT_COMPARE_BUDGET = CompareBudget()


def drawing_s(budget: CompareBudget, bars_per_picture: list[int]) -> float:
    """The time `planner.compare.pipelines.write_outputs` takes to draw pictures of these sizes (bars each)."""
    return sum(budget.picture_s + budget.bar_s * bars for bars in bars_per_picture)
