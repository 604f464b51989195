"""The plan file: versioned JSON, written atomically, reloadable by every command.

Format version 1 (keys at the top level)::

    format            "opplan-plan"
    format_version    1
    instance          the instance's name
    method, solver, solver_version, status, solve_time_s
                      (status: 'optimal', 'feasible', 'heuristic' or 'infeasible', read back as a `PlanStatus`;
                      method: a `PlanMethod` value, or any string for a replayed schedule, read back as given)
    makespan, lower_bound, gap       objective, bound, (makespan - bound) / makespan; makespan/bound in `time_unit`
    makespan_tick, lower_bound_tick  the same in integer ticks (exact)
    time_unit         unit of every `makespan`, `lower_bound`, `start`, `end`: "s" for ONNX models, the task
                      graph's own unit otherwise; value = tick * tick_s
    tick_s            time units per tick (seconds per tick for ONNX models), or null for 1
    model_path, model_sha256, hardware_path, hardware_sha256
    devices           device names, in index order
    tasks             list of {id, device (name), device_index, stage, start, end, start_tick, end_tick}
    task_ops          {task: [op, ...]} for a plan whose tasks are clusters (clusters -> ops), else {}
    clusters          optional {cluster: [op, ...]}: how the planner grouped the tasks of an op-level plan (the
                      plans `plan-solve` writes list every task/op of the input under its own id in `tasks`, and
                      record the clusters here; informational)
    input_shapes      optional: {graph input: [dims]} the model was planned with (--input-shape)
    input_values      optional: {graph input: [values]} the model was planned with (--input-value)
    run               optional: {ranks, threads, predicted_s, options_s: {label: seconds}, reason, bound_s (optional:
                      no run on the host's cores is shorter, `planner.cost.core_bound`)}: how the plan is predicted
                      to run fastest on a CPU host (`RunAdvice`; plan-run --executor fast follows it)

On load the `*_tick` fields are authoritative (exact); `start`/`end`/`makespan` are for readers.  A file without
`start_tick` (hand-written) has its times converted back: round(start / tick_s), or start itself when tick_s is null.
`load_plan` raises `InputError` naming the file and the key for a missing file, bad JSON, an unknown
`format_version` or a missing or mistyped key.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from planner.errors import InputError
from planner.schedule.atomic import atomic_write_text
from planner.schedule.plan import (
    Plan,
    PlanStatus,
    RunAdvice,
    TaskPlacement,
    parse_method,
    parse_status,
)

FORMAT = "opplan-plan"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = frozenset({1})


def _to_unit(tick: int, tick_s: float | None) -> float | int:
    return tick * tick_s if tick_s is not None else tick


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """The JSON object of a plan (format version 1)."""
    ts = plan.tick_s
    tasks = []
    for p in plan.placements:
        tasks.append({
            "id": p.task,
            "device": plan.device_names[p.device] if 0 <= p.device < len(plan.device_names) else str(p.device),
            "device_index": p.device,
            "stage": p.stage,
            "start": _to_unit(p.start_tick, ts),
            "end": _to_unit(p.end_tick, ts),
            "start_tick": p.start_tick,
            "end_tick": p.end_tick,
        })
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "instance": plan.instance_name,
        "method": str(plan.method),
        "solver": plan.solver,
        "solver_version": plan.solver_version,
        "status": str(plan.status),
        "solve_time_s": plan.solve_time_s,
        "makespan": _to_unit(plan.makespan_tick, ts),
        "lower_bound": _to_unit(plan.lower_bound_tick, ts),
        "gap": plan.gap,
        "makespan_tick": plan.makespan_tick,
        "lower_bound_tick": plan.lower_bound_tick,
        "time_unit": plan.time_unit,
        "tick_s": ts,
        "model_path": plan.model_path,
        "model_sha256": plan.model_sha256,
        "hardware_path": plan.hardware_path,
        "hardware_sha256": plan.hardware_sha256,
        "devices": list(plan.device_names),
        "tasks": tasks,
        "task_ops": {k: list(v) for k, v in plan.task_ops.items()},
        **({"search": [{"found_by": part, "makespan": _to_unit(tick, ts), "makespan_tick": tick}
                       for part, tick in plan.search]} if plan.search else {}),
        "input_shapes": {k: list(v) for k, v in plan.input_shapes.items()},
        "input_values": {k: list(v) for k, v in plan.input_values.items()},
        "clusters": {k: list(v) for k, v in plan.clusters.items()},
        **({"run": {"ranks": plan.run.ranks, "threads": plan.run.threads, "predicted_s": plan.run.predicted_s,
                    "options_s": dict(plan.run.options_s), "reason": plan.run.reason,
                    **({"bound_s": plan.run.bound_s} if plan.run.bound_s is not None else {})}} if plan.run else {}),
    }


# Top-level keys whose items (a task, a cluster's ops) are written one per line: JSON indented all the way down is
# written by the json module's pure-Python encoder, 5-7 s for a 100k-op plan; one line per item uses its C encoder.
_ONE_LINE_ITEMS = frozenset({"tasks", "task_ops", "clusters"})


def plan_json(plan: Plan) -> str:
    """The plan file's text: `plan_to_dict` indented by one space per level, except that each task of `tasks` and
    each entry of `task_ops` and `clusters` is on one line (the same JSON, read back by `load_plan`)."""
    parts = []
    for key, value in plan_to_dict(plan).items():
        if key in _ONE_LINE_ITEMS and value:
            if isinstance(value, dict):
                items = [f"{json.dumps(k)}: {json.dumps(v, allow_nan=False)}" for k, v in value.items()]
                text = "{\n  " + ",\n  ".join(items) + "\n }"
            else:
                text = "[\n  " + ",\n  ".join(json.dumps(v, allow_nan=False) for v in value) + "\n ]"
        else:  # JSON strings hold no raw newline, so indenting every line break nests the value one level
            text = json.dumps(value, indent=1, allow_nan=False).replace("\n", "\n ")
        parts.append(f" {json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def save_plan(plan: Plan, path: str | os.PathLike[str]) -> None:
    """Write `plan` as JSON (`plan_json`) to `path` atomically (a crash never leaves half a file)."""
    atomic_write_text(path, plan_json(plan))


class _Reader:
    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, key: str, what: str) -> InputError:
        return InputError(f"plan key {key!r}: {what}", path=self.path)

    def get(self, obj: dict, key: str, types: tuple[type, ...], where: str = "", *, default: Any = ...) -> Any:
        full = f"{where}{key}"
        if key not in obj:
            if default is not ...:
                return default
            raise self.fail(full, "missing")
        value = obj[key]
        if value is None and type(None) in types:
            return None
        if isinstance(value, bool) and bool not in types:
            raise self.fail(full, f"expected {'/'.join(t.__name__ for t in types)}, got {value!r}")
        if not isinstance(value, types):
            raise self.fail(full, f"expected {'/'.join(t.__name__ for t in types)}, got {type(value).__name__}")
        return value

    def status(self, obj: dict) -> PlanStatus:
        """The top-level `status`, read back into the `PlanStatus` enum."""
        value = self.get(obj, "status", (str,))
        try:
            return parse_status(value)
        except ValueError:
            raise self.fail("status", f"{value!r} is not one of {[s.value for s in PlanStatus]}") from None

    def tick(self, obj: dict, key: str, where: str, tick_s: float | None) -> int:
        """`<key>_tick` if present, else `<key>` converted back to ticks."""
        if f"{key}_tick" in obj:
            return self.get(obj, f"{key}_tick", (int,), where)
        value = self.get(obj, key, (int, float), where)
        if tick_s is None:
            if float(value) != int(value):
                raise self.fail(f"{where}{key}", f"{value!r} is not a whole number of ticks")
            return int(value)
        return int(round(value / tick_s))


def _tick_s(r: _Reader, data: dict) -> float | None:
    """The file's `format_version`, `format` and `tick_s` checked in that order; returns tick_s (None for 1)."""
    version = r.get(data, "format_version", (int,))
    if version not in SUPPORTED_VERSIONS:
        raise r.fail("format_version", f"unknown version {version} (this opplan reads {sorted(SUPPORTED_VERSIONS)})")
    fmt = data.get("format", FORMAT)
    if fmt != FORMAT:
        raise r.fail("format", f"expected {FORMAT!r}, got {fmt!r}")
    tick_s = r.get(data, "tick_s", (int, float, type(None)), default=None)
    if tick_s is not None and not (math.isfinite(tick_s) and tick_s > 0):
        raise r.fail("tick_s", f"must be a positive number, got {tick_s!r}")
    return float(tick_s) if tick_s is not None else None


def _device_names(r: _Reader, data: dict, rows: list) -> list[str]:
    """`devices`, or for a hand-written file without it the tasks' devices in index order (or first appearance)."""
    devices = r.get(data, "devices", (list,), default=None)
    if devices is None:
        seen: dict[str, int] = {}
        for i, row in enumerate(rows):
            if isinstance(row, dict):
                name = r.get(row, "device", (str,), f"tasks[{i}].")
                idx = row.get("device_index", len(seen))
                seen.setdefault(name, idx if isinstance(idx, int) else len(seen))
        devices = sorted(seen, key=lambda k: seen[k])
    if not all(isinstance(d, str) for d in devices):
        raise r.fail("devices", "must be a list of device names")
    return devices


def _placements(r: _Reader, rows: list, devices: list[str], tick_s: float | None) -> list[TaskPlacement]:
    """One `TaskPlacement` per row of `tasks`, each row's device checked against `devices`."""
    dev_index = {name: i for i, name in enumerate(devices)}
    placements = []
    for i, row in enumerate(rows):
        where = f"tasks[{i}]."
        if not isinstance(row, dict):
            raise r.fail(f"tasks[{i}]", "must be an object")
        task = r.get(row, "id", (str,), where)
        device = r.get(row, "device", (str,), where)
        if device not in dev_index:
            raise r.fail(f"{where}device", f"{device!r} is not one of the plan's devices {devices[:8]}")
        d = r.get(row, "device_index", (int,), where, default=dev_index[device])
        if d != dev_index[device]:
            raise r.fail(f"{where}device_index", f"{d} does not match device {device!r} (index {dev_index[device]})")
        stage = r.get(row, "stage", (int, type(None)), where, default=None)
        start = r.tick(row, "start", where, tick_s)
        end = r.tick(row, "end", where, tick_s)
        placements.append(TaskPlacement(task, d, start, end, stage))
    return placements


def _name_lists(r: _Reader, data: dict, key: str) -> dict[str, tuple[str, ...]]:
    """The optional `{name: [op, ...]}` object under `key` (task_ops, clusters), each list checked to hold strings."""
    out: dict[str, tuple[str, ...]] = {}
    for k, v in r.get(data, key, (dict,), default={}).items():
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise r.fail(f"{key}.{k}", "must be a list of op names")
        out[k] = tuple(v)
    return out


def _input_shapes(r: _Reader, data: dict) -> dict[str, tuple[int, ...]]:
    """The optional `input_shapes`: each a list of positive integers."""
    input_shapes: dict[str, tuple[int, ...]] = {}
    for k, v in r.get(data, "input_shapes", (dict,), default={}).items():
        if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
            raise r.fail(f"input_shapes.{k}", "must be a list of positive integers")
        input_shapes[k] = tuple(v)
    return input_shapes


def _input_values(r: _Reader, data: dict) -> dict[str, tuple[float, ...]]:
    """The optional `input_values`: each a list of numbers, read back as floats."""
    input_values: dict[str, tuple[float, ...]] = {}
    for k, v in r.get(data, "input_values", (dict,), default={}).items():
        if not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            raise r.fail(f"input_values.{k}", "must be a list of numbers")
        input_values[k] = tuple(float(x) for x in v)
    return input_values


def plan_from_dict(data: Any, path: str = "<plan>") -> Plan:
    """Parse a plan JSON object; raises `InputError` naming `path` and the offending key."""
    r = _Reader(path)
    if not isinstance(data, dict):
        raise InputError("a plan file must hold a JSON object", path=path)
    tick_s = _tick_s(r, data)
    rows = r.get(data, "tasks", (list,))
    devices = _device_names(r, data, rows)
    placements = _placements(r, rows, devices, tick_s)
    task_ops = _name_lists(r, data, "task_ops")
    input_shapes = _input_shapes(r, data)
    input_values = _input_values(r, data)
    clusters = _name_lists(r, data, "clusters")
    return Plan(
        instance_name=r.get(data, "instance", (str,), default=""),
        placements=tuple(placements),
        device_names=tuple(devices),
        makespan_tick=r.tick(data, "makespan", "", tick_s),
        lower_bound_tick=r.tick(data, "lower_bound", "", tick_s),
        status=r.status(data),
        method=parse_method(r.get(data, "method", (str,), default="")),
        solver=r.get(data, "solver", (str,), default=""),
        solver_version=r.get(data, "solver_version", (str,), default=""),
        solve_time_s=float(r.get(data, "solve_time_s", (int, float), default=0.0)),
        tick_s=tick_s,
        time_unit=r.get(data, "time_unit", (str,), default="tick"),
        model_path=r.get(data, "model_path", (str,), default=""),
        model_sha256=r.get(data, "model_sha256", (str,), default=""),
        hardware_path=r.get(data, "hardware_path", (str,), default=""),
        hardware_sha256=r.get(data, "hardware_sha256", (str,), default=""),
        task_ops=task_ops,
        search=tuple((str(step.get("found_by", "")), int(step.get("makespan_tick", 0)))
                     for step in r.get(data, "search", (list,), default=[]) if isinstance(step, dict)),
        input_shapes=input_shapes,
        input_values=input_values,
        clusters=clusters,
        run=_run_advice(r, data),
    )


def _run_advice(r: _Reader, data: dict) -> RunAdvice | None:
    run = r.get(data, "run", (dict,), default=None)
    if run is None:
        return None
    options = r.get(run, "options_s", (dict,), "run.", default={})
    bound = r.get(run, "bound_s", (int, float), "run.", default=None)
    return RunAdvice(ranks=int(r.get(run, "ranks", (int,), "run.")), threads=int(r.get(run, "threads", (int,), "run.")),
                     predicted_s=float(r.get(run, "predicted_s", (int, float), "run.")),
                     options_s=tuple((str(k), float(v)) for k, v in options.items() if isinstance(v, (int, float))),
                     reason=str(r.get(run, "reason", (str,), "run.", default="")),
                     bound_s=None if bound is None else float(bound))


def load_plan(path: str | os.PathLike[str]) -> Plan:
    """Read a plan file written by `save_plan` (or by hand, following the format above)."""
    p = str(path)
    try:
        with open(p, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise InputError("plan file not found", path=p, fix="check the path, or create it with plan-solve") from None
    except IsADirectoryError:
        raise InputError("is a folder, not a plan file", path=p, fix="pass the plan.json that plan-solve wrote") \
            from None
    except OSError as exc:
        raise InputError(f"cannot read plan file: {exc.strerror or exc}", path=p) from None
    except UnicodeDecodeError:  # e.g. --plan model.onnx: a binary file where the JSON plan belongs
        raise InputError("not a plan file (binary, not JSON text)",
                         path=p, fix="pass the plan.json that plan-solve wrote") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})", path=p) from None
    return plan_from_dict(data, p)
