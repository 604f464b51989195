"""The machine's state at run time against its profile: how much slower it is now, and the plan re-priced so.

No torch here (the probe's measurements are `planner.execute.machine_probe`; `runner` calls both).  A profile
written by `plan-calibrate` (it has a `provenance` block from that tool) names in `provenance.measured` every
figure it measured, with its size (`matmul_float 256x256x256`, `conv_float 64x56x56->64 k3`,
`p2p_oneway 1024`); `probe_sizes` reads those back, so that the run's probe measures the same sizes and its
figures are the profile's own kinds of figure:

* `float_flops`     median over the profile's matmul and conv sizes of achieved FLOP/s (the profile's
                    `peak_flops.float`);
* `launch_overhead` median seconds of one one-element op through `run_node` (the profile's `launch_overhead`);
* `link_latency`, `link_bandwidth`  intercept and 1 / slope of the robust line of the ping-pong's one-way time
                    over the profile's message sizes (the profile's `links.intra_host` latency and bandwidth).

`slowdowns` turns a probe's figures into "x times slower than at calibration" per kind (`compute`, `overhead`,
`latency`, `bandwidth`: > 1 is slower, for rates too); `combined` is the geometric mean of the probe before and
the probe after the timed repetitions (the run lies between them).  `scale_topology` makes the profile's topology
that much slower: every device's FLOP/s and memory bandwidth divided by `compute` (the probe measures one compute
rate; the CPU share a rank gets slows both alike), its per-op seconds (launch overhead + the runtime probe's
`op_overhead`) times `overhead`, every link's latency times `latency` but for its share that is the ranks' own
work per transfer (the runtime probe's `send_overhead` + `recv_overhead`, which the topology folds into the
latency), which is CPU work like an op's overhead and is scaled by `overhead`, and its bandwidth divided by
`bandwidth`.  Scaling the whole folded latency by the ping-pong's ratio would scale the ranks' own send and
receive work, most of a transfer's cost, by a transport delay it does not suffer.
`resimulated_makespan_s` re-prices the plan's own schedule (same
devices, same order per device; not a new plan) on such a topology with the simulator (`simulate_plan`), with the
plan's tick: with all slowdowns 1 it is the plan's own makespan (`resimulated_unscaled_makespan_s`; not for a plan
made with `plan-solve --measured`, whose times are not the profile's).  `stretch` = scaled / unscaled
re-simulation: how much the machine's state lengthens this schedule; `measured_vs_resimulated` = measured /
(the plan's makespan x stretch), which is measured / the scaled re-simulation for a plan priced by the profile,
and for a plan priced by measured op times applies the same stretch to its own makespan (the note says so).
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from planner.cost.model import build_instance
from planner.ir.graph import OpGraph
from planner.ir.hardware import Profile
from planner.ir.topology import Device, Link, Topology
from planner.ir.units import format_time
from planner.schedule.plan import Plan
from planner.schedule.simulate import simulate_plan

__all__ = ["FIGURES", "SLOWDOWNS", "ProbeSizes", "ProfileState", "profile_state", "probe_sizes", "slowdowns",
           "combined", "scale_topology", "resimulated_makespan_s", "rank_median", "state_report",
           "summary_lines"]

FIGURES = ("float_flops", "launch_overhead", "link_latency", "link_bandwidth")
# slowdown kind -> (figure, True when the figure is a rate: slower = smaller)
SLOWDOWNS: dict[str, tuple[str, bool]] = {"compute": ("float_flops", True), "overhead": ("launch_overhead", False),
                                          "latency": ("link_latency", False), "bandwidth": ("link_bandwidth", True)}


@dataclass(frozen=True)
class ProbeSizes:
    """What the run-time probe measures: the profile's matmul (m, k, n), conv (cin, hw, cout, kernel) and p2p
    message sizes, each timed once over a block of calls of `block_s`."""

    matmul: tuple[tuple[int, int, int], ...]
    conv: tuple[tuple[int, int, int, int], ...]
    message_bytes: tuple[int, ...]
    # seconds of calls per timed block: long enough to average a timer's resolution, short enough to repeat 5x
    block_s: float = 0.02


@dataclass(frozen=True)
class ProfileState:
    """A plan's profile as the probe sees it: calibrated by plan-calibrate or not (`note` says why not), its
    figures (`FIGURES`, None where it has none) and the sizes to probe."""

    calibrated: bool
    note: str
    figures: dict[str, float | None]
    sizes: ProbeSizes | None = None
    # the runtime probe's per-transfer seconds (the link's send_overhead + recv_overhead), inside the topology's
    # link latency: the ranks' own work, scaled with the per-op overhead, not with the ping-pong's latency
    link_overhead_s: float = 0.0


_MATMUL = re.compile(r"^matmul_float (\d+)x(\d+)x(\d+)$")
_CONV = re.compile(r"^conv_float (\d+)x(\d+)x\d+->(\d+) k(\d+)$")
_P2P = re.compile(r"^p2p_oneway (\d+)$")


def probe_sizes(measured: Mapping[str, str], block_s: float | None = None) -> ProbeSizes | None:
    """The sizes named by a profile's `provenance.measured` keys (module docstring); None when it names no matrix
    product or convolution."""
    matmul = tuple(tuple(int(g) for g in m.groups()) for m in map(_MATMUL.match, measured) if m)
    conv = tuple(tuple(int(g) for g in m.groups()) for m in map(_CONV.match, measured) if m)
    messages = tuple(sorted(int(m.group(1)) for m in map(_P2P.match, measured) if m))
    if not matmul and not conv:
        return None
    sizes = ProbeSizes(matmul, conv, messages)  # type: ignore[arg-type]  # regex groups: 3 and 4 ints
    return sizes if block_s is None else dataclasses.replace(sizes, block_s=block_s)


def profile_state(hardware_path: str | Path | None) -> ProfileState:
    """Read the plan's profile (module docstring); a missing or unreadable file, or a profile without
    plan-calibrate's provenance, is not calibrated."""
    none = dict.fromkeys(FIGURES)
    if not hardware_path or not Path(hardware_path).is_file():
        return ProfileState(False, f"the plan's hardware profile {hardware_path or '(none recorded)'} is not a "
                                   "file here: nothing to compare the machine with", none)
    try:
        profile = Profile.model_validate(yaml.safe_load(Path(hardware_path).read_text()))
    except (OSError, ValueError, yaml.YAMLError) as exc:
        return ProfileState(False, f"the plan's hardware profile {hardware_path} does not read: {exc}", none)
    group = profile.hosts[0].devices[0]
    link = profile.links.intra_host or profile.hosts[0].intra_host
    figures: dict[str, float | None] = {
        "float_flops": group.peak_flops.float, "launch_overhead": group.launch_overhead,
        "link_latency": link.latency if link else None, "link_bandwidth": link.bandwidth if link else None}
    prov = profile.provenance
    if prov is None or not prov.tool.startswith("plan-calibrate"):
        return ProfileState(False, f"the profile {Path(hardware_path).name} is nominal (not measured by "
                                   "plan-calibrate): its figures are not this machine's, so the run is not compared "
                                   "with them", figures)
    if prov.tool.endswith("--device cuda"):
        return ProfileState(False, "the profile was measured on GPUs (plan-calibrate --device cuda); the run-time "
                                   "probe measures CPUs only", figures)
    sizes = probe_sizes(prov.measured)
    if sizes is None:
        return ProfileState(False, "the profile's provenance names no matrix product or convolution it measured",
                            figures)
    overhead_s = sum(x or 0.0 for x in (link.send_overhead, link.recv_overhead)) if link else 0.0
    return ProfileState(True, f"calibrated by {prov.tool} on {prov.host}, {prov.date}", figures, sizes, overhead_s)


def slowdowns(profile: Mapping[str, float | None], probe: Mapping[str, float | None]) -> dict[str, float | None]:
    """Per kind of `SLOWDOWNS`: how many times slower the probe found the machine than the profile says (None
    where either figure is missing or not positive)."""
    out: dict[str, float | None] = {}
    for kind, (figure, is_rate) in SLOWDOWNS.items():
        then, now = profile.get(figure), probe.get(figure)
        ok = then is not None and now is not None and then > 0 and now > 0 and math.isfinite(then * now)
        out[kind] = ((then / now) if is_rate else (now / then)) if ok else None  # type: ignore[operator]
    return out


def combined(before: Mapping[str, float | None], after: Mapping[str, float | None]) -> dict[str, float | None]:
    """Per kind, the geometric mean of the slowdowns before and after the timed repetitions (one where the other
    is missing)."""
    out: dict[str, float | None] = {}
    for kind in SLOWDOWNS:
        values = [v for v in (before.get(kind), after.get(kind)) if v is not None]
        out[kind] = math.exp(sum(map(math.log, values)) / len(values)) if values else None
    return out


def _or_one(x: float | None) -> float:
    return 1.0 if x is None else x


def scale_topology(topology: Topology, slowdown: Mapping[str, float | None], link_overhead_s: float = 0.0
                   ) -> Topology:
    """The topology `slowdown` times slower (module docstring); a missing kind is left as it is.  Of each link's
    latency, `link_overhead_s` (at most all of it) is the ranks' own work per transfer (`ProfileState`), scaled by
    `overhead`; the rest, the transport the ping-pong measures, by `latency`."""
    compute, overhead = _or_one(slowdown.get("compute")), _or_one(slowdown.get("overhead"))
    latency, bandwidth = _or_one(slowdown.get("latency")), _or_one(slowdown.get("bandwidth"))

    def device(d: Device) -> Device:
        return dataclasses.replace(d, peak_flops_per_s={k: v / compute for k, v in d.peak_flops_per_s.items()},
                                   memory_bandwidth_bytes_per_s=d.memory_bandwidth_bytes_per_s / compute,
                                   launch_overhead_s=d.launch_overhead_s * overhead)

    scaled: dict[int, Link] = {}  # one scaled copy per link object (a topology shares them across pairs)

    def link(x: Link) -> Link:
        if id(x) not in scaled:
            own_s = min(link_overhead_s, x.latency_s)
            scaled[id(x)] = dataclasses.replace(x, latency_s=(x.latency_s - own_s) * latency + own_s * overhead,
                                                bandwidth_bytes_per_s=x.bandwidth_bytes_per_s / bandwidth)
        return scaled[id(x)]

    return dataclasses.replace(topology, devices=tuple(map(device, topology.devices)),
                               links=tuple(tuple(map(link, row)) for row in topology.links))


def resimulated_makespan_s(plan: Plan, graph: OpGraph, topology: Topology) -> float | None:
    """The plan's schedule re-priced on `topology` (module docstring), in seconds; None for a plan the replay
    cannot price here: no seconds, or tasks that are clusters of ops rather than the graph's ops."""
    if plan.time_unit != "s" or plan.tick_s is None or plan.task_ops \
            or any(p.task not in graph.index for p in plan.placements):
        return None
    if topology.num_devices != len(plan.device_names):
        return None
    instance = build_instance(graph, topology, tick_s=plan.tick_s)
    return simulate_plan(instance, plan).makespan_tick * plan.tick_s


def state_report(state: ProfileState, before: Mapping[str, float | None], after: Mapping[str, float | None],
                 plan: Plan, graph: OpGraph, topology: Topology | None, measured_makespan_s: float
                 ) -> dict[str, Any]:
    """run.json's `machine_state` (documented in `planner.execute.runner`)."""
    out: dict[str, Any] = {"profile": "calibrated" if state.calibrated else "nominal", "note": state.note,
                           "profile_figures": dict(state.figures)}
    if not state.calibrated:
        return out
    if not before:
        out["note"] += "; the run-time probe did not run (no --report, --no-probe, or not gloo ranks forked here)"
        return out
    sb, sa = slowdowns(state.figures, before), slowdowns(state.figures, after)
    slow = combined(sb, sa)
    scaled = scale_topology(topology, slow, state.link_overhead_s) if topology is not None else None
    resim = resimulated_makespan_s(plan, graph, scaled) if scaled is not None else None
    unscaled = resimulated_makespan_s(plan, graph, topology) if topology is not None else None
    stretch = resim / unscaled if resim is not None and unscaled else None
    planned_s = plan.makespan_tick * (plan.tick_s or 1.0)
    out.update(probe_before=dict(before), probe_after=dict(after), slowdown_before=sb, slowdown_after=sa,
               slowdown=slow, resimulated_makespan_s=resim, resimulated_unscaled_makespan_s=unscaled,
               stretch=stretch,
               measured_vs_resimulated=measured_makespan_s / (planned_s * stretch) if stretch and planned_s else None)
    if unscaled is not None and abs(unscaled - planned_s) > 1e-9 * max(1.0, planned_s):
        out["note"] += ("; the plan's times are not this profile's (plan-solve --measured, or the profile changed "
                        "since): measured_vs_resimulated sets the run against the plan's makespan x stretch")
    return out


def rank_median(figures: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per figure, the median over the ranks that measured it (a probe's figures per rank -> one set)."""
    names = [f for f in FIGURES if any(f in r for r in figures)]
    return {f: statistics.median(r[f] for r in figures if f in r) for f in names}


def summary_lines(state: Mapping[str, Any]) -> list[str]:
    """What plan-run prints about the machine's state (one or two lines)."""
    if state.get("profile") != "calibrated" or "slowdown" not in state:
        return [f"machine state: not compared ({state.get('note', '')})"]

    def text(s: Mapping[str, float | None]) -> str:
        return ", ".join(f"{kind} {v:.2g}x" for kind, v in s.items() if v is not None)

    lines = [f"machine now vs at calibration (x slower; before / after the timed repetitions): "
             f"{text(state['slowdown_before'])} / {text(state['slowdown_after'])}"]
    resim, ratio = state.get("resimulated_makespan_s"), state.get("measured_vs_resimulated")
    if resim is not None and ratio is not None:
        lines.append(f"plan re-simulated on the profile scaled by the probe: {format_time(resim)} ("
                     f"{state['stretch']:.2f}x its schedule on the profile as calibrated); measured / re-simulated "
                     f"{ratio:.2f}")
    return lines
