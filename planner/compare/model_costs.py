"""Pipeline costs of a real model: the op-level instance of an ONNX model cut into contiguous stages.

The model mode of ``plan-compare`` (``--model M.onnx --hw H.yaml --stages p --microbatches m``).  Every schedule
runs the same model on the same p devices, cut as the schedule needs (as `planner.pipeline.registry` does on unit
costs):

* **p stages** (GPipe, 1F1B, ZB-H1, ZB-H2, and DualPipe's two copies): `formulations.stages.solve_stages` on the
  prepared op-level instance, stage s on device s (``StagePlacement.FIXED``: it minimises the bottleneck stage
  time, communication included).
* **2p chunks** (interleaved 1F1B, ZB-V, DualPipeV, the planned V): every stage of that split is cut in two at
  the position (in the stage's topological order) that best balances the two halves' compute; chunk 2s and 2s+1
  are the halves of stage s.  Interleaved 1F1B puts chunk j on device j mod p, the V shapes on devices
  0, 1, ..., p-1, p-1, ..., 0.

Per stage (or chunk) c on its device d:

* forward ticks F_c = sum of its ops' compute ticks on d (`duration_tick`);
* backward per operator (`training`, a `planner.cost.training_costs.TrainingCosts`; what plan-compare uses):
  B_c and W_c = sums of its ops' input-gradient and weight-gradient ticks on d (matrix products one product per
  operand needing a gradient, ops without parameters W = 0, softmax / normalisations / attention by their own
  rules: the table in that module); activation memory of one micro-batch = the bytes its ops stash for their
  backward (each tensor once), allocated by F, the part only B reads freed when B ends
  (`StageCost.activation_freed_by_b_bytes`), the rest when W ends.  Without `training` (an instance alone, or
  ``plan-compare --uniform-backward``) the old stage rule: B_c = W_c = F_c (`unroll.StageCost.from_forward`) and
  activation = the bytes of all its ops' outputs (`activation_bytes`, the sum `StagePlan.activation_bytes`
  reports), freed by W;
* parameters = its ops' `param_bytes`, per copy (DualPipe holds two);
* communication: the hop from c to the next stage of its chain carries every tensor of an edge crossing that
  boundary (an edge that skips stages is forwarded stage by stage, as in `planner.heuristics.stage_dp`), each at the
  instance's delay over the link between the two devices (`SchedulingInstance.comm`: latency + bytes /
  bandwidth), summed; 0 when both sit on one device.  The gradient going back over the same hop costs the same.
  By default (`comm_stream`) each such hop is a send task on the sender's communication stream
  (`planner.pipeline.unroll` docstring): it overlaps compute, and a device's sends run one at a time.
* MoE all-to-all (`StageCost.a2a_tick`, `planner.pipeline.unroll` docstring; on unless `a2a` is off): the MoE
  layers are found from the graph's structure (`planner.ir.moe_structure`: a top-k router over a softmax or
  sigmoid, expert branches, dispatch and combine ops; never op names), given as `moe`.  A piece holding some of a
  layer's dispatch ops (or, for experts written densely, the first ops of its expert branches) dispatches their
  share of the layer's bytes per micro-batch (`MoELayer.anchor_bytes`).  With expert-parallel degree N
  (`expert_parallel`, default the p pipeline devices: the experts spread over the devices) a device keeps the
  1/N of the tokens whose experts it holds and sends the other (N-1)/N, so one all-to-all of the layer costs
  latency + bytes x (N-1)/N / bandwidth of the profile's slowest link between two devices (the rule from before
  the structural finding: an all-to-all waits for its slowest pair), rounded up; N = 1 costs nothing.  The
  piece's `a2a_tick` is the sum over its MoE layers.  Dispatch and combine, forward and backward, each cost that
  (the combine returns as many bytes as were dispatched).  `model_costs` leaves `moe` unset (it sees only the
  instance); the caller that has the graph sets it (``dataclasses.replace(costs, moe=find_moe_layers(graph))``,
  as plan-compare does).  Without `moe`, or with no MoE layer found, there is no all-to-all.
* overlapped pairs (DualPipe's F&B): `fb_overlap` X, a pair lasting round(X * (F + B [+ W])) of its stages.

Units of the comparison: time in microseconds (`Scales.ticks_per_unit` = ticks per microsecond), memory in MiB.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from formulations.stages import solve_stages
from planner.cost.instance import SchedulingInstance
from planner.cost.training_costs import TrainingCosts
from planner.errors import InputError
from planner.heuristics.stage_dp import StagePlan
from planner.ir.moe_structure import MoEStructure
from planner.pipeline.unroll import StageCost, TrainingPipeline, fixed_placement, v_placement

MIB = 2**20


@dataclass(frozen=True, eq=False)
class ModelCosts:
    """An op-level instance cut into p stages (`stage_positions[s]`: positions in the topological order) and
    2p chunks (`chunk_positions`), with the scales that turn ticks and bytes into the reported units."""

    instance: SchedulingInstance
    num_devices: int
    stage_positions: tuple[tuple[int, ...], ...]
    chunk_positions: tuple[tuple[int, ...], ...]
    ticks_per_unit: int
    bytes_per_unit: int = MIB
    time_unit: str = "us"
    memory_unit: str = "MiB"
    stage_plan: StagePlan | None = None  # the StagePlan of the p-stage cut
    comm_stream: bool = True  # hops as send tasks on per-device communication streams (`unroll` docstring)
    a2a: bool = True  # MoE all-to-all tasks on the communication streams
    moe: MoEStructure | None = None  # the MoE layers found in the graph (None: no all-to-all)
    expert_parallel: int | None = None  # expert-parallel degree N (None: the p pipeline devices)
    fb_overlap: float = 1.0  # a pair lasts this fraction of its halves (1: pairs run as their halves)
    training: TrainingCosts | None = None  # per-op F/B/W and stash; None: the stage rule B = W = F

    def cut(self, split: int) -> tuple[tuple[int, ...], ...]:
        return self.stage_positions if split == 1 else self.chunk_positions

    def stage_cost(self, tasks: Sequence[int], device: int) -> StageCost:
        """Costs of the piece made of `tasks` on `device` (module docstring: per-op backward when `training`)."""
        inst = self.instance
        f = sum(int(inst.duration_tick[t, device]) for t in tasks)
        params = sum(int(inst.param_bytes[t]) for t in tasks)
        a2a = self.a2a_tick(tasks) if self.a2a else 0
        if self.training is None:
            return StageCost.from_forward(f, activation_bytes=sum(int(inst.activation_bytes[t]) for t in tasks),
                                          param_bytes=params, a2a_tick=a2a)
        _, b, w = self.training.stage_ticks(tasks, device)
        stash, freed_by_b = self.training.stage_activation_bytes(tasks)
        # A piece's B and W are tasks of their own: at least one tick each, as every op's forward is.
        return StageCost(f, max(b, 1), max(w, 1), activation_bytes=stash, param_bytes=params,
                         activation_freed_by_b_bytes=freed_by_b, a2a_tick=a2a)

    @property
    def expert_parallel_degree(self) -> int:
        """N: the devices the experts are spread over (`expert_parallel`, default the p pipeline devices)."""
        return int(self.expert_parallel) if self.expert_parallel is not None else self.num_devices

    @cached_property
    def _anchor_bytes(self) -> Mapping[str, tuple[int, int]]:
        """Op name -> (MoE layer index, the bytes it dispatches per micro-batch)."""
        layers = self.moe.layers if self.moe is not None else ()
        return {name: (k, b) for k, layer in enumerate(layers) for name, b in layer.anchor_bytes.items()}

    def a2a_tick(self, tasks: Sequence[int]) -> int:
        """One all-to-all of the MoE layers among `tasks` (module docstring)."""
        inst = self.instance
        n = self.expert_parallel_degree
        anchors = self._anchor_bytes
        per_layer: dict[int, int] = {}
        for t in tasks:
            hit = anchors.get(inst.task_names[t])
            if hit is not None:
                per_layer[hit[0]] = per_layer.get(hit[0], 0) + hit[1]
        if not per_layer or inst.num_link_classes < 2 or n <= 1:
            return 0
        out = 0
        for nbytes in per_layer.values():
            sent = nbytes * (n - 1) / n  # the tokens whose experts sit on the other N-1 devices
            out += max(math.ceil(float(inst.link_latency_tick[c]) + sent / float(inst.link_bytes_per_tick[c])
                                 - 1e-9) for c in range(1, inst.num_link_classes))
        return int(out)

    def hop_ticks(self, split: int, devices: Sequence[int]) -> tuple[int, ...]:
        """Per piece c of the cut, the delay of the hop c -> c+1 when piece c sits on devices[c] (0 for the
        last piece, and between two pieces on one device)."""
        cut = self.cut(split)
        inst = self.instance
        order = inst.topological_order
        piece = {}
        for c, positions in enumerate(cut):
            for i in positions:
                piece[order[i]] = c
        out = [0] * len(cut)
        for e, (u, v) in enumerate(inst.edges):
            for c in range(piece[u], piece[v]):
                if devices[c] != devices[c + 1]:
                    out[c] += inst.comm(e, devices[c], devices[c + 1])
        return tuple(out)

    def layout(self, name: str, p: int, m: int) -> PipelineLayout:
        """Where the pipeline schedule `name` puts the model (see `registry.pipeline_for` for the unit-cost twin):
        its pieces (positions), their devices, chains, micro-batches per chain and hop delays."""
        if p != self.num_devices:
            raise InputError(f"the model was cut for {self.num_devices} devices, not {p}")
        chains: tuple[tuple[int, ...], ...]  # one chain of stages, two for DualPipe
        if name in ("gpipe", "1f1b", "zb-h1", "zb-h2"):
            split, std, chains, mb = 1, fixed_placement(p, p), (tuple(range(p)),), m
        elif name == "interleaved-1f1b":
            split, std, chains, mb = 2, fixed_placement(2 * p, p), (tuple(range(2 * p)),), m
        elif name in ("zb-v", "dualpipev", "opplan-v"):
            split, std, chains, mb = 2, v_placement(p), (tuple(range(2 * p)),), m
        elif name == "dualpipe":
            split, std, chains, mb = 1, v_placement(p), (tuple(range(p)), tuple(range(p, 2 * p))), max(m // 2, 1)
        else:
            raise InputError(f"unknown schedule {name!r}")
        cut = self.cut(split)
        if name == "dualpipe":  # stage p + j is the second copy of chunk j, on device p-1-j
            pieces = [cut[s] for s in range(p)] + [cut[j] for j in range(p)]
            down = self.hop_ticks(1, list(range(p)))
            up = self.hop_ticks(1, [p - 1 - j for j in range(p)])
            hops = down + up
        else:
            pieces = list(cut)
            hops = self.hop_ticks(split, std)
        return PipelineLayout(tuple(pieces), tuple(std), chains, mb, tuple(hops))

    def pipeline(self, name: str, p: int, m: int) -> TrainingPipeline:
        """The pipeline schedule `name` runs on (`layout`: one stage per piece)."""
        lay = self.layout(name, p, m)
        order = self.instance.topological_order
        stages = tuple(self.stage_cost([order[i] for i in pos], lay.stage_to_device[s])
                       for s, pos in enumerate(lay.pieces))
        return TrainingPipeline(stages, lay.microbatches, p, lay.stage_to_device, lay.chains, 0, name, None,
                                lay.hops, self.comm_stream,
                                fb_overlap=self.fb_overlap if self.fb_overlap < 1 else None)


@dataclass(frozen=True)
class PipelineLayout:
    """A schedule's view of the cut (`ModelCosts.layout`): stage s runs the ops at `pieces[s]` (positions in the
    topological order) on device `stage_to_device[s]`; `hops[s]` is the delay of its hop to the next stage of its
    chain."""

    pieces: tuple[tuple[int, ...], ...]
    stage_to_device: tuple[int, ...]
    chains: tuple[tuple[int, ...], ...]
    microbatches: int
    hops: tuple[int, ...]


def _halve(durations: Sequence[int]) -> int:
    """The cut k (1 <= k < n) of a sequence into [0, k) and [k, n) with the smallest larger half."""
    total = sum(durations)
    best_k, best = 1, None
    acc = 0
    for k in range(1, len(durations)):
        acc += durations[k - 1]
        worst = max(acc, total - acc)
        if best is None or worst < best:
            best_k, best = k, worst
    return best_k


def model_costs(instance: SchedulingInstance, num_devices: int, *, time_limit_s: float = 20.0,
                backend: str = "cpsat", comm_stream: bool = True,
                training: TrainingCosts | None = None) -> ModelCosts:
    """Cut `instance` into `num_devices` stages with the stage formulation, and each stage in two halves.

    `training`: per-op backward costs of the instance's tasks (`planner.cost.training_costs.training_costs`);
    None keeps the stage rule B = W = F."""
    p = int(num_devices)
    if p < 1 or p > instance.num_devices:
        raise InputError(f"--stages {p} needs 1..{instance.num_devices} devices of the hardware profile")
    n = instance.num_tasks
    if n < 2 * p:
        raise InputError(f"the model has {n} ops, too few for {2 * p} chunks")
    plan = solve_stages(instance, p, time_limit_s=time_limit_s, backend=backend)
    order = instance.topological_order
    pos_of = {instance.task_names[t]: i for i, t in enumerate(order)}
    stages = tuple(tuple(sorted(pos_of[name] for name in tasks)) for tasks in plan.stage_tasks)
    chunks: list[tuple[int, ...]] = []
    for s, pos in enumerate(stages):
        if len(pos) < 2:
            raise InputError(f"stage {s} has one op; it cannot be cut in two chunks", fix="use fewer stages")
        k = _halve([int(instance.duration_tick[order[i], s]) for i in pos])
        chunks += [pos[:k], pos[k:]]
    tick_s = instance.tick_s or 1.0
    ticks_per_us = max(1, round(1e-6 / tick_s)) if instance.tick_s else 1
    return ModelCosts(instance, p, stages, tuple(chunks), ticks_per_us,
                      time_unit="us" if instance.tick_s else instance.time_unit, stage_plan=plan,
                      comm_stream=comm_stream, training=training)
