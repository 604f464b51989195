"""`experiments.bench_half`: the command line is checked before anything runs, a setting's policy reaches the
search for its own run, and a quick run writes one row per setting and seed with figures that agree (the
search never returns a longer schedule than its warm start)."""

from __future__ import annotations

import csv

import pytest

from experiments import bench_half
from planner.search.pipeline import solve
from planner.search.pipeline.policy import PipelineSearchPolicy


@pytest.mark.parametrize("argv, says", [
    (["--settings", "two-phase,nosuch"], "unknown setting nosuch"),
    (["--seconds", "0"], "--seconds must be positive"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_a_bad_command_line_is_an_error_before_any_run(argv, says, monkeypatch, capsys) -> None:
    monkeypatch.setattr(bench_half, "bench_half", lambda *a, **k: pytest.fail("a bench ran"))
    with pytest.raises(SystemExit) as exc:
        bench_half.main(argv)
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


def test_each_setting_runs_with_its_policy(monkeypatch, tmp_path) -> None:
    seen = []
    real = solve.solve_pipeline_lns

    def spy(*args, **kwargs):
        half = kwargs["policy"].half
        seen.append((half.first_share, half.ends and half.ends_rounds, kwargs["seed"], kwargs["time_limit_s"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(solve, "solve_pipeline_lns", spy)
    default = PipelineSearchPolicy()
    before = default.half.first_share
    assert default.half.ends
    out = tmp_path / "half.csv"
    rounds = default.half.ends_rounds
    names = ("two-phase", "no-ends", "ends-once", "short", "long")
    bench_half.main(["--quick", "--seconds", "2", "--settings", ",".join(names), "--seeds", "0,1", "--out", str(out)])
    assert seen == [(before, rounds, 0, 2.0), (before, rounds, 1, 2.0), (before, False, 0, 2.0),
                    (before, False, 1, 2.0), (before, 1, 0, 2.0), (before, 1, 1, 2.0), (1.0, False, 0, 2.0),
                    (1.0, False, 1, 2.0), (0.0, False, 0, 2.0), (0.0, False, 1, 2.0)]
    assert rounds == 2  # two rounds of the ends by default (`HalfSearchPolicy.ends_rounds`)
    assert bench_half.SETTINGS["two-phase"][1] == default  # ``two-phase`` is what plan-compare runs
    rows = list(csv.DictReader(out.open()))
    assert [(r["setting"], r["seed"]) for r in rows] == [(name, seed) for name in names for seed in ("0", "1")]
    for r in rows:
        assert 0 < float(r["makespan_ms"]) <= float(r["start_ms"])
        assert 0 < float(r["bubble_vs_dualpipe"])
        assert r["folded"] == "False"  # p = 4 is below the size where the search folds
