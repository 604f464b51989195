"""Task-graph JSON and STG import: the documented example, and one clear error per kind of bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cost.model import build_instance
from planner.errors import InputError
from planner.ir.taskgraph import load_stg, load_taskgraph
from planner.ir.topology import Topology

EXAMPLE = {
    "tasks": [{"id": "a", "duration": 5, "memory": 0}, {"id": "b", "duration": 3}, {"id": "c", "duration": 4}],
    "edges": [{"src": "a", "dst": "b", "comm": 15, "bytes": 0}, {"src": "a", "dst": "c", "comm": 1}],
}


def _write(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


def test_documented_example_loads_and_costs(tmp_path):
    g = load_taskgraph(_write(tmp_path, EXAMPLE))
    assert [op.name for op in g.ops] == ["a", "b", "c"]
    inst = build_instance(g, Topology.identical(2))
    assert inst.duration_tick[:, 0].tolist() == [5, 3, 4]
    # comm is paid only across devices
    assert inst.comm(0, 0, 1) == 15 and inst.comm(0, 1, 1) == 0
    # bound: critical path a->b = 8 (free comm); work 12/2 = 6
    assert inst.trivial_lower_bound_tick() == 9  # a->c is 9


@pytest.mark.parametrize(
    "doc, fragment",
    [
        ({"tasks": [{"id": "a", "durration": 5}]}, "durration"),
        ({"tasks": [{"id": "a", "duration": 5, "memroy": 1}]}, "did you mean 'memory'"),
        ({"tasks": [{"id": "a", "duration": -1}]}, "tasks[0].duration"),
        ({"tasks": [{"id": "a", "duration": 1}, {"id": "a", "duration": 1}]}, "duplicate task id"),
        ({"tasks": [{"id": "a", "duration": 1}], "edges": [{"src": "a", "dst": "z"}]}, "unknown task id 'z'"),
        ({"tasks": [{"id": "a", "duration": 1}, {"id": "b", "duration": 1}],
          "edges": [{"src": "a", "dst": "b"}, {"src": "b", "dst": "a"}]}, "cycle"),
        ({"task": []}, '"tasks" list'),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_task_graph_gets_a_clear_error(tmp_path, doc, fragment):
    path = _write(tmp_path, doc)
    with pytest.raises(InputError) as err:
        load_taskgraph(path)
    assert fragment in str(err.value)
    assert str(path) in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="not found"):
        load_taskgraph(tmp_path / "nope.json")


def test_stg_reader_matches_the_shared_trivial_bounds(stg_dir):
    import csv

    rows = list(csv.DictReader((stg_dir / "optima.csv").open()))
    for row in rows[:12]:
        g = load_stg(stg_dir / row["graph"])
        inst = build_instance(g, Topology.identical(int(row["procs"])))
        assert inst.trivial_lower_bound_tick() == int(row["trivial_lb"]), row
