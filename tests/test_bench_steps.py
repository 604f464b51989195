"""`experiments.bench_steps`: configurations are checked before anything runs, and a quick run solves the same
neighbourhoods under each configuration, with figures that agree with each other."""

from __future__ import annotations

import csv

import pytest

from experiments import bench_steps


@pytest.mark.parametrize("argv, says", [
    (["--configs", "4x0.5,fourx1"], "'fourx1' is not WORKERSxSECONDS[d]"),
    (["--configs", "0x1"], "'0x1' is not WORKERSxSECONDS[d]"),
    (["--draws", "0"], "--draws >= 1"),
])
def test_a_bad_command_line_is_an_error_before_any_run(argv, says, monkeypatch, capsys) -> None:
    monkeypatch.setattr(bench_steps, "bench_steps", lambda *a, **k: pytest.fail("a bench ran"))
    with pytest.raises(SystemExit) as exc:
        bench_steps.main(argv)
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


def test_configurations_read_as_workers_seconds_and_mode() -> None:
    assert bench_steps.parse_config("4x0.5") == bench_steps.Config(4, 0.5, False)
    assert bench_steps.parse_config(" 1x2d ") == bench_steps.Config(1, 2.0, True)
    assert bench_steps.parse_config("8x1").name == "8x1"


def test_a_quick_run_solves_the_same_steps_under_each_configuration(tmp_path) -> None:
    out = tmp_path / "steps.csv"
    bench_steps.main(["--quick", "--configs", "1x0.5,2x0.5d", "--seeds", "0", "--warm-seconds", "0", "--draws", "1",
                      "--out", str(out)])
    rows = list(csv.DictReader(out.open()))
    assert [r["config"] for r in rows] == ["1x0.5", "2x0.5d"]
    steps = len(bench_steps.KINDS) * len(bench_steps.SIZES)
    for r in rows:
        assert int(r["steps"]) == steps and 0 <= int(r["proven"]) <= steps and 0 <= int(r["gained"]) <= steps
        assert (float(r["gain_ms"]) > 0) == (int(r["gained"]) > 0)
    assert len({r["incumbent_ms"] for r in rows}) == 1  # every configuration starts from the same incumbent
