"""`Schedule`: per device, the ordered actions it executes, plus the pipeline's shape.

A schedule is an *order*, not a timetable: times come from replaying it on a `SchedulingInstance` with the
simulator (`simulate.simulate_schedule`).  Device indices are 0..p-1 and equal the instance's device indices
(and, when run, the pipeline ranks).  Every action of stage s sits on device `stage_to_device[s]`.

`schedule_to_instance_order` is the glue to an instance whose tasks are named by action strings (``0F3``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from planner.cost.instance import SchedulingInstance
from planner.schedule.actions import (
    Action,
    ActionKind,
    OverlapAction,
    ScheduleAction,
    parse_action,
)
from planner.schedule.errors import ScheduleError


@dataclass(frozen=True)
class Schedule:
    """Per-device ordered actions.  `actions[d]` is device d's program; `stage_to_device[s]` hosts stage s."""

    actions: tuple[tuple[ScheduleAction, ...], ...]
    num_stages: int
    num_microbatches: int
    stage_to_device: tuple[int, ...]
    name: str = ""

    def __post_init__(self) -> None:
        if len(self.stage_to_device) != self.num_stages:
            raise ScheduleError(
                f"schedule {self.name!r}: stage_to_device has {len(self.stage_to_device)} entries for "
                f"{self.num_stages} stages"
            )
        p = len(self.actions)
        for s, d in enumerate(self.stage_to_device):
            if not 0 <= d < p:
                raise ScheduleError(f"schedule {self.name!r}: stage {s} is placed on device {d}, but p = {p}")
        for d, row in enumerate(self.actions):
            for a in row:
                for part in _parts(a):
                    if not 0 <= part.stage < self.num_stages:
                        raise ScheduleError(
                            f"schedule {self.name!r}: device {d} action {a} names stage {part.stage}, "
                            f"but there are {self.num_stages} stages"
                        )
                    if not 0 <= part.microbatch < self.num_microbatches:
                        raise ScheduleError(
                            f"schedule {self.name!r}: device {d} action {a} names micro-batch {part.microbatch}, "
                            f"but there are {self.num_microbatches}"
                        )
                    if self.stage_to_device[part.stage] != d:
                        raise ScheduleError(
                            f"schedule {self.name!r}: action {a} runs on device {d}, but stage {part.stage} "
                            f"lives on device {self.stage_to_device[part.stage]}"
                        )

    # ----- construction -----
    @classmethod
    def build(
        cls,
        actions: Sequence[Iterable[ScheduleAction | str]],
        *,
        num_microbatches: int | None = None,
        num_stages: int | None = None,
        stage_to_device: Sequence[int] | None = None,
        name: str = "",
    ) -> Schedule:
        """Make a schedule from per-device lists of actions or action strings, inferring what is not given.

        Inferred: `num_stages` = 1 + highest stage named, `num_microbatches` = 1 + highest micro-batch named,
        `stage_to_device` from where each stage's actions sit (a stage with no action is an error).
        """
        rows = tuple(tuple(parse_action(a) if isinstance(a, str) else a for a in row) for row in actions)
        parts = [(d, part) for d, row in enumerate(rows) for a in row for part in _parts(a)]
        if num_stages is None:
            num_stages = 1 + max((p.stage for _, p in parts), default=-1)
        if num_microbatches is None:
            num_microbatches = 1 + max((p.microbatch for _, p in parts), default=-1)
        if stage_to_device is None:
            where: dict[int, int] = {}
            for d, part in parts:
                if where.setdefault(part.stage, d) != d:
                    raise ScheduleError(
                        f"schedule {name!r}: stage {part.stage} has actions on devices {where[part.stage]} and {d}"
                    )
            missing = [s for s in range(num_stages) if s not in where]
            if missing:
                raise ScheduleError(f"schedule {name!r}: stages {missing} have no action, so no device")
            stage_to_device = [where[s] for s in range(num_stages)]
        return cls(rows, num_stages, num_microbatches, tuple(stage_to_device), name)

    # ----- views -----
    @property
    def p(self) -> int:
        """Number of devices (pipeline ranks)."""
        return len(self.actions)

    @property
    def num_devices(self) -> int:
        return len(self.actions)

    def strings(self) -> tuple[tuple[str, ...], ...]:
        """Per device, the actions in our string form."""
        return tuple(tuple(str(a) for a in row) for row in self.actions)

    def compute_actions(self, device: int) -> tuple[ScheduleAction, ...]:
        """Device `device`'s compute actions (F, B, W, BW and pairs), in order."""
        return tuple(a for a in self.actions[device] if a.is_compute)

    def check_complete(self) -> None:
        """Raise `ScheduleError` unless every stage runs, for every micro-batch, exactly one F and either one BW or
        one B and one W, in the order F before B (or BW) before W on the stage's device."""
        seen: dict[tuple[int, ActionKind, int], int] = {}
        problems: list[str] = []
        for d, row in enumerate(self.actions):
            for step, a in enumerate(row):
                for part in _parts(a):
                    if not part.is_compute:
                        continue
                    key = (part.stage, part.kind, part.microbatch)
                    if key in seen:
                        problems.append(f"{part} appears twice (device {d})")
                    seen[key] = step
        for s in range(self.num_stages):
            for mb in range(self.num_microbatches):
                f = seen.get((s, ActionKind.F, mb))
                b = seen.get((s, ActionKind.B, mb))
                w = seen.get((s, ActionKind.W, mb))
                bw = seen.get((s, ActionKind.BW, mb))
                if f is None:
                    problems.append(f"{s}F{mb} is missing")
                if bw is None and (b is None or w is None):
                    problems.append(f"stage {s} micro-batch {mb} needs {s}BW{mb} or both {s}B{mb} and {s}W{mb}")
                if bw is not None and (b is not None or w is not None):
                    problems.append(f"stage {s} micro-batch {mb} has both a full backward and split B/W")
                back = bw if bw is not None else b
                if f is not None and back is not None and back < f:
                    problems.append(f"the backward of stage {s} micro-batch {mb} comes before its forward")
                if b is not None and w is not None and w < b:
                    problems.append(f"{s}W{mb} comes before {s}B{mb}")
        if problems:
            more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
            raise ScheduleError(f"schedule {self.name!r} is incomplete: " + "; ".join(problems[:5]) + more)


def _parts(a: ScheduleAction) -> tuple[Action, ...]:
    return (a.forward, a.backward) if isinstance(a, OverlapAction) else (a,)


def schedule_to_instance_order(schedule: Schedule, instance: SchedulingInstance) -> tuple[tuple[int, ...], ...]:
    """Per instance device, the instance task indices in the schedule's order.

    Tasks are matched by name (our action strings).  A compute action maps to the task of the same name; a pair
    ``3F4&5B2`` maps to the task of that name if the instance has one, else to its two halves (forward first).
    SEND/RECV actions map to a task only if the instance has one of that name (usually communication is modelled
    by edges, not tasks).  Raises `ScheduleError` when a compute action has no task, a task has no action, or the
    device counts differ.
    """
    if schedule.p != instance.num_devices:
        raise ScheduleError(
            f"schedule {schedule.name!r} has {schedule.p} devices, instance {instance.name!r} has "
            f"{instance.num_devices}"
        )
    index = instance.task_index
    orders: list[tuple[int, ...]] = []
    used: set[int] = set()
    unknown: list[str] = []
    for row in schedule.actions:
        order: list[int] = []
        for a in row:
            name = str(a)
            if name in index:
                names = [name]
            elif isinstance(a, OverlapAction):
                names = [str(a.forward), str(a.backward)]
            elif a.is_comm:
                continue
            else:
                names = [name]
            for n in names:
                if n not in index:
                    unknown.append(n)
                    continue
                t = index[n]
                if t in used:
                    raise ScheduleError(f"schedule {schedule.name!r}: task {n!r} is scheduled twice")
                used.add(t)
                order.append(t)
        orders.append(tuple(order))
    if unknown:
        raise ScheduleError(
            f"schedule {schedule.name!r}: actions {unknown[:8]} have no task in instance {instance.name!r}"
        )
    missing = [instance.task_names[t] for t in range(instance.num_tasks) if t not in used]
    if missing:
        raise ScheduleError(
            f"schedule {schedule.name!r}: instance tasks {missing[:8]} are not scheduled"
            + (f" (and {len(missing) - 8} more)" if len(missing) > 8 else "")
        )
    return tuple(orders)


def schedule_from_plan(plan, *, num_microbatches: int | None = None, num_stages: int | None = None,
                       name: str = "") -> Schedule:
    """The `Schedule` of a `Plan` whose task names are action strings: per device, its tasks sorted by start."""
    rows: list[list[tuple[int, int, str]]] = [[] for _ in plan.device_names]
    for p in plan.placements:
        rows[p.device].append((p.start_tick, p.end_tick, p.task))
    return Schedule.build(
        [[t for _, _, t in sorted(row)] for row in rows],
        num_microbatches=num_microbatches,
        num_stages=num_stages,
        name=name or plan.instance_name,
    )
