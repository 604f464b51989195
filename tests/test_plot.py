"""Pictures: a Gantt PNG with a memory panel, and a Chrome trace that parses with the right events per device."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from instances import pipeline_instance, random_instance, round_robin_orders
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

from planner.plot import default_group, plot_gantt
from planner.schedule.program import Schedule
from planner.schedule.simulate import simulate, simulate_schedule
from planner.schedule.timeline import timeline_of_plan
from planner.schedule.trace import chrome_trace, write_chrome_trace

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def drawn(monkeypatch):
    """The figures `plot_gantt` saves, so a test can check what is drawn rather than the file's size."""
    figures: list[Figure] = []
    original = Figure.savefig

    def capture(self, *args, **kwargs):
        figures.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", capture)
    return figures


def _bars(ax) -> list[tuple[float, float, float]]:
    """(x, width, row centre) of every task bar on the Gantt axes (transfers are the thin bars, height 0.1)."""
    out = []
    for coll in ax.collections:
        if not isinstance(coll, PolyCollection):
            continue
        for path in coll.get_paths():
            xs, ys = path.vertices[:, 0], path.vertices[:, 1]
            if ys.max() - ys.min() > 0.5:
                out.append((float(xs.min()), float(xs.max() - xs.min()), float(round(ys.min() + 0.38))))
    return sorted(out)


def _check_gantt(ax, tl) -> None:
    """Rows are the devices, by name; one bar per task at its time on its row; the x axis spans the step."""
    assert [t.get_text() for t in ax.get_yticklabels()] == list(tl.device_names)
    assert ax.get_xlim() == pytest.approx((tl.start_tick, tl.end_tick))
    want = sorted((float(p.start_tick), float(p.end_tick - p.start_tick), float(p.device))
                  for p in tl.placements if p.end_tick > p.start_tick)
    assert [tuple(round(v, 6) for v in bar) for bar in _bars(ax)] == want


def _pipeline_timeline():
    inst = pipeline_instance(3, 4, activation_bytes=3 * 2**20)
    rows = []
    for s in range(3):
        fw = [f"{s}F{m}" for m in range(4)]
        bw = [x for m in range(4) for x in (f"{s}B{m}", f"{s}W{m}")]
        rows.append(fw + bw)  # GPipe-like with split backward
    return inst, simulate_schedule(inst, Schedule.build(rows))


def test_gantt_png_for_a_pipeline(tmp_path, drawn):
    _, tl = _pipeline_timeline()
    out = plot_gantt(tl, tmp_path / "gantt.png")
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 20_000
    (fig,) = drawn
    gantt, mem = fig.axes[0], fig.axes[1]
    _check_gantt(gantt, tl)
    legend = [t.get_text() for t in gantt.get_legend().get_texts()]
    assert legend == ["F", "B", "W", "transfer"]
    assert [line.get_label() for line in mem.get_lines()] == list(tl.device_names)
    # the memory panel's top reaches the peak (in MiB here: 3 MiB activations)
    peak_mib = max(tl.memory.peak_bytes) / 2**20
    assert max(max(line.get_ydata()) for line in mem.get_lines()) == pytest.approx(peak_mib)


def test_gantt_png_for_a_random_dag_with_custom_groups(tmp_path, drawn):
    inst = random_instance(5, 40, 4)
    tl = simulate(inst, round_robin_orders(inst, 1), link_contention=True)
    out = plot_gantt(tl, tmp_path / "g.png", group=lambda name: f"g{int(name[1:]) % 5}", show_memory=True)
    assert out.read_bytes().startswith(PNG_MAGIC) and out.stat().st_size > 20_000
    out2 = plot_gantt(tl, tmp_path / "g2.png", show_memory=False, show_comm=False)
    assert out2.stat().st_size > 10_000
    with_memory, without = drawn
    assert len(with_memory.axes) == 2 and len(without.axes) == 1
    for fig in (with_memory, without):
        _check_gantt(fig.axes[0], tl)
    labels = [t.get_text() for t in with_memory.axes[0].get_legend().get_texts()]
    assert sorted(labels) == ["g0", "g1", "g2", "g3", "g4", "transfer"]
    assert "transfer" not in [t.get_text() for t in without.axes[0].get_legend().get_texts()]


def test_default_groups():
    assert default_group("3F4") == "F" and default_group("0BW1") == "BW" and default_group("1F0&2B1") == "F&B"
    assert default_group("/layer1/attn/MatMul") == "layer1"
    assert default_group("t12") == "t" and default_group("cluster_3") == "cluster"


def test_chrome_trace_events_per_device(tmp_path):
    inst, tl = _pipeline_timeline()
    path = tmp_path / "trace.json"
    write_chrome_trace(tl, path)
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    compute = Counter(e["pid"] for e in complete if e["tid"] == 0)
    comm = Counter(e["pid"] for e in complete if e["tid"] == 1)
    assert compute == Counter({0: 12, 1: 12, 2: 12})  # 4 micro-batches x (F, B, W) per stage
    # transfers: F of stages 0, 1 forward and B of stages 1, 2 backward, 4 each
    assert comm == Counter({0: 4, 1: 8, 2: 4})
    for e in complete:
        assert {"name", "ts", "dur", "pid", "tid"} <= set(e) and e["dur"] >= 0
    meta = {(e["pid"], e["name"], e.get("tid")): e["args"] for e in events if e["ph"] == "M"}
    assert meta[(1, "process_name", 0)] == {"name": "p1"}
    assert meta[(1, "thread_name", 1)] == {"name": "communication"}
    by_name = {e["name"]: e for e in complete if e["tid"] == 0}
    p = tl.by_task()["2B3"]
    assert by_name["2B3"]["ts"] == p.start_tick and by_name["2B3"]["dur"] == p.end_tick - p.start_tick
    assert by_name["2B3"]["cat"] == "B" and by_name["2B3"]["args"]["stage"] == 2


def test_trace_in_microseconds_when_ticks_have_seconds():
    import dataclasses

    inst = dataclasses.replace(random_instance(2, 6, 2), tick_s=1e-3)
    tl = simulate(inst, round_robin_orders(inst))
    plan = tl.to_plan(method="rr")
    trace = chrome_trace(timeline_of_plan(inst, plan))
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] == 0]
    by = tl.by_task()
    for e in xs:
        assert abs(e["ts"] - by[e["name"]].start_tick * 1000) < 1e-6


def test_ops_without_structured_names_are_grouped_by_op_type(drawn):
    """Ops named t0..t39 fall in one name group, which tells nothing: the legend then lists their op types."""
    from planner.plot import gantt_figure

    inst = random_instance(5, 40, 4)
    tl = simulate(inst, round_robin_orders(inst, 1))
    types = {name: ("MatMul", "Add", "Softmax")[i % 3] for i, name in enumerate(inst.task_names)}
    plain = gantt_figure(tl, show_comm=False)
    assert [t.get_text() for t in plain.axes[0].get_legend().get_texts()] == ["t"]
    typed = gantt_figure(tl, show_comm=False, op_types=types)
    assert sorted(t.get_text() for t in typed.axes[0].get_legend().get_texts()) == ["Add", "MatMul", "Softmax"]
    # names with structure keep their name groups even when op types are given
    _, pipe = _pipeline_timeline()
    fig = gantt_figure(pipe, op_types={p.task: "MatMul" for p in pipe.placements})
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["F", "B", "W", "transfer"]


def test_transfer_arrows_end_on_the_receiving_row():
    from matplotlib.text import Annotation

    from planner.plot import gantt_figure

    _, tl = _pipeline_timeline()
    fig = gantt_figure(tl)
    arrows = [a for a in fig.axes[0].texts if isinstance(a, Annotation)]
    assert len(arrows) == len(tl.transfers) > 0
    for a, x in zip(arrows, tl.transfers):
        end_x, end_y = a.xy
        assert end_x == pytest.approx(x.end_tick)
        assert round(end_y) == x.dst_device  # inside the receiver's row, not above it
        assert x.dst_device - 0.38 < end_y < x.dst_device + 0.22  # within its bar band
        start_y = a.xyann[1]
        assert round(start_y) == x.src_device


def test_memory_note_names_every_device_off_scale():
    import dataclasses

    import numpy as np

    from planner.plot import gantt_figure

    inst = random_instance(3, 30, 8)
    inst = dataclasses.replace(inst, capacity_bytes=np.full(8, 2**50, dtype=np.int64),
                               activation_bytes=np.full(inst.num_tasks, 2**20, dtype=np.int64))
    tl = simulate(inst, round_robin_orders(inst, 1))
    fig = gantt_figure(tl)
    (note,) = [t.get_text() for t in fig.axes[1].texts if t.get_text().startswith("capacity off scale")]
    for name in tl.device_names:
        assert name in note
