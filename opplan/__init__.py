"""opplan's Python API: plan a model on a hardware profile, compare pipeline schedules and sweep memory from a
script or a notebook, with every table-like result as a pandas DataFrame (`.to_frame()`, units in column names).

    import opplan

    moe = opplan.load_model(opplan.BUNDLED_MODEL)
    h100 = opplan.load_hardware("h100-8-nvlink")
    plan = opplan.solve(moe, h100, time_limit_s=10)            # makespan_s, lower_bound_s, gap, .to_frame()
    cmp = opplan.compare(moe, h100, stages=2, microbatches=4, time_limit_s=10)
    cmp.to_frame()                                              # one row per schedule, dualpipe among them
    opplan.whatif(moe, h100, memory_caps_bytes=range(100_000, 500_001, 75_000)).to_frame()  # or memory_caps_gib

Each function is the code a command runs (``plan-solve``, ``plan-simulate``, ``plan-compare --model``,
``plan-whatif``, ``plan-run``, ``plan-calibrate``) without its argument parsing and printing: the same instance, the
same search, the same figures; the frames hold the columns of the CSV files the commands write.  Progress goes to
the `progress` callback a function takes, else to the ``opplan`` logger at INFO; nothing prints.  User errors raise
`planner.errors.OpplanError` (`InputError`, `InfeasibleError`) with a one-line message.  The contracts and units are
in ``docs/api.md``.
"""

from __future__ import annotations

from opplan.calibration import Calibration, calibrate
from opplan.execution import Run, run
from opplan.inputs import Hardware, Model, bundled_profile_names, load_hardware, load_model
from opplan.memory_sweep import GIB, WhatIf, whatif
from opplan.pipelines import Comparison, MemorySweep, compare, compare_memory_sweep
from opplan.plans import Plan, simulate, solve
from opplan.progress import Progress
from planner.data import BUNDLED_MODEL
from planner.errors import InfeasibleError, InputError, OpplanError

__all__ = [
    # inputs
    "BUNDLED_MODEL", "Hardware", "Model", "bundled_profile_names", "load_hardware", "load_model",
    # the three jobs and their results
    "Plan", "solve", "simulate", "Comparison", "compare", "MemorySweep", "compare_memory_sweep", "WhatIf", "whatif",
    "GIB",
    # running a plan and measuring this machine (need torch)
    "Run", "run", "Calibration", "calibrate",
    # progress and errors
    "Progress", "OpplanError", "InputError", "InfeasibleError",
]
