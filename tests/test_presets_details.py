"""The DeepSeek-V3-like preset (`planner.compare.presets`) on its edges: as many stages as the profile has
devices, the embedding's parameters, and the op names a measured-times file may use."""

from __future__ import annotations

import pytest

from planner.compare.presets import (
    PRESETS,
    MicroBatch,
    a2a_s,
    embedding_op,
    experts_op,
    load_op_times,
    preset_costs,
)
from planner.errors import InputError
from planner.ir.hardware import load_topology

CPU4 = "hardware_profiles/cpu-4.yaml"


def test_a_preset_takes_every_device_of_the_profile_and_no_more():
    topo = load_topology(CPU4)
    assert len(preset_costs("deepseek-v3", topo, 4, num_layers=4).stage_units) == 4
    with pytest.raises(InputError, match="--stages 5 needs 1..4 devices of the hardware profile cpu-4"):
        preset_costs("deepseek-v3", topo, 5, num_layers=5)
    with pytest.raises(InputError, match="--stages 0 needs 1..4 devices"):
        preset_costs("deepseek-v3", topo, 0, num_layers=4, expert_parallel=4)


def test_the_embedding_holds_the_vocabulary_times_the_hidden_size_in_bf16():
    a = PRESETS["deepseek-v3"]
    op = embedding_op(a, MicroBatch())
    assert op.param_bytes == a.vocab * a.hidden * 2 and not op.has_input_grad


@pytest.mark.parametrize("key,ok", [("experts_ep8", True), ("experts_ep", False), ("experts_epx", False),
                                    ("expert_ep8", False), ("mlp", True), ("ffn", False)])
def test_measured_times_name_known_ops_or_an_expert_parallel_degree(tmp_path, key, ok):
    path = tmp_path / "times.csv"
    path.write_text(f"op,f_ms,b_ms,w_ms\n{key},1,2,3\n")
    if ok:
        assert load_op_times(path) == {key: (1.0, 2.0, 3.0)}
    else:
        with pytest.raises(InputError, match=f"unknown op '{key}'"):
            load_op_times(path)


def test_the_experts_keep_the_input_and_every_expert_s_input_and_three_hidden_activations():
    # per token: the layer input (h) and, for each of the top-k + shared experts, its input (h) and the gate, up and
    # SwiGLU outputs (3 x expert_ffn); bf16
    a = PRESETS["deepseek-v3"]
    op = experts_op(a, MicroBatch(), "experts", 8)
    per_token = a.top_k + a.num_shared_experts
    assert op.activation_bytes == 2 * 4096 * (a.hidden + per_token * (a.hidden + 3 * a.expert_ffn))


def test_an_all_to_all_of_nothing_takes_no_time():
    topo = load_topology(CPU4)
    assert a2a_s(topo, 4, 0) == 0 and a2a_s(topo, 1, 10**6) == 0 and a2a_s(topo, 4, 1) > 0


def test_the_finest_tick_whose_micro_batch_stays_within_the_tick_limit():
    # eight layers of 4096 tokens on one H100 take about 212.8 ms: 212771 ticks of 1 us is above the default limit
    # of 200000 (`PresetTickPolicy`), so the tick is 10 us (100 per ms)
    costs = preset_costs("deepseek-v3", load_topology("hardware_profiles/h100-8-nvlink.yaml"), 1, num_layers=8)
    assert costs.ticks_per_unit == 100
    work_ms = sum(sum(costs.priced_seconds(op, costs.topology.devices[0])) for u in costs.units for op in u) * 1e3
    assert 200 < work_ms <= 2000
