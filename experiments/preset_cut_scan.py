"""Can another stage cut of the DeepSeek-V3-like preset reach half of DualPipe's bubble?

The preset's cut (`planner.compare.presets`, "Cut": the contiguous cut of the layers' attention and FFN units that
minimises the largest piece's F + B + W) is what DualPipe and the planned row run on, and the memory bound
(`formulations.pipeline_memory_bound`) proves the half-bubble makespan out of reach at p = 8 on that cut only.  This
scan asks the same question of the cuts next to it: every cut that moves one boundary between two pieces by 1 ..
`radius` units (an attention or an FFN half-layer), the other boundaries kept, no piece empty.

Per cut, on DualPipe's placement (the one the planned row takes at p = 8; its p stages, `PresetCosts.stage_units`),
under the cap of the question (DualPipe's peak memory on the preset's own cut) and against its target (the largest
makespan at which the cut's total bubble is at most half DualPipe's on the preset's own cut; each cut's own work,
which its rounding moves by a few ticks):

* ``list``: the list schedule's makespan (`planner.pipeline.stream_greedy.best_stream_list`): a schedule of that cut
  within the cap, so the question is settled ("reached") when it is at most the target;
* ``answer``: ``device bound above`` when the device bound of the cut (per device, earliest head + work + shortest
  tail) is above the target already; else ``dK infeasible`` when device K's relaxation (with the cap) is proven to
  have no schedule ending by the target: then no schedule of that cut does; else ``open`` with every device's
  answer.  Single devices only, in `memory_bound`'s order, `probe_s` each, stopping at the first proof
  (`memory_bound(search=False)`).

`placement` "v": the same for the planned V (`opplan-v`: 2p chunks, `PresetCosts.chunk_units`, its cut moved
instead).  The two placements the planned row chooses between; not the others (a plain chain of p stages).  Cuts
further away than `radius` are not asked, so "every cut here is out of reach" is a statement about this
neighbourhood, not about every cut.

Run: ``python -m experiments.preset_cut_scan --stages 8 --microbatches 20`` (writes
bench/results/preset_cut_scan.csv; about 5 minutes at p = 8 on the 2-vCPU machine).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from formulations.pipeline_memory_bound import MemoryBoundPolicy, memory_bound
from planner.compare.memory_bound_note import half_bubble_tick_of_work
from planner.compare.pipelines import scales_of, simulate_baseline
from planner.compare.presets import PresetCosts, preset_costs
from planner.errors import OpplanError
from planner.ir.hardware import load_topology
from planner.pipeline.stream_greedy import best_stream_list
from planner.pipeline.unroll import TrainingPipeline

HW = "h100-2x8-ib.yaml"
OUT = Path("bench/results/preset_cut_scan.csv")
PROBE_S = 60.0  # one device's relaxation at the target (the preset's own cut: device 3 is proven in 30-63 s)


@dataclass(frozen=True)
class CutAnswer:
    """One cut's row: its layers per piece, the list schedule's makespan, the device bound, the target and the answer
    (module docstring), times in the preset's unit (ms)."""

    layers: str
    list_makespan: float | None
    device_bound: float
    target: float
    answer: str
    seconds: float


def neighbour_cuts(cut: Sequence[Sequence[int]], radius: int) -> Iterator[tuple[tuple[int, ...], ...]]:
    """Every cut of the same units that moves one boundary of `cut` by 1 .. `radius` units either way (the other
    boundaries kept), with no empty piece; boundary by boundary, nearest first, earlier before later."""
    edges = [cut[0][0]] + [piece[-1] + 1 for piece in cut]
    for i in range(1, len(edges) - 1):
        for k in range(1, radius + 1):
            for step in (-k, k):
                moved = list(edges)
                moved[i] += step
                if moved[i - 1] < moved[i] < moved[i + 1]:
                    yield tuple(tuple(range(moved[j], moved[j + 1])) for j in range(len(cut)))


def work_tick(pipe: TrainingPipeline) -> int:
    """Compute ticks of one step: every stage's F + B + W for every micro-batch (the cut's own rounding: each piece's
    passes are rounded up once, so two cuts of the same units differ by a few ticks)."""
    return pipe.num_microbatches * sum(s.forward_tick + s.input_grad_tick + s.weight_grad_tick for s in pipe.stages)


def target_tick(pipe: TrainingPipeline, dualpipe_bubble_tick: int) -> int:
    """The largest makespan at which a schedule of `pipe` has at most `dualpipe_bubble_tick` / 2 of bubble, with
    `pipe`'s own work."""
    return half_bubble_tick_of_work(work_tick(pipe), dualpipe_bubble_tick, pipe.num_devices)


PLACEMENTS = {"dualpipe": ("dualpipe", "stage_units"), "v": ("opplan-v", "chunk_units")}  # pipeline name, cut


def ask_cut(costs: PresetCosts, cut: tuple[tuple[int, ...], ...], p: int, m: int, cap_bytes: int,
            dualpipe_bubble_tick: int, probe_s: float = PROBE_S, placement: str = "dualpipe") -> CutAnswer:
    """The row of `cut` (module docstring) on `placement` (a key of `PLACEMENTS`)."""
    began = time.monotonic()
    name, field = PLACEMENTS[placement]
    at = dataclasses.replace(costs, **{field: cut})
    pipe = at.pipeline(name, p, m)
    target = target_tick(pipe, dualpipe_bubble_tick)
    listed = best_stream_list(pipe, [cap_bytes] * p)
    upper = listed[1] if listed is not None else 2 ** 62
    # a target at or above `upper` is not asked (a schedule ends by then): the result is the device bound alone
    found = memory_bound(pipe, cap_bytes, upper_tick=upper, time_limit_s=p * probe_s, first_ticks=[target],
                         policy=MemoryBoundPolicy(first_probe_s=probe_s), pairs=False, search=False)
    if upper <= target:
        answer = "reached by the list schedule"
    elif found.device_bound_tick > target:
        answer = "device bound above"
    elif found.bound_tick > target:
        answer = f"d{found.device} infeasible"
    else:
        answer = "open (" + ", ".join(f"{q.label} {q.status}" for q in found.probes) + ")"
    unit = costs.ticks_per_unit
    return CutAnswer(at.layers_per_piece(cut), listed[1] / unit if listed is not None else None,
                     found.device_bound_tick / unit, target / unit, answer, time.monotonic() - began)


def scan(p: int, m: int, radius: int = 1, probe_s: float = PROBE_S, num_layers: int | None = None,
         placement: str = "dualpipe") -> tuple[PresetCosts, list[CutAnswer]]:
    """(the preset's costs, the rows): the preset's own cut of `placement` first, then `neighbour_cuts`."""
    costs = preset_costs("deepseek-v3", load_topology(HW), p, num_layers=num_layers)
    dualpipe = simulate_baseline("dualpipe", p, m, costs, scales_of(costs))
    assert dualpipe.figures is not None
    cap = dualpipe.figures.max_peak_memory_bytes
    rows = []
    own = getattr(costs, PLACEMENTS[placement][1])
    for cut in (tuple(own), *neighbour_cuts(own, radius)):
        r = ask_cut(costs, cut, p, m, cap, dualpipe.figures.bubble_tick, probe_s, placement)
        rows.append(r)
        listed = f"{r.list_makespan:.1f}" if r.list_makespan is not None else "none"
        print(f"{r.layers:28s} list {listed:>8s}  device bound {r.device_bound:8.1f}  target {r.target:.2f}  "
              f"{r.answer}  ({r.seconds:.0f} s)", flush=True)
    return costs, rows


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stages", type=int, default=8)
    ap.add_argument("--microbatches", type=int, default=20)
    ap.add_argument("--radius", type=int, default=1, help="units a boundary moves, at most")
    ap.add_argument("--probe-s", type=float, default=PROBE_S, help="seconds per device relaxation")
    ap.add_argument("--layers", type=int, default=None, help="layers of the preset (default: the published 61)")
    ap.add_argument("--placement", choices=sorted(PLACEMENTS), default="dualpipe",
                    help="dualpipe: its p stages' cut; v: the planned V's 2p chunks' cut")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    for flag, value, least in (("--stages", args.stages, 2), ("--microbatches", args.microbatches, 2),
                               ("--radius", args.radius, 1)):
        if value < least:
            raise SystemExit(f"error: {flag} must be >= {least}, got {value}")
    if args.probe_s <= 0:
        raise SystemExit(f"error: --probe-s must be > 0, got {args.probe_s}")
    try:
        costs, rows = scan(args.stages, args.microbatches, args.radius, args.probe_s, args.layers, args.placement)
    except OpplanError as exc:  # a preset or pipeline size it cannot price: one line, no traceback
        raise SystemExit(f"error: {exc}") from None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["layers_per_piece", f"list_makespan_{costs.time_unit}", f"device_bound_{costs.time_unit}",
                    f"target_{costs.time_unit}", "answer", "seconds"])
        for r in rows:
            w.writerow([r.layers, r.list_makespan, r.device_bound, r.target, r.answer, round(r.seconds, 1)])
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
