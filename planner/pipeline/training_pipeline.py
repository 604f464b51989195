"""A training pipeline as data: the costs of each stage (`StageCost`), the stages' chains and placement on devices
(`TrainingPipeline`), the standard placements, and a pipeline of identical stages (`uniform_pipeline`).

What these fields mean for the tasks, their dependencies, memory and communication streams is stated where they
are turned into a `SchedulingInstance`: `planner.pipeline.unroll` (which re-exports every name here).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import InputError
from planner.heuristics.stage_dp import StagePlacement

__all__ = ["A2A_KINDS", "StageCost", "TrainingPipeline", "fixed_placement", "uniform_pipeline", "v_placement"]

# The MoE all-to-all tasks a stage may run around its F and its backward, in the order they are unrolled.
A2A_KINDS = ("DISPATCH_F", "COMBINE_F", "DISPATCH_B", "COMBINE_B")


@dataclass(frozen=True)
class StageCost:
    """Costs of one stage for one micro-batch: ticks of F, B (input grad), W (weight grad), memory in bytes."""

    forward_tick: int
    input_grad_tick: int
    weight_grad_tick: int
    activation_bytes: int = 0
    param_bytes: int = 0
    full_backward_tick: int | None = None  # None: input_grad_tick + weight_grad_tick
    activation_freed_by_b_bytes: int = 0  # part of activation_bytes released when B ends (rest at W)
    a2a_tick: int = 0  # one MoE all-to-all (dispatch or combine) of the stage's MoE layers, one micro-batch
    a2a_kinds: tuple[str, ...] | None = None  # which of A2A_KINDS the stage runs (None: all four)

    def __post_init__(self) -> None:
        for name in ("forward_tick", "input_grad_tick", "weight_grad_tick", "activation_bytes", "param_bytes",
                     "activation_freed_by_b_bytes", "a2a_tick"):
            if int(getattr(self, name)) < 0:
                raise InputError(f"stage cost {name} = {getattr(self, name)} must be >= 0")
        if self.a2a_kinds is not None and not set(self.a2a_kinds) <= set(A2A_KINDS):
            raise InputError(f"stage cost a2a_kinds {self.a2a_kinds} must be among {A2A_KINDS}")
        if self.activation_freed_by_b_bytes > self.activation_bytes:
            raise InputError(f"activation_freed_by_b_bytes ({self.activation_freed_by_b_bytes}) exceeds "
                             f"activation_bytes ({self.activation_bytes})")

    @property
    def a2a_kind_set(self) -> tuple[str, ...]:
        """The all-to-all kinds the stage runs (none when `a2a_tick` is 0)."""
        if int(self.a2a_tick) <= 0:
            return ()
        return A2A_KINDS if self.a2a_kinds is None else tuple(k for k in A2A_KINDS if k in self.a2a_kinds)

    @property
    def bw_tick(self) -> int:
        """Duration of the fused full backward BW."""
        if self.full_backward_tick is not None:
            return int(self.full_backward_tick)
        return int(self.input_grad_tick) + int(self.weight_grad_tick)

    @classmethod
    def from_forward(cls, forward_tick: int, **kw) -> StageCost:
        """The matrix-product rule: B = W = F (so BW = 2F)."""
        return cls(forward_tick, forward_tick, forward_tick, **kw)


@dataclass(frozen=True)
class TrainingPipeline:
    """Stages, their placement and the micro-batches that flow through them (see the module docstring)."""

    stages: tuple[StageCost, ...]
    num_microbatches: int
    num_devices: int
    stage_to_device: tuple[int, ...] | None
    chains: tuple[tuple[int, ...], ...]
    comm_tick: int = 0
    name: str = "pipeline"
    overlap_tick: int | None = None  # duration of an overlapped F&B pair task; None: pairs run as two tasks
    stage_comm_tick: tuple[int, ...] | None = None  # per stage, its hop to the next stage (None: comm_tick)
    comm_stream: bool = False  # cross-device hops as send tasks on the sender's communication stream
    fb_overlap: float | None = None  # X: an overlapped pair lasts X * (its halves); None: `overlap_tick` only
    # stages whose hop to the next stage of their chain is a send task although both stages sit on one device: the
    # turn of a folded pipeline (`planner.pipeline.mirror`), whose one device there stands for two
    turn_sends: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        s = len(self.stages)
        if s == 0 or self.num_microbatches < 1 or self.num_devices < 1:
            raise InputError(f"pipeline {self.name!r}: needs at least one stage, micro-batch and device")
        seen = sorted(x for c in self.chains for x in c)
        if seen != list(range(s)):
            raise InputError(f"pipeline {self.name!r}: chains {self.chains} must cover stages 0..{s - 1} once each")
        if self.stage_to_device is not None:
            if len(self.stage_to_device) != s or not all(0 <= d < self.num_devices for d in self.stage_to_device):
                raise InputError(f"pipeline {self.name!r}: stage_to_device {self.stage_to_device} does not map "
                                 f"{s} stages to devices 0..{self.num_devices - 1}")
        if self.comm_tick < 0:
            raise InputError(f"pipeline {self.name!r}: comm_tick must be >= 0")
        if self.stage_comm_tick is not None and (len(self.stage_comm_tick) != s
                                                 or any(c < 0 for c in self.stage_comm_tick)):
            raise InputError(f"pipeline {self.name!r}: stage_comm_tick needs one tick >= 0 per stage")
        if self.fb_overlap is not None and not 0 < self.fb_overlap <= 1:
            raise InputError(f"pipeline {self.name!r}: fb_overlap must be in (0, 1], got {self.fb_overlap}")
        if any(not 0 <= x < s or self.chain_of(x)[-1] == x for x in self.turn_sends):
            raise InputError(f"pipeline {self.name!r}: turn_sends {self.turn_sends} must name stages with a next "
                             f"stage in their chain")

    def pair_tick(self, fwd_stage: int, bwd_stage: int, full: bool) -> int | None:
        """Duration of the overlapped pair F(fwd_stage) & B(bwd_stage) (BW when `full`): with `fb_overlap` X,
        round(X * (F + B [+ W if full])); else `overlap_tick` for a full pair (None for an input-gradient-only
        pair); None when pairs have no duration of their own (they run as their two halves)."""
        f, b = self.stages[fwd_stage], self.stages[bwd_stage]
        if self.fb_overlap is not None:
            back = b.bw_tick if full else int(b.input_grad_tick)
            return round(self.fb_overlap * (int(f.forward_tick) + back))
        if full and self.overlap_tick is not None:
            return int(self.overlap_tick)
        return None

    @property
    def pairs_gain(self) -> bool:
        """Whether an overlapped pair is shorter than its halves (`fb_overlap` < 1): only then does the
        formulation consider pairing."""
        return self.fb_overlap is not None and self.fb_overlap < 1

    @property
    def has_a2a(self) -> bool:
        """Whether some stage has MoE all-to-all tasks (`StageCost.a2a_tick` > 0, placement given)."""
        return self.stage_to_device is not None and any(int(c.a2a_tick) > 0 for c in self.stages)

    @property
    def streams_on(self) -> bool:
        """Whether the instance has communication streams (for sends with `comm_stream`, or for all-to-alls)."""
        return self.comm_stream or self.has_a2a

    @property
    def num_streams(self) -> int:
        """Devices of the unrolled instance: p compute streams, then (with `streams_on`) p communication
        streams (stream p + d is device d's)."""
        return 2 * self.num_devices if self.streams_on else self.num_devices

    def sends_on_stream(self, stage: int, nxt: int) -> bool:
        """Whether the hop stage -> nxt is a send task (comm stream on, different devices or a turn send,
        nonzero delay)."""
        std = self.stage_to_device
        return (self.comm_stream and std is not None and (std[stage] != std[nxt] or stage in self.turn_sends)
                and self.hop_tick(stage) > 0)

    def hop_tick(self, stage: int) -> int:
        """Delay of the transfer from `stage` to the next stage of its chain (activation), and of the gradient
        coming back over the same hop: `stage_comm_tick[stage]`, else `comm_tick`."""
        if self.stage_comm_tick is not None:
            return int(self.stage_comm_tick[stage])
        return int(self.comm_tick)

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    def device_stages(self, device: int) -> tuple[int, ...]:
        return tuple(s for s, d in enumerate(self.stage_to_device or ()) if d == device)

    def chain_of(self, stage: int) -> tuple[int, ...]:
        return next(c for c in self.chains if stage in c)


# ------------------------------------------------------------------------------------------- placements
def fixed_placement(num_stages: int, num_devices: int) -> tuple[int, ...]:
    """Stage s on device s mod p (one stage per device, or Megatron's looping placement for interleaving)."""
    return tuple(s % num_devices for s in range(num_stages))


def v_placement(num_devices: int) -> tuple[int, ...]:
    """2p stages in a V: device i holds stages i and 2p-1-i.  One layout for ZB-V and DualPipeV (one chain down
    and back up) and for DualPipe (stage s < p on device s going down, its copy p+j on device p-1-j going up):
    the pipelines differ in their chains, not in where the stages sit."""
    p = num_devices
    return tuple(s if s < p else 2 * p - 1 - s for s in range(2 * p))


def uniform_pipeline(
    num_stages: int,
    num_microbatches: int,
    *,
    forward_tick: int = 1,
    input_grad_tick: int = 1,
    weight_grad_tick: int = 1,
    activation_bytes: int = 1,
    param_bytes: int = 0,
    placement: StagePlacement = StagePlacement.FIXED,
    num_devices: int | None = None,
    comm_tick: int = 0,
    overlap_tick: int | None = None,
    name: str | None = None,
    fb_overlap: float | None = None,
) -> TrainingPipeline:
    """Identical stages.  `placement`: FIXED (stage s on device s mod p; p = num_stages unless given),
    V (num_stages = 2p, V-shape), DUALPIPE (num_stages = 2p stage copies, two chains), FREE (no placement).
    A plain string naming one of them ('fixed', 'v', ...) is converted."""
    try:
        placement = StagePlacement(placement)
    except ValueError:
        raise InputError(f"unknown placement {placement!r}", fix="use fixed, v, dualpipe or free") from None
    cost = StageCost(forward_tick, input_grad_tick, weight_grad_tick, activation_bytes, param_bytes)
    stages = tuple(cost for _ in range(num_stages))
    chains: tuple[tuple[int, ...], ...] = (tuple(range(num_stages)),)
    if placement in (StagePlacement.V, StagePlacement.DUALPIPE):
        if num_stages % 2:
            raise InputError(f"placement {placement.value!r} needs an even number of stages, got {num_stages}")
        p = num_stages // 2
        std: tuple[int, ...] | None = v_placement(p)
        if placement is StagePlacement.DUALPIPE:
            chains = (tuple(range(p)), tuple(range(p, 2 * p)))
        num_devices = p
    elif placement is StagePlacement.FIXED:
        num_devices = num_devices or num_stages
        std = fixed_placement(num_stages, num_devices)
    else:
        num_devices = num_devices or num_stages
        std = None
    return TrainingPipeline(stages, num_microbatches, num_devices, std, chains, comm_tick,
                            name or f"{placement}-{num_stages}x{num_microbatches}", overlap_tick,
                            fb_overlap=fb_overlap)
