"""Hardware profiles -> Topology: the shipped profiles, device numbering and naming, link choice, and errors."""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

import pytest

from planner.errors import InputError
from planner.ir.hardware import DEFAULT_PROFILE, load_topology
from planner.ir.topology import LOCAL, Topology

SHIPPED = {
    "cpu-4.yaml": 4,
    "h100-8-nvlink.yaml": 8,
    "h100-2x8-ib.yaml": 16,
    "a100-4-pcie.yaml": 4,
    "mixed-a100-h100.yaml": 8,
}

MINIMAL = """\
name: tiny
hosts:
  - name: node0
    devices:
      - kind: cpu-process
        count: 2
        name_prefix: cpu
        peak_flops: {float: 96GFLOPS}
        memory: 8GiB
        memory_bandwidth: 15GB/s
        launch_overhead: 10us
links:
  intra_host: {latency: 30us, bandwidth: 3GB/s}
"""


def write(tmp_path: Path, text: str, name: str = "hw.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load_error(path: Path) -> str:
    with pytest.raises(InputError) as info:
        load_topology(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message


# --- shipped profiles ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("file", "count"), sorted(SHIPPED.items()))
def test_every_shipped_profile_loads(hw_dir, file, count):
    path = hw_dir / file
    topo = load_topology(path)
    assert isinstance(topo, Topology)
    assert topo.num_devices == count
    assert len({d.name for d in topo.devices}) == count
    assert topo.source_path == str(path)
    assert topo.source_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert topo.notes.get("source")
    for i, row in enumerate(topo.links):
        assert len(row) == count
        assert row[i] is LOCAL
        for j, link in enumerate(row):
            if i != j:
                assert 0 < link.bandwidth_bytes_per_s < float("inf") and link.latency_s >= 0
                assert topo.link(j, i) == link  # the shipped machines are symmetric
    for dev in topo.devices:
        assert dev.memory_bytes > 0 and dev.memory_bandwidth_bytes_per_s > 0 and dev.launch_overhead_s > 0
        assert dev.peak_flops_per_s["float"] > 0


def test_topology_pickles(hw_dir):
    import pickle

    topo = load_topology(hw_dir / "mixed-a100-h100.yaml")
    again = pickle.loads(pickle.dumps(topo))
    assert again.devices == topo.devices and again.links == topo.links


def test_every_shipped_profile_is_listed_in_the_test(hw_dir):
    assert {p.name for p in hw_dir.glob("*.yaml")} == set(SHIPPED)


def test_default_profile_is_four_cpu_processes_on_one_host():
    assert DEFAULT_PROFILE.name == "cpu-4.yaml"
    topo = load_topology(DEFAULT_PROFILE)
    assert [d.name for d in topo.devices] == ["node0/cpu0", "node0/cpu1", "node0/cpu2", "node0/cpu3"]
    assert {d.kind for d in topo.devices} == {"cpu-process"}
    assert {d.host for d in topo.devices} == {"node0"}


def test_dgx_h100_figures(hw_dir):
    topo = load_topology(hw_dir / "h100-8-nvlink.yaml")
    gpu = topo.devices[3]
    assert gpu.name == "node0/gpu3"
    assert gpu.flops_per_s("float") == pytest.approx(67e12)
    assert gpu.flops_per_s("bfloat16") == pytest.approx(989.4e12)
    assert gpu.flops_per_s("tfloat32") == pytest.approx(494.7e12)
    assert gpu.memory_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert gpu.memory_bytes == 80 * 2**30
    # NVLink 4: 900 GB/s bidirectional per GPU, stored per direction.
    assert topo.link(0, 7).bandwidth_bytes_per_s == pytest.approx(450e9)


def test_two_node_profile_picks_intra_or_inter_host_link(hw_dir):
    topo = load_topology(hw_dir / "h100-2x8-ib.yaml")
    hosts = [d.host for d in topo.devices]
    assert hosts == ["node0"] * 8 + ["node1"] * 8
    assert topo.devices[8].name == "node1/gpu0"
    nvlink, ib = topo.link(0, 1), topo.link(0, 8)
    assert nvlink.bandwidth_bytes_per_s == pytest.approx(450e9)
    assert ib.bandwidth_bytes_per_s == pytest.approx(50e9)  # 400 Gb/s: bits
    for i in range(16):
        for j in range(16):
            expected = LOCAL if i == j else (nvlink if hosts[i] == hosts[j] else ib)
            assert topo.link(i, j) == expected, (i, j)


def test_mixed_profile_has_heterogeneous_speeds_and_per_group_links(hw_dir):
    topo = load_topology(hw_dir / "mixed-a100-h100.yaml")
    kinds = [d.kind for d in topo.devices]
    assert kinds == ["A100-SXM4-80GB"] * 4 + ["H100-PCIe-80GB"] * 4
    # one prefix across both groups: the host's GPUs are numbered 0..7
    assert [d.name for d in topo.devices] == [f"node0/gpu{i}" for i in range(8)]
    a100, h100 = topo.devices[0], topo.devices[4]
    assert a100.flops_per_s("float") == pytest.approx(19.5e12)
    assert a100.flops_per_s("bfloat16") == pytest.approx(312e12)
    assert a100.memory_bandwidth_bytes_per_s == pytest.approx(2039e9)
    assert h100.flops_per_s("bfloat16") > 2 * a100.flops_per_s("bfloat16")
    within_a100, within_h100, across = topo.link(0, 1), topo.link(4, 5), topo.link(0, 4)
    assert len({within_a100, within_h100, across}) == 3
    assert across.bandwidth_bytes_per_s < within_h100.bandwidth_bytes_per_s < within_a100.bandwidth_bytes_per_s
    assert topo.link(3, 7) == across and topo.link(7, 3) == across


def test_a100_pcie_profile(hw_dir):
    topo = load_topology(hw_dir / "a100-4-pcie.yaml")
    assert topo.devices[0].flops_per_s("float16") == pytest.approx(312e12)
    assert topo.devices[0].memory_bandwidth_bytes_per_s == pytest.approx(1935e9)
    assert topo.link(0, 3).bandwidth_bytes_per_s == pytest.approx(32e9)


# --- schema features -----------------------------------------------------------------------------------------


def test_minimal_profile_and_defaults(tmp_path):
    topo = load_topology(write(tmp_path, MINIMAL))
    assert topo.name == "tiny"
    assert topo.num_devices == 2
    dev = topo.devices[0]
    assert dev.memory_bytes == 8 * 2**30
    assert dev.launch_overhead_s == pytest.approx(10e-6)
    assert dev.flops_per_s("bfloat16") == dev.flops_per_s("float")  # unlisted dtype falls back to fp32
    assert topo.link(0, 1).name == "intra_host"  # unnamed links are named by their key path
    assert topo.link(0, 1).transfer_s(3 * 10**9) == pytest.approx(1 + 30e-6)


def test_hosts_override_links_and_devices_are_numbered_in_listing_order(tmp_path):
    path = write(
        tmp_path,
        """\
        name: hetero
        hosts:
          - name: a
            intra_host: {name: fast, latency: 1us, bandwidth: 100GB/s}
            devices:
              - {kind: big, count: 2, name_prefix: gpu, peak_flops: {float: 10TFLOPS}, memory: 40GB,
                 memory_bandwidth: 1TB/s, launch_overhead: 5us}
              - {kind: small, peak_flops: {float: 1TFLOPS}, memory: 16GB, memory_bandwidth: 100GB/s,
                 launch_overhead: 5us}
          - name: b
            devices:
              - {kind: small, count: 2, name_prefix: gpu, peak_flops: {float: 1TFLOPS}, memory: 16GB,
                 memory_bandwidth: 100GB/s, launch_overhead: 5us,
                 intra_group: {name: pair, latency: 2us, bandwidth: 50GB/s}}
        links:
          intra_host: {name: slow, latency: 10us, bandwidth: 10GB/s}
          inter_host: {name: net, latency: 20us, bandwidth: 100Gb/s}
        """,
    )
    topo = load_topology(path)
    assert [d.name for d in topo.devices] == ["a/gpu0", "a/gpu1", "a/dev0", "b/gpu0", "b/gpu1"]
    assert [d.kind for d in topo.devices] == ["big", "big", "small", "small", "small"]
    assert topo.link(0, 2).name == "fast"  # host a overrides links.intra_host
    assert topo.link(3, 4).name == "pair"  # group link inside host b
    assert topo.link(2, 3).name == "net"
    assert topo.link(2, 3).bandwidth_bytes_per_s == pytest.approx(12.5e9)
    assert topo.devices[0].memory_bytes == 40 * 10**9


def test_plain_si_numbers_are_accepted(tmp_path):
    text = MINIMAL.replace("8GiB", "8589934592").replace("10us", "0.00001").replace("96GFLOPS", "9.6e10")
    topo = load_topology(write(tmp_path, text))
    assert topo.devices[0].memory_bytes == 8 * 2**30
    assert topo.devices[0].launch_overhead_s == pytest.approx(1e-5)
    assert topo.devices[0].flops_per_s("float") == pytest.approx(9.6e10)


def test_zero_latency_is_allowed(tmp_path):
    topo = load_topology(write(tmp_path, MINIMAL.replace("latency: 30us", "latency: 0us")))
    assert topo.link(0, 1).latency_s == 0.0


# --- errors: one line, naming the file and the key path ----------------------------------------------------------


def test_missing_file(tmp_path):
    message = load_error(tmp_path / "nope.yaml")
    assert "not found" in message


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = write(tmp_path, "name: x\nhosts: [\n  - a\n")
    message = load_error(path)
    assert "not valid YAML at line 3" in message


def test_duplicate_key_is_refused(tmp_path):
    path = write(tmp_path, MINIMAL.replace("memory: 8GiB", "memory: 8GiB\n        memory: 4GiB"))
    assert "duplicate key 'memory'" in load_error(path)


def test_unknown_key_suggests_the_nearest(tmp_path):
    path = write(tmp_path, MINIMAL.replace("memory: 8GiB", "memroy: 8GiB"))
    message = load_error(path)
    assert "hosts[0].devices[0].memroy: unknown key (did you mean 'memory'?)" in message


def test_unknown_dtype_suggests_the_onnx_name(tmp_path):
    path = write(tmp_path, MINIMAL.replace("{float: 96GFLOPS}", "{float: 96GFLOPS, bf16: 1TFLOPS}"))
    message = load_error(path)
    assert "hosts[0].devices[0].peak_flops.bf16: unknown key (did you mean 'bfloat16'?" in message


def test_bad_unit(tmp_path):
    path = write(tmp_path, MINIMAL.replace("memory: 8GiB", "memory: 80 GiBs"))
    message = load_error(path)
    assert "hosts[0].devices[0].memory:" in message
    assert "'80 GiBs'" in message
    assert "expected a size like 80GiB or 900GB" in message


def test_bandwidth_in_bits_for_a_size_is_refused(tmp_path):
    path = write(tmp_path, MINIMAL.replace("memory: 8GiB", "memory: 8Gb"))
    assert "'b' means bits" in load_error(path)


def test_negative_bandwidth(tmp_path):
    path = write(tmp_path, MINIMAL.replace("bandwidth: 3GB/s", "bandwidth: -3GB/s"))
    message = load_error(path)
    assert "links.intra_host.bandwidth:" in message
    assert "negative" in message and "'-3GB/s'" in message


def test_zero_bandwidth_and_zero_memory(tmp_path):
    path = write(tmp_path, MINIMAL.replace("memory_bandwidth: 15GB/s", "memory_bandwidth: 0GB/s"))
    assert "hosts[0].devices[0].memory_bandwidth: must be positive" in load_error(path)
    path = write(tmp_path, MINIMAL.replace("memory: 8GiB", "memory: 0"), name="b.yaml")
    assert "hosts[0].devices[0].memory: must be positive" in load_error(path)


def test_zero_count(tmp_path):
    path = write(tmp_path, MINIMAL.replace("count: 2", "count: 0"))
    message = load_error(path)
    assert "hosts[0].devices[0].count:" in message and "greater than 0" in message


def test_count_must_be_an_integer(tmp_path):
    path = write(tmp_path, MINIMAL.replace("count: 2", "count: 2.5"))
    assert "hosts[0].devices[0].count:" in load_error(path)


def test_zero_devices(tmp_path):
    path = write(tmp_path, "name: x\nhosts:\n  - name: node0\n    devices: []\n")
    assert "hosts[0].devices: must not be empty" in load_error(path)
    path = write(tmp_path, "name: x\nhosts: []\n", name="b.yaml")
    assert "hosts: must not be empty" in load_error(path)


def test_missing_required_key(tmp_path):
    path = write(tmp_path, MINIMAL.replace("        launch_overhead: 10us\n", ""))
    assert "hosts[0].devices[0].launch_overhead: missing required key" in load_error(path)


def test_wrong_type(tmp_path):
    path = write(tmp_path, MINIMAL.replace("intra_host: {latency: 30us, bandwidth: 3GB/s}", "intra_host: 5"))
    assert "links.intra_host: expected a mapping" in load_error(path)
    path = write(tmp_path, "- a\n- b\n", name="list.yaml")
    assert "expected a mapping" in load_error(path)


def test_empty_file(tmp_path):
    assert "empty" in load_error(write(tmp_path, ""))


def test_several_errors_are_counted(tmp_path):
    text = MINIMAL.replace("count: 2", "count: 0").replace("memory: 8GiB", "memory: 8 GiBs")
    assert "(and 1 more)" in load_error(write(tmp_path, text))


def test_missing_links(tmp_path):
    path = write(tmp_path, MINIMAL.split("links:")[0])
    assert "links.intra_host: missing required key" in load_error(path)
    two_hosts = MINIMAL.replace("hosts:\n", "hosts:\n  - {name: other, devices: [{kind: c, peak_flops: {float: 1}, "
                                "memory: 1, memory_bandwidth: 1, launch_overhead: 0}]}\n")
    path = write(tmp_path, two_hosts, name="b.yaml")
    assert "links.inter_host: missing required key" in load_error(path)


def test_duplicate_host_and_bad_names(tmp_path):
    text = MINIMAL.replace("hosts:\n", "hosts:\n  - {name: node0, devices: [{kind: c, peak_flops: {float: 1}, "
                           "memory: 1, memory_bandwidth: 1, launch_overhead: 0}]}\n")
    text += "  inter_host: {latency: 1us, bandwidth: 1GB/s}\n"
    assert "hosts[1].name: duplicate host name 'node0'" in load_error(write(tmp_path, text))
    path = write(tmp_path, MINIMAL.replace("name: node0", "name: node/0"), name="b.yaml")
    assert "hosts[0].name:" in load_error(path)


def test_single_device_needs_no_links(tmp_path):
    topo = load_topology(write(tmp_path, MINIMAL.split("links:")[0].replace("count: 2", "count: 1")))
    assert topo.num_devices == 1 and topo.links == ((LOCAL,),)
