"""How the inbox's first page, a filtered page and page 500 scale with 100,000 pending interrupts.

Baseline: the same three pages with 100 pending interrupts, measured in the
same run. Prints server time (best of 5) and SQL query count; a query count
that grows with the data or with the page number would show here.

    .venv/bin/python bench/inbox_scale.py [--interrupts 100000]
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def setup(database: Path):
    os.environ["DATABASE_URL"] = f"sqlite:///{database}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def populate(total: int, threads: int) -> None:
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from interrupts.models import Agent, Interrupt, Run, Thread

    agents = [Agent.objects.create(name=f"bench-{i}", url=f"http://127.0.0.1:9/{i}/") for i in range(5)]
    per_thread = max(total // threads, 1)
    with transaction.atomic():
        made_threads = Thread.objects.bulk_create(
            [Thread(thread_id=f"t-{i}", agent=agents[i % 5], title=f"Thread {i}") for i in range(threads)],
            batch_size=2000)
        runs = Run.objects.bulk_create(
            [Run(thread=t, agent=t.agent, run_id=f"r-{t.thread_id}", input={}, status="interrupted")
             for t in made_threads], batch_size=2000)
        Interrupt.objects.bulk_create(
            [Interrupt(run=run, interrupt_id=f"i-{n}", reason=("tool_call", "input_required", "confirmation")[n % 3],
                       message=f"Approve step {n} of {run.run_id}?", raw={"id": f"i-{n}", "reason": "x"})
             for run in runs for n in range(per_thread)], batch_size=5000)
    get_user_model().objects.create_user("bench", password="bench-password-1")


def measure(client, url: str) -> tuple[float, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    best = float("inf")
    for _ in range(5):
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            response = client.get(url)
            elapsed = time.perf_counter() - started
        assert response.status_code == 200, (url, response.status_code)
        best = min(best, elapsed)
    return best * 1000, len(queries)


def run(total: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        setup(Path(folder) / "bench.sqlite3")
        from django.test import Client

        populate(total, max(total // 10, 1))
        client = Client(HTTP_HOST="localhost")
        client.login(username="bench", password="bench-password-1")
        last_page = max(min(500, total // 25), 1)
        return {
            "first page": measure(client, "/inbox/"),
            "filtered (agent, reason)": measure(client, "/inbox/?agent=bench-1&reason=tool_call"),
            f"page {last_page}": measure(client, f"/inbox/?page={last_page}"),
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--interrupts", type=int, default=100_000)
    parser.add_argument("--baseline", type=int, default=100)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import json

        print(json.dumps(run(args.child)))
        return
    # Each size in its own process: Django is configured once per process.
    import json
    import subprocess

    results = {}
    for size in (args.baseline, args.interrupts):
        done = subprocess.run([sys.executable, __file__, "--child", str(size)], capture_output=True, text=True,
                              check=True, env={**os.environ, "DEBUG": "true"})
        results[size] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"Inbox with {args.interrupts:,} pending interrupts vs {args.baseline} (server time best of 5; SQL queries)")
    print(f"{'page':<28}{'baseline ms':>12}{'large ms':>10}{'ratio':>8}{'queries':>10}")
    for name in results[args.interrupts]:
        base_ms, base_q = next(v for k, v in results[args.baseline].items() if k.split()[0] == name.split()[0])
        big_ms, big_q = results[args.interrupts][name]
        print(f"{name:<28}{base_ms:>12.1f}{big_ms:>10.1f}{big_ms / base_ms:>8.1f}{f'{base_q} / {big_q}':>10}")


if __name__ == "__main__":
    main()
