"""Shared fixtures: paths to the bundled model, hardware profiles, the onnx light models and shared benchmarks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from checks import check_plan_valid
from hypothesis import settings

import planner.lns as lns_module
import planner.search.assignment as assignment_phase
import planner.search.iterated as iterated_phase
from planner.errors import InfeasibleError
from planner.solve import SolveOptions, plan_instance

# CI runs one fixed set of examples per property test (`.ci/run` sets HYPOTHESIS_PROFILE=ci), so a landing never
# hangs on a new random draw; a local `make test` draws fresh examples each run (the default profile) and prints
# the reproduce blob of any failure, which is how counterexamples get found and pinned as plain tests.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("default", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def light_models_dir() -> Path:
    """The onnx wheel's real CNN topologies with generated weights (onnx/backend/test/data/light)."""
    import onnx  # tests may import onnx freely; the layering rule is for planner/

    return Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"


@pytest.fixture(scope="session")
def hw_dir() -> Path:
    return REPO / "hardware_profiles"


@pytest.fixture(scope="session")
def stg_dir() -> Path:
    path = SHARED / "benchmarks" / "stg-dev"
    if not path.is_dir():
        pytest.skip(f"shared benchmarks not found at {path}")
    return path


# the phase module in which the placement search calls each function `plan_with` can switch off or replace
SEARCH_FUNCTIONS = {"iterated_list_schedule": iterated_phase, "assignment_search": assignment_phase, "lns": lns_module}


def _no_plan(*_args, **_kwargs):
    raise InfeasibleError("off for this test")


@pytest.fixture
def plan_with(monkeypatch):
    """`run(instance, off=(...), replace={...})`: `plan_instance` (6 s, one thread, no decomposition) with the named
    functions of the search's phases in `off` replaced by one that finds no plan and those in `replace` by the
    given ones (each in the phase module that calls it: `SEARCH_FUNCTIONS`); checks the plan and returns it with the
    progress lines — for tests of which phase found the plan."""
    def run(instance, *, off=(), replace=None, time_limit_s: float = 6.0):
        for name in off:
            monkeypatch.setattr(SEARCH_FUNCTIONS[name], name, _no_plan)
        for name, fn in (replace or {}).items():
            monkeypatch.setattr(SEARCH_FUNCTIONS[name], name, fn)
        said: list[str] = []
        out = plan_instance(instance, SolveOptions(time_limit_s=time_limit_s, threads=1, decomposition_share=0.0),
                            said.append)
        check_plan_valid(instance, out.op_plan)
        return out, said
    return run
