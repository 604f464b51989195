"""Processor sharing between the ranks of one host: the figure, and how fast a rank computes when k others do.

On a host with fewer cores than ranks (this project's 2-vCPU machine runs 2 ranks on about one core's
throughput), a rank computing alone runs faster than a rank computing while the others do.  `plan-calibrate`
measures both and writes the host's `sharing:` block (`planner.ir.hardware.HostSharing`):

* `effective_parallelism` E: the host's compute throughput in solo ranks' worth, `measured_ranks` x (one rank's
  throughput with all `measured_ranks` computing at once) / (its throughput alone);
* `measured_ranks` n: how many ranks computed at once when the profile's compute figures were measured.

The model: while k ranks of a host compute at once, each runs at `speed(k)` = min(1, E / k) of its solo speed.
An op the profile prices at d seconds was priced at the calibration's concurrency, i.e. at speed(n), so its solo
work is d x speed(n) and it takes that work / speed(k) seconds while k ranks compute throughout.  With E >= n
(a core per rank) speed is 1 everywhere and nothing changes.

This module only holds the figure and the arithmetic; the simulator (`planner.schedule.simulate`, `sharing=`)
replays a schedule under it.  The cost model's own prices (`planner.cost.model`) never read it, so a profile
prices the same with or without the block.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import yaml

from planner.ir.hardware import Profile
from planner.ir.topology import Topology

__all__ = ["SharedHosts", "shared_hosts", "load_shared_hosts", "read_profile", "effective_parallelism"]


def effective_parallelism(ranks: int, concurrent_rate: float, solo_rate: float) -> float:
    """E from one measurement: `ranks` x (a rank's rate with `ranks` computing at once) / (its rate alone)."""
    if concurrent_rate <= 0 or solo_rate <= 0:
        raise ValueError(f"rates must be positive, got concurrent {concurrent_rate}, solo {solo_rate}")
    return ranks * concurrent_rate / solo_rate


@dataclass(frozen=True)
class SharedHosts:
    """Per device, the index of its sharing host (-1: the device computes on its own processors, never slowed by
    the others), and per sharing host its E and n (module docstring)."""

    host_of_device: tuple[int, ...]
    parallelism: tuple[float, ...]
    measured_ranks: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.parallelism) != len(self.measured_ranks):
            raise ValueError("one effective parallelism and one measured rank count per host")
        if any(not e > 0 for e in self.parallelism) or any(n < 1 for n in self.measured_ranks):
            raise ValueError("effective parallelism must be > 0 and measured ranks >= 1")
        if any(not -1 <= h < len(self.parallelism) for h in self.host_of_device):
            raise ValueError("a device names a sharing host that does not exist")

    def speed(self, host: int, computing: int) -> float:
        """Fraction of solo speed of each of `computing` ranks of `host` computing at once (1 for none or one
        rank, or for a device that shares nothing: host -1)."""
        if host < 0 or computing <= 1:
            return 1.0
        return min(1.0, self.parallelism[host] / computing)

    def solo(self) -> SharedHosts:
        """The same hosts for durations that are each op's time alone (measured op times, not figures measured
        with every rank busy): measured_ranks 1 everywhere."""
        return dataclasses.replace(self, measured_ranks=tuple(1 for _ in self.measured_ranks))

    def calibrated_speed(self, host: int) -> float:
        """speed(n): the fraction of solo speed at which the profile's figures were measured."""
        return 1.0 if host < 0 else self.speed(host, self.measured_ranks[host])


def shared_hosts(profile: Profile, topology: Topology) -> SharedHosts | None:
    """The profile's sharing blocks mapped onto `topology`'s devices (its devices name their host); None when no
    host of the profile has a `sharing:` block (then nothing is to be simulated differently)."""
    index: dict[str, int] = {}
    parallelism: list[float] = []
    ranks: list[int] = []
    for host in profile.hosts:
        if host.sharing is not None:
            index[host.name] = len(parallelism)
            parallelism.append(float(host.sharing.effective_parallelism))
            ranks.append(int(host.sharing.measured_ranks))
    if not parallelism:
        return None
    return SharedHosts(tuple(index.get(d.host, -1) for d in topology.devices), tuple(parallelism), tuple(ranks))


def read_profile(path: str | Path) -> Profile | None:
    """The profile at `path`, None when it does not read as one (a bundled profile's name, say)."""
    try:
        return Profile.model_validate(yaml.safe_load(Path(path).read_text()))
    except (OSError, ValueError, yaml.YAMLError):
        return None


def load_shared_hosts(path: str | Path, topology: Topology) -> SharedHosts | None:
    """`shared_hosts` of the profile file at `path` (already readable as `topology`); None as there, or when the
    file does not read as a profile (a bundled name, say: no bundled profile has the block)."""
    profile = read_profile(path)
    return shared_hosts(profile, topology) if profile is not None else None

