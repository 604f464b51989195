"""plan-compare's table ends with the outcome in words; the search story is for --verbose."""

from __future__ import annotations

from planner.compare.table_text import outcome_line


def _v(makespan: float, bubble: float, peak: float) -> dict[str, float]:
    return {"makespan": makespan, "bubble_ratio": bubble, "peak_memory": peak}


def test_outcome_line_against_dualpipe_and_the_best_other():
    # the bubble compares idle time: 30 x 0.2 = 6 against 40 x 0.4 = 16, 38 % (the ratios alone would say 50 %)
    values = {"gpipe": _v(43.4, 0.447, 8), "zb-h2": _v(38, 0.368, 7), "dualpipe": _v(40, 0.4, 5),
              "opplan": _v(30, 0.2, 5)}
    assert outcome_line(values, "unit") == ("result: opplan 30 unit — 25.0 % shorter than DualPipe, 21.1 % than "
                                            "the best other schedule (zb-h2), bubble 38 % of DualPipe's, peak "
                                            "memory 100 % of DualPipe's")


def test_outcome_line_when_longer_or_without_dualpipe():
    values = {"1f1b": _v(20, 0.1, 4), "opplan": _v(25, 0.2, 5)}
    assert outcome_line(values, "ms") == "result: opplan 25 ms — 25.0 % longer than the best other schedule (1f1b)"
    assert outcome_line({"1f1b": _v(20, 0.1, 4)}, "ms") == ""
    same = {"dualpipe": _v(10, 0.0, 2), "opplan": _v(10, 0.0, 2)}
    assert outcome_line(same, "us") == ("result: opplan 10 us — as long as DualPipe, bubble as DualPipe's (0.0%), "
                                        "peak memory 100 % of DualPipe's")


def test_cli_prints_the_short_line_and_the_story_with_verbose(tmp_path, capsys):
    from planner.cli_compare import compare_main

    args = ["--stages", "2", "--microbatches", "4", "--schedules", "1f1b,dualpipe", "--time-limit", "3",
            "--bound-time", "0", "--no-pictures", "--placement", "dualpipe"]
    assert compare_main([*args, "--out", str(tmp_path / "a")]) == 0
    short = capsys.readouterr().out.splitlines()
    assert compare_main([*args, "--verbose", "--out", str(tmp_path / "b")]) == 0
    long = capsys.readouterr().out.splitlines()
    short_line = next(x for x in short if x.startswith("opplan: "))
    long_line = next(x for x in long if x.startswith("opplan: "))
    assert short_line.split(", ")[:2] == long_line.split(", ")[:2]  # status and bound in both
    assert "warm start" not in short_line and "warm start" in long_line
    assert len(short_line) < len(long_line)
    table_end = [x for x in short if x.startswith("result: opplan ")]
    assert table_end[-1].startswith("result: opplan 12 unit — ") and "DualPipe" in table_end[-1]


def test_memory_bound_progress_lines_are_in_the_comparisons_unit():
    from planner.compare.pipelines import ticks_in_units
    from planner.pipeline.registry import Scales

    line = "memory bound: device 0, a schedule ending by 506028 ticks? feasible (0.9 s)"
    assert ticks_in_units(line, Scales(100, 1), "us") == \
        "memory bound: device 0, a schedule ending by 5060 us? feasible (0.9 s)"
    assert ticks_in_units("no ticks here", Scales(100, 1), "us") == "no ticks here"
