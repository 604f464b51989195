"""Baseline generators: valid on a grid of (p, m), published closed forms on uniform stages, requirements, goldens.

Bubble definition used here: **per-device idle time** = total idle time / p = makespan - busy time of one device
(on uniform stages every device idles the same), with the makespan from the first start to the last end of the
step (so bubble ratio = idle / (devices x makespan) = per-device idle / makespan).  The published forms below are
in those terms.  Zero communication throughout.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.pipeline.dualpipe import dualpipe, dualpipe_v
from planner.pipeline.generators import RequirementError, gpipe, interleaved_1f1b, one_f_one_b
from planner.pipeline.metrics import figures
from planner.pipeline.registry import GENERATORS
from planner.pipeline.unroll import instance_for_schedule, uniform_pipeline
from planner.pipeline.zero_bubble import zb_h1, zb_h2, zb_v
from planner.schedule.simulate import simulate_schedule
from planner.schedule.validate import validate_plan

GOLDEN = Path(__file__).parent / "golden" / "pipeline"
COSTS = [(1, 1, 1), (2, 3, 1), (3, 2, 2)]  # (F, B input-grad, W) per stage


def _run(schedule, pipe):
    inst = instance_for_schedule(pipe, schedule)
    tl = simulate_schedule(inst, schedule)
    validate_plan(inst, tl.to_plan(method=schedule.name))
    return figures(pipe, tl)


def _pipe(name, p, m, f, b, w, overlap=True):
    kw = dict(forward_tick=f, input_grad_tick=b, weight_grad_tick=w)
    if name in ("gpipe", "1f1b", "zb-h1", "zb-h2"):
        return uniform_pipeline(p, m, **kw)
    if name == "interleaved-1f1b":
        return uniform_pipeline(2 * p, m, num_devices=p, **kw)
    ov = (f + b + w + f) if overlap else None  # an F&B pair as one task lasting F + BW
    if name == "dualpipe":
        return uniform_pipeline(2 * p, m // 2, placement="dualpipe", overlap_tick=ov, **kw)
    return uniform_pipeline(2 * p, m, placement="v", overlap_tick=ov, **kw)


GRID = [(p, m) for p in (1, 2, 3, 4, 6, 8) for m in (1, 2, 4, 7, 8, 12, 16, 20)]


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_every_generator_is_valid_or_refuses_clearly(name):
    built = 0
    for p, m in GRID:
        try:
            sch = GENERATORS[name](p, m)
        except RequirementError as exc:
            assert "requires" in str(exc) and f"p = {p}" in str(exc)
            continue
        if name != "dualpipe":
            sch.check_complete()
        _run(sch, _pipe(name, p, m, 2, 3, 1))
        built += 1
    assert built >= 8


@pytest.mark.parametrize("f,b,w", COSTS)
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12), (8, 16)])
def test_gpipe_and_1f1b_idle_is_p_minus_1_times_f_plus_full_backward(p, m, f, b, w):
    for gen, name in ((gpipe, "gpipe"), (one_f_one_b, "1f1b")):
        fig = _run(gen(p, m), _pipe(name, p, m, f, b, w))
        assert fig.per_device_bubble_tick == (p - 1) * (f + b + w)
        assert fig.makespan_tick == (m + p - 1) * (f + b + w)
    # memory: 1F1B holds p activations on the first device, GPipe all m
    assert max(_run(one_f_one_b(p, m), _pipe("1f1b", p, m, f, b, w)).peak_activation_bytes) == p
    assert max(_run(gpipe(p, m), _pipe("gpipe", p, m, f, b, w)).peak_activation_bytes) == m


@pytest.mark.parametrize("f,b,w", COSTS)
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12), (8, 16)])
def test_interleaved_idle_is_that_of_one_chunk(p, m, f, b, w):
    # v = 2 chunks per device, each costing f, b, w: idle (p-1)(F_chunk + BW_chunk).
    fig = _run(interleaved_1f1b(p, m), _pipe("interleaved-1f1b", p, m, f, b, w))
    assert fig.per_device_bubble_tick == (p - 1) * (f + b + w)


@pytest.mark.parametrize("f,b,w", COSTS)
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12), (6, 12), (8, 20)])
def test_zb_h1_closed_form_and_1f1b_memory(p, m, f, b, w):
    # Published: (p-1)(F + B - W) with B the input-gradient part = (p-1)(F + BW - 2W) with BW the full backward.
    fig = _run(zb_h1(p, m), _pipe("zb-h1", p, m, f, b, w))
    assert fig.per_device_bubble_tick == (p - 1) * (f + (b + w) - 2 * w)
    assert max(fig.peak_activation_bytes) == p


@pytest.mark.parametrize("f,b,w", [(2, 3, 1), (1, 2, 1), (1, 1, 1)])
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (6, 12), (8, 20)])
def test_zb_h2_closed_form(p, m, f, b, w):
    # Published (B input-gradient part): (p-1)(F + B - 2W), zero when F = B = W in the paper's per-device view.
    # With the step measured from the first start to the last end the parallelogram adds its start-up: the idle
    # per device is (p-1) * max(F, F + B - 2W).  Memory 2p-1 activations.
    fig = _run(zb_h2(p, m), _pipe("zb-h2", p, m, f, b, w))
    assert fig.per_device_bubble_tick == (p - 1) * max(f, f + b - 2 * w)
    assert max(fig.peak_activation_bytes) == 2 * p - 1


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12), (6, 12), (8, 16), (8, 20)])
def test_dualpipe_closed_form_and_memory(p, m):
    # F = B = W = 1, overlapped pair F&B (F + full backward) lasts 3; B in the formula is the full backward (2).
    # Published: (p/2 - 1)(F&B + B - 3W) = (p/2 - 1)(3 + 2 - 3); memory 2x parameters, p + 1 activations.
    pipe = uniform_pipeline(2 * p, m // 2, placement="dualpipe", overlap_tick=3, param_bytes=5)
    fig = _run(dualpipe(p, m), pipe)
    assert fig.per_device_bubble_tick == (p // 2 - 1) * (3 + 2 - 3)
    assert set(fig.param_bytes) == {2 * 5}
    assert set(fig.peak_activation_bytes) == {p + 1}


@pytest.mark.parametrize("f,b,w", [(2, 3, 1), (3, 2, 2)])
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (8, 16)])
def test_dualpipe_never_exceeds_its_closed_form(p, m, f, b, w):
    fb = f + b + w
    fig = _run(dualpipe(p, m), _pipe("dualpipe", p, m, f, b, w))
    assert fig.per_device_bubble_tick <= (p // 2 - 1) * (f + fb + fb - 3 * w)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 10), (6, 12), (8, 20)])
def test_dualpipe_v_closed_form_and_memory(p, m):
    # DualPipeV runs 2p chunks on p devices: the DualPipe README's (PP/2 - 1)(F&B + B - 3W) with PP = 2p
    # chunks, per-chunk costs F = B = W = 1 (F&B = 3, B full = 2); memory PP + 1 = 2p + 1 chunk activations.
    pipe = uniform_pipeline(2 * p, m, placement="v", overlap_tick=3, param_bytes=1)
    fig = _run(dualpipe_v(p, m), pipe)
    assert fig.per_device_bubble_tick == (p - 1) * (3 + 2 - 3)
    assert set(fig.peak_activation_bytes) == {2 * p + 1}
    assert set(fig.param_bytes) == {2}


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (6, 12), (8, 16)])
def test_zb_v_closed_form_and_1f1b_memory(p, m):
    # 2p chunks, F = B = W = 1 per chunk.  Published: zero bubble, each device measured from its own first start
    # to its own last end; in this file's definition (first start to last end over all devices) device r starts
    # r chunk forwards late: idle (p-1)F per device.  Memory 2p chunk activations (1F1B's p stages) on every
    # device.  Unequal costs and the comparison with torch: tests/test_pipeline_zbv.py.
    fig = _run(zb_v(p, m), _pipe("zb-v", p, m, 1, 1, 1))
    assert set(fig.peak_activation_bytes) == {2 * p}
    assert fig.per_device_bubble_tick == (p - 1) * 1


@pytest.mark.parametrize("gen,p,m,what", [
    (one_f_one_b, 4, 3, "m >= p"),
    (interleaved_1f1b, 4, 6, "multiple of p"),
    (zb_h1, 4, 3, "m >= p"),
    (zb_h2, 4, 6, "m >= 2p-1"),
    (zb_v, 4, 7, "m >= 2p"),
    (dualpipe, 3, 12, "even number of devices"),
    (dualpipe, 4, 9, "even number of micro-batches"),
    (dualpipe, 4, 6, "m >= 2p"),
    (dualpipe_v, 4, 7, "m >= 2p"),
])
def test_requirements_are_typed_errors(gen, p, m, what):
    with pytest.raises(RequirementError, match=what):
        gen(p, m)


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_golden_orders(name):
    lines = [ln for ln in (GOLDEN / f"{name}.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert [" ".join(r) for r in GENERATORS[name](4, 8).strings()] == lines
