"""Shared fixtures: paths to the bundled model, hardware profiles, the onnx light models and shared benchmarks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

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
    return REPO / "planner" / "data" / "hardware_profiles"


@pytest.fixture(scope="session")
def stg_dir() -> Path:
    path = SHARED / "benchmarks" / "stg-dev"
    if not path.is_dir():
        pytest.skip(f"shared benchmarks not found at {path}")
    return path
