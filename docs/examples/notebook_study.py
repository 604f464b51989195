"""A notebook-style study through the Python API (`import opplan`): plan the bundled MoE on eight H100s, compare
the pipeline schedules against DualPipe, sweep the memory per device, and plot the three tables.

    python docs/examples/notebook_study.py [OUT.png] [--time-limit S]

Every result is a pandas DataFrame with the units in its column names (docs/api.md); the figure draws the frames'
columns as they are.  `tests/test_opplan_example.py` runs this script and checks the plot against the frames.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from matplotlib.figure import Figure  # a figure without pyplot: drawn by the Agg canvas, no display needed

import opplan


def study(time_limit_s: float):
    moe = opplan.load_model(opplan.BUNDLED_MODEL)
    h100 = opplan.load_hardware("h100-8-nvlink")
    plan = opplan.solve(moe, h100, time_limit_s=time_limit_s)
    print(f"plan: makespan {plan.makespan_s * 1e6:.1f} us, lower bound {plan.lower_bound_s * 1e6:.1f} us")
    schedules = opplan.compare(moe, h100, stages=2, microbatches=4, time_limit_s=time_limit_s).to_frame()
    sweep = opplan.whatif(moe, h100, memory_caps_bytes=range(100_000, 500_001, 75_000), time_limit_s=time_limit_s)
    return plan.to_frame(), schedules, sweep.to_frame()


def plot(devices, schedules, memory, path: Path):
    fig = Figure(figsize=(16, 4.5), layout="constrained")
    busy, pipes, caps = fig.subplots(1, 3)
    busy.barh(devices["device"], devices["busy_fraction"])
    busy.set(title="planned: busy share per device", xlabel="busy / makespan")
    pipes.barh(schedules["schedule"], schedules["makespan_us"])
    pipes.set(title="pipeline schedules, 2 stages x 4 micro-batches", xlabel="makespan (us)")
    fits = memory[memory["feasible"] == 1]
    caps.plot(fits["capacity_bytes"], fits["makespan_s"], marker="o", label="makespan")
    caps.plot(fits["capacity_bytes"], fits["lower_bound_s"], linestyle="--", label="lower bound")
    caps.set(title="memory what-if", xlabel="memory per device (bytes)", ylabel="seconds")
    caps.legend()
    fig.savefig(path, dpi=100)
    return fig


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=Path(tempfile.mkdtemp()) / "study.png")
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds for each of the three jobs")
    args = parser.parse_args(argv)
    frames = study(args.time_limit)
    fig = plot(*frames, args.out)
    print(f"wrote {args.out}")
    return frames, fig


if __name__ == "__main__":
    main()
