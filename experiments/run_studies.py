"""Run every study (`experiments/study_*.py`) in its quick mode, or in full: what `make experiments` runs.

    python -m experiments.run_studies [--full] [--only memory_whatif ...] [--out experiments/results]

The contract of a study module: `main(quick: bool, out_dir: Path) -> None` writes its CSV files into `out_dir`
first, then draws its PNG plots from those CSV files (so a plot can be redrawn without re-running anything).
Each study gets `<out>/<name>/`, where name is the module name without ``study_``.  Each study runs in a process
of its own (`python -m experiments.run_studies --one NAME`), so a study that fails — with a Python exception or a
crash inside a native solver library, which no `except` can catch — is reported with its exit status and the
others still run; the exit status is 1 when any failed.  The runner writes
`<out>/run_studies.csv`: study, mode, seconds, status.

Quick mode is meant to finish within 20 minutes on a 2-vCPU machine (each study's docstring gives its own
time); full mode takes longer, and every run's time is in `run_studies.csv`.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import time
from pathlib import Path

from experiments.realsize import write_csv

HERE = Path(__file__).resolve().parent
PREFIX = "study_"


def discover() -> list[str]:
    """Names of the studies (module name without the prefix), sorted."""
    return sorted(p.stem.removeprefix(PREFIX) for p in HERE.glob(f"{PREFIX}*.py"))


def run_one(name: str, quick: bool, out_dir: Path) -> None:
    """Run one study in this process (what the child process of `run` does)."""
    module = importlib.import_module(f"experiments.{PREFIX}{name}")
    module.main(quick=quick, out_dir=out_dir)


def command(name: str, quick: bool, out_dir: Path) -> list[str]:
    """The child process that runs one study."""
    return [sys.executable, "-m", "experiments.run_studies", "--one", name, "--out", str(out_dir),
            *([] if quick else ["--full"])]


def run(names: list[str], quick: bool, out_root: Path) -> list[dict]:
    """Run the studies one after the other, each in its own process; one result row each (a failure does not
    stop the others)."""
    rows = []
    for name in names:
        out_dir = out_root / name
        print(f"== {name} ({'quick' if quick else 'full'}) -> {out_dir}", flush=True)
        t0 = time.monotonic()
        code = subprocess.call(command(name, quick, out_dir))
        status = "ok" if code == 0 else f"failed (exit status {code})"
        seconds = time.monotonic() - t0
        print(f"== {name}: {status} in {seconds:.0f} s", flush=True)
        rows.append({"study": name, "mode": "quick" if quick else "full", "seconds": round(seconds, 1),
                     "status": status})
        write_csv(out_root / "run_studies.csv", rows)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="full mode (longer; run times in run_studies.csv)")
    parser.add_argument("--only", nargs="+", metavar="STUDY", help=f"run only these (of: {', '.join(discover())})")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="results folder (default %(default)s)")
    parser.add_argument("--one", metavar="STUDY", help=argparse.SUPPRESS)  # the child process: run one, into --out
    args = parser.parse_args(argv)
    if args.one:
        run_one(args.one, quick=not args.full, out_dir=args.out)
        return 0
    names = discover()
    if args.only:
        unknown = sorted(set(args.only) - set(names))
        if unknown:
            parser.error(f"unknown studies {unknown}; studies: {', '.join(names)}")
        names = [n for n in names if n in args.only]
    rows = run(names, quick=not args.full, out_root=args.out)
    total = sum(r["seconds"] for r in rows)
    print(f"{len(rows)} studies in {total:.0f} s: " + ", ".join(f"{r['study']} {r['status']}" for r in rows))
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
