"""How the benchmarks report: a printed table, and the same figures as JSON in bench/results/."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

# BENCH_RESULTS: elsewhere (`make bench-smoke` writes to a temporary folder, not the figures kept here).
RESULTS = Path(os.environ.get("BENCH_RESULTS") or Path(__file__).resolve().parent / "results")


def percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0–100) by linear interpolation between the closest ranks."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def table(title: str, header: list[str], rows: list[list]) -> None:
    """Print rows under a title; the first column left-aligned, the others right-aligned."""
    cells = [[str(c) for c in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    print(title)
    for row in cells:
        print("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row)))
    sys.stdout.flush()


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine() -> dict:
    """What the figures were measured on: cores, memory, Python, and how busy the machine was (load average)."""
    about = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                about["memory_gib"] = round(int(line.split()[1]) / 1024**2, 1)
        about["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    return about


def save(name: str, results: dict, **about) -> Path:
    """Write ``results`` to bench/results/<name>.json with when and where it was measured.

    ``run``: the BENCH_RUN that ``make bench`` sets for all the benchmarks of
    one invocation, so bench/summary.py can tell this run's figures from older
    files; with one, a copy also goes to bench/results/runs/<run>/.
    """
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    document = {
        "benchmark": name,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "run": os.environ.get("BENCH_RUN", ""),
        "commit": _commit(),
        "machine": machine(),
        **about,
        "results": results,
    }
    text = json.dumps(document, indent=2) + "\n"
    path.write_text(text)
    if document["run"]:
        # This run's own copy: a benchmark someone runs by hand meanwhile rewrites results/<name>.json,
        # not the figures bench/summary.py reads for this run.
        copy = run_folder(document["run"]) / f"{name}.json"
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(text)
    print(f"wrote {path}")
    return path


def run_folder(run: str, folder: Path = RESULTS) -> Path:
    """Where one `make bench` run keeps its own copy of every results file (bench/results/runs/<run>/)."""
    return folder / "runs" / run
