"""plan-compare names the devices at the memory cap (`planner.compare.pipelines.devices_at_cap`): where the cap,
not the order, keeps the planned schedule above its cut's bound."""

from __future__ import annotations

import pytest

from planner.compare.compare_policy import ComparePolicy
from planner.compare.pipelines import compare, devices_at_cap
from planner.pipeline.registry import UnitCosts


def test_devices_within_one_percent_of_the_cap_count() -> None:
    assert ComparePolicy().at_cap_share == 0.99
    assert devices_at_cap((10, 98, 99, 100, 50), 100) == (2, 3)
    assert devices_at_cap((10, 100), None) == ()
    assert devices_at_cap((), 100) == ()


@pytest.mark.parametrize("cap_units", [None, 3.0])
def test_the_planned_row_names_its_devices_at_the_cap(cap_units: float | None) -> None:
    # unit costs, p = 4, m = 8: under DualPipe's peak (5 units) no device of the planned row reaches it; under 3
    # units every device holds 3 at its peak
    cmp = compare(4, 8, UnitCosts(), schedules=("1f1b", "dualpipe"), time_limit_s=10, bound_time_s=0,
                  memory_cap_units=cap_units)
    opp = cmp.row("opplan")
    assert opp.figures is not None and cmp.memory_cap_units is not None
    cap = cmp.memory_cap_units * cmp.scales.bytes_per_unit
    expected = tuple(d for d, peak in enumerate(opp.figures.peak_memory_bytes) if peak >= 0.99 * cap)
    assert opp.notes["devices_at_cap"] == expected == ((0, 1, 2, 3) if cap_units else ())
    line = next(x for x in cmp.table().splitlines() if x.startswith("opplan:"))
    if expected:
        assert f"(at the cap: device{'s' if len(expected) > 1 else ''} {', '.join(map(str, expected))})" in line
    else:
        assert "at the cap" not in line
