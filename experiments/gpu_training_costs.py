"""The per-operator training cost rules against a real GPU: measured F, B and W time of real modules beside the
times `planner.cost.training_costs` predicts for them.

    python -m experiments.gpu_training_costs [--out DIR] [--dtypes float32,bfloat16] [--small] [--device cuda]

Needs a CUDA device (never the tests, never CI); `--small --device cpu` runs the same code on toy sizes as a smoke
check.  Per case (a pre-norm transformer block with attention written out, and an expert-choice MoE block: the
modules of `tests/test_training_costs.py` at realistic sizes) and dtype:

* **measured** on the device, CUDA-event timed, median of `--reps` after warm-ups, the inputs needing a gradient
  (as inside a pipeline, where a stage's input comes from the stage before):
  * F = the forward, autograd recording;
  * B = forward + backward with every parameter frozen (autograd runs only the input-gradient chain), minus F;
  * W = forward + full backward, minus F + B.
* **predicted**: the module exported with torch's dynamo exporter (random seeded weights), imported and prepared
  by the planner, priced by `training_costs(..., inputs_need_grad=True)` on one device, summed over the ops, for two
  profiles: the H200 datasheet (the H100 SXM5 profile's compute with the H200's 4.8 TB/s and 141 GB), and the
  roofline measured here (a large matrix product of that dtype and a large copy).

Writes `fbw.csv` (one row per case, dtype and profile) to `--out` and prints it.  What it checks is the rules'
shape (B and W against F, per op type) and the roofline's absolute error on real kernels; eager PyTorch runs
kernels the ONNX graph does not have (autograd's bookkeeping, separate bias kernels) and fuses none.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from planner.data import resolve_profile

H200_BANDWIDTH = "4.8TB/s"  # H200 SXM datasheet: 141 GB HBM3e at 4.8 TB/s; compute as the H100 SXM5
H200_MEMORY = "141GB"


@dataclass(frozen=True)
class Sizes:
    d: int
    heads: int
    seq: int
    batch: int
    experts: int
    expert_hidden: int
    capacity: int  # tokens per expert (expert choice)


FULL = Sizes(d=1024, heads=16, seq=1024, batch=8, experts=8, expert_hidden=2048, capacity=2048)  # 2 experts a token
SMALL = Sizes(d=32, heads=4, seq=16, batch=2, experts=4, expert_hidden=64, capacity=8)  # also the FLOP-count test's


def modules(torch, sizes: Sizes):
    """(name, module class, input shape) of the two cases: a pre-norm transformer block (attention written out:
    scores, softmax, context; then a GELU MLP) and an MoE block (router softmax in float32, then per expert a top-k
    over the tokens, the chosen tokens gathered, a ReLU MLP, weighted by the gate and scatter-added back).  Shared
    with `tests/test_training_costs.py`, which counts their FLOPs at `SMALL` sizes."""
    nn = torch.nn
    d, heads, s, batch = sizes.d, sizes.heads, sizes.seq, sizes.batch

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            q, k, v = (t.view(batch, s, heads, d // heads).transpose(1, 2)
                       for t in self.qkv(self.ln1(x)).split(d, -1))
            a = torch.softmax(q @ k.transpose(-1, -2) * (d // heads) ** -0.5, dim=-1) @ v
            x = x + self.proj(a.transpose(1, 2).reshape(batch, s, d))
            return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))

    capacity = sizes.capacity

    class MoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.router = nn.Linear(d, sizes.experts, bias=False)
            self.w1 = nn.ModuleList(nn.Linear(d, sizes.expert_hidden) for _ in range(sizes.experts))
            self.w2 = nn.ModuleList(nn.Linear(sizes.expert_hidden, d) for _ in range(sizes.experts))

        def forward(self, x):
            t = x.reshape(-1, d)
            # the router in float32, as real MoE models keep it (and ONNX's TopK before opset 24 has no bfloat16)
            p = torch.softmax(self.router(t).float(), dim=-1)
            out = torch.zeros_like(t)
            for e, (w1, w2) in enumerate(zip(self.w1, self.w2, strict=True)):
                gate, idx = torch.topk(p[:, e], capacity)
                y = w2(torch.relu(w1(t[idx]))) * gate[:, None].to(t.dtype)
                out = out + torch.zeros_like(t).scatter_add(0, idx[:, None].expand(-1, d), y)
            return out.reshape(x.shape)

    return (("block", Block, (batch, s, d)), ("moe", MoE, (batch, s, d)))


def _timed_ms(torch, device: str, fn, reps: int) -> float:
    """Median milliseconds of `fn()` over `reps` runs after 3 warm-ups (CUDA events on a GPU)."""
    import time

    for _ in range(3):
        fn()
    samples = []
    for _ in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def measure_fbw_ms(torch, module, shape, dtype, device: str, reps: int) -> tuple[float, float, float]:
    """(F, B, W) milliseconds of `module` on `device` (module docstring)."""
    module = module.to(device=device, dtype=dtype)
    x = torch.randn(*shape, device=device, dtype=dtype, requires_grad=True)
    params = list(module.parameters())

    def forward():
        module(x)

    def forward_backward():
        x.grad = None
        module.zero_grad(set_to_none=True)
        module(x).sum().backward()

    f = _timed_ms(torch, device, forward, reps)
    fbw = _timed_ms(torch, device, forward_backward, reps)
    for p in params:
        p.requires_grad_(False)
    try:
        fb = _timed_ms(torch, device, forward_backward, reps)
    finally:
        for p in params:
            p.requires_grad_(True)
    return f, fb - f, fbw - fb


def measured_roofline(torch, dtype, device: str) -> tuple[float, float]:
    """(FLOP/s of a large matrix product of `dtype`, bytes/s of a large copy) on `device`."""
    n = 8192 if device == "cuda" else 512
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    matmul_ms = _timed_ms(torch, device, lambda: a @ b, 10)
    src = torch.empty(2**28 if device == "cuda" else 2**22, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    copy_ms = _timed_ms(torch, device, lambda: dst.copy_(src), 10)
    return 2.0 * n**3 / (matmul_ms * 1e-3), 2.0 * src.numel() * 4 / (copy_ms * 1e-3)


def _profile(path: Path, *, flops: dict[str, float] | None, bandwidth: str, memory: str) -> Path:
    """One device of the H100 SXM5 profile with `bandwidth` and `memory` (and measured peak FLOP/s if given)."""
    doc = yaml.safe_load(resolve_profile("h100-8-nvlink.yaml").read_text())
    dev = doc["hosts"][0]["devices"][0]
    dev.update(count=1, memory=memory, memory_bandwidth=bandwidth)
    if flops:
        dev["peak_flops"] = {**dev["peak_flops"], **{k: f"{v / 1e9:.3f}GFLOPS" for k, v in flops.items()}}
    doc["name"] = path.stem
    path.write_text(yaml.safe_dump(doc))
    return path


def predicted_fbw_ms(onnx_path: Path, hw_path: Path) -> tuple[float, float, float, int]:
    """(F, B, W) milliseconds the planner predicts for the whole model on one device of `hw_path`, and its op count."""
    from planner.cost.training_costs import training_costs
    from planner.ir.hardware import load_topology
    from planner.prepare import prepare

    prepared = prepare(onnx_path, load_topology(hw_path))
    inst = prepared.instance
    tc = training_costs(prepared.graph, prepared.topology, inst, inputs_need_grad=True)
    tick_ms = (inst.tick_s or 1.0) * 1e3
    f, b, w = tc.stage_ticks(range(inst.num_tasks), 0)
    return f * tick_ms, b * tick_ms, w * tick_ms, inst.num_tasks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.gpu_training_costs", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("bench/results/gpu"))
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--small", action="store_true", help="toy sizes (a smoke check on a CPU)")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA device visible; use --device cpu --small for a smoke check")
    sizes = SMALL if args.small else FULL
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        datasheet = _profile(tmpdir / "h200-datasheet.yaml", flops=None, bandwidth=H200_BANDWIDTH, memory=H200_MEMORY)
        for dtype_name in args.dtypes.split(","):
            dtype = getattr(torch, dtype_name)
            peak, bandwidth = measured_roofline(torch, dtype, args.device)
            print(f"{dtype_name}: measured matmul {peak / 1e12:.1f} TFLOP/s, copy {bandwidth / 1e12:.2f} TB/s",
                  flush=True)
            onnx_type = {"float32": "float", "float16": "float16", "bfloat16": "bfloat16"}[dtype_name]
            measured = _profile(tmpdir / f"measured-{dtype_name}.yaml", flops={onnx_type: peak},
                                bandwidth=f"{bandwidth / 1e9:.0f}GB/s", memory=H200_MEMORY)
            for name, factory, shape in modules(torch, sizes):
                torch.manual_seed(0)
                module = factory().to(dtype)
                onnx_path = tmpdir / f"{name}-{dtype_name}.onnx"
                torch.onnx.export(module, (torch.randn(*shape, dtype=dtype),), str(onnx_path), dynamo=True,
                                  external_data=False, verbose=False)
                f, b, w = measure_fbw_ms(torch, module, shape, dtype, args.device, args.reps)
                for profile_name, hw in (("datasheet", datasheet), ("measured", measured)):
                    pf, pb, pw, n_ops = predicted_fbw_ms(onnx_path, hw)
                    rows.append({"case": name, "dtype": dtype_name, "profile": profile_name, "ops": n_ops,
                                 "measured_f_ms": round(f, 4), "measured_b_ms": round(b, 4),
                                 "measured_w_ms": round(w, 4), "predicted_f_ms": round(pf, 4),
                                 "predicted_b_ms": round(pb, 4), "predicted_w_ms": round(pw, 4),
                                 "measured_b_over_f": round(b / f, 3), "predicted_b_over_f": round(pb / pf, 3),
                                 "measured_w_over_f": round(w / f, 3), "predicted_w_over_f": round(pw / pf, 3),
                                 "predicted_over_measured_f": round(pf / f, 3),
                                 "predicted_over_measured_fbw": round((pf + pb + pw) / (f + b + w), 3)})
                    print(rows[-1], flush=True)
    write_rows(args.out / "fbw.csv", rows)
    return 0


def write_rows(path: Path, rows: list[dict]) -> None:
    """`rows` as a CSV at `path`, the first row's keys as the header (a later row's missing keys left empty)."""
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")


if __name__ == "__main__":
    raise SystemExit(main())
