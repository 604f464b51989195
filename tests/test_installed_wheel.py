"""The wheel, installed without `-e` into a fresh virtual environment, works from any directory: plan-inspect and
plan-solve with no model or hardware argument, a bundled profile by name, plan-run --check on the plan it wrote,
and the MoE generator.

Nothing is downloaded.  The wheel is built from a copy of the source with this venv's setuptools
(`pip wheel --no-deps --no-build-isolation`), and installed with the new venv's own pip (ensurepip, offline) into a
venv that sees no third-party package at install time.  Only then does a `.pth` file make this venv's
site-packages visible for the dependencies (onnx, ortools, torch ...).  A path line in a `.pth` file adds the
folder to sys.path without running the `.pth` files inside it, so the editable opplan finder of this venv
(`__editable__.opplan-*.pth`) stays off: the test asserts that `planner` is imported from the new venv.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # builds a wheel and a venv, then runs four commands: about a minute here


def _sh(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 600) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV"))}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    # Build from a copy so the worktree gets no build/ or egg-info folders.
    src = tmp / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for top in ("planner", "formulations", "hardware_profiles"):
        shutil.copytree(REPO / top, src / top, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    dist = tmp / "dist"
    _sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), "."],
        src, env)
    (wheel,) = dist.glob("opplan-*.whl")
    venv = tmp / "venv"
    _sh([sys.executable, "-m", "venv", str(venv)], tmp, env)
    py = venv / "bin" / "python"
    _sh([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], tmp, env)
    site = Path(_sh([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp, env).strip())
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp / "elsewhere"
    work.mkdir()
    return {"venv": venv, "bin": venv / "bin", "site": site, "work": work, "env": env}


def test_the_wheel_is_what_gets_imported(installed):
    probe = ("import planner, planner.data as d; print(planner.__file__); print(d.BUNDLED_MODEL); "
             "print(d.DEFAULT_PROFILE); print(d.PROFILES_DIR / 'README.md')")
    where = _sh([str(installed["bin"] / "python"), "-c", probe],
                installed["work"], installed["env"]).split()
    assert all(Path(p).is_relative_to(installed["site"]) and Path(p).exists() for p in where), where


def test_commands_work_from_another_directory(installed):
    b, work, env = installed["bin"], installed["work"], installed["env"]
    summary = json.loads(_sh([str(b / "plan-inspect"), "--format", "json"], work, env))
    assert summary["num_ops"] == 255 and Path(summary["model"]).is_relative_to(installed["site"])
    _sh([str(b / "plan-inspect"), "--hw", "h100-8-nvlink.yaml"], work, env)
    # no model, no hardware: the bundled MoE on the bundled cpu-4 (HEFT keeps it short; the MILP is tested elsewhere)
    _sh([str(b / "plan-solve"), "--method", "heft", "--quiet"], work, env)
    plan = work / "out" / "plan.json"
    assert plan.is_file() and (work / "out" / "plan.gantt.png").is_file()
    _sh([str(b / "plan-solve"), "--hw", "h100-8-nvlink", "--method", "heft", "--quiet", "--no-pictures",
         "--out", "h100.json"], work, env)
    assert Path(json.loads((work / "h100.json").read_text())["hardware_path"]).is_file()
    report = json.loads(_sh([str(b / "plan-run"), "--plan", str(plan), "--check", "--format", "json"], work, env))
    assert report["world_size"] == 4 and report["max_abs_error"] <= 1e-5


def test_the_moe_generator_runs_from_another_directory(installed):
    out = _sh([str(installed["bin"] / "python"), "-m", "planner.data.make_moe", "--layers", "1", "--experts", "2",
               "--seq-len", "8"], installed["work"], installed["env"])
    assert json.loads(out)["nodes"] > 0 and (installed["work"] / "moe.onnx").is_file()
