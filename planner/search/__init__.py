"""Searches that decide where to look next: budgets, phases and the moves of the planner's searches."""
