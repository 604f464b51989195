"""plan-compare on a model (planner/pipeline/model_costs.py) and communication streams (unroll, streams.py).

Bubble ratio here is the docs/architecture.md one: total idle time of the compute streams / (devices x makespan).
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from formulations.pipeline import solve_pipeline
from planner.cli_compare import compare_main
from planner.compare.pipelines import CSV_COLUMNS, compare
from planner.pipeline.generators import gpipe
from planner.pipeline.registry import UnitCosts
from planner.pipeline.streams import simulate_pipeline
from planner.pipeline.unroll import uniform_pipeline, unroll

REPO = Path(__file__).resolve().parents[1]
MOE = REPO / "planner" / "data" / "models" / "moe.onnx"
HW = REPO / "hardware_profiles" / "h100-8-nvlink.yaml"


@pytest.fixture(scope="module")
def moe_instance():
    from planner.ir.hardware import load_topology
    from planner.prepare import prepare

    return prepare(MOE, load_topology(HW)).instance


def test_model_cut_keeps_every_op_once_and_conserves_work(moe_instance):
    from planner.compare.model_costs import model_costs

    mc = model_costs(moe_instance, 2, time_limit_s=10)
    inst = moe_instance
    for cut in (mc.stage_positions, mc.chunk_positions):
        flat = [i for pos in cut for i in pos]
        assert flat == list(range(inst.num_tasks))  # contiguous, in topological order, each op once
    one = mc.pipeline("1f1b", 2, 4)
    v = mc.pipeline("zb-v", 2, 4)
    dp = mc.pipeline("dualpipe", 2, 4)
    total = int(inst.duration_tick[:, 0].sum())  # h100-8-nvlink: identical devices
    assert sum(s.forward_tick for s in one.stages) == total == sum(s.forward_tick for s in v.stages)
    assert sum(s.param_bytes for s in one.stages) == int(inst.param_bytes.sum()) == \
        sum(s.param_bytes for s in v.stages)
    assert all(s.input_grad_tick == s.weight_grad_tick == s.forward_tick for s in one.stages)  # B = W = F
    # DualPipe: two copies of every stage (twice the parameters), m/2 micro-batches per direction
    assert sum(s.param_bytes for s in dp.stages) == 2 * int(inst.param_bytes.sum()) and dp.num_microbatches == 2
    # the hop of stage 0 carries the tensors crossing the cut; the V's turn (chunk p-1 -> p, one device) is free
    assert one.hop_tick(0) > 0 and one.hop_tick(1) == 0 and v.hop_tick(1) == 0 and v.hop_tick(0) > 0


def test_cli_model_mode_on_the_bundled_moe(tmp_path, capsys):
    out = tmp_path / "moe"
    rc = compare_main(["--model", str(MOE), "--hw", str(HW), "--stages", "2", "--microbatches", "4",
                       "--time-limit", "4", "--stage-time-limit", "5", "--no-pictures", "--out", str(out)])
    assert rc == 0
    rows = list(csv.DictReader((out / "compare.csv").open()))
    assert tuple(rows[0]) == CSV_COLUMNS
    by = {r["schedule"]: r for r in rows}
    assert {"gpipe", "1f1b", "zb-h1", "dualpipe", "dualpipev", "opplan"} <= set(by)
    assert float(by["opplan"]["peak_memory"]) <= float(by["dualpipe"]["peak_memory"])
    assert float(by["opplan"]["makespan"]) <= float(by["dualpipe"]["makespan"])
    assert float(by["dualpipe"]["param_memory"]) > float(by["1f1b"]["param_memory"])  # two copies
    printed = capsys.readouterr().out
    assert "times in us, memory in MiB" in printed


def test_model_mode_needs_the_hardware(capsys):
    assert compare_main(["--model", str(MOE), "--stages", "2", "--microbatches", "4", "--no-opplan"]) == 2
    assert "--hw" in capsys.readouterr().err


def test_sends_become_tasks_on_the_senders_communication_stream():
    pipe = uniform_pipeline(2, 1, comm_tick=2)
    pipe = type(pipe)(**{**pipe.__dict__, "comm_stream": True})
    inst = unroll(pipe)
    assert inst.num_devices == 4 and inst.device_names[2:] == ("p0/comm", "p1/comm")
    idx = inst.task_index
    assert inst.eligible(idx["0SEND_F0"], 2) and inst.eligible(idx["1SEND_B0"], 3)
    edges = {(inst.task_names[u], inst.task_names[v]) for u, v in inst.edges}
    assert {("0F0", "0SEND_F0"), ("0SEND_F0", "1F0"), ("1B0", "1SEND_B0"), ("1SEND_B0", "0B0")} <= edges
    assert ("0F0", "1F0") not in edges


def test_a_devices_sends_serialize_on_its_stream():
    # GPipe, 2 stages, 2 micro-batches, F = B = W = 1 (BW = 2), every hop 2 ticks.
    # Edge delays: 1F0 [3,4), 1F1 [4,5), 1BW0 [5,7), 1BW1 [7,9); gradients arrive 9, 11; 0BW0 [9,11),
    #   0BW1 [11,13) -> 13.
    # Stream: device 0's sends run [1,3), [3,5) -> 1F0 [3,4), 1F1 [5,6), 1BW0 [6,8), 1BW1 [8,10); device 1's
    #   gradient sends [8,10), [10,12) -> 0BW0 [10,12), 0BW1 [12,14) -> 14.
    plain = uniform_pipeline(2, 2, comm_tick=2)
    stream = type(plain)(**{**plain.__dict__, "comm_stream": True})
    _, tl_plain = simulate_pipeline(plain, gpipe(2, 2))
    inst, tl = simulate_pipeline(stream, gpipe(2, 2))
    assert tl_plain.makespan_tick == 13 and tl.makespan_tick == 14
    at = tl.by_task()
    assert (at["0SEND_F1"].start_tick, at["1F1"].start_tick, at["0BW1"].end_tick) == (3, 5, 14)


def test_formulation_orders_sends_and_never_beats_the_delay_model():
    # 2 stages, 3 micro-batches, F = B = W = 1, hops of 2: the stream model only adds constraints, so its optimum
    # is >= the edge-delay model's; both solve to optimality on this size.
    plain = uniform_pipeline(2, 3, comm_tick=2)
    stream = type(plain)(**{**plain.__dict__, "comm_stream": True})
    a = solve_pipeline(plain, time_limit_s=20)
    b = solve_pipeline(stream, time_limit_s=20)
    assert a.status == b.status == "optimal"
    assert b.plan.makespan_tick >= a.plan.makespan_tick
    sends = sorted((x.start_tick, x.end_tick) for x in b.plan.placements if x.device == 2)
    assert len(sends) == 3 and all(e1 <= s2 for (_, e1), (s2, _) in zip(sends, sends[1:]))
    assert b.schedule.num_devices == 2  # the schedule holds the compute actions


def test_compare_with_comm_streams_keeps_figures_on_compute_streams():
    cmp = compare(4, 8, UnitCosts(comm=0.5, comm_stream=True), time_limit_s=5)
    dp, opp = cmp.row("dualpipe"), cmp.row("opplan")
    assert dp.timeline.num_devices == 8 and len(dp.figures.peak_memory_bytes) == 4
    assert opp.figures.max_peak_memory_bytes <= dp.figures.max_peak_memory_bytes
    assert opp.figures.makespan_tick <= dp.figures.makespan_tick


def test_moe_all_to_all_is_derived_from_dispatched_bytes(moe_instance):
    # h100-8-nvlink: one link class between devices, latency 300 ticks, 4500 bytes per tick.  A stage's a2a_tick
    # is, per MoE layer with ops in it, ceil(300 + (bytes of its expert dispatch outputs) x (N-1)/N / 4500), with
    # N = 2 (the expert-parallel degree defaults to the pipeline's devices).  The MoE layers are found from the
    # graph's structure (planner/ir/moe_structure.py); the op names serve here as the independent oracle.
    import dataclasses
    import math
    import re

    from planner.compare.model_costs import model_costs
    from planner.ir.hardware import load_topology
    from planner.ir.moe_structure import find_moe_layers
    from planner.prepare import prepare

    graph = prepare(MOE, load_topology(HW)).graph
    mc = dataclasses.replace(model_costs(moe_instance, 2, time_limit_s=10), moe=find_moe_layers(graph))
    inst = moe_instance
    order = inst.topological_order
    pipe = mc.pipeline("1f1b", 2, 4)
    assert pipe.has_a2a and pipe.streams_on
    for s, pos in enumerate(mc.stage_positions):
        per_layer: dict[str, int] = {}
        for i in pos:
            m = re.match(r"^(.*)/expert\d+/dispatch$", inst.task_names[order[i]])
            if m:
                per_layer[m.group(1)] = per_layer.get(m.group(1), 0) + int(inst.activation_bytes[order[i]])
        want = sum(math.ceil(300 + b * (2 - 1) / 2 / 4500) for b in per_layer.values())
        assert pipe.stages[s].a2a_tick == want
    assert sum(st.a2a_tick for st in pipe.stages) > 0
    off = dataclasses.replace(mc, a2a=False).pipeline("1f1b", 2, 4)
    assert not off.has_a2a and all(st.a2a_tick == 0 for st in off.stages)
