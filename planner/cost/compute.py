"""Compute time of one op on one device: a roofline, scaled per op type, plus a fixed launch overhead.

    time_s = factor(op_type) x max(flops / peak_flops_per_s(dtype), (bytes_read + bytes_written) / memory_bandwidth)
             + launch_overhead

The first term is compute-bound time, the second memory-bound time; a real kernel reaches at best the larger of
the two.  `factor` is the device's calibrated cost factor of the op's type (`Device.op_cost_factors`, the
profile's optional `op_cost_factors` table that `plan-calibrate` fits: how far that type's kernels fall short of
the roofline of the profile's figures); 1 for a type the table does not list, and for every type of a profile
without one.  Ops that the importer could not cost by a rule (`Op.estimated`) have zero FLOPs, so they are priced by
the bytes they move — never silently free.  Task-graph ops carry a given `duration` in the file's time unit,
which is returned as it is (the device is an abstract processor).
"""

from __future__ import annotations

from planner.ir.graph import Op
from planner.ir.topology import Device, Topology


def compute_time_s(op: Op, device: Device) -> float:
    """Seconds (or the task graph's time unit) that `op` occupies `device`'s compute stream."""
    if op.duration is not None:
        return float(op.duration)
    compute_s = op.flops / device.flops_per_s(op.dtype) if op.flops else 0.0
    memory_s = (op.bytes_read + op.bytes_written) / device.memory_bandwidth_bytes_per_s
    roofline_s = max(compute_s, memory_s)
    factor = device.op_cost_factors.get(op.op_type)
    if factor is not None:  # no multiplication at all without a factor: a profile without the table prices as before
        roofline_s *= factor
    return roofline_s + device.launch_overhead_s


def devices_by_spec(topology: Topology) -> list[list[int]]:
    """The topology's devices in groups that `compute_time_s` prices alike (same peak FLOP/s per dtype, memory
    bandwidth, launch overhead and cost factors), so a cost computation runs once per group: an 8-GPU node costs
    a graph once, not 8 times."""
    groups: dict[tuple, list[int]] = {}
    for d, dev in enumerate(topology.devices):
        key = (tuple(sorted(dev.peak_flops_per_s.items())), dev.memory_bandwidth_bytes_per_s, dev.launch_overhead_s,
               tuple(sorted(dev.op_cost_factors.items())))
        groups.setdefault(key, []).append(d)
    return list(groups.values())
