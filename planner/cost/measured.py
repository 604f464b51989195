"""Measured per-op times that override the roofline: a CSV of op name -> seconds, a `plan-run` report, or an
onnxruntime profile.

* CSV: a header row with the columns `op` and `seconds` (extra columns ignored); one row per op name
  (`plan-calibrate --model M` writes one).  Columns `seconds_<k>_threads` hold the same ops' times on one process
  with k intra-op threads (`plan-calibrate --engine onnxruntime --nproc k`); `load_thread_times` reads them.
* `plan-run --report run.json`: a JSON object whose `op_seconds` maps each op to its measured seconds (the median
  over the run's repetitions times its rank's load factor, per-op runtime overhead included;
  `planner.execute.run_report`).
* onnxruntime profiling JSON (from `SessionOptions.enable_profiling`): a list of Chrome-trace events; the
  `Node` category events named `<node name>_kernel_time` carry `dur` in microseconds.  Repeated runs are averaged.

Both return a mapping op name -> seconds.  Names that are not ops of the graph are reported, not ignored.
"""

from __future__ import annotations

import csv
import json
import re
from collections import defaultdict
from pathlib import Path

from planner.errors import InputError


def load_measured_times(path: str | Path) -> dict[str, float]:
    """Read a measured profile (CSV or onnxruntime JSON, chosen by extension) into op name -> seconds."""
    path = Path(path)
    if not path.is_file():
        raise InputError("measured profile not found", path=str(path), fix="pass an existing .csv or .json file")
    if path.suffix.lower() == ".csv":
        return _load_csv(path)
    if path.suffix.lower() == ".json":
        return _load_ort_profile(path)
    raise InputError(f"unknown profile format {path.suffix!r}", path=str(path),
                     fix="use a .csv with columns op,seconds, a plan-run report .json or an onnxruntime "
                         "profiling .json")


def _load_csv(path: Path) -> dict[str, float]:
    return _csv_columns(path)[1]


def _csv_columns(path: Path) -> dict[int, dict[str, float]]:
    """Intra-op threads -> op -> seconds from the `seconds` column (1) and every `seconds_<k>_threads` column, the
    file read once; `InputError` naming the line for a value that is not a number or is negative."""
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames or "op" not in reader.fieldnames or "seconds" not in reader.fieldnames:
            raise InputError(f"header is {reader.fieldnames}, expected columns 'op' and 'seconds'", path=str(path))
        columns = {1: "seconds", **{int(name.split("_")[1]): name for name in reader.fieldnames
                                    if re.fullmatch(r"seconds_[0-9]+_threads", name) and int(name.split("_")[1]) > 1}}
        out: dict[int, dict[str, float]] = {threads: {} for threads in sorted(columns)}
        for line, row in enumerate(reader, start=2):
            for threads, name in columns.items():
                try:
                    seconds = float(row[name])
                except (TypeError, ValueError):
                    raise InputError(f"line {line}: {name}={row[name]!r} is not a number", path=str(path)) from None
                if seconds < 0:
                    raise InputError(f"line {line}: negative time {seconds} for op {row['op']!r}", path=str(path))
                out[threads][row["op"]] = seconds
    return out


def load_thread_times(path: str | Path) -> dict[int, dict[str, float]]:
    """Intra-op threads -> op name -> seconds, from a CSV's `seconds` (1 thread) and `seconds_<k>_threads` columns;
    a file of another format, or a CSV without thread columns, gives its times under 1 thread only."""
    path = Path(path)
    if path.suffix.lower() == ".csv" and path.is_file():
        return _csv_columns(path)
    return {1: load_measured_times(path)}


def _load_run_report(path: Path, times: object) -> dict[str, float]:
    if not isinstance(times, dict):
        raise InputError("op_seconds is not a mapping of op name -> seconds", path=str(path),
                         fix="pass the run.json that plan-run --report wrote")
    out: dict[str, float] = {}
    for op, value in times.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise InputError(f"op_seconds[{op!r}] = {value!r} is not a non-negative number", path=str(path))
        out[str(op)] = float(value)
    if not out:
        raise InputError("op_seconds is empty", path=str(path), fix="run the plan with plan-run --report")
    return out


def _load_ort_profile(path: Path) -> dict[str, float]:
    try:
        events = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg} at line {exc.lineno})", path=str(path)) from None
    if isinstance(events, dict) and "op_seconds" in events:
        return _load_run_report(path, events["op_seconds"])
    samples = ort_kernel_samples(events)
    if not samples:
        raise InputError("no Node kernel_time events found", path=str(path),
                         fix="profile with onnxruntime SessionOptions.enable_profiling = True")
    return {k: sum(v) / len(v) for k, v in samples.items()}


def ort_kernel_samples(events: object) -> dict[str, list[float]]:
    """node name -> its kernel seconds, one sample per run, from an onnxruntime profile's events (a list of
    Chrome-trace events, or an object holding them under `traceEvents`)."""
    if isinstance(events, dict):
        events = events.get("traceEvents", [])
    samples: dict[str, list[float]] = defaultdict(list)
    for ev in events if isinstance(events, list) else ():
        if not isinstance(ev, dict) or ev.get("cat") != "Node":
            continue
        name = str(ev.get("name", ""))
        if name.endswith("_kernel_time"):
            samples[name[: -len("_kernel_time")]].append(float(ev.get("dur", 0.0)) * 1e-6)
    return dict(samples)
