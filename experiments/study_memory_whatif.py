"""Study: memory what-if on real-size models — makespan against per-device memory, and the least memory that works.

    python -m experiments.study_memory_whatif [--full] [--out DIR]      (or all studies: make experiments)

Per case (a real-size model from `planner.ir.llm_model` on a bundled hardware profile):

* **proven minimum**: `capacity_lower_bound` — below it no plan exists.  On the real-size models the binding rule
  is the assignment relaxation of `planner/heuristics/memory_bound.py` (each device holds its parameters plus the
  working set of the tasks it runs; proof in that module's docstring); the reason is in the CSV (`proof`).
* **smallest found**: the least capacity (by bisection) at which a memory-aware scheduler finds a plan that the
  validator confirms within capacity: the parameters-first packed plan (`planner/heuristics/memory_pack.py`, to
  1 MiB), the memory-aware list scheduler or HEFT with the memory tracker (to 1/16 GiB); each one's own result is
  a column (`found_<method>_gib`).  The least feasible capacity lies in [proven, found]: `bracket_gib` is the
  width, `min_gap_pct` the width as a share of the found capacity.
* **sweep**: at capacities from the smallest found up to the devices' real memory, the planner (`plan_instance`,
  fixed budget per point; its first phase falls back to the memory-aware list scheduler when HEFT hits a memory
  dead end: column `found_by`) against HEFT (memory-aware), the memory-aware list scheduler, the packed plan and
  single device, and the memory HEFT, round-robin and single device would use if they ignored capacity (they always give
  a plan; `fits` says whether it is within capacity).  `lower_bound_ms` is the best bound proven at that capacity
  or a larger one.  Each point is planned afresh (`plan-whatif` instead keeps the best plan of a smaller capacity,
  so its curve never rises with memory; here a point may come out worse than a smaller one: search noise).

Writes `whatif.csv` (one row per case x capacity x method) and `summary.csv` (one row per case: the minimum with
its proof, and the makespans at the devices' real capacity), then `<case>.png` per case from `whatif.csv`:
makespan against capacity (proven-infeasible region shaded) and each method's peak memory at the real capacity.

Quick mode: Mixtral-8x7B-like (32 layers, batch 4 x 4096) on 4x A100 PCIe and 8x H100, three capacities each
(smallest found, the memory-aware list scheduler's smallest, 80 GiB), 30 s per planner run: about 5 minutes here.
Full mode adds the 2x8 H100 InfiniBand and mixed A100/H100 profiles, Llama-70B-like on 4x A100 and a
DeepSeek-V3-like slice on 8x H100, six capacities per case and 60 s per planner run (much longer).
"""

from __future__ import annotations

from pathlib import Path

from experiments.realsize import (
    GIB,
    IGNORING_MEMORY,
    MEMORY_AWARE,
    compare_methods,
    load_case,
    model_file,
    num,
    read_csv,
    smallest_feasible,
    study_cli,
    with_capacity,
    write_csv,
)
from planner.heuristics.memory import capacity_lower_bound

STUDY = "memory_whatif"
# (model preset, overrides, hardware profile)
QUICK_CASES = [("mixtral-8x7b", {}, "a100-4-pcie.yaml"), ("mixtral-8x7b", {}, "h100-8-nvlink.yaml")]
FULL_CASES = QUICK_CASES + [("mixtral-8x7b", {}, "h100-2x8-ib.yaml"), ("mixtral-8x7b", {}, "mixed-a100-h100.yaml"),
                            ("llama-70b", {}, "a100-4-pcie.yaml"), ("deepseek-v3-slice", {}, "h100-8-nvlink.yaml")]
# memory_pack is left out of the curves (its plans are for the least capacity, several times slower: they would
# squash the others); the capacity where it finds a plan is drawn as a line instead
PLOTTED = ("planned", "memory_list", "heft", "single_device")


# (method, bisection resolution): the packed plan is cheap and aims at the least capacity, so it gets a finer one
FOUND_BY = (("memory_pack", GIB // 1024), ("memory_list", GIB // 16), ("heft", GIB // 16))


def _capacities(found: int, device: int, quick: bool, *, listed: int | None = None) -> list[int]:
    """Capacities to sweep: the smallest found, the list scheduler's smallest (where the planner's own first phase
    starts to find plans), a few steps above, and round figures up to the device's own."""
    if quick:
        return sorted({found, listed or device, device})
    steps = [found, listed or device, found + GIB, found + 2 * GIB, 40 * GIB, device]
    return sorted({c for c in steps if found <= c <= device})


def _case_name(model: str, overrides: dict, profile: str) -> str:
    tag = "".join(f"-{k}{v}" for k, v in sorted(overrides.items()))
    return f"{model}{tag}@{profile.removesuffix('.yaml')}"


def run_case(model: str, overrides: dict, profile: str, models_dir: Path, time_limit_s: float,
             quick: bool) -> tuple[list[dict], dict]:
    """Rows of `whatif.csv` and the `summary.csv` row of one case."""
    name = _case_name(model, overrides, profile)
    inst = load_case(model_file(model, models_dir, **overrides), profile)
    device_cap = int(inst.capacity_bytes.min())
    params_gib = float(inst.param_bytes.sum()) / GIB
    bound = capacity_lower_bound(inst)
    found: dict[str, int | None] = {}
    for method, resolution in FOUND_BY:
        found[method] = smallest_feasible(inst, MEMORY_AWARE[method], bound.capacity_bytes, device_cap,
                                          resolution_bytes=resolution)
    candidates = [(c, m) for m, c in found.items() if c is not None]
    smallest, found_by = min(candidates) if candidates else (device_cap, "none")
    print(f"  {name}: no plan below {bound.capacity_bytes / GIB:.3f} GiB, found " + ", ".join(
        f"{m} {c / GIB:.3f} GiB" if c is not None else f"{m} -" for m, c in found.items()), flush=True)
    # the methods that ignore memory give the same plan at every capacity: run them once (at the device capacity)
    ignoring = {r.method: r for r in compare_methods(inst, time_limit_s, IGNORING_MEMORY)}
    tick_ms = (inst.tick_s or 1.0) * 1e3
    results = {}
    for cap in _capacities(smallest, device_cap, quick, listed=found["memory_list"]):
        results[cap] = compare_methods(with_capacity(inst, cap), time_limit_s, ["planned", *MEMORY_AWARE])
        print(f"  {name} at {cap / GIB:.2f} GiB: " + ", ".join(
            f"{r.method} {r.makespan_ms:.1f} ms" if r.fits else f"{r.method} -" for r in results[cap]), flush=True)
    # A bound proven at a capacity holds at every smaller one (less memory never helps), never at a larger one:
    # each capacity's bound is the best proven there or above (at least the op graph's trivial bound).
    bound_at: dict[int, float] = {}
    floor = inst.trivial_lower_bound_tick() * tick_ms
    for cap in sorted(results, reverse=True):
        planned = results[cap][0]
        floor = max(floor, planned.lower_bound_ms if planned.fits else floor)
        bound_at[cap] = floor
    rows: list[dict] = []
    at_device: dict[str, dict] = {}
    for cap, found_rows in sorted(results.items()):
        bound_ms = bound_at[cap]
        for r in [*found_rows, *ignoring.values()]:
            fits = r.fits and r.peak_gib * GIB <= cap
            row = {"case": name, "model": model, "profile": profile, "devices": inst.num_devices,
                   "ops": inst.num_tasks, "params_gib": params_gib, "capacity_gib": cap / GIB, "method": r.method,
                   "fits": int(fits), "makespan_ms": r.makespan_ms, "lower_bound_ms": bound_ms,
                   "gap_pct": 100 * (r.makespan_ms - bound_ms) / r.makespan_ms if fits else float("nan"),
                   "peak_gib": r.peak_gib, "solve_s": r.solve_s, "found_by": r.found_by, "reason": r.reason}
            rows.append(row)
            if cap == device_cap:
                at_device[r.method] = row
    planned, ml = at_device.get("planned", {}), at_device.get("memory_list", {})
    planned_fits = [num(str(r["capacity_gib"])) for r in rows if r["method"] == "planned" and r["fits"]]
    summary = {
        "case": name, "model": model, "profile": profile, "devices": inst.num_devices, "ops": inst.num_tasks,
        "params_gib": params_gib, "proven_min_gib": bound.capacity_bytes / GIB, "proof": bound.reason,
        "smallest_found_gib": smallest / GIB, "found_by": found_by,
        "bracket_gib": (smallest - bound.capacity_bytes) / GIB,
        "min_gap_pct": 100 * (smallest - bound.capacity_bytes) / smallest,
        **{f"found_{m}_gib": (c / GIB if c is not None else float("nan")) for m, c in found.items()},
        "planned_smallest_gib": min(planned_fits) if planned_fits else float("nan"),
        "device_gib": device_cap / GIB,
        "planned_ms": planned.get("makespan_ms", float("nan")) if planned.get("fits") else float("nan"),
        "memory_list_ms": ml.get("makespan_ms", float("nan")) if ml.get("fits") else float("nan"),
        "heft_ms": _fit_ms(at_device.get("heft")), "single_device_ms": _fit_ms(at_device.get("single_device")),
        "single_device_needs_gib": at_device.get("single_device_ignoring_memory", {}).get("peak_gib", float("nan")),
        "heft_ignoring_memory_peak_gib": at_device.get("heft_ignoring_memory", {}).get("peak_gib", float("nan")),
        "bound_ms": planned.get("lower_bound_ms", float("nan")),
    }
    summary["planned_vs_memory_list_pct"] = 100 * (summary["planned_ms"] - summary["memory_list_ms"]) / \
        summary["memory_list_ms"]
    summary["gap_pct"] = 100 * (summary["planned_ms"] - summary["bound_ms"]) / summary["planned_ms"]
    return rows, summary


def _fit_ms(row: dict | None) -> float:
    return float(row["makespan_ms"]) if row and row["fits"] else float("nan")


def plot(out_dir: Path) -> list[Path]:
    """One PNG per case, drawn from `whatif.csv` and `summary.csv` alone."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - plotting stays optional
    from matplotlib.figure import Figure  # noqa: PLC0415

    rows = read_csv(out_dir / "whatif.csv")
    summaries = {s["case"]: s for s in read_csv(out_dir / "summary.csv")}
    written = []
    for case, s in summaries.items():
        mine = [r for r in rows if r["case"] == case]
        fig = Figure(figsize=(11, 4.2))
        FigureCanvasAgg(fig)
        ax, bx = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
        proven, device = num(s["proven_min_gib"]), num(s["device_gib"])
        ax.axvspan(0, proven, color="0.85", label=f"no plan exists (< {proven:.3f} GiB)")
        found = num(s["smallest_found_gib"])
        ax.axvline(found, color="tab:green", linestyle="--", label=f"a plan exists ({s['found_by']}, {found:.3f} GiB)")
        for method in PLOTTED:
            pts = sorted((num(r["capacity_gib"]), num(r["makespan_ms"])) for r in mine
                         if r["method"] == method and r["fits"] == "1")
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=method)
        bounds = sorted({(num(r["capacity_gib"]), num(r["lower_bound_ms"])) for r in mine})
        ax.plot(*zip(*bounds, strict=True), color="k", linestyle=":", label="lower bound")
        ax.set_xlim(proven * 0.9, device * 1.02)
        ax.set_xlabel("memory per device (GiB)")
        ax.set_ylabel("makespan (ms)")
        fig.suptitle(f"{case}: {num(s['params_gib']):.1f} GiB of parameters on {s['devices']} devices", fontsize=10)
        ax.legend(fontsize=7)
        at_device = [r for r in mine if num(r["capacity_gib"]) == device]
        names = [r["method"] for r in at_device]
        peaks = [num(r["peak_gib"]) for r in at_device]
        colors = ["tab:green" if r["fits"] == "1" else ("tab:red" if num(r["peak_gib"]) > 0 else "0.7")
                  for r in at_device]
        bx.barh(names, peaks, color=colors)
        bx.axvline(device, color="k", linestyle="--", label=f"capacity {device:.0f} GiB")
        bx.set_xlabel("peak memory, fullest device (GiB)")
        bx.set_title("green: fits, red: over capacity, grey: no plan", fontsize=8)
        bx.tick_params(axis="y", labelsize=7)
        bx.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        path = out_dir / f"{case.replace('@', '_at_')}.png"
        fig.savefig(path, dpi=110)
        written.append(path)
    return written


def main(quick: bool, out_dir: Path, *, cases: list[tuple[str, dict, str]] | None = None,
         time_limit_s: float | None = None) -> None:
    """Run the cases (default: QUICK_CASES or FULL_CASES), write the CSVs, then draw the PNGs from them."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cases = cases if cases is not None else (QUICK_CASES if quick else FULL_CASES)
    time_limit_s = time_limit_s if time_limit_s is not None else (30.0 if quick else 60.0)
    rows: list[dict] = []
    summaries: list[dict] = []
    for model, overrides, profile in cases:
        r, s = run_case(model, overrides, profile, out_dir / "models", time_limit_s, quick)
        rows += r
        summaries.append(s)
        write_csv(out_dir / "whatif.csv", rows)  # after every case, so a stopped run keeps what it has
        write_csv(out_dir / "summary.csv", summaries)
    plot(out_dir)


if __name__ == "__main__":
    study_cli(__doc__, STUDY, main)
