"""The DeepSeek-V3-like preset of plan-compare (planner/compare/presets.py).

The FLOP counts below are written out from the formulas of the presets module docstring with the published figures
as literal numbers (h 7168, H 128, r_q 1536, r_kv 512, d_n 128, d_r 64, d_v 128, E 256, k 8, one shared expert,
f_e 2048, f 18432, V 129280), one micro-batch of 1 x 4096 tokens, so a wrong formula in the module fails here.
"""

from __future__ import annotations

import csv
import itertools
import math

import pytest

from planner.cli_compare import compare_main
from planner.compare.pipelines import compare
from planner.compare.presets import (
    DeepSeekV3,
    MicroBatch,
    a2a_s,
    attention_op,
    balanced_cut,
    experts_op,
    head_op,
    layer_ops,
    load_op_times,
    mlp_op,
    model_units,
    pass_seconds,
    preset_costs,
)
from planner.errors import InputError
from planner.ir.hardware import load_topology

T = 4096
H100_8 = "hardware_profiles/h100-8-nvlink.yaml"
H100_16 = "hardware_profiles/h100-2x8-ib.yaml"


@pytest.fixture(scope="module")
def ib16():
    return load_topology(H100_16)


def test_attention_flops_by_hand():
    # MLA projections: W_DQ 7168x1536, W_UQ 1536x(128 x 192), W_DKV 7168x(512 + 64), W_UKV 512x(128 x 256),
    # W_O (128 x 128)x7168 -> 187,105,280 weights, 2 FLOPs per weight per token.
    weights = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert weights == 187_105_280
    proj = 2 * T * weights
    # causal core: QK^T (192 per head) and PV (128 per head), each 2 x 4096^2 / 2 multiply-adds per head
    core = 2 * 128 * (4096 * 4096 // 2) * 192 + 2 * 128 * (4096 * 4096 // 2) * 128
    op = attention_op(DeepSeekV3(), MicroBatch(4096, 1), "a")
    assert op.forward_flops == proj + core == 2_219_961_221_120
    assert op.input_grad_flops == proj + 2 * core  # the core's input gradient is four products
    assert op.weight_grad_flops == proj  # the core has no weights
    # bf16 parameters: the projections and the three RMSNorm weights (7168 + 1536 + 512)
    assert op.param_bytes == 2 * (weights + 7168 + 1536 + 512)
    # Q, K (192 per head each) and V (128 per head) are freed by B
    assert op.freed_by_b_bytes == 2 * T * 128 * (192 + 192 + 128)


def test_ffn_flops_by_hand():
    a, mb = DeepSeekV3(), MicroBatch()
    mlp = mlp_op(a, mb, "m")
    assert mlp.forward_flops == mlp.input_grad_flops == mlp.weight_grad_flops == 2 * T * 3 * 7168 * 18432
    ex = experts_op(a, mb, "e", expert_parallel=16)
    # gate 7168 x 256, then 8 routed + 1 shared SwiGLU experts of 3 x 7168 x 2048 per token
    assert ex.forward_flops == 2 * T * 7168 * 256 + 2 * T * 9 * 3 * 7168 * 2048
    assert ex.input_grad_flops == ex.weight_grad_flops == ex.forward_flops
    # one shared and 256 / 16 routed experts on the device, the gate and one norm
    assert ex.param_bytes == 2 * (256 * 7168 + 17 * 3 * 7168 * 2048 + 7168)
    head = head_op(a, mb)
    assert head.forward_flops == 2 * T * 7168 * 129280


def test_forward_flops_per_token_match_the_published_activated_parameters():
    # The report: 37B activated parameters per token (36.6B of the main model, the 0.9B head included).  At one
    # token the attention core is negligible, so the forward FLOPs / 2 count the activated weights.
    units = model_units(DeepSeekV3(), MicroBatch(1, 1), 61, 16)
    activated = sum(op.forward_flops for u in units for op in u) / 2
    assert activated == pytest.approx(36.6e9, rel=0.005)


def test_layers_dense_then_moe_with_all_to_all_bytes():
    a, mb = DeepSeekV3(), MicroBatch()
    assert [op.name for u in layer_ops(a, mb, 2, 16) for op in u] == ["layer2/attention", "layer2/mlp"]
    moe = [op for u in layer_ops(a, mb, 3, 16) for op in u]
    assert [op.name for op in moe] == ["layer3/attention", "layer3/dispatch", "layer3/experts", "layer3/combine"]
    assert moe[1].a2a_bytes == moe[3].a2a_bytes == T * 8 * 7168 * 2
    units = model_units(a, mb, 61, 16)
    assert len(units) == 122 and units[0][0].name == "embedding" and units[-1][-1].name == "head"


def test_pass_time_is_the_compute_rule_at_bf16_peak(ib16):
    dev = ib16.devices[0]
    op = mlp_op(DeepSeekV3(), MicroBatch(), "m")
    f, b, w = pass_seconds(op, dev)
    expected = 2 * T * 3 * 7168 * 18432 / 989.4e12 + 5e-6  # compute-bound, plus the profile's launch overhead
    assert f == b == w == pytest.approx(expected, rel=1e-9)


def test_all_to_all_time_over_nvlink_and_infiniband(ib16):
    sent = T * 8 * 7168 * 2
    # device 0 of 2 x 8 H100, EP 16: 7 peers over NVLink (3 us, 450 GB/s), 8 over IB (8 us, 50 GB/s), 1/16 each
    nvlink = 3e-6 + 7 * sent / 16 / 450e9
    ib = 8e-6 + 8 * sent / 16 / 50e9
    assert a2a_s(ib16, 16, sent) == pytest.approx(max(nvlink, ib))
    assert a2a_s(ib16, 8, sent) == pytest.approx(3e-6 + 7 * sent / 8 / 450e9)  # one node: NVLink only
    assert a2a_s(ib16, 1, sent) == 0
    # EP 32 on a 16-device profile: the 16 peers beyond it over IB, 8 + 16 in all
    assert a2a_s(ib16, 32, sent) == pytest.approx(8e-6 + 24 * sent / 32 / 50e9)


def test_balanced_cut_matches_brute_force():
    for weights in ([3, 1, 1, 3], [5, 1, 1, 1, 1, 5, 2], [1, 9, 1, 1, 1, 1], [4] * 6):
        for k in range(1, len(weights) + 1):
            cut = balanced_cut(weights, k)
            assert [i for piece in cut for i in piece] == list(range(len(weights)))
            best = min(max(sum(weights[lo:hi]) for lo, hi in zip((0, *c), (*c, len(weights)), strict=True))
                       for c in itertools.combinations(range(1, len(weights)), k - 1))
            assert max(sum(weights[i] for i in piece) for piece in cut) == best
    assert balanced_cut([3, 1, 1, 3], 2) == ((0, 1), (2, 3))


def test_pipelines_sum_the_ops_of_their_pieces(ib16):
    costs = preset_costs("deepseek-v3", ib16, 4, num_layers=8)
    assert costs.num_layers == 8 and len(costs.stage_units) == 4 and len(costs.chunk_units) == 8
    one = costs.pipeline("1f1b", 4, 8)
    # every stage's parameters are the sum of its ops'; the whole model once over the four stages
    assert sum(s.param_bytes for s in one.stages) == sum(op.param_bytes for u in costs.units for op in u)
    dp = costs.pipeline("dualpipe", 4, 8)
    assert dp.stages[:4] == dp.stages[4:] == one.stages  # two copies of the same stages (identical devices)
    assert dp.num_microbatches == 4
    v = costs.pipeline("zb-v", 4, 8)
    assert v.stage_comm_tick is not None and v.stage_comm_tick[3] == 0  # chunks 3 and 4 share device 3
    assert v.stage_comm_tick[-1] == 0 and all(t > 0 for i, t in enumerate(v.stage_comm_tick[:-1]) if i != 3)
    # one MoE layer's dispatch over NVLink inside one node: a2a_tick of a piece counts its MoE layers
    moe_layers = sum(1 for u in costs.stage_units[-1] for op in costs.units[u] if op.name.endswith("/dispatch"))
    per = math.ceil(a2a_s(ib16, 4, T * 8 * 7168 * 2) / costs.tick_s - 1e-9)
    assert one.stages[-1].a2a_tick == moe_layers * per > 0


def test_compare_runs_every_schedule_on_the_preset(ib16):
    costs = preset_costs("deepseek-v3", ib16, 2, num_layers=2, microbatch=MicroBatch(512, 1))
    cmp = compare(2, 4, costs, opplan=False)
    assert not [r.name for r in cmp.rows if r.skipped]
    assert cmp.units() == ("ms", "MiB")


def test_cli_end_to_end_small(tmp_path, capsys):
    out = tmp_path / "cmp"
    rc = compare_main(["--preset", "deepseek-v3", "--layers", "4", "--stages", "4", "--microbatches", "8",
                       "--hw", H100_8, "--time-limit", "4", "--no-pictures", "--out", str(out)])
    assert rc == 0
    rows = {r["schedule"]: r for r in csv.DictReader((out / "compare.csv").open())}
    assert {"1f1b", "zb-v", "dualpipe", "dualpipev", "opplan"} <= set(rows)
    assert float(rows["opplan"]["peak_memory"]) <= float(rows["dualpipe"]["peak_memory"])
    printed = capsys.readouterr().out
    assert "preset deepseek-v3: 4 layers, 1 x 4096 tokens" in printed and "(ms)" in printed


@pytest.mark.parametrize("argv, message", [
    (["--preset", "deepseek-v3", "--model", "m.onnx", "--hw", H100_8], "--preset and --model exclude each other"),
    (["--preset", "deepseek-v4", "--hw", H100_8], "unknown preset 'deepseek-v4' (use one of deepseek-v3)"),
    (["--preset", "deepseek-v3", "--layers", "0", "--hw", H100_8], "--layers: expected a whole number >= 1"),
    (["--preset", "deepseek-v3", "--layers", "2", "--hw", H100_8], "--layers 2 is too few for 4 stages"),
    (["--preset", "deepseek-v3"], "--preset needs --hw"),
    (["--layers", "4"], "apply only with --preset"),
    (["--preset", "deepseek-v3", "--stages", "16", "--hw", H100_8], "--stages 16 needs 1..8 devices"),
])
def test_cli_errors_are_one_line(argv, message, capsys):
    base = ["--stages", "4", "--microbatches", "8", "--no-opplan", "--no-pictures"]
    rc = compare_main(base + argv)
    err = capsys.readouterr().err
    assert rc != 0 and message in err and err.count("\n") == 1


def test_library_refuses_nonsense(ib16):
    with pytest.raises(InputError, match="unknown preset"):
        preset_costs("gpt-5", ib16, 2)
    with pytest.raises(InputError, match="--expert-parallel must be >= 1"):
        preset_costs("deepseek-v3", ib16, 2, expert_parallel=0)


def _times_csv(path, rows, header="op,f_ms,b_ms,w_ms"):
    path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


def test_measured_op_times_replace_the_roofline_of_their_ops_only(ib16, tmp_path):
    """Attention, experts (the EP-specific row before the generic one), mlp and head take the file's milliseconds;
    the embedding keeps the roofline, the all-to-alls the links; the cut is balanced on the times used."""
    times = load_op_times(_times_csv(tmp_path / "t.csv", [
        ("attention", 4, 7, 2), ("experts", 9, 9, 9), ("experts_ep4", 6, 8, 4), ("mlp", 5, 6, 5),
        ("head", 60, 60, 60), ("attention_core", 1, 3, 0)]))
    assert "attention_core" not in times  # the GPU script's diagnostic row is skipped
    roof = preset_costs("deepseek-v3", ib16, 4, num_layers=8)
    costs = preset_costs("deepseek-v3", ib16, 4, num_layers=8, op_times=times)
    ms = {"attention": (4, 7, 2), "experts": (6, 8, 4), "mlp": (5, 6, 5), "head": (60, 60, 60)}
    dev = ib16.devices[0]
    for s, units in enumerate(costs.stage_units):
        ops = [op for u in units for op in costs.units[u]]
        want = [sum(ms[op.name.rsplit("/", 1)[-1]][i] if op.name.rsplit("/", 1)[-1] in ms
                    else pass_seconds(op, dev)[i] * 1e3 for op in ops) for i in range(3)]
        got = costs.stage_cost(units, s)
        assert [got.forward_tick, got.input_grad_tick, got.weight_grad_tick] == [
            math.ceil(w * costs.ticks_per_unit - 1e-6) for w in want]
        # the same all-to-all, rounded up to this pricing's tick (coarser: the measured work is longer)
        a2a_ms = roof.stage_cost(units, s).a2a_tick / roof.ticks_per_unit
        assert got.a2a_tick == math.ceil(a2a_ms * costs.ticks_per_unit - 1e-6)
    assert any(costs.stage_cost(u, s).a2a_tick for s, u in enumerate(costs.stage_units))  # still there
    # a head measured at 180 ms against ~20 ms a layer: the cut (balanced on the times used) leaves it with its
    # layer's FFN alone, where the roofline's last stage held that layer's attention too
    assert costs.stage_units[-1] == (15,) and roof.stage_units[-1] == (14, 15)
    # an EP the file did not measure falls back to the generic experts row
    ep2 = preset_costs("deepseek-v3", ib16, 4, num_layers=8, op_times=times, expert_parallel=2)
    moe = next(u for u in ep2.units if any(op.name.endswith("/experts") for op in u))
    assert ep2.stage_cost([ep2.units.index(moe)], 0).forward_tick == 9 * ep2.ticks_per_unit


def test_measured_op_times_read_the_gpu_scripts_csv(tmp_path):
    header = "op,device,tokens,measured_f_ms,measured_b_ms,measured_w_ms,predicted_f_ms"
    path = _times_csv(tmp_path / "g.csv", [("attention", "h100", 4096, 3.9, 7.1, 2.3, 2.2),
                                           ("attention", "measured", 4096, 3.9, 7.1, 2.3, 2.9),
                                           ("attention_core", "-", 4096, 1.2, 4.2, 0, "")], header)
    assert load_op_times(path) == {"attention": (3.9, 7.1, 2.3)}


@pytest.mark.parametrize("rows, header, message", [
    ([("attention", 1, 1, 1)], "op,f,b,w", "lacks the columns op and f_ms,b_ms,w_ms"),
    ([("attn", 1, 1, 1)], "op,f_ms,b_ms,w_ms", ":2: unknown op 'attn'"),
    ([("mlp", 1, "x", 1)], "op,f_ms,b_ms,w_ms", ":2: mlp: f_ms, b_ms, w_ms must be numbers"),
    ([("mlp", 1, -0.2, 1)], "op,f_ms,b_ms,w_ms", "F must be > 0 and B, W >= 0"),
    ([("head", 0, 1, 1)], "op,f_ms,b_ms,w_ms", "F must be > 0"),
    ([("head", 1, 1, 1), ("head", 2, 1, 1)], "op,f_ms,b_ms,w_ms", ":3: head has two different times"),
    ([], "op,f_ms,b_ms,w_ms", "no op times"),
])
def test_measured_op_times_refuse_bad_files(tmp_path, rows, header, message):
    path = _times_csv(tmp_path / "bad.csv", rows, header)
    with pytest.raises(InputError, match=message.replace("(", r"\(")) as err:
        load_op_times(path)
    assert str(path) in str(err.value)
    with pytest.raises(InputError, match="no such file"):
        load_op_times(tmp_path / "missing.csv")


def test_cli_preset_times(tmp_path, capsys):
    times = _times_csv(tmp_path / "t.csv", [("attention", 4, 7, 2), ("experts", 6, 8, 4)])
    out = tmp_path / "cmp"
    rc = compare_main(["--preset", "deepseek-v3", "--layers", "4", "--stages", "4", "--microbatches", "8",
                       "--hw", H100_8, "--no-opplan", "--no-pictures", "--out", str(out), "--preset-times",
                       str(times)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert f"op times measured ({times}): attention, experts_ep4; the rest" in printed
    rc = compare_main(["--stages", "4", "--microbatches", "8", "--no-opplan", "--preset-times", str(times)])
    assert rc != 0 and "--preset-times apply only with --preset" in capsys.readouterr().err
