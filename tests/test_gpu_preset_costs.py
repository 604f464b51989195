"""The GPU check of the DeepSeek-V3-like preset (experiments/gpu_preset_costs.py) without a GPU: its modules are the
ops the preset prices (the same parameters at the published sizes, the same matrix-product FLOPs on toy sizes by
torch's FlopCounterMode), and its command runs through on a CPU and writes what the preset predicts."""

from __future__ import annotations

import csv

import pytest

torch = pytest.importorskip("torch")
from experiments.gpu_preset_costs import SMALL_ARCH, SMALL_MB, main, modules, preset_op  # noqa: E402
from planner.compare.presets import DeepSeekV3, MicroBatch, pass_seconds  # noqa: E402
from planner.data import resolve_profile  # noqa: E402
from planner.ir.hardware import load_topology  # noqa: E402


@pytest.mark.parametrize("expert_parallel", [16, 8])
def test_modules_hold_the_presets_parameters_at_the_published_sizes(expert_parallel):
    """Built on the meta device (no memory): every module's parameter bytes in bf16 are its preset op's."""
    arch, mb = DeepSeekV3(), MicroBatch()
    with torch.device("meta"):
        for name, factory, shape in modules(torch, arch, mb, expert_parallel):
            module = factory()
            assert shape == (4096, 7168)
            assert sum(p.numel() for p in module.parameters()) * 2 == preset_op(name, arch, mb,
                                                                                 expert_parallel).param_bytes, name


@pytest.mark.parametrize("expert_parallel", [4, 16])
def test_modules_do_the_presets_matrix_products(expert_parallel):
    """FlopCounterMode's forward and backward FLOPs on toy sizes equal the preset's F and B + W exactly, once the
    counter's attention core (it counts the whole s x s products; the causal mask halves them, as the preset
    does) is halved."""
    from torch.utils.flop_counter import FlopCounterMode

    a, mb = SMALL_ARCH, SMALL_MB
    qk, dv = a.qk_nope_head_dim + a.qk_rope_head_dim, a.v_head_dim
    causal_core = mb.seqs * a.num_heads * mb.seq_len ** 2 * (qk + dv)  # the preset's core FLOPs, forward
    for name, factory, shape in modules(torch, a, mb, expert_parallel):
        torch.manual_seed(0)
        module = factory()
        x = torch.randn(*shape, requires_grad=True)
        with FlopCounterMode(display=False) as fc:
            y = module(x)
        forward = fc.get_total_flops()
        with FlopCounterMode(display=False) as fc:
            y.sum().backward()
        backward = fc.get_total_flops()
        op = preset_op(name, a, mb, expert_parallel)
        extra_f, extra_bw = (causal_core, 2 * causal_core) if name == "attention" else (0, 0)
        assert forward - extra_f == op.forward_flops, name
        assert backward - extra_bw == op.input_grad_flops + op.weight_grad_flops, name


def test_command_runs_on_a_cpu_and_writes_the_presets_prediction(tmp_path):
    out = tmp_path / "gpu"
    assert main(["--small", "--device", "cpu", "--reps", "1", "--expert-parallel", "4", "--out", str(out)]) == 0
    rows = list(csv.DictReader((out / "preset_fbw.csv").open()))
    assert [(r["op"], r["device"]) for r in rows] == [
        (op, dev) for op in ("attention", "experts_ep4", "mlp", "head") for dev in ("h100", "measured")] + [
        ("attention_core", "-")]
    h100 = load_topology(resolve_profile("h100-8-nvlink.yaml")).devices[0]
    for r in rows[:-1]:
        if r["device"] == "h100":
            want = pass_seconds(preset_op(r["op"], SMALL_ARCH, SMALL_MB, 4), h100)
            got = (float(r["predicted_f_ms"]), float(r["predicted_b_ms"]), float(r["predicted_w_ms"]))
            assert got == pytest.approx(tuple(s * 1e3 for s in want), abs=1e-4)
        assert float(r["measured_f_ms"]) > 0 and r["forward_held_mib"] == ""  # no CUDA: no allocator reading
