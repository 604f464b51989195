"""The DeepSeek-V3-like preset's per-op costs against a real GPU: each op of one layer built as a PyTorch module at
the published sizes, its F, B and W timed, beside what `planner.compare.presets` prices it at.

    python -m experiments.gpu_preset_costs [--out DIR] [--reps N] [--expert-parallel 16,8] [--small --device cpu]

Needs a CUDA device (never the tests, never CI); `--small --device cpu` runs the same code on toy sizes as a smoke
check (`tests/test_gpu_preset_costs.py`).  The preset's figures behind the bench rows ``preset:8`` and ``preset:16``
are formulas (module docstring of `planner.compare.presets`); this is where they meet kernels.

**The modules** (bf16, one micro-batch of T = 4096 tokens, the preset's default), written from the preset's
description, not from DeepSeek's code:

* ``attention``: MLA. RMSNorm; query down-projection h -> r_q, RMSNorm, up-projection r_q -> H (d_n + d_r); key/value
  down-projection h -> r_kv + d_r (the RoPE key shared by the heads), RMSNorm on the r_kv part, up-projection
  r_kv -> H (d_n + d_v); the causal core by `torch.nn.functional.scaled_dot_product_attention` (whichever kernel
  PyTorch picks for a 192-wide query/key and a 128-wide value); output projection H d_v -> h.  No RoPE rotation
  (elementwise, as the preset leaves it out).
* ``experts`` at expert-parallel degree EP: the router's gate h -> E on the device's T tokens, the shared expert on
  them, and the device's ceil(E / EP) routed experts on the T k tokens balanced routing sends it (each expert T k /
  ceil(E / EP) tokens, as one batched product per SwiGLU matrix: a grouped GEMM), weighted by the gate's first k
  probabilities and summed back.  The tokens a device receives are its own T tokens repeated k times: the
  all-to-all that would bring them is not timed here (one GPU: no peers).
* ``mlp``: a dense layer's RMSNorm + SwiGLU FFN of width f.
* ``head``: the final RMSNorm, the output projection h -> V and the cross-entropy loss over random targets.

**Measured** eagerly, as `experiments.gpu_training_costs` does: CUDA-event timed, median of `--reps` after
warm-ups, the input needing a gradient (F = forward; B = forward + backward with parameters frozen, minus F; W =
forward + full backward, minus F + B), and the bytes the forward leaves allocated (the activations autograd
keeps, with the output) beside the preset's activation bytes.  **Predicted**: `pass_seconds(op, device)` of the
preset's op on two devices: the H100 SXM5 profile's (the preset's own numbers, ``h100``) and the same with the bf16
matrix-product rate and the copy bandwidth measured here (``measured``).  The CSV is what ``plan-compare --preset
deepseek-v3 --preset-times`` reads (`planner.compare.presets.load_op_times`).

Writes `preset_fbw.csv` (one row per op and device) to `--out` and prints each row.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

from experiments.gpu_training_costs import (
    H200_MEMORY,
    _profile,
    _timed_ms,
    measure_fbw_ms,
    measured_roofline,
    write_rows,
)
from planner.compare.presets import (
    DeepSeekV3,
    MicroBatch,
    OpWork,
    attention_op,
    experts_op,
    head_op,
    mlp_op,
    pass_seconds,
)

# toy sizes for `--small` (a smoke check on a CPU): every dimension of the real model, shrunk
SMALL_ARCH = DeepSeekV3(hidden=64, dense_ffn=96, num_heads=4, q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16,
                        qk_rope_head_dim=8, v_head_dim=16, num_routed_experts=16, top_k=4, expert_ffn=32, vocab=256)
SMALL_MB = MicroBatch(seq_len=32)


def modules(torch, a: DeepSeekV3, mb: MicroBatch, expert_parallel: int):
    """(name, module class, input shape) of the four ops of the module docstring; `experts` at `expert_parallel`."""
    nn, F = torch.nn, torch.nn.functional
    t, h, heads = mb.tokens, a.hidden, a.num_heads
    qk, dv, dn, dr = a.qk_nope_head_dim + a.qk_rope_head_dim, a.v_head_dim, a.qk_nope_head_dim, a.qk_rope_head_dim

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.q_norm, self.kv_norm = nn.RMSNorm(h), nn.RMSNorm(a.q_lora_rank), nn.RMSNorm(a.kv_lora_rank)
            self.q_down, self.q_up = nn.Linear(h, a.q_lora_rank, bias=False), nn.Linear(a.q_lora_rank, heads * qk,
                                                                                        bias=False)
            self.kv_down = nn.Linear(h, a.kv_lora_rank + dr, bias=False)
            self.kv_up = nn.Linear(a.kv_lora_rank, heads * (dn + dv), bias=False)
            self.out = nn.Linear(heads * dv, h, bias=False)

        def forward(self, x):
            y = self.norm(x)
            q = self.q_up(self.q_norm(self.q_down(y))).view(mb.seqs, mb.seq_len, heads, qk)
            c, k_rope = self.kv_down(y).split([a.kv_lora_rank, dr], -1)
            k_nope, v = self.kv_up(self.kv_norm(c)).view(mb.seqs, mb.seq_len, heads, dn + dv).split([dn, dv], -1)
            k_rope = k_rope.view(mb.seqs, mb.seq_len, 1, dr).expand(-1, -1, heads, -1)
            k = torch.cat([k_nope, k_rope], -1)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=True)
            return x + self.out(o.transpose(1, 2).reshape(t, heads * dv))

    local = math.ceil(a.num_routed_experts / expert_parallel)
    per_expert = t * a.top_k // local

    class Experts(nn.Module):
        def __init__(self):
            super().__init__()
            fe, scale = a.expert_ffn, h ** -0.5
            self.norm = nn.RMSNorm(h)
            self.gate = nn.Linear(h, a.num_routed_experts, bias=False)
            self.shared_gate_up = nn.Linear(h, 2 * fe * a.num_shared_experts, bias=False)
            self.shared_down = nn.Linear(fe * a.num_shared_experts, h, bias=False)
            self.w_gate = nn.Parameter(torch.randn(local, h, fe) * scale)
            self.w_up = nn.Parameter(torch.randn(local, h, fe) * scale)
            self.w_down = nn.Parameter(torch.randn(local, fe, h) * fe ** -0.5)

        def forward(self, x):
            y = self.norm(x)
            probs = torch.softmax(self.gate(y).float(), -1)[:, :a.top_k].to(x.dtype)  # balanced: a fixed choice
            g, u = self.shared_gate_up(y).chunk(2, -1)
            shared = self.shared_down(F.silu(g) * u)
            received = y.repeat(a.top_k, 1).view(local, per_expert, h)
            routed = torch.bmm(F.silu(torch.bmm(received, self.w_gate)) * torch.bmm(received, self.w_up),
                               self.w_down).view(a.top_k, t, h)
            return x + shared + (routed * probs.t().unsqueeze(-1)).sum(0)

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.RMSNorm(h)
            self.gate_up = nn.Linear(h, 2 * a.dense_ffn, bias=False)
            self.down = nn.Linear(a.dense_ffn, h, bias=False)

        def forward(self, x):
            g, u = self.gate_up(self.norm(x)).chunk(2, -1)
            return x + self.down(F.silu(g) * u)

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.RMSNorm(h)
            self.proj = nn.Linear(h, a.vocab, bias=False)
            self.register_buffer("targets", torch.randint(0, a.vocab, (t,)))

        def forward(self, x):
            return F.cross_entropy(self.proj(self.norm(x)).float(), self.targets)

    return [("attention", Attention, (t, h)), (f"experts_ep{expert_parallel}", Experts, (t, h)),
            ("mlp", Mlp, (t, h)), ("head", Head, (t, h))]


def preset_op(name: str, a: DeepSeekV3, mb: MicroBatch, expert_parallel: int) -> OpWork:
    """The preset's op that module `name` (of `modules`) builds."""
    if name == "attention":
        return attention_op(a, mb, name)
    if name.startswith("experts"):
        return experts_op(a, mb, name, expert_parallel)
    return {"mlp": mlp_op, "head": lambda a_, mb_, _: head_op(a_, mb_)}[name](a, mb, name)


def forward_bytes(torch, module, shape, dtype, device: str) -> int | None:
    """Bytes a forward leaves allocated on a CUDA device (what autograd keeps, and the output); None on a CPU."""
    if device != "cuda":
        return None
    x = torch.randn(*shape, device=device, dtype=dtype, requires_grad=True)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    out = module(x)
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - before
    del out
    return held


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.gpu_preset_costs", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("bench/results/gpu"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--small", action="store_true", help="toy sizes (a smoke check on a CPU)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--expert-parallel", type=lambda x: [int(v) for v in x.split(",")], default=[16, 8],
                    help="EP degrees of the experts op, comma-separated (default 16,8)")
    args = ap.parse_args(argv)

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA device visible; use --device cpu --small for a smoke check")
    arch, mb = (SMALL_ARCH, SMALL_MB) if args.small else (DeepSeekV3(), MicroBatch())
    dtype = torch.bfloat16
    args.out.mkdir(parents=True, exist_ok=True)
    from planner.data import resolve_profile
    from planner.ir.hardware import load_topology

    if args.device == "cuda":
        print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    peak, bandwidth = measured_roofline(torch, dtype, args.device)
    print(f"bfloat16: measured matmul {peak / 1e12:.1f} TFLOP/s, copy {bandwidth / 1e12:.2f} TB/s", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        measured_hw = _profile(Path(tmp) / "measured.yaml", flops={"bfloat16": peak},
                               bandwidth=f"{bandwidth / 1e9:.0f}GB/s", memory=H200_MEMORY)
        devices = {"h100": load_topology(resolve_profile("h100-8-nvlink.yaml")).devices[0],
                   "measured": load_topology(measured_hw).devices[0]}
    cases, seen = [], set()
    for ep in args.expert_parallel:
        for name, factory, shape in modules(torch, arch, mb, ep):
            if name not in seen:
                seen.add(name)
                cases.append((name, factory, shape, ep))
    rows = []
    for name, factory, shape, ep in cases:
        torch.manual_seed(0)
        module = factory().to(device=args.device, dtype=dtype)
        params = sum(p.numel() * p.element_size() for p in module.parameters())
        f, b, w = measure_fbw_ms(torch, module, shape, dtype, args.device, args.reps)
        held = forward_bytes(torch, module, shape, dtype, args.device)
        op = preset_op(name, arch, mb, ep)
        for device_name, dev in devices.items():
            pf, pb, pw = (s * 1e3 for s in pass_seconds(op, dev))
            rows.append({"op": name, "device": device_name, "tokens": mb.tokens,
                         "measured_f_ms": round(f, 4), "measured_b_ms": round(b, 4), "measured_w_ms": round(w, 4),
                         "predicted_f_ms": round(pf, 4), "predicted_b_ms": round(pb, 4),
                         "predicted_w_ms": round(pw, 4),
                         "measured_b_over_f": round(b / f, 3), "predicted_b_over_f": round(pb / pf, 3),
                         "measured_w_over_f": round(w / f, 3), "predicted_w_over_f": round(pw / pf, 3),
                         "predicted_over_measured_fbw": round((pf + pb + pw) / (f + b + w), 3),
                         "forward_held_mib": None if held is None else round(held / 2**20, 1),
                         "preset_activation_mib": round(op.activation_bytes / 2**20, 1),
                         "preset_param_mib": round(op.param_bytes / 2**20, 1),
                         "module_param_mib": round(params / 2**20, 1)})
            print(rows[-1], flush=True)
        del module
        if args.device == "cuda":
            torch.cuda.empty_cache()
    # the attention core alone: how far the flash kernels' backward is from the preset's B = 2F
    core = core_fbw_ms(torch, arch, mb, dtype, args.device, args.reps)
    print(f"attention core alone (SDPA, causal): F {core[0]:.3f} ms, B {core[1]:.3f} ms, B/F {core[1] / core[0]:.2f} "
          f"(preset: 2)", flush=True)
    rows.append({"op": "attention_core", "device": "-", "tokens": mb.tokens, "measured_f_ms": round(core[0], 4),
                 "measured_b_ms": round(core[1], 4), "measured_w_ms": 0.0,
                 "measured_b_over_f": round(core[1] / core[0], 3), "predicted_b_over_f": 2.0})
    write_rows(args.out / "preset_fbw.csv", rows)
    return 0


def core_fbw_ms(torch, a: DeepSeekV3, mb: MicroBatch, dtype, device: str, reps: int) -> tuple[float, float]:
    """(F, B) milliseconds of the causal attention core alone (no weights: W = 0)."""
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    shape = (mb.seqs, a.num_heads, mb.seq_len)
    q, k = (torch.randn(*shape, qk, device=device, dtype=dtype, requires_grad=True) for _ in range(2))
    v = torch.randn(*shape, a.v_head_dim, device=device, dtype=dtype, requires_grad=True)
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def forward_backward():
        for x in (q, k, v):
            x.grad = None
        sdpa(q, k, v, is_causal=True).sum().backward()

    f = _timed_ms(torch, device, lambda: sdpa(q, k, v, is_causal=True), reps)
    fb = _timed_ms(torch, device, forward_backward, reps)
    return f, fb - f


if __name__ == "__main__":
    raise SystemExit(main())
