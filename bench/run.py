"""Run benchmarks within a time budget, each bounded, then bench/summary.py; exit 1 if any failed.

    bench/run.py --budget 870 [--lanes 2] name:seconds[:arguments joined by +] ...

With BENCH_REFERENCE set (`make bench-smoke` sets bench/smoke_reference.json),
bench/smoke_check.py runs last, and fails the run when a figure's ratio to its
same-run baseline moved too far from that reference: a benchmark with such a
figure is first run again alone, and judged on that run.

What the benchmarks of one run share is done once here: the static files are
collected, and the served apps' databases are copies of templates built by the
first benchmark to need one (``tests.servers``), dropped at the end. Each
benchmark's output is printed whole when it ends, so lanes never interleave.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

from backends import PRODUCTION  # noqa: E402

from tests.servers import drop_run_templates  # noqa: E402

#: A benchmark is not started with less than this left of the budget.
LEAST_SECONDS = 20
#: After its limit, a benchmark gets this long to stop its servers (SIGTERM) before SIGKILL.
KILL_AFTER_SECONDS = 10


def parse(entry: str) -> tuple[str, int, list[str]]:
    name, limit, *rest = entry.split(":", 2)
    return name, int(limit), rest[0].split("+") if rest else []


def run_one(name: str, limit: int, arguments: list[str], deadline: float) -> tuple[bool, str]:
    left = deadline - time.monotonic()
    if left < LEAST_SECONDS:
        return False, f"bench/{name}.py skipped: the budget is spent\n"
    limit = min(limit, int(left))
    began = time.monotonic()
    with tempfile.TemporaryFile("w+") as output:
        process = subprocess.Popen([sys.executable, str(BENCH / f"{name}.py"), *arguments], cwd=ROOT,
                                   stdout=output, stderr=subprocess.STDOUT)
        try:
            ok = process.wait(timeout=limit) == 0
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGTERM)  # backends.py stops its servers on SIGTERM
            try:
                process.wait(timeout=KILL_AFTER_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            ok = False
        output.seek(0)
        text = output.read()
    head = f"\n== bench/{name}.py {' '.join(arguments)} (at most {limit} s)\n"
    tail = "" if ok else f"bench/{name}.py failed or ran out of time\n"
    return ok, f"{head}{text}{tail}({name}: {time.monotonic() - began:.0f} s)\n"


def collect_static() -> None:
    # As the benchmarks serve it (backends.PRODUCTION): with DEBUG off, whitenoise serves the manifest's files.
    done = subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT,
                          env={**os.environ, **PRODUCTION}, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"collectstatic failed: {done.stderr}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, required=True, help="seconds for every benchmark together")
    parser.add_argument("--lanes", type=int, default=1,
                        help="benchmarks run at once (1 for figures; more for a smoke that only checks they run)")
    parser.add_argument("entries", nargs="+")
    args = parser.parse_args()
    began = time.monotonic()
    deadline = began + args.budget
    run = os.environ.setdefault("BENCH_RUN", f"{datetime.now():%Y%m%dT%H%M%S}-{os.getpid()}")
    # The served apps' templates, shared by every benchmark of this run (tests.servers names them by it).
    os.environ["COUNTERSIGN_TEST_RUN"] = f"bench{run.replace('-', '')}"
    os.environ["BENCH_STATIC_COLLECTED"] = "1"
    collect_static()
    reference = os.environ.get("BENCH_REFERENCE")
    try:
        failed = run_all(args.entries, args.lanes, deadline)
        print("\n== bench/summary.py", flush=True)
        if subprocess.run([sys.executable, str(BENCH / "summary.py")], cwd=ROOT).returncode != 0:
            failed.append("summary")
        moved = check(reference) if reference else set()
        # Four at a time on two cores, a figure can swing past its limit with no change behind it: measured
        # again with its benchmark alone, it fails only if it still does. A real regression does, alone too.
        again = [entry for entry in args.entries if parse(entry)[0] in moved - set(failed)]
        if again:
            print(f"\n== measured again, one at a time: {' '.join(parse(entry)[0] for entry in again)}", flush=True)
            failed += run_all(again, 1, deadline)
            moved = check(reference)
    finally:
        drop_run_templates()
    print(f"\nthe benchmarks took {time.monotonic() - began:.0f} s")
    if failed:
        print(f"Not measured: {' '.join(failed)}")
    if moved:
        print(f"Figures outside the reference {reference}: see bench/smoke_check.py above")
    return 1 if failed or moved else 0


def run_all(entries: list[str], lanes: int, deadline: float) -> list[str]:
    """Run ``entries``, ``lanes`` at a time, printing each as it ends; the names of those that failed."""
    failed = []
    with ThreadPoolExecutor(lanes) as pool:
        running = {pool.submit(run_one, *parse(entry), deadline): entry for entry in entries}
        for done in as_completed(running):  # each printed as it ends: the run shows its progress
            ok, text = done.result()
            print(text, end="", flush=True)
            if not ok:
                failed.append(parse(running[done])[0])
    return failed


def check(reference: str) -> set[str]:
    """bench/smoke_check.py on this run's figures; the benchmarks with a figure that failed (printed there)."""
    # Even when a benchmark failed: its figures are reported as not measured, the others' margins still shown.
    print(f"\n== bench/smoke_check.py --reference {reference}", flush=True)
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as moved:
        done = subprocess.run([sys.executable, str(BENCH / "smoke_check.py"), "--reference", reference,
                               "--moved-to", moved.name], cwd=ROOT)
        names = set(moved.read().split())
    return names | ({"smoke_check"} if done.returncode != 0 and not names else set())


if __name__ == "__main__":
    sys.exit(main())
