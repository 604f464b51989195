"""The hardware as the planner sees it: devices with speed and memory, and the links between them.

Values are SI: seconds, bytes, bytes per second, FLOP/s.  The YAML loader (`planner/ir/hardware.py`) turns human
units into these.  Devices are numbered 0..n-1 in the order the profile lists them (expanding `count`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Device:
    """One planning target (a GPU, a CPU process)."""

    name: str
    kind: str
    host: str
    peak_flops_per_s: Mapping[str, float]  # per ONNX element type name ('float', 'float16', 'bfloat16', 'int8' ...)
    memory_bytes: int
    memory_bandwidth_bytes_per_s: float
    launch_overhead_s: float = 0.0
    # op type -> calibrated multiplier of the roofline term (`planner.cost.compute`); absent types: 1.0.  A plain
    # dict, like peak_flops_per_s: a Topology must pickle.
    op_cost_factors: Mapping[str, float] = field(default_factory=dict)

    def flops_per_s(self, dtype: str) -> float:
        """Peak FLOP/s for `dtype`, falling back to 'float' (fp32) when the profile does not list the dtype."""
        if dtype in self.peak_flops_per_s:
            return self.peak_flops_per_s[dtype]
        return self.peak_flops_per_s.get("float", max(self.peak_flops_per_s.values()))


@dataclass(frozen=True, slots=True)
class Link:
    """A point-to-point path between two devices: time for n bytes = latency_s + n / bandwidth_bytes_per_s."""

    name: str
    latency_s: float
    bandwidth_bytes_per_s: float

    def transfer_s(self, size_bytes: int) -> float:
        return self.latency_s + size_bytes / self.bandwidth_bytes_per_s


LOCAL = Link("local", 0.0, float("inf"))


@dataclass(frozen=True)
class Topology:
    """Devices and the link used between every ordered pair.

    `links[i][j]` is the link from device i to device j; `links[i][i]` is `LOCAL` (free).
    """

    name: str
    devices: tuple[Device, ...]
    links: tuple[tuple[Link, ...], ...]
    source_path: str = ""
    source_sha256: str = ""
    notes: Mapping[str, str] = field(default_factory=dict)

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    def link(self, src: int, dst: int) -> Link:
        return self.links[src][dst]

    @classmethod
    def identical(cls, num_devices: int, name: str = "identical") -> Topology:
        """N identical devices, fully connected by free links: for task graphs whose times are given directly.

        Speeds and memory are placeholders (1 FLOP/s, unbounded memory); task-graph costs never read them.
        """
        dev = tuple(
            Device(f"p{i}", "abstract", "host0", {"float": 1.0}, 2**62, 1.0, 0.0) for i in range(num_devices)
        )
        free = Link("free", 0.0, float("inf"))
        links = tuple(tuple(LOCAL if i == j else free for j in range(num_devices)) for i in range(num_devices))
        return cls(name=name, devices=dev, links=links)
