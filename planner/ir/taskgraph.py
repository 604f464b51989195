"""Plain task graphs: the JSON format for users without an ONNX file, and the STG benchmark format.

Task-graph JSON (times in one abstract unit, the same for `duration` and `comm`):

    {"tasks": [{"id": "a", "duration": 5, "memory": 0}, {"id": "b", "duration": 3}],
     "edges": [{"src": "a", "dst": "b", "comm": 15, "bytes": 0}]}

* `duration` (required, >= 0): time the task occupies a device.
* `memory` (optional, bytes, default 0): memory the task holds on its device for the whole step.
* `comm` (optional, default 0): transfer time paid only when src and dst run on different devices.
* `bytes` (optional, default 0): size of the data sent; with a hardware profile it adds bytes / bandwidth.
* Optional top level `"time_unit"` (e.g. "ms") names the unit in reports; default "unit".

STG (Standard Task Graph Set, Kasahara lab): `n`, then one line per task `id time npred pred...`, entry and exit
dummies of zero time, trailing lines starting with '#'.  Zero communication.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
from pathlib import Path

from planner.errors import InputError
from planner.ir.graph import Edge, Op, OpGraph, SourceInfo

_TASK_KEYS = {"id", "duration", "memory"}
_EDGE_KEYS = {"src", "dst", "comm", "bytes"}
_TOP_KEYS = {"tasks", "edges", "time_unit", "name"}


def _read(path: Path) -> bytes:
    if not path.is_file():
        raise InputError("file not found", path=str(path), fix="check the path")
    return path.read_bytes()


def _number(value: object, where: str, path: Path, *, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InputError(f"{where}: expected a non-negative number, got {value!r}", path=str(path))
    if integer and value != int(value):
        raise InputError(f"{where}: expected a whole number of bytes, got {value!r}", path=str(path))
    return value


def _check_keys(obj: dict, allowed: set[str], where: str, path: Path) -> None:
    for key in obj:
        if key not in allowed:
            near = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else f" (allowed: {', '.join(sorted(allowed))})"
            raise InputError(f"{where}.{key}: unknown key{hint}", path=str(path))


def load_taskgraph(path: str | Path) -> OpGraph:
    """Read a task-graph JSON file; errors name the file and the item (`tasks[3].duration`)."""
    path = Path(path)
    raw = _read(path)
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"not valid JSON ({exc})", path=str(path)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("tasks"), list):
        raise InputError('expected an object with a "tasks" list', path=str(path))
    _check_keys(doc, _TOP_KEYS, "top level", path)
    ops: list[Op] = []
    seen: set[str] = set()
    for i, task in enumerate(doc["tasks"]):
        where = f"tasks[{i}]"
        if not isinstance(task, dict):
            raise InputError(f'{where}: expected an object with "id" and "duration"', path=str(path))
        _check_keys(task, _TASK_KEYS, where, path)
        if "id" not in task or "duration" not in task:
            raise InputError(f'{where}: expected an object with "id" and "duration"', path=str(path))
        name = str(task["id"])
        if name in seen:
            raise InputError(f"{where}: duplicate task id {name!r}", path=str(path))
        seen.add(name)
        memory = int(_number(task.get("memory", 0), f"{where}.memory", path, integer=True))
        ops.append(Op(name=name, op_type="task", duration=_number(task["duration"], f"{where}.duration", path),
                      param_bytes=memory))
    edges: list[Edge] = []
    pairs: set[tuple[str, str]] = set()
    for i, edge in enumerate(doc.get("edges", [])):
        where = f"edges[{i}]"
        if not isinstance(edge, dict):
            raise InputError(f'{where}: expected an object with "src" and "dst"', path=str(path))
        _check_keys(edge, _EDGE_KEYS, where, path)
        if "src" not in edge or "dst" not in edge:
            raise InputError(f'{where}: expected an object with "src" and "dst"', path=str(path))
        src, dst = str(edge["src"]), str(edge["dst"])
        for end in (src, dst):
            if end not in seen:
                raise InputError(f"{where}: unknown task id {end!r}", path=str(path),
                                 fix="every edge end must be a task id")
        if src == dst:
            raise InputError(f"{where}: edge from {src!r} to itself", path=str(path))
        if (src, dst) in pairs:
            raise InputError(f"{where}: duplicate edge {src!r} -> {dst!r}", path=str(path))
        pairs.add((src, dst))
        size = int(_number(edge.get("bytes", 0), f"{where}.bytes", path, integer=True))
        edges.append(Edge(src, dst, tensor=f"{src}->{dst}", size_bytes=size,
                          comm=_number(edge.get("comm", 0), f"{where}.comm", path)))
    try:
        return OpGraph.build(
            str(doc.get("name", path.stem)), ops, edges,
            source=SourceInfo(str(path), hashlib.sha256(raw).hexdigest(), "taskgraph",
                              str(doc.get("time_unit", "unit"))),
        )
    except ValueError as exc:
        raise InputError(str(exc), path=str(path), fix="a task graph must be acyclic") from None


def load_stg(path: str | Path) -> OpGraph:
    """Read a Standard Task Graph Set file (zero communication); task ids become names 't<id>'."""
    path = Path(path)
    raw = _read(path)
    ops: list[Op] = []
    edges: list[Edge] = []
    lines = [ln.split() for ln in raw.decode("ascii", errors="replace").splitlines()]
    body = [ln for ln in lines if ln and not ln[0].startswith("#")]
    for lineno, fields in enumerate(body[1:], start=2):  # the first line is the (untrusted) task count
        try:
            tid, time, npred = int(fields[0]), int(fields[1]), int(fields[2])
            preds = [int(x) for x in fields[3 : 3 + npred]]
        except (ValueError, IndexError):
            raise InputError(f"task line {lineno}: expected 'id time npred pred...'", path=str(path)) from None
        if len(preds) != npred:
            raise InputError(f"task line {lineno}: {npred} predecessors announced, {len(preds)} given", path=str(path))
        ops.append(Op(name=f"t{tid}", op_type="task", duration=float(time)))
        edges.extend(Edge(f"t{p}", f"t{tid}", tensor=f"t{p}->t{tid}", comm=0.0) for p in preds)
    try:
        return OpGraph.build(path.name, ops, edges,
                             source=SourceInfo(str(path), hashlib.sha256(raw).hexdigest(), "taskgraph", "unit"))
    except ValueError as exc:
        raise InputError(str(exc), path=str(path)) from None
