"""Every command refuses bad input the same way (docs/layers/cli.md): exit status 2, one line on stderr that
starts with ``error:`` and names the file or flag, no traceback, and no output file.

One table of cases across plan-inspect, plan-solve, plan-simulate, plan-whatif, plan-compare, plan-run and
plan-codegen.  Each case runs in a fresh empty working directory (so the commands' default outputs, such as
``out/plan.json``, would land there) with every ``--out`` pointing into it; afterwards the directory must be empty.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner.cli import inspect_main, simulate_main, solve_main, whatif_main
from planner.cli_compare import compare_main
from planner.cli_run import codegen_main, run_main

REPO = Path(__file__).resolve().parents[1]
MOE = REPO / "planner" / "data" / "models" / "moe.onnx"
HW = REPO / "hardware_profiles"

MAINS = {"plan-inspect": inspect_main, "plan-solve": solve_main, "plan-simulate": simulate_main,
         "plan-whatif": whatif_main, "plan-compare": compare_main, "plan-run": run_main, "plan-codegen": codegen_main}

GRAPH = {"tasks": [{"id": "a", "duration": 5, "memory": 0}, {"id": "b", "duration": 3}, {"id": "c", "duration": 4}],
         "edges": [{"src": "a", "dst": "b", "comm": 15}, {"src": "a", "dst": "c", "comm": 1}]}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """Input files the cases read (never written to by a case): a task graph, a 4-device HEFT plan of the bundled
    MoE, a binary file, a text file that is not JSON, a profile with two typos."""
    d = tmp_path_factory.mktemp("inputs")
    (d / "g.json").write_text(json.dumps(GRAPH))
    assert solve_main(["--method", "heft", "--out", str(d / "moe.plan.json"), "--quiet", "--no-pictures",
                       "--format", "json"]) == 0
    (d / "model.onnx").write_bytes(MOE.read_bytes())
    (d / "notes.txt").write_text("this is not a plan\n")
    (d / "folder").mkdir()
    typos = (HW / "cpu-4.yaml").read_text().replace("memory:", "memroy:", 1).replace("count:", "cuont:", 1)
    (d / "typos.yaml").write_text(typos)
    return d


# (command, arguments with {in} = the inputs folder and {out} = the empty working directory, what the line names)
CASES = [
    # plan-inspect
    ("plan-inspect", ["--model", "{in}/missing.onnx"], "missing.onnx"),
    ("plan-inspect", ["--hw", "{in}/typos.yaml"], "did you mean 'count'"),
    ("plan-inspect", ["--hw", "{in}/typos.yaml"], "did you mean 'memory'"),  # the second typo is named too
    ("plan-inspect", ["--top", "-1"], "--top"),
    ("plan-inspect", ["--clusters", "--target-clusters", "0"], "--target-clusters"),
    ("plan-inspect", ["--format", "xml"], "--format"),
    # plan-solve
    ("plan-solve", ["--graph", "{in}/g.json", "--devices", "0", "--out", "{out}/p.json"], "--devices"),
    ("plan-solve", ["--graph", "{in}/g.json", "--devices", "-3", "--out", "{out}/p.json"], "--devices"),
    ("plan-solve", ["--graph", "{in}/g.json", "--devices", "two", "--out", "{out}/p.json"], "--devices"),
    ("plan-solve", ["--graph", "{in}/g.json", "--devices", "2", "--time-limit", "0"], "--time-limit"),
    ("plan-solve", ["--graph", "{in}/g.json", "--devices", "2", "--time-limit", "nan"], "--time-limit"),
    ("plan-solve", ["--graph", "{in}/g.json", "--devices", "2", "--gap", "2"], "--gap"),
    ("plan-solve", ["--graph", "{in}/g.json", "--devices", "2", "--threads", "0"], "--threads"),
    ("plan-solve", ["--graph", "{in}/g.json", "--devices", "2", "--rounds", "-1"], "--rounds"),
    ("plan-solve", ["--graph", "{in}/g.json", "--devices", "2", "--clusters", "0"], "--clusters"),
    ("plan-solve", ["--graph", "{in}/g.json", "--devices", "2", "--method", "magic"], "--method"),
    ("plan-solve", ["--graph", "{in}/missing.json", "--devices", "2"], "missing.json"),
    ("plan-solve", ["--graph", "{in}/g.json", "--model", str(MOE)], "--graph"),
    ("plan-solve", ["--memory", "8 GiBs"], "--memory"),
    ("plan-solve", ["--memory", "100KiB", "--time-limit", "5", "--quiet"], "fits on no device"),
    ("plan-solve", ["--pin", "nodevice"], "--pin"),
    # plan-simulate
    ("plan-simulate", ["--plan", "{in}/model.onnx"], "model.onnx"),
    ("plan-simulate", ["--plan", "{in}/missing.json"], "missing.json"),
    ("plan-simulate", ["--plan", "{in}/notes.txt"], "notes.txt"),
    ("plan-simulate", ["--plan", "{in}/folder"], "folder"),
    ("plan-simulate", ["--plan", "{in}/moe.plan.json", "--hw", str(HW / "h100-8-nvlink.yaml"), "--out",
                       "{out}/re.json"], "4 devices"),
    # plan-whatif
    ("plan-whatif", ["--memory", "8GiB:1GiB:1GiB", "--out-dir", "{out}/w"], "--memory"),
    ("plan-whatif", ["--memory", "lots", "--out-dir", "{out}/w"], "--memory"),
    ("plan-whatif", ["--memory", "1GiB", "--time-limit", "-5", "--out-dir", "{out}/w"], "--time-limit"),
    # plan-compare
    ("plan-compare", ["--stages", "0", "--microbatches", "4", "--out", "{out}/c"], "--stages"),
    ("plan-compare", ["--stages", "2", "--microbatches", "-1", "--out", "{out}/c"], "--microbatches"),
    ("plan-compare", ["--stages", "2", "--microbatches", "4", "--f", "-1", "--out", "{out}/c"], "--f"),
    ("plan-compare", ["--stages", "2", "--microbatches", "4", "--fb-overlap", "1.5", "--out", "{out}/c"],
     "--fb-overlap"),
    ("plan-compare", ["--stages", "2", "--microbatches", "4", "--schedules", "nope", "--out", "{out}/c"], "nope"),
    ("plan-compare", ["--stages", "2", "--microbatches", "4", "--model", str(MOE), "--out", "{out}/c"], "--hw"),
    ("plan-compare", ["--microbatches", "4"], "--stages"),
    # plan-run and plan-codegen
    ("plan-run", ["--plan", "{in}/moe.plan.json", "--nproc", "0"], "--nproc"),
    ("plan-run", ["--plan", "{in}/moe.plan.json", "--nproc", "9"], "--nproc 9"),
    ("plan-run", ["--plan", "{in}/moe.plan.json", "--repeat", "0"], "--repeat"),
    ("plan-run", ["--plan", "{in}/model.onnx"], "model.onnx"),
    ("plan-codegen", ["--plan", "{in}/moe.plan.json", "--nproc", "0", "--out", "{out}/gen"], "--nproc"),
    ("plan-codegen", ["--plan", "{in}/moe.plan.json", "--nproc", "5", "--out", "{out}/gen"], "--nproc 5"),
    ("plan-codegen", ["--plan", "{in}/missing.json", "--out", "{out}/gen"], "missing.json"),
]


def test_the_table_covers_every_command_and_enough_cases():
    assert len(CASES) >= 25
    assert {command for command, _, _ in CASES} == set(MAINS)


@pytest.mark.parametrize("command,argv,names", CASES, ids=[f"{c} {' '.join(a)}" for c, a, _ in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(inputs, tmp_path, monkeypatch, capsys, command, argv,
                                                        names):
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    args = [a.replace("{in}", str(inputs)).replace("{out}", str(work)) for a in argv]
    assert MAINS[command](args) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert names in err, err
    assert "Traceback" not in err and "heft:" not in err, err
    assert list(work.iterdir()) == [], f"{command} wrote {list(work.iterdir())}"


def test_console_script_says_it_in_one_line(tmp_path):
    """The installed entry point exits 2 with one line, for an argument error and for an input error."""
    exe = Path(sys.executable).parent / "plan-solve"
    for argv, names in ((["--graph", "g.json", "--devices", "0"], "--devices"),
                        (["--graph", "missing.json", "--devices", "2"], "missing.json")):
        proc = subprocess.run([str(exe), *argv], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                              check=False)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and names in proc.stderr and "Traceback" not in proc.stderr
        assert list(tmp_path.iterdir()) == []
