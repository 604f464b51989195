"""ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, section 6): closed form on equal costs, near
the lower bound and below 1F1B on unequal costs, and the same action lists as torch's ScheduleZBVZeroBubble.

Bubble definition (as tests/test_pipeline_generators.py and metrics.py): idle time summed over the p devices,
with the step measured from the first start to the last end over all devices; `per_device_bubble_tick` is that
sum / p.  The paper's "zero bubble" measures each device from its own first start to its own last end; in our
definition device r still starts r chunk forwards late, so on equal chunk costs F = B = W the idle per device
is (p-1)F and the makespan 6mF + (p-1)F.

Lower bound used below (any schedule, any order, on the V placement, zero communication): device r cannot start
before r chunk forwards have run (its first task needs F of stages 0..r-1 of micro-batch 0), and it then has
2m chunk-(F+B+W) of work; so makespan >= (p-1)F_chunk + m(F+B+W) in whole-stage units (the bottom device).
"""

from __future__ import annotations

import pytest

from planner.pipeline.dualpipe import dualpipe_v
from planner.pipeline.generators import one_f_one_b
from planner.pipeline.metrics import figures
from planner.pipeline.registry import Scales, UnitCosts, pipeline_for
from planner.pipeline.unroll import instance_for_schedule, uniform_pipeline
from planner.pipeline.zero_bubble import zb_v
from planner.schedule.simulate import simulate_schedule
from planner.schedule.torch_csv import schedule_to_torch_rows
from planner.schedule.validate import validate_plan


def _figures(name, schedule, p, m, costs):
    """Figures of `schedule` on the pipeline the registry gives `name` (the same model on the same p devices:
    ZB-V and DualPipeV cut every stage in two chunks of half the cost), with makespan and memory in units."""
    sc = Scales.of(costs)
    pipe = pipeline_for(name, p, m, costs, sc)
    inst = instance_for_schedule(pipe, schedule)
    tl = simulate_schedule(inst, schedule)
    validate_plan(inst, tl.to_plan(method=name))
    fig = figures(pipe, tl)
    return fig.makespan_tick / sc.ticks_per_unit, max(fig.peak_activation_bytes) / sc.bytes_per_unit


def _lower_bound(p, m, c):
    return (p - 1) * c.f / 2 + m * (c.f + c.b + c.w)


@pytest.mark.parametrize("f", [1, 2])
@pytest.mark.parametrize("p,m", [(1, 2), (2, 4), (3, 6), (4, 8), (4, 12), (6, 12), (8, 16), (8, 20)])
def test_equal_costs_closed_form_and_1f1b_memory(p, m, f):
    # 2p chunks costing F = B = W = f each: per-device idle (p-1)f (module docstring), which is the lower bound;
    # every device peaks at 2p chunk activations (1F1B's p stage activations).
    pipe = uniform_pipeline(2 * p, m, placement="v", forward_tick=f, input_grad_tick=f, weight_grad_tick=f)
    sch = zb_v(p, m)
    inst = instance_for_schedule(pipe, sch)
    tl = simulate_schedule(inst, sch)
    validate_plan(inst, tl.to_plan(method="zb-v"))
    fig = figures(pipe, tl)
    assert fig.per_device_bubble_tick == (p - 1) * f
    assert fig.makespan_tick == 6 * m * f + (p - 1) * f
    assert set(fig.peak_activation_bytes) == {2 * p}


# Measured (units of the whole-stage costs; LB = _lower_bound): ZB-V against 1F1B, DualPipeV (pairs at the sum
# of their halves) and the bound.  The previous priority-rule ZB-V is in the last column.
#   (p, m)  F,B,W   zb-v   1f1b  dualpipev   LB     old zb-v
#   (4, 8)  2,3,1   54     66    57.5        51     69
#   (4, 8)  1,2,1   35     44    37.5        33.5   45
#   (8, 20) 2,3,1   134    162   143.5       127    173
#   (8, 20) 1,2,1   87     108   93.5        83.5   112.5
EXPECTED = {((4, 8), (2, 3, 1)): 54, ((4, 8), (1, 2, 1)): 35, ((8, 20), (2, 3, 1)): 134, ((8, 20), (1, 2, 1)): 87}


@pytest.mark.parametrize("fbw", [(2, 3, 1), (1, 2, 1), (3, 2, 2), (1, 1, 2), (1, 3, 1), (3, 1, 1)])
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12), (6, 12), (8, 20)])
def test_unequal_costs_near_lower_bound_and_below_1f1b(p, m, fbw):
    c = UnitCosts(*fbw, activation=1)
    span, mem = _figures("zb-v", zb_v(p, m), p, m, c)
    span_1f1b, mem_1f1b = _figures("1f1b", one_f_one_b(p, m), p, m, c)
    span_dpv, _ = _figures("dualpipev", dualpipe_v(p, m), p, m, c)
    lb = _lower_bound(p, m, c)
    assert lb <= span <= 1.13 * lb  # measured worst on this grid: 1.12 at (6, 12) with F, B, W = 1, 3, 1
    assert span < span_1f1b and span <= span_dpv
    assert mem == mem_1f1b == p  # activation memory of p stages
    if ((p, m), fbw) in EXPECTED:
        assert span == EXPECTED[(p, m), fbw]


def _torch_rows(p: int, m: int) -> list[list[str]]:
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    cls = getattr(schedules, "ScheduleZBVZeroBubble", None)
    if cls is None or not hasattr(cls, "_calculate_single_rank_operations"):
        pytest.skip("this torch has no ScheduleZBVZeroBubble._calculate_single_rank_operations")
    obj = object.__new__(cls)  # no process group, no stages: the method reads only these three fields
    obj.pp_group_size = p
    obj._n_microbatches = m
    obj.num_stages = 2 * p
    try:
        return [[str(a) for a in obj._calculate_single_rank_operations(r) if a is not None] for r in range(p)]
    except AttributeError as exc:  # pragma: no cover - depends on the torch version
        pytest.skip(f"ScheduleZBVZeroBubble needs more state in this torch version: {exc}")


@pytest.mark.parametrize("p,m", [(4, 8), (4, 10), (2, 4), (3, 7), (8, 20), (1, 3)])
def test_zb_v_matches_torch(p, m):
    assert schedule_to_torch_rows(zb_v(p, m)) == _torch_rows(p, m)
