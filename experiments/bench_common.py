"""What the bench scripts share: where their CSVs go (`RESULTS`, `bench/results/`) and how a list of rows is written
(`write_csv`).  It imports no bench, so any bench imports it without importing the others (`experiments.bench` runs
them all as its sections and re-exports both names)."""

from __future__ import annotations

import csv
from pathlib import Path

__all__ = ["RESULTS", "write_csv"]

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


def write_csv(path: Path, rows: list[dict]) -> None:
    """Write `rows` to `path` (folders made): one column per key, in first-seen order over all rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fields: list[str] = []
    for row in rows:
        fields.extend(k for k in row if k not in fields)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
