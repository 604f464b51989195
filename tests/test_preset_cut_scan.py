"""`experiments.preset_cut_scan`: the cuts next to the preset's, and one answer per cut that agrees with its figures."""

from __future__ import annotations

import pytest

from experiments.preset_cut_scan import main, neighbour_cuts, scan, target_tick, work_tick
from planner.compare.memory_bound_note import half_bubble_tick
from planner.compare.pipelines import scales_of, simulate_baseline
from planner.compare.presets import preset_costs
from planner.ir.hardware import load_topology


def test_one_boundary_moves_at_a_time_and_no_piece_empties() -> None:
    cut = ((0, 1), (2, 3, 4), (5,))
    assert list(neighbour_cuts(cut, 1)) == [((0,), (1, 2, 3, 4), (5,)), ((0, 1, 2), (3, 4), (5,)),
                                            ((0, 1), (2, 3), (4, 5))]  # the last boundary cannot move right
    two = set(neighbour_cuts(cut, 2)) - set(neighbour_cuts(cut, 1))
    assert two == {((0, 1, 2, 3), (4,), (5,)), ((0, 1), (2,), (3, 4, 5))}


def test_the_target_on_the_preset_s_own_cut_is_the_half_bubble_makespan() -> None:
    costs = preset_costs("deepseek-v3", load_topology("h100-2x8-ib.yaml"), 4, num_layers=8)
    dualpipe = simulate_baseline("dualpipe", 4, 8, costs, scales_of(costs))
    assert dualpipe.figures is not None and dualpipe.pipeline is not None
    fig = dualpipe.figures
    assert work_tick(dualpipe.pipeline) == 4 * fig.makespan_tick - fig.bubble_tick
    assert target_tick(dualpipe.pipeline, fig.bubble_tick) == half_bubble_tick(fig, fig, 4)


@pytest.mark.parametrize(("placement", "field"), [("dualpipe", "stage_units"), ("v", "chunk_units")])
def test_every_answer_agrees_with_the_cut_s_figures(placement: str, field: str) -> None:
    costs, rows = scan(4, 8, radius=1, probe_s=5.0, num_layers=8, placement=placement)
    own = getattr(costs, field)
    assert rows[0].layers == costs.layers_per_piece(own)  # the preset's own cut first
    assert len(rows) == 1 + len(list(neighbour_cuts(own, 1)))
    assert len({r.layers for r in rows}) == len(rows)
    for r in rows:
        assert r.list_makespan is not None and r.device_bound <= r.list_makespan
        if r.answer == "reached by the list schedule":
            assert r.list_makespan <= r.target
        elif r.answer == "device bound above":
            assert r.device_bound > r.target
        else:
            assert r.list_makespan > r.target >= r.device_bound
            assert r.answer.startswith("open (") or r.answer.endswith(" infeasible")
    assert any(r.answer == "device bound above" for r in rows)  # some moves load a device past the target


@pytest.mark.parametrize("argv", [["--layers", "0"], ["--radius", "0"], ["--stages", "0"], ["--probe-s", "0"]])
def test_bad_sizes_are_one_line_errors(argv: list[str], tmp_path) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--out", str(tmp_path / "scan.csv")])
    assert str(exc.value).startswith(f"error: {argv[0]} must be")  # names the flag
    assert "\n" not in str(exc.value)
    assert not (tmp_path / "scan.csv").exists()
