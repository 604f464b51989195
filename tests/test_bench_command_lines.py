"""The bench modules parse their command lines before anything runs: `--help` prints the usage and an unknown flag
(or, for `experiments.bench_pipeline`, an unknown row) is an error, never a bench run: a bench's default run takes
minutes to more than an hour, so a mistyped flag must not start it.  Every bench function is replaced by one that
fails the test if called."""

from __future__ import annotations

import pytest

from experiments import bench_pipeline


@pytest.fixture(autouse=True)
def _no_bench(monkeypatch):
    def ran(*args, **kwargs):
        raise AssertionError("a bench ran")

    for name in ("bench_pipeline", "bench_lns", "bench_lns_mode", "bench_cut_moves", "bench_placement"):
        monkeypatch.setattr(bench_pipeline, name, ran)


def test_help_prints_the_usage_and_runs_nothing(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_pipeline.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--rows" in out and "preset:16" in out


@pytest.mark.parametrize("argv, says", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--rows", "preset:8,nosuch:3"], "unknown row nosuch:3"),
    (["--rows", "preset:8", "--cut"], "not allowed with argument"),
    (["--placement", "--reps", "0"], "--reps must be >= 1"),
])
def test_a_bad_command_line_is_an_error_before_any_run(argv, says, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_pipeline.main(argv)
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


def test_rows_reach_the_row_bench(monkeypatch, tmp_path) -> None:
    asked = []

    def rows(quick, only):
        asked.append((quick, list(only)))
        return [dict(case="c", moe_found="none", p=8, m=16, schedule="opplan", makespan=1, bubble_vs_dualpipe=0.5,
                     peak_memory=2, status="feasible", bound=1, memory_bound="", half_bubble_makespan="",
                     half_bubble_unreachable="", half_bubble_answers="", other_placements_bound="", devices_at_cap="")]

    monkeypatch.setattr(bench_pipeline, "bench_pipeline", rows)
    monkeypatch.setattr(bench_pipeline, "REPO", tmp_path)
    bench_pipeline.main(["--rows", "preset:8,hf_gpt2:8", "--quick"])
    assert asked == [(True, ["preset:8", "hf_gpt2:8"])]
    assert (tmp_path / "bench" / "results" / "pipeline_rows.csv").exists()


@pytest.mark.parametrize("module", ["bench_heft", "bench_coarsen"])
def test_the_other_benches_read_help_and_refuse_unknown_flags(module, monkeypatch, capsys) -> None:
    # they have no options: any flag is an error, so the command line can never start a bench (minutes) by mistake
    import importlib

    bench = importlib.import_module(f"experiments.{module}")
    for name in ("bench_heft", "bench_coarsen", "bench_parallelism"):
        if hasattr(bench, name):
            monkeypatch.setattr(bench, name, lambda *a, **k: pytest.fail("a bench ran"))
    with pytest.raises(SystemExit) as exc:
        bench.main(["--help"])
    assert exc.value.code == 0 and "usage:" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        bench.main(["--quick"])
    assert exc.value.code == 2 and "unrecognized arguments: --quick" in capsys.readouterr().err
