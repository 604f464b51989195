"""Bundled data is found through the package from any working directory: hardware profiles by name, the default
model, and an error for a missing profile that names a folder that exists and the names it holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import hardware_profiles
import planner
from planner.data import BUNDLED_MODEL, DEFAULT_PROFILE, PROFILES_DIR, bundled_profile_names, resolve_profile
from planner.errors import InputError
from planner.ir.hardware import load_topology

PACKAGE = Path(planner.__file__).parent
PROFILES_PACKAGE = Path(hardware_profiles.__file__).parent


def test_bundled_files_live_inside_the_packages():
    assert BUNDLED_MODEL.exists() and BUNDLED_MODEL.is_relative_to(PACKAGE)
    for path in (PROFILES_DIR, DEFAULT_PROFILE):
        assert path.exists() and path.is_relative_to(PROFILES_PACKAGE)
    assert bundled_profile_names() == ["a100-4-pcie.yaml", "cpu-4.yaml", "h100-2x8-ib.yaml", "h100-8-nvlink.yaml",
                                       "mixed-a100-h100.yaml"]
    assert (PROFILES_DIR / "README.md").is_file()


@pytest.mark.parametrize("name", ["h100-8-nvlink.yaml", "h100-8-nvlink"])
def test_a_bundled_name_works_from_any_directory(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    topo = load_topology(name)
    assert topo.num_devices == 8
    # the plan files record this path; it must be the file read, not the name resolved against the cwd
    assert Path(topo.source_path) == PROFILES_DIR / "h100-8-nvlink.yaml"


def test_a_local_file_wins_over_a_bundled_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = DEFAULT_PROFILE.read_text().replace("name: ", "name: local-", 1)
    Path("h100-8-nvlink.yaml").write_text(text)
    topo = load_topology("h100-8-nvlink.yaml")
    assert topo.num_devices == 4 and topo.source_path == "h100-8-nvlink.yaml"


def test_a_path_with_a_folder_is_never_replaced_by_a_bundled_one(tmp_path):
    assert resolve_profile(tmp_path / "cpu-4.yaml") == tmp_path / "cpu-4.yaml"
    with pytest.raises(InputError, match="not found"):
        load_topology(tmp_path / "cpu-4.yaml")


def test_a_missing_profile_names_a_real_folder_and_the_bundled_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as err:
        load_topology("h100-9-nvlink.yaml")
    message = str(err.value)
    assert message.startswith("h100-9-nvlink.yaml: hardware profile not found")
    assert str(PROFILES_DIR) in message and PROFILES_DIR.is_dir()
    assert all(name in message for name in bundled_profile_names())
    assert "\n" not in message


def test_plan_inspect_uses_the_bundled_defaults_from_another_directory(tmp_path, monkeypatch, capsys):
    from planner.cli import inspect_main

    monkeypatch.chdir(tmp_path)
    assert inspect_main(["--format", "json", "--hw", "a100-4-pcie"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["model"] == str(BUNDLED_MODEL) and summary["num_ops"] == 255
