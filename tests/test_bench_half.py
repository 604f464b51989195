"""`experiments.bench_half`: the command line is checked before anything runs, a setting's constants reach the
search only for its own run, and a quick run writes one row per setting and seed with figures that agree (the
search never returns a longer schedule than its warm start)."""

from __future__ import annotations

import csv

import pytest

from experiments import bench_half
from formulations import pipeline_lns


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


def test_each_setting_runs_with_its_constants_and_restores_them(monkeypatch, tmp_path) -> None:
    seen = []
    real = pipeline_lns.solve_pipeline_lns

    def spy(*args, **kwargs):
        seen.append((pipeline_lns.HALF_FIRST_SHARE, pipeline_lns.HALF_ENDS and pipeline_lns.ENDS_ROUNDS,
                     kwargs["seed"], kwargs["time_limit_s"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline_lns, "solve_pipeline_lns", spy)
    before = pipeline_lns.HALF_FIRST_SHARE
    assert pipeline_lns.HALF_ENDS
    out = tmp_path / "half.csv"
    rounds = pipeline_lns.ENDS_ROUNDS
    names = ("two-phase", "no-ends", "ends-once", "short", "long")
    bench_half.main(["--quick", "--seconds", "2", "--settings", ",".join(names), "--seeds", "0,1", "--out", str(out)])
    assert seen == [(before, rounds, 0, 2.0), (before, rounds, 1, 2.0), (before, False, 0, 2.0),
                    (before, False, 1, 2.0), (before, 1, 0, 2.0), (before, 1, 1, 2.0), (1.0, False, 0, 2.0),
                    (1.0, False, 1, 2.0), (0.0, False, 0, 2.0), (0.0, False, 1, 2.0)]
    assert rounds == 2  # the default the README's "The ends in rounds" measured
    assert pipeline_lns.HALF_FIRST_SHARE == before and pipeline_lns.HALF_ENDS and pipeline_lns.ENDS_ROUNDS == rounds
    rows = list(csv.DictReader(out.open()))
    assert [(r["setting"], r["seed"]) for r in rows] == [(name, seed) for name in names for seed in ("0", "1")]
    for r in rows:
        assert 0 < float(r["makespan_ms"]) <= float(r["start_ms"])
        assert 0 < float(r["bubble_vs_dualpipe"])
        assert r["folded"] == "False"  # p = 4 is below the size where the search folds
