"""Compute time of one op on one device: a roofline plus a fixed launch overhead.

    time_s = max(flops / peak_flops_per_s(dtype), (bytes_read + bytes_written) / memory_bandwidth) + launch_overhead

The first term is compute-bound time, the second memory-bound time; a real kernel reaches at best the larger of
the two.  Ops that the importer could not cost by a rule (`Op.estimated`) have zero FLOPs, so they are priced by
the bytes they move — never silently free.  Task-graph ops carry a given `duration` in the file's time unit,
which is returned as it is (the device is an abstract processor).
"""

from __future__ import annotations

from planner.ir.graph import Op
from planner.ir.topology import Device


def compute_time_s(op: Op, device: Device) -> float:
    """Seconds (or the task graph's time unit) that `op` occupies `device`'s compute stream."""
    if op.duration is not None:
        return float(op.duration)
    compute_s = op.flops / device.flops_per_s(op.dtype) if op.flops else 0.0
    memory_s = (op.bytes_read + op.bytes_written) / device.memory_bandwidth_bytes_per_s
    return max(compute_s, memory_s) + device.launch_overhead_s
