"""bench/smoke_check.py fails `make bench-smoke` when a figure's same-run ratio moves past 2×, or goes missing.

Synthetic results files, in the shape bench/report.py writes them, through the
script itself: a reference recorded from two runs, then runs checked against it.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.backend_free

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "smoke_check.py"
RELAY = "stored + on the socket ÷ a bare httpx read"


def write_run(folder: Path, run: str = "", **ratios: float | None) -> Path:
    """bench/relay_throughput.py's results with these ratios by back end, as one smoke run writes them."""
    folder.mkdir(parents=True)
    document = {
        "benchmark": "relay_throughput", "measured_at": "2026-12-05T01:00:00+0000", "run": run, "commit": "abc1234",
        "machine": {"cpus": 2, "python": "3.13.0", "platform": "Linux", "load_average": [1.0, 1.0, 1.0]},
        "events": 5000,
        "results": {backend: {"ratio": value, "baseline_events_per_s": 100_000.0} for backend, value in ratios.items()},
    }
    (folder / "relay_throughput.json").write_text(json.dumps(document))
    return folder


def smoke_check(*arguments, run: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_RUN", "BENCH_RESULTS", "BENCH_REFERENCE")}
    if run:
        env["BENCH_RUN"] = run
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, arguments)], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=60)


@pytest.fixture
def reference(tmp_path) -> Path:
    path = tmp_path / "reference.json"
    runs = [write_run(tmp_path / "one", sqlite=0.2, postgres=0.1), write_run(tmp_path / "two", sqlite=0.45,
                                                                             postgres=0.1)]
    recorded = smoke_check("--reference", path, "--record", *runs)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    # Apart by more than 2×: left little room either way, which the recorder is told.
    assert f"NOISY: relay_throughput: {RELAY} [sqlite] spread 2.25×" in recorded.stdout
    assert "[postgres] spread" not in recorded.stdout
    return path


def test_the_reference_is_the_median_of_the_ratios_seen(reference):
    figures = json.loads(reference.read_text())["figures"]["relay_throughput"][RELAY]
    assert figures["sqlite"] == {"ratio": pytest.approx(math.sqrt(0.2 * 0.45), rel=1e-3), "seen": [0.2, 0.45]}
    assert figures["postgres"] == {"ratio": 0.1, "seen": [0.1, 0.1]}


def test_a_run_within_2x_passes_and_shows_every_figure(reference, tmp_path):
    # sqlite's reference is 0.3: 0.55 is 1.83× higher; postgres's is 0.1: 0.052 is 1.92× lower.
    checked = smoke_check("--reference", reference, "--results", write_run(tmp_path / "run", sqlite=0.55,
                                                                            postgres=0.052))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "1.83× higher" in checked.stdout and "1.92× lower" in checked.stdout
    assert checked.stdout.count(RELAY) == 2
    assert "All 2 judged figures are within 2× of the reference (0 advisory" in checked.stdout


@pytest.mark.parametrize(("sqlite", "moved"), [(0.65, "2.17× higher"), (0.14, "2.14× lower")])
def test_a_run_beyond_2x_either_way_fails_and_says_by_how_much(reference, tmp_path, sqlite, moved):
    checked = smoke_check("--reference", reference, "--results", write_run(tmp_path / "run", sqlite=sqlite,
                                                                            postgres=0.1))
    assert checked.returncode == 1
    failed = [line for line in checked.stdout.splitlines() if line.startswith("FAILED")]
    assert failed == [f"FAILED: relay_throughput: {RELAY} [sqlite]: {sqlite:.3g} this run against 0.3 "
                      f"in the reference: {moved}, more than the 2× allowed"]


def test_a_back_end_without_its_figure_fails(reference, tmp_path):
    checked = smoke_check("--reference", reference, "--results", write_run(tmp_path / "run", sqlite=0.3))
    assert checked.returncode == 1
    assert f"FAILED: relay_throughput: {RELAY} [postgres]: not measured in this run" in checked.stdout


def test_a_figure_without_a_ratio_fails(reference, tmp_path):
    checked = smoke_check("--reference", reference, "--results", write_run(tmp_path / "run", sqlite=0.3,
                                                                            postgres=None))
    assert checked.returncode == 1
    assert f"FAILED: relay_throughput: {RELAY} [postgres]: this run gave no ratio" in checked.stdout


def test_a_benchmark_that_wrote_nothing_or_an_older_run_fails(reference, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    checked = smoke_check("--reference", reference, "--results", empty)
    assert checked.returncode == 1 and checked.stdout.count("not measured in this run") == 2
    # Under `make bench-smoke` (BENCH_RUN set), a file another run left is not this run's figure.
    older = write_run(tmp_path / "older", run="earlier", sqlite=0.3, postgres=0.1)
    checked = smoke_check("--reference", reference, "--results", older, run="this-run")
    assert checked.returncode == 1 and checked.stdout.count("did not finish in this run") == 2


def test_a_figure_missing_from_the_reference_fails(reference, tmp_path):
    document = json.loads(reference.read_text())
    del document["figures"]["relay_throughput"][RELAY]["postgres"]
    reference.write_text(json.dumps(document))
    checked = smoke_check("--reference", reference, "--results", write_run(tmp_path / "run", sqlite=0.3,
                                                                            postgres=0.1))
    assert checked.returncode == 1
    assert "[postgres]: measured, but reference.json has no reference for it" in checked.stdout


def test_recording_refuses_an_incomplete_run(tmp_path):
    checked = smoke_check("--reference", tmp_path / "reference.json", "--record",
                          write_run(tmp_path / "run", sqlite=0.3, postgres=None))
    assert checked.returncode == 1 and "is not a complete smoke run" in checked.stderr
    assert not (tmp_path / "reference.json").exists()


def test_a_lone_run_far_out_does_not_pull_the_reference(tmp_path):
    path = tmp_path / "reference.json"
    runs = [write_run(tmp_path / str(i), sqlite=value, postgres=0.1) for i, value in enumerate((0.1, 0.11, 0.12, 0.9))]
    recorded = smoke_check("--reference", path, "--record", *runs)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    figures = json.loads(path.read_text())["figures"]["relay_throughput"][RELAY]
    assert figures["sqlite"]["ratio"] == pytest.approx(math.sqrt(0.11 * 0.12), rel=1e-3)  # not 0.3, halfway to 0.9
    assert "[sqlite] spread 9.00× across these runs (0.1, 0.11, 0.12, 0.9); 1 of them would fail" in recorded.stdout


def test_an_advisory_figure_is_shown_however_far_it_moved_and_fails_only_when_missing(tmp_path):
    """50 runs at once ÷ one at a time moves past 2× with no change behind it here: printed, not judged."""
    def latency_run(folder, ratio):
        (folder).mkdir()
        document = json.loads((write_run(tmp_path / f"{folder.name}-relay", sqlite=0.3, postgres=0.1)
                               / "relay_throughput.json").read_text())
        document.update(benchmark="interrupt_latency", results={"sqlite": {
            "1 run at a time": {"p50_ms": 10.0}, "50 at once, ends spread over 1 s": {"p50_ms": 10.0 * ratio}}})
        (folder / "interrupt_latency.json").write_text(json.dumps(document))
        return folder

    path = tmp_path / "reference.json"
    assert smoke_check("--reference", path, "--record", latency_run(tmp_path / "one", 2),
                       latency_run(tmp_path / "two", 2)).returncode == 0
    checked = smoke_check("--reference", path, "--results", latency_run(tmp_path / "far", 9))
    assert checked.returncode == 0 and "FAILED" not in checked.stdout, checked.stdout
    assert "4.50× higher" in checked.stdout and "advisory" in checked.stdout
    assert "1 advisory, printed above, not judged" in checked.stdout
    missing = tmp_path / "missing"
    missing.mkdir()
    checked = smoke_check("--reference", path, "--results", missing)
    assert "FAILED: interrupt_latency: p50, 50 runs at once ÷ one at a time [sqlite]: not measured" in checked.stdout
