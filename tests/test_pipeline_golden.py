"""plan-compare's rows pinned: every schedule's makespan, bubble ratio, peak and parameter memory, and the planned
row's status and bound, on settings where the planned row is proven optimal (so the answer is the same on every run
and every machine), against `tests/golden/pipeline_golden.json`.

The settings: unit costs at p = 4, m = 8 (F = B = W = 1), and the bundled MoE (`--model`) at p = 2, m = 4 on the
``auto`` placement, on the V placement (its cut moves) and on DualPipe's placement at granularity 2 (the sub-chunk
solve).  A change to the search's code or its policies that keeps its behaviour keeps these rows.

Regenerate (only when a behaviour change is meant): ``.venv/bin/python -c "import sys; sys.path.insert(0, 'tests');
import test_pipeline_golden as g; g.write_golden()"``.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden" / "pipeline_golden.json"
_MOE = ["--model", str(REPO / "planner" / "data" / "models" / "moe.onnx"),
        "--hw", "h100-8-nvlink.yaml"]  # a bundled profile, by name

# name -> plan-compare arguments (besides --out and --no-pictures)
CASES: dict[str, list[str]] = {
    "unit-p4-m8": ["--stages", "4", "--microbatches", "8", "--time-limit", "20"],
    "moe-p2-m4-auto": [*_MOE, "--stages", "2", "--microbatches", "4", "--time-limit", "20", "--bound-time", "0"],
    "moe-p2-m4-v": [*_MOE, "--stages", "2", "--microbatches", "4", "--time-limit", "20", "--bound-time", "0",
                    "--placement", "v"],
    "moe-p2-m4-dualpipe-k2": [*_MOE, "--stages", "2", "--microbatches", "4", "--time-limit", "20",
                              "--bound-time", "0", "--placement", "dualpipe", "--granularity", "2"],
}


def rows_of(args: list[str], out: Path) -> dict[str, object]:
    """plan-compare run with `args` into `out`: its compare.csv rows (figures as floats) and the planned row's
    status and bound, as the table line says them."""
    from planner.cli_compare import compare_main

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        rc = compare_main([*args, "--out", str(out), "--no-pictures"])
    assert rc == 0, printed.getvalue()
    with (out / "compare.csv").open() as fh:
        rows = {r["schedule"]: {k: float(v) for k, v in r.items() if k != "schedule"} for r in csv.DictReader(fh)}
    line = next(x for x in printed.getvalue().splitlines() if x.startswith("opplan: "))
    status, bound = line.split(", ")[0:2]
    return {"rows": rows, "status": status.removeprefix("opplan: "), "bound": bound.removeprefix("bound ")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_plan_compare_rows_match_the_golden_values(case: str, tmp_path: Path) -> None:
    expected = json.loads(GOLDEN.read_text())[case]
    got = rows_of(CASES[case], tmp_path)
    assert got["status"] == expected["status"] == "optimal"
    assert got["bound"] == expected["bound"]
    assert set(got["rows"]) == set(expected["rows"])  # type: ignore[arg-type]
    for name, figures in expected["rows"].items():
        assert got["rows"][name] == pytest.approx(figures, rel=1e-9), name  # type: ignore[index]


def write_golden() -> None:
    """Regenerate the golden file from the code as it is (only when a behaviour change is meant)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        golden = {case: rows_of(args, Path(tmp) / case) for case, args in sorted(CASES.items())}
    GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
