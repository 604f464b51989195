"""Memory what-if (`whatif`): plan one model under each per-device memory capacity, as ``plan-whatif`` does.

The sweep is `planner.whatif.memory_sweep`: monotone (a plan that fits less memory is kept for more), one time
budget for the whole sweep, a short reason on every infeasible capacity.  `WhatIf.to_frame()` holds the columns of
``plan-whatif``'s ``whatif.csv``, in its units: the command writes that file from the same frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from opplan.inputs import Hardware, Model, costed
from opplan.plans import solve_options
from opplan.progress import Progress, progress_or_log
from planner.errors import InputError
from planner.whatif import WhatIfResult, memory_sweep, whatif_csv_text, whatif_frame, write_whatif

__all__ = ["GIB", "WhatIf", "whatif"]

GIB = 2**30
"""Bytes in a GiB: ``memory_caps_gib`` is in GiB (binary), as the commands' ``16GiB``."""


@dataclass(frozen=True)
class WhatIf:
    """A memory sweep of `model` on `hw`: `result` per capacity (ascending), in the instance's time unit
    (`time_unit`, seconds for ONNX models) and bytes."""

    model: Model
    hw: Hardware
    result: WhatIfResult

    @property
    def time_unit(self) -> str:
        return self.result.time_unit

    @property
    def smallest_feasible_bytes(self) -> int | None:
        """The smallest capacity of the sweep that has a plan (None: none has)."""
        return self.result.smallest_feasible_bytes

    @property
    def capacity_lower_bound_bytes(self) -> int:
        """Below this capacity no plan can fit (the largest op's own memory, or parameters / devices)."""
        return self.result.capacity_lower_bound_bytes

    def to_frame(self) -> pd.DataFrame:
        """One row per capacity, the columns of ``whatif.csv`` (`planner.whatif.whatif_frame`, the frame that file
        is written from): ``capacity_bytes``, ``feasible`` (1 or 0), ``makespan_<unit>`` and ``lower_bound_<unit>``
        (NaN where infeasible), ``peak_memory_bytes``, ``plan_found_at_capacity_bytes`` (the capacity the kept plan
        was found at; missing where none), ``reason`` (why infeasible, one short line) and ``details`` (the
        planner's full words, once)."""
        return whatif_frame(self.result)

    def csv_text(self) -> str:
        """``whatif.csv``'s text, as ``plan-whatif`` writes it from `to_frame()`."""
        return whatif_csv_text(self.to_frame())

    def write(self, out_dir: str | Path) -> tuple[Path, Path]:
        """``whatif.csv`` and ``whatif.png`` (makespan against capacity) in `out_dir`, as ``plan-whatif``."""
        return write_whatif(self.result, Path(out_dir))


def whatif(model: Model, hw: Hardware, *, memory_caps_gib: Sequence[float] = (),
           memory_caps_bytes: Sequence[int] = (), time_limit_s: float = 20.0, method: str = "milp",
           backend: str = "cpsat", threads: int = 8, seed: int = 0, progress: Progress | None = None) -> WhatIf:
    """Plan `model` on `hw` with every device's memory at each capacity (GiB in `memory_caps_gib`, bytes in
    `memory_caps_bytes`; duplicates dropped, swept in ascending order) within `time_limit_s` seconds for the whole
    sweep.  `method`, `backend`: as in `solve`.  `progress` gets one line per capacity (default: the ``opplan``
    logger at INFO)."""
    capacities = sorted({round(g * GIB) for g in memory_caps_gib} | {int(b) for b in memory_caps_bytes})
    if not capacities or capacities[0] <= 0:
        raise InputError("memory_caps_gib / memory_caps_bytes: give at least one capacity, every one positive")
    options = solve_options(method, backend=backend, time_limit_s=time_limit_s, threads=threads, seed=seed)
    result = memory_sweep(costed(model, hw).instance, capacities, options, progress_or_log(progress))
    return WhatIf(model, hw, result)
