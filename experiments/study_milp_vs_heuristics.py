"""Study: where the planner beats the list schedulers — larger batches, heterogeneous devices, two hosts.

    python -m experiments.study_milp_vs_heuristics [--full] [--out DIR]      (or all studies: make experiments)

Per case (a model on a bundled hardware profile at the devices' real memory), one row per method: the planner
(`plan_instance`, fixed budget), HEFT (memory-aware, the library default), the memory-aware list scheduler
(`planner.heuristics.memory_list`) and single device (memory-aware: "does not fit" when the model needs more than
one device holds; `needs_gib` is what it would use).  `bound_ms` is the planner's proven lower bound (the
decomposition bound, never below critical path and work / speed); `gap_pct` = (makespan - bound) / makespan;
`vs_planned_pct` = how much longer than the planner's plan.

Cases: the Mixtral-8x7B-like model at batch 16 x 4096 (larger batch) on 8x H100, on the mixed A100/H100 server
(heterogeneous) and on 2x8 H100 over InfiniBand (two hosts); the Llama-70B-like dense model on 8x H100; the
bundled small MoE on cpu-4 (where the MILP wins most).  Quick mode uses 8 of the 32 layers and 10 s per planner
run (about 4 minutes here); full mode all layers, a DeepSeek-V3-like slice on 2x8 H100 and 60 s per run (about
6 minutes on 2 vCPUs).

Writes `comparison.csv`, then `comparison.png` from it: per case, each method's makespan relative to the bound.
"""

from __future__ import annotations

from pathlib import Path

from experiments.realsize import GIB, compare_methods, load_case, model_file, num, read_csv, study_cli, write_csv

STUDY = "milp_vs_heuristics"
METHODS = ("planned", "heft", "memory_list", "single_device")
# (case label, model preset, overrides, profile); quick mode replaces "layers" by QUICK_LAYERS for the presets
CASES = [
    ("larger batch", "mixtral-8x7b", {"batch": 16}, "h100-8-nvlink.yaml"),
    ("heterogeneous", "mixtral-8x7b", {}, "mixed-a100-h100.yaml"),
    ("two hosts", "mixtral-8x7b", {}, "h100-2x8-ib.yaml"),
    ("dense", "llama-70b", {}, "h100-8-nvlink.yaml"),
    ("small MoE", "moe", {}, "cpu-4.yaml"),
]
FULL_ONLY = [("two hosts, 257 experts", "deepseek-v3-slice", {}, "h100-2x8-ib.yaml")]
QUICK_LAYERS = {"mixtral-8x7b": 8, "llama-70b": 16}


def run_case(label: str, model: str, overrides: dict, profile: str, models_dir: Path,
             time_limit_s: float) -> list[dict]:
    inst = load_case(model_file(model, models_dir, **overrides), profile)
    results = {r.method: r for r in compare_methods(inst, time_limit_s, [*METHODS, "single_device_ignoring_memory"])}
    planned = results["planned"]
    bound_ms = planned.lower_bound_ms
    tag = "".join(f"-{k}{v}" for k, v in sorted(overrides.items()))
    rows = []
    for method in METHODS:
        r = results[method]
        rows.append({
            "case": label, "model": f"{model}{tag}", "profile": profile, "devices": inst.num_devices,
            "ops": inst.num_tasks, "params_gib": float(inst.param_bytes.sum()) / GIB, "method": method,
            "fits": int(r.fits), "makespan_ms": r.makespan_ms, "bound_ms": bound_ms,
            "gap_pct": 100 * (r.makespan_ms - bound_ms) / r.makespan_ms if r.fits else float("nan"),
            "vs_planned_pct": 100 * (r.makespan_ms - planned.makespan_ms) / planned.makespan_ms
            if r.fits and planned.fits else float("nan"),
            "peak_gib": r.peak_gib,
            "needs_gib": results["single_device_ignoring_memory"].peak_gib if method == "single_device" else r.peak_gib,
            "solve_s": r.solve_s, "found_by": r.found_by, "reason": r.reason})
    print(f"  {label} ({model}{tag} on {profile}): " + ", ".join(
        f"{m} {results[m].makespan_ms:.1f} ms" if results[m].fits else f"{m} -" for m in METHODS)
        + f"; bound {bound_ms:.1f} ms", flush=True)
    return rows


def plot(out_dir: Path) -> Path:
    """`comparison.png` from `comparison.csv` alone: makespan / bound per case and method."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - plotting stays optional
    from matplotlib.figure import Figure  # noqa: PLC0415

    rows = read_csv(out_dir / "comparison.csv")
    cases = list(dict.fromkeys(r["case"] for r in rows))
    fig = Figure(figsize=(max(6.0, 1.9 * len(cases)), 4.2))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    width = 0.8 / len(METHODS)
    for k, method in enumerate(METHODS):
        xs, ys = [], []
        for i, case in enumerate(cases):
            row = next((r for r in rows if r["case"] == case and r["method"] == method), None)
            if row is not None and row["fits"] == "1":
                xs.append(i + (k - (len(METHODS) - 1) / 2) * width)
                ys.append(num(row["makespan_ms"]) / num(row["bound_ms"]))
        ax.bar(xs, ys, width=width, label=method)
    ax.axhline(1.0, color="k", linestyle=":", label="lower bound")
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([f"{c}\n{next(r['model'] for r in rows if r['case'] == c)}" for c in cases], fontsize=7)
    ax.set_ylabel("makespan / lower bound (missing bar: does not fit)")
    ax.set_ylim(bottom=0.9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / "comparison.png"
    fig.savefig(path, dpi=110)
    return path


def main(quick: bool, out_dir: Path, *, cases: list[tuple[str, str, dict, str]] | None = None,
         time_limit_s: float | None = None) -> None:
    """Run the cases (default: CASES, plus FULL_ONLY in full mode), write the CSV, then the PNG from it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if cases is None:
        cases = list(CASES) if quick else CASES + FULL_ONLY
        if quick:
            cases = [(label, model, {**o, "layers": QUICK_LAYERS[model]} if model in QUICK_LAYERS else o, prof)
                     for label, model, o, prof in cases]
    time_limit_s = time_limit_s if time_limit_s is not None else (10.0 if quick else 60.0)
    rows: list[dict] = []
    for label, model, overrides, profile in cases:
        rows += run_case(label, model, overrides, profile, out_dir / "models", time_limit_s)
        write_csv(out_dir / "comparison.csv", rows)  # after every case, so a stopped run keeps what it has
    plot(out_dir)


if __name__ == "__main__":
    study_cli(__doc__, STUDY, main)
