"""The README's result blocks are rendered from the bench's CSVs (`experiments.readme_results`): the exact text of
a block from a tiny CSV, the quick run's CSV as a fallback, "not measured yet" without a CSV, and the text outside
the markers left alone."""

from __future__ import annotations

from experiments.readme_results import NOT_MEASURED, TABLES, ResultTable, update_readme

TABLE = ResultTable("demo", "demo.csv", ("name", "ms"), "A demo table", "Lower is better.")

README = """# Title

Intro stays.

<!-- bench:demo -->
old text
<!-- /bench:demo -->

Outro stays.
"""


def test_a_block_is_rendered_from_its_csv(tmp_path) -> None:
    (tmp_path / "demo.csv").write_text("name,ms,extra\na,1.5,x\nb|c,2,y\n")
    readme = tmp_path / "README.md"
    readme.write_text(README)
    assert update_readme(tmp_path, readme, (TABLE,)) == ["demo"]
    assert readme.read_text() == """# Title

Intro stays.

<!-- bench:demo -->
**A demo table** (`bench/results/demo.csv`)

| name | ms |
|---|---|
| a | 1.5 |
| b\\|c | 2 |

Lower is better.
<!-- /bench:demo -->

Outro stays.
"""
    # rendering again gives the same text (the markers survive)
    before = readme.read_text()
    update_readme(tmp_path, readme, (TABLE,))
    assert readme.read_text() == before


def test_the_quick_csv_fills_in_and_a_missing_one_says_not_measured(tmp_path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(README)
    update_readme(tmp_path, readme, (TABLE,))
    assert f"<!-- bench:demo -->\n**A demo table**: {NOT_MEASURED}.\n<!-- /bench:demo -->" in readme.read_text()
    (tmp_path / "demo-quick.csv").write_text("name\nq\n")  # a column the CSV lacks shows as an empty cell
    update_readme(tmp_path, readme, (TABLE,))
    text = readme.read_text()
    assert "**A demo table** (`bench/results/demo-quick.csv`, quick mode)" in text
    assert "| q |  |\n" in text


def test_a_readme_without_the_markers_is_left_alone(tmp_path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# nothing to fill\n")
    assert update_readme(tmp_path, readme, (TABLE,)) == []
    assert readme.read_text() == "# nothing to fill\n"


def test_the_registry_names_each_block_once_and_has_the_runtime_table() -> None:
    names = [t.name for t in TABLES]
    assert len(names) == len(set(names))
    runtime = next(t for t in TABLES if t.name == "runtime")
    assert runtime.csv_name == "runtime.csv"
    assert runtime.columns[0] == "model" and "opplan_ms" in runtime.columns and "vs_ort_2_intra" in runtime.columns


def test_the_runtime_table_has_one_row_per_model_with_opplan_against_the_others(tmp_path) -> None:
    from experiments.readme_results import render_table

    runtime = next(t for t in TABLES if t.name == "runtime")
    chosen = {"opplan-chosen": "2 ranks x 1 thread", "opplan-advised": "1 rank x 2 threads"}
    ratio = {"opplan-chosen": "1.1", "opplan-1-rank": "0.9"}
    rows = [{"model": "m", "config": c, "median_ms": ms, "effective_parallelism_start": "1.9",
             "effective_parallelism_end": "1.8", "chosen": chosen.get(c, ""), "measured_vs_predicted": ratio.get(c, ""),
             "speedup_ceiling": "1.87" if c == "opplan-chosen" else ""}
            for c, ms in (("ort-1", "10"), ("ort-2-intra", "6"), ("ort-parallel-2", "9"), ("torch-1", "12"),
                          ("torch-2", "8"), ("opplan-1-rank", "11"), ("opplan-advised", "7"), ("opplan-chosen", "5"),
                          ("codegen-torchrun", "13"))]
    text = render_table(runtime, rows, "x.csv")
    assert ("| m | 10 | 6 | 9 | 12 | 11 | 7 | 1 rank x 2 threads | 5 | 2 ranks x 1 thread | 13 | 2.00 | 1.87 | 0.83 | "
            "0.9 / - / 1.1 | 1.9 / 1.8 |") in text


def test_the_mutation_table_sums_each_package_and_names_its_weakest_module() -> None:
    from experiments.readme_results import render_table

    mutation = next(t for t in TABLES if t.name == "mutation")
    head = ("module", "path", "sampled", "equivalent", "killed", "timeout", "survived", "kill_ratio")
    rows = [dict(zip(head, r, strict=True)) for r in (
        ("a", "planner/search/a.py", "10", "2", "8", "1", "1", "0.900"),
        ("b", "planner/search/b.py", "5", "0", "5", "0", "0", "1.000"),
        ("c", "planner/pipeline/c.py", "4", "0", "2", "0", "2", "0.500"))]
    text = render_table(mutation, rows, "x.csv")
    assert "| planner/pipeline | 1 | 4 | 2 | 50.0 | c 50% |" in text
    assert "| planner/search | 2 | 15 | 14 | 93.3 | a 90% |" in text


def test_the_pipeline_table_has_one_row_per_case_with_its_stage_counts_joined() -> None:
    table = next(t for t in TABLES if t.name == "pipeline")
    assert table.select is not None
    rows = [{"case": "x", "p": "4", "schedule": "dualpipe", "makespan": "9", "time_unit": "us", "gap": ""},
            {"case": "x", "p": "4", "schedule": "opplan", "makespan": "7", "time_unit": "us", "gap": ""},
            {"case": "x", "p": "8", "schedule": "opplan", "makespan": "8", "time_unit": "us", "gap": ""},
            {"case": "y", "p": "8", "schedule": "opplan", "makespan": "5", "time_unit": "ms", "gap": "0.1"}]
    assert table.select(rows) == [
        {"case": "x", "p": "4 / 8", "schedule": "opplan", "makespan": "7 / 8", "time_unit": "us", "gap": ""},
        {"case": "y", "p": "8", "schedule": "opplan", "makespan": "5", "time_unit": "ms", "gap": "0.1"}]
