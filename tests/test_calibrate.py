"""plan-calibrate on 2 real ranks (tiny sizes, --quick): a profile that validates and plans, with its provenance,
and the per-op CSV that plan-solve --measured reads; the provenance schema refuses what it should."""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path

import pytest
import yaml

from planner.cli import solve_main
from planner.cli_calibrate import calibrate_main
from planner.cost.measured import load_measured_times
from planner.errors import InputError
from planner.execute.calibrate_profile import op_csv, profile_document, profile_yaml
from planner.ir.hardware import load_topology
from planner.ir.load import load_model
from planner.prepare import run_passes

REPO = Path(__file__).resolve().parents[1]
MOE = REPO / "planner" / "data" / "models" / "moe.onnx"


@pytest.mark.dist
def test_calibrate_writes_a_profile_that_plans_and_op_times_that_replan(tmp_path, capfd):
    out = tmp_path / "cal.yaml"
    assert calibrate_main(["--nproc", "2", "--quick", "--repeats", "1", "--out", str(out), "--model", str(MOE),
                           "--name", "probe", "--timeout", "300"]) == 0
    printed = capfd.readouterr()  # capfd: rank 0 (a forked child) writes the progress lines
    assert "[1/6]" in printed.err and "[6/6]" in printed.err  # progress, one line per step
    assert "p2p_bandwidth" in printed.out and "spread" in printed.out
    topology = load_topology(out)
    assert topology.num_devices == 2 and topology.name == "probe"
    assert "plan-calibrate" in topology.notes["provenance"]
    doc = yaml.safe_load(out.read_text())
    prov = doc["provenance"]
    assert prov["nproc"] == 2 and prov["threads_per_process"] == 1 and prov["torch_version"]
    assert set(prov["measured"]) >= {"float_flops", "memory_bandwidth", "launch_overhead", "link_latency",
                                     "link_bandwidth"}
    dev = topology.devices[0]
    assert dev.peak_flops_per_s["float"] > 0 and dev.memory_bandwidth_bytes_per_s > 0 and dev.launch_overhead_s > 0
    link = topology.links[0][1]
    assert link.latency_s > 0 and link.bandwidth_bytes_per_s > 0
    times_csv = tmp_path / "moe.times.csv"
    times = load_measured_times(times_csv)
    graph = run_passes(load_model(MOE))
    assert set(times) == {op.name for op in graph.ops} and all(t > 0 for t in times.values())
    plan = tmp_path / "p.json"
    assert solve_main(["--model", str(MOE), "--hw", str(out), "--measured", str(times_csv), "--method", "heft",
                       "--out", str(plan), "--no-pictures", "--quiet"]) == 0


def test_calibrate_refuses_a_missing_model(tmp_path, capsys):
    assert calibrate_main(["--quick", "--out", str(tmp_path / "x.yaml"), "--model", str(tmp_path / "no.onnx")]) == 2
    assert "model not found" in capsys.readouterr().err and not (tmp_path / "x.yaml").exists()


FIGURES = {"float_flops": 2e10, "double_flops": 1e10, "memory_bandwidth": 5e9, "launch_overhead": 2e-5,
           "link_latency": 4e-5, "link_bandwidth": 3e9}


def _doc(**overrides):
    doc = profile_document(FIGURES, {"float_flops": "matmul"}, {"float_flops": "5%"}, nproc=2, threads=1,
                           torch_version="2.x", host="box", date="2026-12-01T18:00:00+00:00", memory_bytes=2**34)
    doc["provenance"].update(overrides)
    return doc


def test_a_written_profile_reads_back_with_the_figures(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(profile_yaml(_doc()))
    topology = load_topology(path)
    dev = topology.devices[1]
    assert dev.peak_flops_per_s["float"] == pytest.approx(2e10, rel=1e-3)
    assert dev.memory_bandwidth_bytes_per_s == pytest.approx(5e9, rel=1e-3)
    assert dev.launch_overhead_s == pytest.approx(2e-5, rel=1e-3)
    assert dev.memory_bytes == 2**33
    assert topology.links[0][1].latency_s == pytest.approx(4e-5, rel=1e-3)
    assert topology.notes["provenance"] == "measured by plan-calibrate --nproc 2 --threads 1 on box, " \
                                           "2026-12-01T18:00:00+00:00"


@pytest.mark.parametrize("key,value,expect", [
    ("date", "yesterday", "provenance.date: expected an ISO 8601 date"),
    ("nproc", 0, "provenance.nproc"),
    ("colour", "blue", "provenance.colour: unknown key"),
    ("load_avg_1min", -1, "provenance.load_avg_1min"),
])
def test_the_provenance_block_is_validated(tmp_path, key, value, expect):
    path = tmp_path / "p.yaml"
    doc = _doc()
    doc["provenance"][key] = value
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(InputError, match=expect.replace(".", r"\.")):
        load_topology(path)


def test_a_provenance_date_yaml_parsed_as_a_date_is_accepted(tmp_path):
    path = tmp_path / "p.yaml"
    text = yaml.safe_dump(_doc(), sort_keys=False).replace("'2026-12-01T18:00:00+00:00'", "2026-12-01")
    path.write_text(text)
    assert "2026-12-01" in load_topology(path).notes["provenance"]


def test_op_csv_is_what_measured_reads(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(op_csv({"a": 1.5e-5, "b/c": 0.25}))
    assert load_measured_times(path) == {"a": 1.5e-5, "b/c": 0.25}
    assert next(csv.reader(path.open())) == ["op", "seconds"]


def test_a_gpu_profile_has_one_gpu_memory_per_device_and_an_nccl_link(tmp_path):
    doc = profile_document(FIGURES, {}, {}, nproc=4, threads=1, torch_version="2.x", host="gpubox",
                           date="2026-12-01", memory_bytes=80 * 2**30, device="cuda")
    path = tmp_path / "g.yaml"
    path.write_text(profile_yaml(doc))
    topology = load_topology(path)
    assert topology.num_devices == 4 and topology.devices[3].name == "node0/gpu3"
    assert topology.devices[0].kind == "cuda-gpu" and topology.devices[0].memory_bytes == 80 * 2**30
    assert topology.links[0][1].name == "nccl-measured"


def test_the_gpu_script_parses_and_calls_our_commands():
    # never run here (needs CUDA); it must stay valid bash and call the console scripts pyproject installs
    script = REPO / "scripts" / "calibrate_gpu.sh"
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    text = script.read_text()
    scripts = (REPO / "pyproject.toml").read_text()
    for command in ("plan-calibrate", "plan-solve", "plan-simulate"):
        assert f"$BIN/{command}" in text and f"{command} = " in scripts


def test_a_gpu_is_calibrated_with_sizes_past_its_launches_and_its_cache():
    from planner.execute.calibrate import GPU_SIZES, QUICK_SIZES, SIZES, default_sizes

    assert default_sizes("cpu") is SIZES and default_sizes("cuda") is GPU_SIZES
    assert default_sizes("cuda", quick=True) is QUICK_SIZES
    # the CPU sizes measured an H200's launches (8 TFLOP/s) and its 60 MB L2 (7.1 TB/s from 4.8 TB/s HBM)
    assert min(m * k * n for m, k, n in GPU_SIZES.matmul) >= 2048**3
    assert GPU_SIZES.vector_elems * 4 >= 2**30


def test_default_feeds_are_made_on_the_cpu_whatever_the_default_device():
    # a calibrating rank's default device is its GPU; the feeds are numpy arrays made on the host all the same
    # ("meta" stands in for the GPU: it too has no numpy view, as the first run on an H200 failed)
    torch = pytest.importorskip("torch")
    from planner.execute.program import default_feeds

    graph = load_model(REPO / "planner" / "data" / "models" / "moe.onnx")
    before = torch.get_default_device()
    torch.set_default_device("meta")
    try:
        feeds = default_feeds(graph)
    finally:
        torch.set_default_device(before)
    assert feeds and all(f.shape == tuple(graph.tensors[k].shape) for k, f in feeds.items())
