"""Import/export of the action CSV that `torch.distributed.pipelining` reads for custom schedules.

Format (as `PipelineScheduleMulti._load_csv` / `_dump_csv` of `torch.distributed.pipelining.schedules` read and
write it, checked against torch 2.13): one CSV row per pipeline rank, in rank order; each cell is one action in
PyTorch's string form, ``<stage><type><microbatch>`` with type F (forward), I (input-gradient backward), W
(weight-gradient backward), B (full backward), SEND_F/RECV_F/SEND_B/RECV_B, or an overlapped pair
``(<a>;<b>)OVERLAP_F_B``; an empty cell is an idle slot (``None``).  PyTorch's ``compute_only`` format holds only
compute actions and inserts the sends/receives itself; ``compute_comms`` holds both.

The translation of letters (our B = PyTorch I, our BW = PyTorch B) is in `actions.py`.  On import empty cells are
dropped (our schedules are orders, not time slots).  This module does not import torch; to run a CSV in torch's
runtime see `planner.execute.torch_pipelining` (DualPipe's two-direction schedules are not one chain of stages
and torch refuses them).
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence

from planner.errors import InputError
from planner.schedule.actions import from_torch_str, to_torch_str
from planner.schedule.atomic import atomic_write_text
from planner.schedule.errors import ScheduleError
from planner.schedule.program import Schedule


def schedule_to_torch_rows(schedule: Schedule, *, compute_only: bool = True) -> list[list[str]]:
    """Per rank, the action strings in PyTorch's form (SEND/RECV dropped when `compute_only`)."""
    return [
        [to_torch_str(a) for a in row if a.is_compute or not compute_only]
        for row in schedule.actions
    ]


def schedule_to_torch_csv(schedule: Schedule, *, compute_only: bool = True) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for row in schedule_to_torch_rows(schedule, compute_only=compute_only):
        writer.writerow(row)
    return buf.getvalue()


def write_torch_csv(schedule: Schedule, path: str | os.PathLike[str], *, compute_only: bool = True) -> None:
    """Write the schedule as PyTorch's custom-schedule CSV (atomically)."""
    atomic_write_text(path, schedule_to_torch_csv(schedule, compute_only=compute_only))


def schedule_from_torch_rows(
    rows: Sequence[Sequence[str]],
    *,
    num_microbatches: int | None = None,
    num_stages: int | None = None,
    name: str = "",
) -> Schedule:
    """A `Schedule` from per-rank cells in PyTorch's form (empty cells are skipped)."""
    actions = [[from_torch_str(c) for c in row if c.strip()] for row in rows]
    return Schedule.build(actions, num_microbatches=num_microbatches, num_stages=num_stages, name=name)


def read_torch_csv(
    path: str | os.PathLike[str],
    *,
    num_microbatches: int | None = None,
    num_stages: int | None = None,
) -> Schedule:
    """Read PyTorch's custom-schedule CSV; errors name the file, row and cell and raise `InputError`."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
    except OSError as exc:
        raise InputError(f"cannot read schedule CSV: {exc.strerror or exc}", path=str(path)) from exc
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            if cell.strip():
                try:
                    from_torch_str(cell)
                except ScheduleError as exc:
                    raise InputError(f"row {r} (rank {r}) cell {c}: {exc}", path=str(path)) from exc
    try:
        return schedule_from_torch_rows(rows, num_microbatches=num_microbatches, num_stages=num_stages,
                                        name=os.path.basename(str(path)))
    except ScheduleError as exc:
        raise InputError(str(exc), path=str(path)) from exc
