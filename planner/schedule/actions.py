"""Pipeline actions: the small immutable steps a device executes, and their compact string form.

Kinds (ours; `F`, `B`, `W` are the words of docs/architecture.md):

======  =====================================  ==============  =================
ours    meaning                                PyTorch letter  example (ours)
======  =====================================  ==============  =================
F       forward                                F               ``3F4``
B       backward for the input gradient        I               ``3B4``
W       backward for the weight gradient       W               ``3W4``
BW      full backward (B and W fused)          B               ``3BW4``
F&B     overlapped forward + backward pair     OVERLAP_F_B     ``3F4&5B2``, ``0F6&7BW1``
SEND_F  send stage's forward output            SEND_F          ``3SEND_F4``
RECV_F  receive stage's forward input          RECV_F          ``3RECV_F4``
SEND_B  send stage's input gradient            SEND_B          ``3SEND_B4``
RECV_B  receive stage's output gradient        RECV_B          ``3RECV_B4``
======  =====================================  ==============  =================

**Beware the letter B**: our ``B`` is PyTorch's ``I`` (input-gradient backward only), and PyTorch's ``B`` is our
``BW`` (full backward).  Strings in *our* form are `str(action)` / `parse_action`; strings in *PyTorch's* form
(as `torch.distributed.pipelining.schedules._Action` prints and parses them, e.g. ``1I0``, ``2B1``,
``(0F3;1I0)OVERLAP_F_B``) are `to_torch_str` / `from_torch_str`, used only by the CSV import/export
(`torch_csv.py`).

Grammar of our form: ``<stage><KIND><microbatch>`` with non-negative decimal integers, KIND one of
``F B W BW SEND_F RECV_F SEND_B RECV_B``; a pair is ``<forward>&<backward>`` where the forward half has kind F
and the backward half kind B or BW (DualPipe's overlapped F&B: one device runs a forward of one chunk and a
backward of another at the same time).  The forms round-trip exactly: ``str(parse_action(s)) == s`` for every
canonical string (no leading zeros, no spaces).

In a `SchedulingInstance` built from a schedule, task names are these strings (``0F3``); a pair may be one task
named ``3F4&5B2`` or its two halves as separate tasks (see `program.schedule_to_instance_order`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from planner.schedule.errors import ScheduleError


class ActionKind(str, Enum):  # noqa: UP042 - str() of a member must stay "ActionKind.F" for existing callers
    """What an action does; the value is the letter(s) of our string form."""

    F = "F"
    B = "B"
    W = "W"
    BW = "BW"
    OVERLAP = "F&B"  # only `OverlapAction.kind`
    SEND_F = "SEND_F"
    RECV_F = "RECV_F"
    SEND_B = "SEND_B"
    RECV_B = "RECV_B"


COMPUTE_KINDS = frozenset({ActionKind.F, ActionKind.B, ActionKind.W, ActionKind.BW})
COMM_KINDS = frozenset({ActionKind.SEND_F, ActionKind.RECV_F, ActionKind.SEND_B, ActionKind.RECV_B})
BACKWARD_KINDS = frozenset({ActionKind.B, ActionKind.BW})

_OURS_TO_TORCH = {
    ActionKind.F: "F",
    ActionKind.B: "I",
    ActionKind.W: "W",
    ActionKind.BW: "B",
    ActionKind.SEND_F: "SEND_F",
    ActionKind.RECV_F: "RECV_F",
    ActionKind.SEND_B: "SEND_B",
    ActionKind.RECV_B: "RECV_B",
}
_TORCH_TO_OURS = {v: k for k, v in _OURS_TO_TORCH.items()}

_SINGLE = re.compile(r"(0|[1-9]\d*)(SEND_F|RECV_F|SEND_B|RECV_B|BW|F|B|W)(0|[1-9]\d*)")
_TORCH_SINGLE = re.compile(r"(\d+)(SEND_F|RECV_F|SEND_B|RECV_B|F|I|B|W)(\d+)")
_TORCH_OVERLAP = re.compile(r"\(([^();]*);([^();]*)\)OVERLAP_F_B")


@dataclass(frozen=True, slots=True)
class Action:
    """One step of one stage for one micro-batch: `str(Action(3, ActionKind.F, 4)) == '3F4'`."""

    stage: int
    kind: ActionKind
    microbatch: int

    def __post_init__(self) -> None:
        if not isinstance(self.kind, ActionKind) or self.kind is ActionKind.OVERLAP:
            raise ScheduleError(f"action kind {self.kind!r} is not one of {sorted(k.value for k in _OURS_TO_TORCH)}")
        if self.stage < 0 or self.microbatch < 0:
            raise ScheduleError(
                f"action {self.stage}{self.kind.value}{self.microbatch}: stage and micro-batch must be >= 0"
            )

    def __str__(self) -> str:
        return f"{self.stage}{self.kind.value}{self.microbatch}"

    @property
    def is_compute(self) -> bool:
        return self.kind in COMPUTE_KINDS

    @property
    def is_comm(self) -> bool:
        return self.kind in COMM_KINDS

    @property
    def stages(self) -> tuple[int, ...]:
        return (self.stage,)

    @property
    def compute_parts(self) -> tuple[Action, ...]:
        """The compute actions this action performs (itself, or nothing for SEND/RECV)."""
        return (self,) if self.is_compute else ()


@dataclass(frozen=True, slots=True)
class OverlapAction:
    """DualPipe's overlapped pair: `forward` (kind F) and `backward` (kind B or BW) run together on one device."""

    forward: Action
    backward: Action

    def __post_init__(self) -> None:
        if self.forward.kind is not ActionKind.F or self.backward.kind not in BACKWARD_KINDS:
            raise ScheduleError(
                f"overlapped pair {self.forward}&{self.backward} must be a forward (F) then a backward (B or BW)"
            )

    def __str__(self) -> str:
        return f"{self.forward}&{self.backward}"

    @property
    def kind(self) -> ActionKind:
        return ActionKind.OVERLAP

    @property
    def is_compute(self) -> bool:
        return True

    @property
    def is_comm(self) -> bool:
        return False

    @property
    def stages(self) -> tuple[int, ...]:
        return (self.forward.stage, self.backward.stage)

    @property
    def compute_parts(self) -> tuple[Action, ...]:
        return (self.forward, self.backward)


ScheduleAction = Action | OverlapAction


def _parse_single(text: str, whole: str) -> Action:
    m = _SINGLE.fullmatch(text)
    if m is None:
        raise ScheduleError(
            f"action {whole!r} is not of the form <stage><F|B|W|BW|SEND_F|RECV_F|SEND_B|RECV_B><microbatch> "
            "(e.g. '3F4') or a pair '<stage>F<mb>&<stage>B<mb>'"
        )
    return Action(int(m.group(1)), ActionKind(m.group(2)), int(m.group(3)))


def parse_action(text: str) -> ScheduleAction:
    """Parse our string form (`'3F4'`, `'3BW4'`, `'3F4&5B2'`, `'3SEND_F4'`); raises `ScheduleError`."""
    s = text.strip()
    if "&" in s:
        left, _, right = s.partition("&")
        return OverlapAction(_parse_single(left, s), _parse_single(right, s))
    return _parse_single(s, s)


def try_parse_action(text: str) -> ScheduleAction | None:
    """`parse_action`, or None when `text` is not an action string (e.g. an ONNX cluster name)."""
    if not text.lstrip()[:1].isdigit():  # every action starts with its stage number; op names rarely do, and a
        return None  # failed parse raises and catches an error (the writers ask this of each of 100k op names)
    try:
        return parse_action(text)
    except ScheduleError:
        return None


# ----- PyTorch's string form -----
def to_torch_str(action: ScheduleAction) -> str:
    """The string `torch.distributed.pipelining.schedules._Action` prints for this action (``1I0``, ``2B1``...)."""
    if isinstance(action, OverlapAction):
        return f"({to_torch_str(action.forward)};{to_torch_str(action.backward)})OVERLAP_F_B"
    return f"{action.stage}{_OURS_TO_TORCH[action.kind]}{action.microbatch}"


def from_torch_str(text: str) -> ScheduleAction:
    """Parse one action in PyTorch's form; raises `ScheduleError` for kinds we do not model (UNSHARD, ...)."""
    s = text.strip()
    m = _TORCH_OVERLAP.fullmatch(s)
    if m is not None:
        fwd, bwd = from_torch_str(m.group(1)), from_torch_str(m.group(2))
        if not isinstance(fwd, Action) or not isinstance(bwd, Action):
            raise ScheduleError(f"PyTorch action {text!r}: nested overlapped pairs are not supported")
        return OverlapAction(fwd, bwd)
    m = _TORCH_SINGLE.fullmatch(s)
    if m is None:
        raise ScheduleError(
            f"PyTorch action {text!r} is not <stage><F|I|W|B|SEND_F|RECV_F|SEND_B|RECV_B><microbatch> or "
            "(<a>;<b>)OVERLAP_F_B; UNSHARD, RESHARD and REDUCE_GRAD are not modelled"
        )
    return Action(int(m.group(1)), _TORCH_TO_OURS[m.group(2)], int(m.group(3)))
