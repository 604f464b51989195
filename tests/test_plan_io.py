"""Plan file: round trip (ticks and seconds), atomic writes, one-line errors naming file and key."""

from __future__ import annotations

import json
import os

import pytest
from instances import random_instance, round_robin_orders

from planner.errors import InputError
from planner.schedule import plan_io
from planner.schedule.plan import Plan, TaskPlacement
from planner.schedule.plan_io import load_plan, plan_to_dict, save_plan
from planner.schedule.simulate import simulate, simulate_plan


def _plan(tick_s=None) -> Plan:
    return Plan(
        instance_name="toy",
        placements=(TaskPlacement("a", 0, 0, 3, 0), TaskPlacement("b", 1, 4, 9, 1), TaskPlacement("c", 0, 3, 3)),
        device_names=("gpu0", "gpu1"),
        makespan_tick=9,
        lower_bound_tick=8,
        status="feasible",
        method="milp",
        solver="cp-sat",
        solver_version="9.10",
        solve_time_s=1.25,
        tick_s=tick_s,
        time_unit="tick" if tick_s is None else "s",
        model_path="m.onnx",
        model_sha256="ab" * 32,
        hardware_path="hw.yaml",
        hardware_sha256="cd" * 32,
        task_ops={"a": ("conv1", "relu1"), "b": ("fc",), "c": ()},
    )


@pytest.mark.parametrize("tick_s", [None, 1e-6, 3.7e-7])
def test_round_trip_is_exact(tmp_path, tick_s):
    plan = _plan(tick_s)
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    assert load_plan(path) == plan
    data = json.loads(path.read_text())
    assert data["format_version"] == 1 and data["status"] == "feasible"
    assert data["tasks"][1] == {"id": "b", "device": "gpu1", "device_index": 1, "stage": 1,
                                "start": 4 if tick_s is None else 4 * tick_s,
                                "end": 9 if tick_s is None else 9 * tick_s, "start_tick": 4, "end_tick": 9}
    assert data["time_unit"] == ("tick" if tick_s is None else "s")
    assert data["gap"] == pytest.approx(1 / 9)
    assert data["makespan"] == (9 if tick_s is None else 9 * tick_s)
    assert data["task_ops"]["a"] == ["conv1", "relu1"]
    assert [f for f in os.listdir(tmp_path)] == ["plan.json"]  # no temp file left behind


def test_hand_written_file_without_tick_fields(tmp_path):
    path = tmp_path / "hand.json"
    path.write_text(json.dumps({
        "format_version": 1, "status": "heuristic", "makespan": 2e-6, "lower_bound": 1e-6, "tick_s": 1e-6,
        "tasks": [{"id": "x", "device": "cpu0", "start": 0.0, "end": 1e-6},
                  {"id": "y", "device": "cpu1", "start": 1e-6, "end": 2e-6}],
    }))
    plan = load_plan(path)
    assert plan.device_names == ("cpu0", "cpu1")
    assert [(p.task, p.device, p.start_tick, p.end_tick) for p in plan.placements] == [("x", 0, 0, 1), ("y", 1, 1, 2)]
    assert plan.makespan_tick == 2


def test_interrupted_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "plan.json"
    save_plan(_plan(), path)
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        save_plan(_plan(1e-3), path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["plan.json"]


def _write(tmp_path, data) -> str:
    path = tmp_path / "p.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match=r"nope\.json: plan file not found"):
        load_plan(tmp_path / "nope.json")


def test_bad_json(tmp_path):
    path = _write(tmp_path, "{\"format_version\": 1,")
    with pytest.raises(InputError, match=r"p\.json: not valid JSON \(line 1"):
        load_plan(path)


@pytest.mark.parametrize("version", [0, 2, 99])
def test_unknown_format_version(tmp_path, version):
    data = plan_to_dict(_plan())
    data["format_version"] = version
    with pytest.raises(InputError, match=rf"p\.json: plan key 'format_version': unknown version {version}"):
        load_plan(_write(tmp_path, data))


@pytest.mark.parametrize(
    ("drop", "key"),
    [("format_version", "format_version"), ("status", "status"), ("tasks", "tasks"),
     ("makespan", "makespan"), ("task0.id", "tasks[0].id"), ("task0.end", "tasks[0].end"),
     ("task0.device", "tasks[0].device")],
)
def test_missing_key_names_file_and_key(tmp_path, drop, key):
    data = plan_to_dict(_plan())
    if drop.startswith("task0."):
        field = drop.split(".")[1]
        data["tasks"][0].pop(field)
        data["tasks"][0].pop(f"{field}_tick", None)
    else:
        data.pop(drop)
        data.pop(f"{drop}_tick", None)
    path = _write(tmp_path, data)
    with pytest.raises(InputError) as info:
        load_plan(path)
    msg = str(info.value)
    assert "\n" not in msg and path in msg and repr(key) in msg and "missing" in msg


def test_mistyped_and_inconsistent_keys(tmp_path):
    data = plan_to_dict(_plan())
    data["tasks"][1]["start_tick"] = "4"
    with pytest.raises(InputError, match=r"'tasks\[1\]\.start_tick': expected int, got str"):
        load_plan(_write(tmp_path, data))
    data = plan_to_dict(_plan())
    data["tasks"][0]["device"] = "gpu7"
    with pytest.raises(InputError, match=r"'tasks\[0\]\.device': 'gpu7' is not one of"):
        load_plan(_write(tmp_path, data))
    data = plan_to_dict(_plan())
    data["tasks"][0]["device_index"] = 1
    with pytest.raises(InputError, match=r"tasks\[0\]\.device_index"):
        load_plan(_write(tmp_path, data))
    with pytest.raises(InputError, match="JSON object"):
        load_plan(_write(tmp_path, "[1, 2]"))


def test_simulated_plan_survives_save_load_and_resimulation(tmp_path):
    """A tight plan (made by the simulator) reloads exactly, and re-simulating it reproduces its times."""
    for seed in range(5):
        inst = random_instance(seed, 14, 3)
        plan = simulate(inst, round_robin_orders(inst, seed), link_contention=False).to_plan(
            method="round-robin", lower_bound_tick=inst.trivial_lower_bound_tick())
        path = tmp_path / f"plan{seed}.json"
        save_plan(plan, path)
        back = load_plan(path)
        assert back == plan
        again = simulate_plan(inst, back)
        assert again.placements == plan.placements
        assert again.makespan_tick == plan.makespan_tick


def test_format_constants():
    assert plan_io.FORMAT_VERSION in plan_io.SUPPORTED_VERSIONS
