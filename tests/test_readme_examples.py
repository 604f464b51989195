"""The README's Python examples run: each is an excerpt of a script under `docs/examples/`, which these tests run
as a user would (a fresh interpreter, a short time limit), and every line of the README's excerpt is in its script."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "docs" / "examples"
TIMEOUT_S = 240


def _run(script: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLES / script), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_readme_excerpts_are_lines_of_their_scripts() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"<!-- from (docs/examples/\S+\.py) -->\n```python\n(.*?)```", readme, re.DOTALL)
    assert {path for path, _ in blocks} == {"docs/examples/notebook_study.py",
                                            "docs/examples/train_with_planned_schedule.py"}
    for path, code in blocks:
        script = {line.strip() for line in (REPO / path).read_text(encoding="utf-8").splitlines()}
        missing = [line for line in code.splitlines() if line.strip() and line.strip() not in script]
        assert not missing, f"README lines not in {path}: {missing}"


def test_the_planning_example_plans_the_bundled_model() -> None:
    out = _run("plan_a_model.py", "--time-limit", "1")
    assert re.search(r"255 ops on 4 devices: makespan [\d.]+ us, lower bound [\d.]+ us", out), out
    assert out.count(" ops\n") == 4  # one line per device


@pytest.mark.dist
def test_the_training_example_trains_with_the_planned_schedule() -> None:
    out = _run("train_with_planned_schedule.py", "--steps", "3", "--time-limit", "1")
    losses = [float(v) for v in re.findall(r"step \d+: loss ([\d.]+)", out)]
    assert len(losses) == 3, out
    assert losses[-1] < losses[0]  # the optimizer steps on every rank's chunks
