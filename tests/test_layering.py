"""The one-way layering of shared/DESIGN.md section 3, read from the import statements with `ast`.

onnx only in planner/ir/; torch only in planner/execute/; solver libraries only in formulations/backends/.
Planning, simulating and drawing must work without torch.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# library top-level module -> the only folder (relative to the repo) allowed to import it
RESTRICTED = {
    "onnx": "planner/ir",
    "onnxruntime": "planner/ir",
    "torch": "planner/execute",
    "ortools": "formulations/backends",
    "pulp": "formulations/backends",
    "highspy": "formulations/backends",
    "pyscipopt": "formulations/backends",
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


SOURCES = sorted(p for top in ("planner", "formulations") for p in (REPO / top).rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_restricted_imports_stay_in_their_layer(path: Path) -> None:
    rel = path.relative_to(REPO).as_posix()
    for module in _imports(path) & RESTRICTED.keys():
        allowed = RESTRICTED[module]
        assert rel.startswith(allowed + "/"), f"{rel} imports {module}, which only {allowed}/ may import"


def test_layering_check_sees_real_imports(tmp_path: Path) -> None:
    # Guard against a checker that passes because it reads nothing.
    probe = tmp_path / "probe.py"
    probe.write_text("import torch.nn\nfrom onnx import helper\nfrom . import x\n")
    assert _imports(probe) == {"torch", "onnx"}
    assert len(SOURCES) > 5
