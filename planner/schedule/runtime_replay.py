"""A plan replayed as our CPU runtime runs it: each transfer's own work on its ranks, and processor sharing.

The placement model prices a transfer as a delay on its link: the sender's device is free as soon as the producing
op ends.  Our runtime on gloo (`planner.execute.dist`) does not work that way: the sending rank packs and posts
every send itself, right after the producing op, and the receiving rank posts and completes every receive, so a
transfer takes time *from the ranks' ops*.  `plan-calibrate`'s runtime probe measures that work per send and per
receive (the profile's links' `send_overhead` and `recv_overhead`, which the topology folds into the link's latency
so that the delay is right).  On a CPU host a send can cost more than the small ops around it, so a plan that splits
a small model over ranks can be priced shorter than its single-rank plan by the placement model and run longer.

`RuntimeReplay` holds what the simulator needs to replay a plan that way (`simulate_plan(..., sharing=,
rank_transfer_tick=)`): the profile's per-send and per-receive seconds as ticks, and its hosts' `sharing:` blocks
(a profile without them: no host slows its ranks).  It is built only from a profile that has the probe's figures
(`RuntimeReplay.of` returns None otherwise: every bundled profile, and every GPU profile, where NCCL's work runs on
its own stream).  The replay is a figure beside the plan's own makespan, never a bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from planner.cost.instance import SchedulingInstance
from planner.cost.sharing import SharedHosts, read_profile, shared_hosts
from planner.ir.hardware import Profile
from planner.ir.topology import Topology
from planner.schedule.plan import Plan
from planner.schedule.simulate import simulate_plan

__all__ = ["RuntimeReplay", "rank_transfer_s"]


def rank_transfer_s(profile: Profile) -> tuple[float, float] | None:
    """(send_overhead, recv_overhead) seconds of the profile's intra-host link (the runtime probe's), None when it
    has neither."""
    link = profile.links.intra_host or profile.hosts[0].intra_host
    if link is None or (link.send_overhead is None and link.recv_overhead is None):
        return None
    return float(link.send_overhead or 0.0), float(link.recv_overhead or 0.0)


@dataclass(frozen=True)
class RuntimeReplay:
    """Per-transfer rank work (seconds: send, receive) and the hosts' processor sharing (module docstring)."""

    send_s: float
    recv_s: float
    sharing: SharedHosts

    @classmethod
    def of(cls, path: str | Path, topology: Topology, *, solo_durations: bool = False,
           transfer_s: tuple[float, float] | None = None) -> RuntimeReplay | None:
        """The replay for plans on the profile at `path` (read as `topology`), None when neither the profile nor
        `transfer_s` gives per-transfer figures.  `solo_durations`: the instance's durations are measured op times
        (`plan-solve --measured`), i.e. an op's time alone (`planner.execute.run_sharing`), not priced at the
        calibration's concurrency.  `transfer_s`: (per send, per receive) seconds a run measured
        (`planner.cost.measured_transfers`), used instead of the profile's."""
        profile = read_profile(path) if path else None
        overheads = transfer_s or (rank_transfer_s(profile) if profile is not None else None)
        if overheads is None:
            return None
        hosts = shared_hosts(profile, topology) if profile is not None else None
        if hosts is None:  # nobody shares cores: the ranks' streams only take the transfers' work
            hosts = SharedHosts(tuple(-1 for _ in topology.devices), (), ())
        elif solo_durations:
            hosts = hosts.solo()
        return cls(overheads[0], overheads[1], hosts)

    def makespan_tick(self, instance: SchedulingInstance, plan: Plan) -> float:
        """The plan's makespan replayed with the transfers' work on the ranks (ticks of `instance`; fractional,
        since shared ranks run at fractional speeds)."""
        tick_s = instance.tick_s or 1.0
        work = (self.send_s / tick_s, self.recv_s / tick_s)
        return simulate_plan(instance, plan, sharing=self.sharing, rank_transfer_tick=work).makespan_tick
