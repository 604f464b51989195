"""A small device-by-time text picture, for error messages (the validator shows one around a failure).

Each row is a device, each column a time bucket; a cell shows the symbol of the task running there, ``.`` when
idle and ``!`` when several tasks overlap in it.  A legend maps symbols to task names and times.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from planner.schedule.plan import TaskPlacement

_SYMBOLS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def text_grid(
    placements: Iterable[TaskPlacement],
    device_names: Sequence[str],
    window: tuple[int, int],
    *,
    devices: Sequence[int] | None = None,
    width: int = 60,
    mark: tuple[int, ...] = (),
    indent: str = "  ",
) -> str:
    """Render `placements` between ticks window[0] and window[1] for `devices` (default all, up to 16).

    `mark` is a tuple of tick positions shown with ``^`` under the grid (e.g. the time of a violation).
    """
    t0, t1 = window
    if t1 <= t0:
        t1 = t0 + 1
    bucket = max(1, -(-(t1 - t0) // width))
    cols = -(-(t1 - t0) // bucket)
    if devices is None:
        devices = range(min(len(device_names), 16))
    devices = [d for d in devices if 0 <= d < len(device_names)]
    items = sorted(
        (p for p in placements if p.device in devices and p.start_tick < t1 and
         (p.end_tick > t0 or (p.end_tick == p.start_tick and p.start_tick >= t0))),
        key=lambda p: (p.start_tick, p.device, p.task),
    )
    symbol: dict[tuple[str, int, int], str] = {}
    for i, p in enumerate(items):
        symbol[(p.task, p.device, p.start_tick)] = _SYMBOLS[i] if i < len(_SYMBOLS) else "*"
    label_w = max((len(device_names[d]) for d in devices), default=4)
    lines = [f"{'':>{label_w}} ticks {t0}..{t1}, one column = {bucket} tick{'s' if bucket > 1 else ''}"]
    for d in devices:
        cells = ["."] * cols
        for p in items:
            if p.device != d:
                continue
            s = symbol[(p.task, p.device, p.start_tick)]
            lo = max(0, (p.start_tick - t0) // bucket)
            hi = max(lo + 1, -(-(min(p.end_tick, t1) - t0) // bucket))
            for c in range(lo, min(hi, cols)):
                cells[c] = s if cells[c] in (".", s) else "!"
        lines.append(f"{device_names[d]:>{label_w}} |{''.join(cells)}|")
    if mark:
        under = [" "] * cols
        for m in mark:
            c = (m - t0) // bucket
            if 0 <= c < cols:
                under[c] = "^"
        lines.append(f"{'':>{label_w}}  {''.join(under)}")
    legend = [f"{symbol[(p.task, p.device, p.start_tick)]}={p.task}[{p.start_tick},{p.end_tick})" for p in items[:24]]
    if len(items) > 24:
        legend.append(f"... {len(items) - 24} more")
    lines.append("  ".join(legend))
    return "\n".join(indent + line for line in lines)
