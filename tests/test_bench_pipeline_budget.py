"""The pipeline bench gives the transformers exports' and the preset's planned rows their budget by stage count
(`experiments.bench_pipeline.EXPORT_LIMIT_S`: more at 8 stages than at 4, where time moves the rows;
`PRESET_LIMIT_S` at p = 8 and 16) and the memory bound its `BOUND_S`, checked without exporting or solving:
`compare`, the export and the costs are stood in for."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from experiments import bench_pipeline
from planner.ir.moe_structure import MoEStructure


def test_the_exports_get_their_budget_by_stage_count(monkeypatch, tmp_path):
    pytest.importorskip("transformers")
    import experiments.hf_models as hf
    import planner.compare.pipelines as pipelines

    asked: list[tuple[str, int, float]] = []

    def fake_compare(p, m, costs, *, time_limit_s, bound_time_s):
        assert bound_time_s == bench_pipeline.BOUND_S
        asked.append((costs.name, p, time_limit_s))
        return SimpleNamespace(table=lambda: "")

    monkeypatch.setattr(pipelines, "compare", fake_compare)
    monkeypatch.setattr(hf, "export_hf_model", lambda model, path: path)
    monkeypatch.setattr(hf, "export_hf_architecture", lambda arch, path: (path, {}))
    monkeypatch.setattr(bench_pipeline, "_model_costs_of",
                        lambda path, p: SimpleNamespace(name=path.stem, time_unit="us", memory_unit="MiB",
                                                        moe=MoEStructure(())))
    monkeypatch.setattr(bench_pipeline, "_rows", lambda *a, **k: [])
    bench_pipeline._exported_rows(quick=False, wanted=lambda case, p: True)
    by_stages = {(name, p): s for name, p, s in asked}
    names = {"hf_mixtral", "hf_qwen2_moe", "hf_phimoe", "hf_switch_encoder", "hf_gpt2"}
    assert {name for name, _ in by_stages} == names
    for name in names:
        assert by_stages[name, 4] == bench_pipeline.EXPORT_LIMIT_S[4]
        assert by_stages[name, 8] == bench_pipeline.EXPORT_LIMIT_S[8]
    assert bench_pipeline.EXPORT_LIMIT_S[8] > bench_pipeline.EXPORT_LIMIT_S[4]  # 8 stages keep improving longer


def test_the_preset_rows_get_their_budget(monkeypatch):
    import planner.compare.pipelines as pipelines
    import planner.compare.presets as presets

    asked: list[tuple[int, float, float, bool]] = []

    def fake_compare(p, m, costs, *, time_limit_s, bound_time_s):
        asked.append((p, time_limit_s, bound_time_s, costs.measured))
        return SimpleNamespace(table=lambda: "")

    monkeypatch.setattr(pipelines, "compare", fake_compare)
    monkeypatch.setattr(presets, "preset_costs", lambda preset, topology, p, num_layers=None, op_times=None:
                        SimpleNamespace(num_layers=61, time_unit="ms", memory_unit="MiB", measured=bool(op_times)))
    monkeypatch.setattr(bench_pipeline, "_rows", lambda *a, **k: [])
    bench_pipeline._preset_rows(quick=False, wanted=lambda case, p: True)
    bound = bench_pipeline.BOUND_S
    s8, s16 = bench_pipeline.PRESET_LIMIT_S[8], bench_pipeline.PRESET_LIMIT_S[16]
    # the roofline's rows, then the same on the op times measured on an H200 (the committed CSV, read for real)
    assert asked == [(8, s8, bound, False), (16, s16, bound, False), (8, s8, bound, True), (16, s16, bound, True)]
    # `--rows preset:8` runs that row alone
    asked.clear()
    bench_pipeline._preset_rows(quick=False, wanted=lambda case, p: f"{case}:{p}" in ("preset:8",))
    assert asked == [(8, s8, bound, False)]
    asked.clear()
    bench_pipeline._preset_rows(quick=True, wanted=lambda case, p: True)  # quick: the roofline's small row alone
    assert asked == [(4, 10.0, 10.0, False)]
