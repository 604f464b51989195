"""A calibration -> a hardware profile in our schema (`planner.ir.hardware`), the per-op CSV and the summary.

No torch here (the measurements are `planner.execute.calibrate`).  The profile describes one host with `nproc`
identical `cpu-process` devices, each with the measured figures, the memory of the machine shared out evenly, and
the measured gloo link between them (with the runtime probe's per-op and per-transfer overheads when it ran:
`op_overhead`, the link's `send_overhead` and `recv_overhead`) and, with several processes, the host's `sharing:`
block (its effective parallelism, measured solo vs concurrent; `planner.cost.sharing`); its `provenance` block
says where, when, with what and how each figure was measured, and the spread of its repeats.  It is validated
with the same schema `plan-solve --hw` reads before it is written.
"""

from __future__ import annotations

import datetime
import os
import platform
from collections.abc import Mapping
from typing import Any

import pandas as pd
import yaml

from planner.ir.hardware import Profile, topology_from_profile
from planner.ir.units import format_bytes, format_time

__all__ = ["profile_document", "profile_yaml", "op_frame", "op_frame_csv", "op_csv", "summary_lines",
           "machine_memory_bytes"]


def machine_memory_bytes() -> int:
    """Physical memory of this machine (Linux/Unix sysconf); 8 GiB when it cannot be read."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def _rate(x: float, unit: str) -> str:
    """A rate in the profile's human units with 4 significant digits (e.g. 12.34GFLOPS, 8.1GB/s)."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.4g}{prefix}{unit}"
    return f"{x:.4g}{unit}"


def _time(x: float) -> str:
    return f"{x * 1e6:.4g}us"


def profile_document(figures: Mapping[str, float | None], how: Mapping[str, str], spread: Mapping[str, str], *,
                     nproc: int, threads: int, torch_version: str, name: str | None = None,
                     host: str | None = None, date: str | None = None, load_avg: float | None = None,
                     memory_bytes: int | None = None, device: str = "cpu",
                     op_cost_factors: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The profile as a YAML-ready mapping (see the module docstring); `figures` as `Calibration.profile_figures`.
    `device` "cuda": GPUs, `memory_bytes` one GPU's memory; else CPU processes sharing the machine's memory.
    `op_cost_factors` (op type -> factor, fitted by `planner.execute.calibrate_fit`): the device group's table;
    none or empty: no table (the profile prices every op by the plain roofline)."""
    host = host or platform.node() or "localhost"
    date = date or datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()
    gpu = device == "cuda"
    # a GPU has its own memory (memory_bytes is one GPU's); CPU processes share the machine's
    per_proc = memory_bytes if gpu and memory_bytes else (memory_bytes or machine_memory_bytes()) // max(1, nproc)
    peak: dict[str, str] = {"float": _rate(float(figures["float_flops"] or 1e9), "FLOPS")}
    if figures.get("double_flops"):
        peak["double"] = _rate(float(figures["double_flops"] or 0), "FLOPS")
    group: dict[str, Any] = {"kind": "cuda-gpu" if gpu else "cpu-process", "count": nproc,
                             "name_prefix": "gpu" if gpu else "cpu",
             "peak_flops": peak,
              "memory": f"{per_proc // 2**20}MiB",
              "memory_bandwidth": _rate(float(figures["memory_bandwidth"] or 1e9), "B/s"),
              "launch_overhead": _time(float(figures["launch_overhead"] or 0.0))}
    if op_cost_factors:
        group["op_cost_factors"] = {k: float(v) for k, v in op_cost_factors.items()}
    if figures.get("op_overhead") is not None:  # the runtime probe ran (calibrate_probe)
        group["op_overhead"] = _time(float(figures["op_overhead"] or 0.0))
    host_block: dict[str, Any] = {"name": "node0", "devices": [group]}
    if nproc > 1 and figures.get("effective_parallelism"):  # measured solo vs concurrent (calibrate._sharing)
        host_block["sharing"] = {"effective_parallelism": round(float(figures["effective_parallelism"] or 0), 3),
                                 "measured_ranks": nproc}
    safe_host = "".join(c if c.isalnum() or c in "-_." else "-" for c in host) or "localhost"
    doc: dict[str, Any] = {
        "name": name or f"calibrated-{safe_host}-{nproc}",
        "description": (f"{safe_host}: {nproc} GPU(s), one process each, measured together" if gpu else
                        f"{safe_host}: {nproc} CPU process(es) of {threads} torch thread(s) each, measured together"),
        "source": "measured by plan-calibrate (see provenance)",
        "provenance": {
            "host": host, "date": date,
            "tool": f"plan-calibrate --nproc {nproc} --threads {threads}" + (" --device cuda" if gpu else ""),
            "torch_version": str(torch_version), "nproc": nproc, "threads_per_process": threads,
            **({"load_avg_1min": round(load_avg, 2)} if load_avg is not None else {}),
            "measured": dict(how), "spread": dict(spread),
        },
        "hosts": [host_block],
    }
    if nproc > 1:
        if figures.get("link_latency") is None or not figures.get("link_bandwidth"):
            raise ValueError("a profile of several processes needs the measured link latency and bandwidth")
        link: dict[str, Any] = {"name": "nccl-measured" if gpu else "gloo-measured",
                                "latency": _time(float(figures["link_latency"] or 0)),
                                "bandwidth": _rate(float(figures["link_bandwidth"] or 0), "B/s")}
        for side in ("send_overhead", "recv_overhead"):  # measured by the runtime probe
            if figures.get(side) is not None:
                link[side] = _time(float(figures[side] or 0.0))
        doc["links"] = {"intra_host": link}
    return doc


def with_shared_memory_link(doc: dict[str, Any], latency_s: float, bandwidth_bytes_per_s: float,
                            side_overhead_s: float | None = None) -> None:
    """Make the profile's intra-host link the shared-memory transfers of `plan-run --executor fast`, as
    `shm_probe.shm_link_figures` measured them (the gloo runtime's send and receive overheads do not apply).
    `side_overhead_s` is the link's send and receive overhead each: what a transfer costs the executor beyond the
    ping-pong's latency on each side (a send ends its rank's segment and a receive starts one): the largest of one
    engine call (`engine_times.engine_call_s`), half of a crossing's cost beyond the latency
    (`shm_probe.crossing_s`) and a segment's cost beyond its ops (`shm_probe.segment_overhead_s`)."""
    link: dict[str, Any] = {"name": "shared-memory-measured", "latency": _time(latency_s),
                            "bandwidth": _rate(bandwidth_bytes_per_s, "B/s")}
    if side_overhead_s is not None:
        link.update(send_overhead=_time(side_overhead_s), recv_overhead=_time(side_overhead_s))
    doc["links"] = {"intra_host": link}
    for key in ("link_latency", "link_bandwidth", "send_overhead", "recv_overhead"):  # the gloo link's, replaced
        doc["provenance"]["measured"].pop(key, None)
        doc["provenance"]["spread"].pop(key, None)
    doc["provenance"]["measured"]["link"] = (
        "shared memory (plan-run --executor fast): latency = half the median round trip of a 64-byte ping-pong "
        "between two forked processes, bandwidth = 1 MiB over its one-way time less that latency" +
        ("; send and receive overhead each = the largest of one onnxruntime call on a one-node model (a transfer "
         "ends a segment on the sender and starts one on the receiver), half of what a crossing between ranks "
         "costs the fast executor beyond that latency (a chain of tiny ops alternating ranks at every op against "
         "the chain on one rank) and, with --model, the mean time a segment of the model takes beyond its ops' "
         "times (its ops four at a time on alternating ranks)" if side_overhead_s is not None else ""))


def profile_yaml(doc: Mapping[str, Any]) -> str:
    """The YAML text of a profile mapping, checked against the schema first (ValueError on a bad figure)."""
    topology_from_profile(Profile.model_validate(doc))
    header = ("# Written by plan-calibrate: figures measured on this machine with the processes running at once\n"
              "# (see provenance). Re-run plan-calibrate when the machine, its load or torch changes.\n")
    return header + yaml.safe_dump(dict(doc), sort_keys=False, width=120)


def op_frame(op_seconds: Mapping[str, float], more: Mapping[str, Mapping[str, float]] | None = None
             ) -> pd.DataFrame:
    """The per-op times as a frame: ``op``, ``seconds``, then a column per entry of `more` (column name -> op ->
    seconds, e.g. ``seconds_2_threads``; 0 where it has no time for an op), one row per op of `op_seconds`."""
    more = more or {}
    ops = list(op_seconds)
    columns: dict[str, list[Any]] = {"op": ops, "seconds": [float(op_seconds[op]) for op in ops]}
    columns.update({name: [float(column.get(op, 0.0)) for op in ops] for name, column in more.items()})
    return pd.DataFrame(columns, columns=list(columns))


def op_frame_csv(frame: pd.DataFrame) -> str:
    """The CSV text of an `op_frame`: the header, then one line per op, every time with 9 significant digits
    (``%.9g``), ``\\n`` line ends."""
    return frame.to_csv(index=False, float_format="%.9g", lineterminator="\n", na_rep="nan")


def op_csv(op_seconds: Mapping[str, float], more: Mapping[str, Mapping[str, float]] | None = None) -> str:
    """The per-op CSV `plan-solve --measured` reads (`op,seconds`), with a column per entry of `more` (column name
    -> op -> seconds, e.g. `seconds_2_threads`) after them: `op_frame_csv` of `op_frame`."""
    return op_frame_csv(op_frame(op_seconds, more))


def _fmt(value: float, unit: str) -> str:
    if unit == "s":
        return format_time(value)
    if unit == "B/s":
        return format_bytes(value, binary=False) + "/s"
    if unit == "x":
        return f"{value:.3g}x"
    return _rate(value, "FLOP/s")


def summary_lines(rows: list[tuple[str, float, str, float, int]]) -> list[str]:
    """One line per figure: name, median, spread over its repeats x ranks, sample count.
    `rows` holds (name, value, unit, spread, samples)."""
    width = max((len(r[0]) for r in rows), default=10)
    lines = [f"{'figure':<{width}}  {'median':>14}  spread (max-min)/median over samples"]
    for name, value, unit, spread, n in rows:
        lines.append(f"{name:<{width}}  {_fmt(value, unit):>14}  {spread:6.1%} of {n}")
    return lines
