"""Ctrl-C, file modes and ``--help`` of the commands.

The first Ctrl-C during the search of plan-solve or plan-compare stops it and writes the best plan (the schedules)
found so far (one line says so); a second aborts and writes nothing.  Ctrl-C at any other moment is one line
(``interrupted``) on stderr, exit status 130, and nothing partial left: output folders are written under a hidden
temporary name and moved into place at the end.  The tests stop a command at a moment they choose
(`planner.cli.PAUSE_ENV`: before the heavy imports, or inside an output folder that is written but not yet moved into
place; or a progress line of a running CP-SAT solve), then send SIGINT to the subprocess.

Written files honour the umask (0644 under 022), and ``--help`` loads neither onnx nor matplotlib, states every
option's purpose and shows its default.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from planner.cli import PAUSE_ENV, inspect_main, simulate_main, solve_main, whatif_main
from planner.cli_args import ArgumentParser, DefaultsHelpFormatter
from planner.cli_calibrate import calibrate_main
from planner.cli_compare import compare_main
from planner.cli_interrupt import STOPPING_LINE
from planner.cli_run import codegen_main, run_main
from planner.schedule.atomic import atomic_write_text

BIN = Path(sys.executable).parent
GRAPH = {"tasks": [{"id": "a", "duration": 5}, {"id": "b", "duration": 3}, {"id": "c", "duration": 4}],
         "edges": [{"src": "a", "dst": "b", "comm": 15}, {"src": "a", "dst": "c", "comm": 1}]}
COMMANDS = {"plan-inspect": inspect_main, "plan-solve": solve_main, "plan-simulate": simulate_main,
            "plan-whatif": whatif_main, "plan-compare": compare_main, "plan-run": run_main,
            "plan-codegen": codegen_main, "plan-calibrate": calibrate_main}


# plan-solve's timed progress lines ("[   1.2s] ...") and plan-compare's indented ones: what is left of stderr is what
# the command said about how it ended
PROGRESS = re.compile(r"^(\[\s*\d+\.\d+s\] |   )")


def _told(err: str) -> list[str]:
    """The lines of `err` that are not progress lines."""
    return [line for line in err.splitlines() if not PROGRESS.match(line)]


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _started(argv: list[str], **kwargs) -> subprocess.Popen:
    """`subprocess.Popen` of a console script, output captured as text, with SIGINT at its default in the child: a
    shell's background job starts with SIGINT ignored, and a Python started so never sees a Ctrl-C."""
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_sigint_default, **kwargs)


def _interrupted_at(point: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run a console script until it says ``paused at <point>``, send it SIGINT, and return how it ended."""
    proc = _started([str(BIN / argv[0]), *argv[1:]], cwd=cwd, env={**os.environ, PAUSE_ENV: point})
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == f"paused at {point}":
                break
        else:
            raise AssertionError(f"{argv[0]} never reached {point}: {proc.stderr.read() if proc.stderr else ''}")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _assert_interrupted(done: subprocess.CompletedProcess) -> None:
    """Exit 130, and stderr is the one line ``interrupted``."""
    assert done.returncode == 130, done.stderr
    assert done.stderr == "interrupted\n", done.stderr


@pytest.fixture
def graph(tmp_path: Path) -> Path:
    path = tmp_path / "g.json"
    path.write_text(json.dumps(GRAPH))
    return path


def test_ctrl_c_while_loading_is_one_line_and_writes_nothing(tmp_path, graph):
    work = tmp_path / "work"
    work.mkdir()
    done = _interrupted_at("imports", ["plan-solve", "--graph", str(graph), "--devices", "2", "--out",
                                       str(work / "p.json")], work)
    _assert_interrupted(done)
    assert list(work.iterdir()) == []


def _solving(argv: list[str], cwd: Path, progress: str) -> subprocess.Popen:
    """Start plan-solve and return once its stderr shows `progress` (a CP-SAT solve is then running)."""
    proc = _started([str(BIN / "plan-solve"), *argv], cwd=cwd)
    assert proc.stderr is not None
    for line in proc.stderr:
        if progress in line:
            return proc
    proc.wait()
    raise AssertionError(f"plan-solve never said {progress!r} (exit {proc.returncode})")


# the bundled MoE on the default 4 CPUs: the decomposition's CP-SAT solve of its largest segment runs for seconds
SEARCH = ["--time-limit", "300", "--no-pictures"]
IN_A_SOLVE = "segment 13 (96 tasks):"


def test_first_ctrl_c_in_a_search_writes_the_best_plan_so_far(tmp_path):
    proc = _solving([*SEARCH, "--out", str(tmp_path / "p.json")], tmp_path, IN_A_SOLVE)
    try:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert _told(err) == [STOPPING_LINE], err
    assert any("search stopped; the best plan so far" in line for line in err.splitlines()), err
    plan = json.loads((tmp_path / "p.json").read_text())
    assert plan["tasks"], "the written plan is empty"
    assert "wrote plan" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json"]  # no temporary folder left


def test_second_ctrl_c_in_a_search_aborts_and_writes_nothing(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    env_pause = {**os.environ, PAUSE_ENV: "writing"}  # the plan waits in its temporary folder for the second press
    proc = _started([str(BIN / "plan-solve"), *SEARCH, "--out", str(work / "p.json")], cwd=work, env=env_pause)
    try:
        assert proc.stderr is not None and proc.stdout is not None
        for line in proc.stderr:
            if IN_A_SOLVE in line:
                break
        proc.send_signal(signal.SIGINT)
        for line in proc.stdout:
            if line.strip() == "paused at writing":
                break
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert _told(err) == [STOPPING_LINE, "interrupted"], err
    assert list(work.iterdir()) == []


# eight stages and 24 micro-batches on unit costs: the planned row's full-model solve runs for minutes
COMPARE_SEARCH = ["--stages", "8", "--microbatches", "24", "--b", "2", "--comm", "0.3", "--time-limit", "300",
                  "--no-pictures"]
IN_COMPARE_SOLVE = "planned row (dualpipe): starts from"  # the full model's solve follows at once


def _comparing(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start plan-compare and return once its stderr says the planned row's solve starts."""
    proc = _started([str(BIN / "plan-compare"), *COMPARE_SEARCH, *argv], cwd=cwd, env=env)
    assert proc.stderr is not None
    for line in proc.stderr:
        if IN_COMPARE_SOLVE in line:
            return proc
    proc.wait()
    raise AssertionError(f"plan-compare never said {IN_COMPARE_SOLVE!r} (exit {proc.returncode})")


def test_first_ctrl_c_in_plan_compare_writes_the_schedules_found_so_far(tmp_path):
    """The planned row is what the stopped search had: at least as short as its warm start (DualPipe's split)."""
    work = tmp_path / "work"
    work.mkdir()
    proc = _comparing(["--out", str(work / "cmp")], work)
    try:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert _told(err) == [STOPPING_LINE], err
    assert "wrote 10 files to" in out
    assert [p.name for p in work.iterdir()] == ["cmp"]  # no temporary folder left beside it
    with (work / "cmp" / "compare.csv").open() as f:
        rows = {r["schedule"]: float(r["makespan"]) for r in csv.DictReader(f)}
    assert "opplan" in rows, rows
    assert rows["opplan"] <= rows["dualpipe"]
    assert (work / "cmp" / "opplan.torch.csv").stat().st_size > 0


def test_second_ctrl_c_in_plan_compare_aborts_and_writes_nothing(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    env_pause = {**os.environ, PAUSE_ENV: "writing"}  # the files wait in their temporary folder for the second press
    proc = _comparing(["--out", str(work / "cmp")], work, env_pause)
    try:
        assert proc.stdout is not None
        proc.send_signal(signal.SIGINT)
        for line in proc.stdout:
            if line.strip() == "paused at writing":
                break
        else:
            raise AssertionError("plan-compare never reached its writing after the first Ctrl-C")
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert _told(err) == [STOPPING_LINE, "interrupted"], err
    assert list(work.iterdir()) == []


def test_ctrl_c_while_plan_compare_writes_leaves_no_folder(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    done = _interrupted_at("writing", ["plan-compare", "--stages", "2", "--microbatches", "4", "--no-opplan",
                                       "--out", str(work / "cmp")], work)
    _assert_interrupted(done)  # a few pictures draw without progress lines (CompareBudget.progress_after_s)
    assert list(work.iterdir()) == []  # neither cmp nor its temporary folder


def test_ctrl_c_while_plan_whatif_writes_keeps_the_old_folder_as_it_was(tmp_path, graph):
    out = tmp_path / "w"
    out.mkdir()
    (out / "whatif.csv").write_text("the previous run\n")
    done = _interrupted_at("writing", ["plan-whatif", "--memory", "1GiB,2GiB", "--method", "heft", "--quiet",
                                       "--out-dir", str(out)], tmp_path)
    _assert_interrupted(done)
    assert [p.name for p in out.iterdir()] == ["whatif.csv"]
    assert (out / "whatif.csv").read_text() == "the previous run\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.json", "w"]


def test_staged_folders_appear_whole(tmp_path):
    """Without an interrupt the staged folder lands in place, readable by others (the umask's mode)."""
    out = tmp_path / "new" / "cmp"
    old = os.umask(0o022)
    try:
        assert compare_main(["--stages", "2", "--microbatches", "4", "--no-opplan", "--no-pictures",
                             "--out", str(out)]) == 0
    finally:
        os.umask(old)
    assert (out / "compare.csv").is_file()
    assert out.stat().st_mode & 0o777 == 0o755
    assert (out / "compare.csv").stat().st_mode & 0o777 == 0o644
    assert [p.name for p in out.parent.iterdir()] == ["cmp"]  # no temporary folder left beside it


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_honour_the_umask(tmp_path, graph, umask, mode):
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
        assert solve_main(["--graph", str(graph), "--devices", "2", "--method", "heft", "--quiet", "--format",
                           "json", "--out", str(tmp_path / "p.json")]) == 0
    finally:
        os.umask(old)
    for name in ("a.txt", "p.json", "p.trace.json", "p.gantt.png"):
        assert (tmp_path / name).stat().st_mode & 0o777 == mode, name


def test_help_loads_neither_onnx_nor_matplotlib():
    code = ("import sys\n"
            "from planner.cli import inspect_main, simulate_main, solve_main, whatif_main\n"
            "from planner.cli_calibrate import calibrate_main\n"
            "from planner.cli_compare import compare_main\n"
            "from planner.cli_run import codegen_main, run_main\n"
            "for main in (inspect_main, simulate_main, solve_main, whatif_main, calibrate_main, compare_main,\n"
            "             codegen_main, run_main):\n"
            "    assert main(['--help']) == 0\n"
            "heavy = ('onnx', 'matplotlib', 'torch', 'ortools', 'onnxruntime')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "[]"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_has_help_and_shows_its_default(monkeypatch, command):
    parsers: list[argparse.ArgumentParser] = []

    def capture(self, args=None, namespace=None):
        parsers.append(self)
        raise SystemExit(0)

    monkeypatch.setattr(ArgumentParser, "parse_args", capture)
    assert COMMANDS[command]([]) == 0
    (parser,) = parsers
    formatter = DefaultsHelpFormatter(command)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"{command} {action.option_strings} has no help text"
        default = action.default
        if default is None or default is False or default == []:
            continue
        shown = formatter._get_help_string(action) or ""
        assert "default" in shown.lower(), f"{command} {action.option_strings} does not show its default"


def test_a_stop_lasts_for_the_block_and_stops_later_solves_as_they_start() -> None:
    from formulations.stop import request_stop, stop_control, stop_requested, stoppable

    stopped: list[str] = []
    request_stop()  # outside a block: nothing lasts
    assert not stop_requested()
    with stop_control():
        with stoppable(lambda: stopped.append("running")):
            request_stop()
        assert stop_requested()
        with stoppable(lambda: stopped.append("later")):
            pass
    assert stopped == ["running", "later"]
    assert not stop_requested()


def test_a_stopped_comparison_ends_at_once_with_the_schedules_found_so_far() -> None:
    """The comparison plan-compare runs, stopped before it starts: every solve returns what it has as it starts
    (within its first second), the search loops end as if time were up, the memory bound is not searched."""
    import time

    from formulations.stop import request_stop, stop_control
    from planner.compare.pipelines import compare
    from planner.pipeline.registry import UnitCosts

    started = time.monotonic()
    with stop_control():
        request_stop()
        cmp = compare(8, 24, UnitCosts(b=2, comm=0.3), time_limit_s=300)
    assert time.monotonic() - started < 30
    opplan, dualpipe = cmp.row("opplan"), cmp.row("dualpipe")
    assert opplan.figures is not None and dualpipe.figures is not None
    assert opplan.figures.makespan_tick <= dualpipe.figures.makespan_tick
    assert opplan.notes["memory_bound"] == {"skipped": "the search was stopped (Ctrl-C)"}


def _planned(tmp_path: Path, graph: Path) -> Path:
    plan = tmp_path / "plan" / "p.json"
    assert solve_main(["--graph", str(graph), "--devices", "2", "--method", "heft", "--quiet", "--no-pictures",
                       "--out", str(plan)]) == 0
    return plan


def test_ctrl_c_while_plan_simulate_writes_leaves_the_old_files_as_they_were(tmp_path, graph):
    plan = _planned(tmp_path, graph)
    out = tmp_path / "sim"
    out.mkdir()
    (out / "r.json").write_text("the previous run\n")
    done = _interrupted_at("writing", ["plan-simulate", "--plan", str(plan), "--format", "json", "--out",
                                       str(out / "r.json")], tmp_path)
    _assert_interrupted(done)
    assert [p.name for p in out.iterdir()] == ["r.json"]  # neither a picture, a trace nor a temporary folder
    assert (out / "r.json").read_text() == "the previous run\n"


def test_plan_simulate_writes_its_files_together(tmp_path, graph):
    plan = _planned(tmp_path, graph)
    out = tmp_path / "new" / "r.json"
    assert simulate_main(["--plan", str(plan), "--format", "json", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.gantt.png", "r.json", "r.trace.json"]
    assert json.loads(out.read_text())["tasks"]


def test_a_stopped_comparison_on_a_model_cuts_and_plans_at_once() -> None:
    """On a model the stage cut is part of the search: stopped, it keeps its best cut within its first second, and
    the comparison skips the bound over every cut (seconds of work the user asked not to wait for)."""
    import time

    from formulations.stop import request_stop, stop_control
    from planner.bundled_profiles import resolve_profile
    from planner.compare.model_costs import model_costs
    from planner.compare.pipelines import compare
    from planner.ir.hardware import load_topology
    from planner.prepare import prepare

    prepared = prepare(Path(__file__).parents[1] / "planner" / "data" / "models" / "moe.onnx",
                       load_topology(resolve_profile("cpu-4.yaml")))
    started = time.monotonic()
    with stop_control():
        request_stop()
        costs = model_costs(prepared.instance, 4, time_limit_s=60)
        cmp = compare(4, 8, costs, time_limit_s=300)
    assert time.monotonic() - started < 30
    opplan, dualpipe = cmp.row("opplan"), cmp.row("dualpipe")
    assert opplan.figures is not None and dualpipe.figures is not None
    assert opplan.figures.makespan_tick <= dualpipe.figures.makespan_tick
    assert "every_cut" not in opplan.notes
