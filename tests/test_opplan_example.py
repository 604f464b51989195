"""The notebook-style example `docs/examples/notebook_study.py` runs, stays short, and its figure draws the API's
frames as they are: each bar and each point of the plot is a value of the frame it comes from."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import numpy as np
from matplotlib.image import imread

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "docs" / "examples" / "notebook_study.py"


def _code_lines(path: Path) -> int:
    """Lines of code: not blank, not a comment, not a docstring."""
    src = path.read_text(encoding="utf-8")
    docs: set[int] = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(node) is not None:
            first = node.body[0]
            docs.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return sum(1 for i, line in enumerate(src.splitlines(), 1)
               if line.strip() and not line.strip().startswith("#") and i not in docs)


def test_the_example_is_under_forty_lines_and_uses_only_the_api() -> None:
    assert _code_lines(SCRIPT) < 40
    imported = {n.module or "" for n in ast.walk(ast.parse(SCRIPT.read_text())) if isinstance(n, ast.ImportFrom)} | \
        {a.name for n in ast.walk(ast.parse(SCRIPT.read_text())) if isinstance(n, ast.Import) for a in n.names}
    assert "opplan" in imported and not any(m.split(".")[0] in ("planner", "formulations") for m in imported)


def test_the_study_plots_its_frames(tmp_path, capsys) -> None:
    spec = importlib.util.spec_from_file_location("notebook_study", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "study.png"
    (devices, schedules, memory), fig = module.main([str(out), "--time-limit", "1"])
    assert f"wrote {out}" in capsys.readouterr().out
    assert imread(out).shape[:2] == (450, 1600)  # 16 x 4.5 inches at 100 dpi
    busy, pipes, caps = fig.axes
    assert [p.get_width() for p in busy.patches] == list(devices["busy_fraction"])
    assert [t.get_text() for t in busy.get_yticklabels()] == list(devices["device"])
    assert [p.get_width() for p in pipes.patches] == list(schedules["makespan_us"])
    assert {"dualpipe", "opplan"} <= {t.get_text() for t in pipes.get_yticklabels()}
    fits = memory[memory["feasible"] == 1]
    makespan, bound = caps.lines
    np.testing.assert_array_equal(makespan.get_xdata(), fits["capacity_bytes"])
    np.testing.assert_array_equal(makespan.get_ydata(), fits["makespan_s"])
    np.testing.assert_array_equal(bound.get_ydata(), fits["lower_bound_s"])
    assert len(fits) >= 2 and (memory["feasible"] == 0).any()  # the sweep crosses the smallest capacity that fits
