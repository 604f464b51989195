"""Every command refuses bad input the same way (docs/layers/cli.md): exit status 2, one line on stderr that
starts with ``error:`` and names the file or flag, no traceback, and no output file.

One table of cases across plan-inspect, plan-solve, plan-simulate, plan-whatif, plan-compare, plan-run,
plan-codegen and plan-calibrate.  Each case runs in a fresh empty working directory (so the commands' default
outputs, such as ``out/plan.json``, would land there) with every ``--out`` pointing into it; afterwards the
directory must be empty, and the inputs folder (where the unusable output paths point) must hold no new file, folder
or temp file.  Unusable output paths (a folder where a file belongs, a path under a file, a folder without write
permission) are refused before any work, so those cases finish at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.cli import inspect_main, simulate_main, solve_main, whatif_main
from planner.cli_calibrate import calibrate_main
from planner.cli_compare import compare_main
from planner.cli_run import codegen_main, run_main

REPO = Path(__file__).resolve().parents[1]
MOE = REPO / "planner" / "data" / "models" / "moe.onnx"
HW = REPO / "hardware_profiles"

MAINS = {"plan-inspect": inspect_main, "plan-solve": solve_main, "plan-simulate": simulate_main,
         "plan-whatif": whatif_main, "plan-compare": compare_main, "plan-run": run_main, "plan-codegen": codegen_main,
         "plan-calibrate": calibrate_main}

GRAPH = {"tasks": [{"id": "a", "duration": 5, "memory": 0}, {"id": "b", "duration": 3}, {"id": "c", "duration": 4}],
         "edges": [{"src": "a", "dst": "b", "comm": 15}, {"src": "a", "dst": "c", "comm": 1}]}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """Input files the cases read (never written to by a case): a task graph, a 4-device HEFT plan of the bundled
    MoE, a binary file, a text file that is not JSON, a profile with two typos, a folder where plan-solve's Gantt
    picture of ``side.json`` would go, and a folder nobody may write in."""
    d = tmp_path_factory.mktemp("inputs")
    (d / "g.json").write_text(json.dumps(GRAPH))
    assert solve_main(["--method", "heft", "--out", str(d / "moe.plan.json"), "--quiet", "--no-pictures",
                       "--format", "json"]) == 0
    (d / "model.onnx").write_bytes(MOE.read_bytes())
    (d / "notes.txt").write_text("this is not a plan\n")
    (d / "folder").mkdir()
    typos = (HW / "cpu-4.yaml").read_text().replace("memory:", "memroy:", 1).replace("count:", "cuont:", 1)
    (d / "typos.yaml").write_text(typos)
    (d / "side.gantt.png").mkdir()
    (d / "locked").mkdir(mode=0o555)
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
    # more bad arguments
    ("plan-inspect", ["--input-shape", "x=2x"], "x=2x"),
    ("plan-simulate", ["--plan", "{in}/moe.plan.json", "--format", "xml"], "--format"),
    ("plan-simulate", [], "--plan"),
    ("plan-whatif", ["--memory", "1GiB", "--threads", "0", "--out-dir", "{out}/w"], "--threads"),
    ("plan-whatif", ["--memory", "1GiB", "--gap", "5", "--out-dir", "{out}/w"], "--gap"),
    ("plan-whatif", ["--out-dir", "{out}/w"], "--memory"),
    ("plan-compare", ["--stages", "2", "--microbatches", "4", "--lns-share", "2", "--out", "{out}/c"], "--lns-share"),
    ("plan-compare", ["--stages", "2", "--microbatches", "4", "--placement", "moon", "--out", "{out}/c"],
     "--placement"),
    ("plan-compare", ["--stages", "2", "--microbatches", "4", "--granularity", "0", "--out", "{out}/c"],
     "--granularity"),
    ("plan-compare", ["--stages", "2", "--microbatches", "4", "--bound-time", "-1", "--out", "{out}/c"],
     "--bound-time"),
    ("plan-compare", ["--stages", "2", "--microbatches", "4", "--time-limit", "inf", "--out", "{out}/c"],
     "--time-limit"),
    ("plan-compare", ["--stages", "2", "--microbatches", "4", "--layers", "4", "--out", "{out}/c"], "--preset"),
    ("plan-compare", ["--stages", "2", "--microbatches", "4", "--preset", "nope", "--hw", str(HW / "cpu-4.yaml"),
                      "--out", "{out}/c"], "nope"),
    ("plan-run", ["--plan", "{in}/moe.plan.json", "--timeout", "0"], "--timeout"),
    ("plan-run", ["--plan", "{in}/moe.plan.json", "--backend", "mpi"], "--backend"),
    ("plan-run", ["--plan", "{in}/moe.plan.json", "--warmup", "-1"], "--warmup"),
    ("plan-run", [], "--plan"),
    ("plan-codegen", ["--plan", "{in}/moe.plan.json"], "--out"),
    ("plan-calibrate", ["--nproc", "0", "--out", "{out}/c.yaml"], "--nproc"),
    ("plan-calibrate", ["--threads", "-1", "--out", "{out}/c.yaml"], "--threads"),
    ("plan-calibrate", ["--timeout", "0", "--out", "{out}/c.yaml"], "--timeout"),
    ("plan-calibrate", ["--device", "tpu", "--out", "{out}/c.yaml"], "--device"),
    ("plan-calibrate", ["--model", "{in}/missing.onnx", "--out", "{out}/c.yaml"], "missing.onnx"),
    # output paths that cannot be written, refused before any work: a folder where a file belongs, a path under a
    # file (at any depth), and a folder without write permission
    ("plan-inspect", ["--clusters", "--dot", "{in}/folder"], "is a folder"),
    ("plan-inspect", ["--clusters", "--dot", "{in}/notes.txt/c.dot"], "is a file"),
    ("plan-solve", ["--graph", "{in}/g.json", "--devices", "2", "--out", "{in}/folder"], "is a folder"),
    ("plan-solve", ["--out", "{in}/folder"], "is a folder"),
    ("plan-solve", ["--graph", "{in}/g.json", "--devices", "2", "--out", "{in}/notes.txt/p.json"], "is a file"),
    ("plan-solve", ["--graph", "{in}/g.json", "--devices", "2", "--out", "{in}/notes.txt/a/b/p.json"], "is a file"),
    ("plan-solve", ["--graph", "{in}/g.json", "--devices", "2", "--out", "{in}/side.json"], "side.gantt.png"),
    ("plan-solve", ["--graph", "{in}/g.json", "--devices", "2", "--out", "{in}/locked/p.json"], "no permission"),
    ("plan-simulate", ["--plan", "{in}/moe.plan.json", "--out", "{in}/folder"], "is a folder"),
    ("plan-simulate", ["--plan", "{in}/moe.plan.json", "--out", "{in}/notes.txt/re.json"], "is a file"),
    ("plan-simulate", ["--plan", "{in}/moe.plan.json", "--out", "{in}/locked/re.json"], "no permission"),
    ("plan-whatif", ["--memory", "1GiB", "--out-dir", "{in}/notes.txt"], "is a file, not a folder"),
    ("plan-whatif", ["--memory", "1GiB", "--out-dir", "{in}/notes.txt/w"], "is a file"),
    ("plan-whatif", ["--memory", "1GiB", "--out-dir", "{in}/locked"], "no permission"),
    ("plan-compare", ["--stages", "2", "--microbatches", "4", "--out", "{in}/notes.txt"], "is a file, not a folder"),
    ("plan-compare", ["--stages", "2", "--microbatches", "4", "--out", "{in}/notes.txt/c"], "is a file"),
    ("plan-compare", ["--stages", "2", "--microbatches", "4", "--model", str(MOE), "--hw", str(HW / "cpu-4.yaml"),
                      "--out", "{in}/notes.txt/c"], "is a file"),
    ("plan-compare", ["--stages", "2", "--microbatches", "4", "--out", "{in}/locked/c"], "no permission"),
    ("plan-run", ["--plan", "{in}/moe.plan.json", "--report", "{in}/folder"], "is a folder"),
    ("plan-run", ["--plan", "{in}/moe.plan.json", "--report", "{in}/notes.txt/run.json"], "is a file"),
    ("plan-codegen", ["--plan", "{in}/moe.plan.json", "--out", "{in}/notes.txt"], "is a file, not a folder"),
    ("plan-codegen", ["--plan", "{in}/moe.plan.json", "--out", "{in}/notes.txt/gen"], "is a file"),
    ("plan-codegen", ["--plan", "{in}/moe.plan.json", "--out", "{in}/locked/gen"], "no permission"),
    ("plan-calibrate", ["--out", "{in}/folder"], "is a folder"),
    ("plan-calibrate", ["--out", "{in}/notes.txt/c.yaml"], "is a file"),
    ("plan-calibrate", ["--model", str(MOE), "--op-times", "{in}/folder", "--out", "{out}/c.yaml"], "is a folder"),
]
# root may write anywhere: the write-permission cases then have nothing to refuse
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
PARAMS = [pytest.param(c, a, n, id=f"{c} {' '.join(a)}",
                       marks=[pytest.mark.skipif(AS_ROOT and n == "no permission", reason="root may write anywhere")])
          for c, a, n in CASES]


def test_the_table_covers_every_command_and_enough_cases():
    assert len(CASES) >= 60
    assert {command for command, _, _ in CASES} == set(MAINS)


@pytest.mark.parametrize("command,argv,names", PARAMS)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(inputs, tmp_path, monkeypatch, capsys, command, argv,
                                                        names):
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    args = [a.replace("{in}", str(inputs)).replace("{out}", str(work)) for a in argv]
    before = sorted(inputs.rglob("*"))
    assert MAINS[command](args) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert names in err, err
    assert "Traceback" not in err and "heft:" not in err, err
    assert list(work.iterdir()) == [], f"{command} wrote {list(work.iterdir())}"
    assert sorted(inputs.rglob("*")) == before, f"{command} left something in the inputs folder"


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
