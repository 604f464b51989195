"""Measure this machine (`calibrate`), as ``plan-calibrate`` does: the same measurements, the same validated profile
and, with a model, the same op times (`planner.calibration.measure_profile`).

torch is imported only when `calibrate` is called (through `planner.execute`), so planning works where torch is
absent.  The ranks measure in forked processes; their progress is not forwarded, so `progress` gets a line before
the measurement and the summary after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from opplan.progress import Progress, progress_or_log
from planner.calibration import CalibrationRequest, MeasuredProfile, measure_profile
from planner.schedule.atomic import atomic_write_text

__all__ = ["Calibration", "calibrate"]


@dataclass(frozen=True)
class Calibration:
    """One calibration of this machine: `profile_text` is the hardware profile ``plan-calibrate`` would write
    (`load_hardware` reads it once written), `profile` the same as a mapping, `measured` everything behind it."""

    measured: MeasuredProfile

    @property
    def profile(self) -> dict[str, Any]:
        return self.measured.doc

    @property
    def profile_text(self) -> str:
        return self.measured.text

    @property
    def wall_s(self) -> float:
        """Seconds the measurements took (the ranks' and the runtime probe's)."""
        return self.measured.calibration.wall_s

    @property
    def op_cost_factors(self) -> dict[str, float]:
        """op type -> its fitted factor over the roofline (the profile's ``op_cost_factors``); empty without them."""
        return {t: fit.factor for t, fit in self.measured.fits.items()}

    def to_frame(self) -> pd.DataFrame:
        """One row per measured figure, the table ``plan-calibrate`` prints: ``name``, ``value`` (the median of
        its samples, in ``unit``: ``s``, ``FLOP/s``, ``B/s`` or ``x``), ``unit``, ``spread`` ((max - min) / median
        of the samples, a fraction) and ``samples`` (repeats x ranks)."""
        return pd.DataFrame(self.measured.figure_rows(), columns=["name", "value", "unit", "spread", "samples"])

    def op_times_frame(self) -> pd.DataFrame | None:
        """With a model: one row per op, the columns of the op-times CSV (`plan-solve --measured` reads it):
        ``op``, ``seconds`` and, for the onnxruntime engine on more than one thread, ``seconds_<k>_threads``.
        None without a model."""
        return self.measured.op_times_frame()

    def write(self, profile_path: str | Path, op_times_path: str | Path | None = None) -> tuple[Path, Path | None]:
        """Write the profile YAML to `profile_path` and, with a model, the op-times CSV (from `op_times_frame()`)
        to `op_times_path` (default ``<model stem>.times.csv`` beside the profile), as ``plan-calibrate``;
        returns both paths (the second None without a model)."""
        from planner.execute.calibrate_profile import op_frame_csv

        profile = Path(profile_path)
        profile.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(profile, self.profile_text)
        frame = self.op_times_frame()
        model = self.measured.request.model
        if frame is None or model is None:
            return profile, None
        times = Path(op_times_path) if op_times_path is not None else profile.with_name(model.stem + ".times.csv")
        times.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(times, op_frame_csv(frame))
        return profile, times


def calibrate(*, model: str | Path | None = None, nproc: int = 1, threads: int = 1, repeats: int | None = None,
              quick: bool = False, engine: str = "torch", transport: str = "gloo", name: str | None = None,
              device: str = "cpu", timeout_s: float = 600.0, op_factors: bool = True, runtime_probe: bool = True,
              sharing: bool = True, progress: Progress | None = None) -> Calibration:
    """Measure this machine with `nproc` processes of `threads` torch threads running at once, `repeats` times per
    figure (default 5, 3 `quick`; `quick`: tiny sizes, seconds), as ``plan-calibrate`` with the same options:
    `model` also times that ONNX model's ops (`engine` "torch": our runtime; "onnxruntime": the fast executor's
    engine, on 1 and on nproc x threads threads); `transport` "shm" prices the link as shared memory (nproc >= 2);
    `op_factors`, `runtime_probe`, `sharing` False skip those measurements (the ``--no-...`` options); `name` the
    profile's (default ``calibrated-<host>-<nproc>``); at most `timeout_s` seconds.  Needs torch.  Raises
    `InputError` for a missing model or an unmeasurable request, `planner.execute.calibrate.CalibrationFailed`
    when a measuring rank fails."""
    from planner.execute.calibrate_profile import summary_lines  # here: torch stays optional

    say = progress_or_log(progress)
    request = CalibrationRequest(nproc=nproc, threads=threads, repeats=repeats, quick=quick, device=device,
                                 model=None if model is None else Path(model), engine=engine, transport=transport,
                                 name=name, timeout_s=timeout_s, progress=False, op_factors=op_factors,
                                 runtime_probe=runtime_probe, sharing=sharing)
    say(f"calibrate: measuring with {nproc} process(es) x {threads} thread(s), {request.effective_repeats} "
        f"repeats each" + (f", and the ops of {Path(model).name} ({engine})" if model is not None else ""))
    measured = measure_profile(request)
    for line in summary_lines(measured.figure_rows()):
        say(line)
    say(f"calibrate: measured in {measured.calibration.wall_s:.1f} s")
    return Calibration(measured)
