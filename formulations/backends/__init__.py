"""Solver adapters behind `formulations.model_api.ModelBuilder`, and the one registry that finds them.

The only package allowed to import solver libraries.  `get_backend(name)` returns a `Backend`, whose
`new_builder()` starts an empty model; `available_backends()` lists the names whose solver is installed.

=======  =====================================  ==========================================
name     solver                                  module
=======  =====================================  ==========================================
cpsat    OR-Tools CP-SAT (default)               `formulations.backends.cpsat`
scip     SCIP through OR-Tools pywraplp          `formulations.backends.scip`
cbc      CBC bundled with PuLP (PULP_CBC_CMD)    `formulations.backends.cbc`
highs    HiGHS through highspy                   `formulations.backends.highs`
=======  =====================================  ==========================================
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from formulations.model_api import ModelBuilder
from planner.errors import BackendUnavailableError

BACKEND_NAMES = ("cpsat", "scip", "cbc", "highs")
DEFAULT_BACKEND = "cpsat"


@dataclass(frozen=True)
class Backend:
    """A solver adapter: its name, the solver's version, and a factory for empty models."""

    name: str
    version: str
    new_builder: Callable[[], ModelBuilder]
    exact_cumulative: bool  # True: `cumulative` is exact; False: the documented safe bound

    def __repr__(self) -> str:
        return f"Backend({self.name}, {self.version})"


def _load(name: str) -> Backend | None:
    try:
        mod = importlib.import_module(f"formulations.backends.{name}")
    except ImportError:
        return None
    is_available = getattr(mod, "available", None)
    if is_available is not None and not is_available():
        return None
    return Backend(mod.NAME, mod.VERSION, mod.new_builder, exact_cumulative=(name == "cpsat"))


def available_backends() -> list[str]:
    """Names of the backends whose solver is installed, in order of preference."""
    return [n for n in BACKEND_NAMES if _load(n) is not None]


def get_backend(name: str) -> Backend:
    """The backend called `name`; BackendUnavailableError (listing the installed ones) when unknown or missing."""
    key = str(name).strip().lower()
    backend = _load(key) if key in BACKEND_NAMES else None
    if backend is None:
        installed = available_backends()
        what = "is not installed" if key in BACKEND_NAMES else "is unknown"
        raise BackendUnavailableError(
            f"solver backend {name!r} {what}; installed backends: {', '.join(installed) or 'none'}",
            fix=f"choose one of {', '.join(installed)}" if installed else "install ortools, pulp or highspy",
        )
    return backend
