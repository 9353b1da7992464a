"""Scaling: interrupt-to-inbox latency and relay rate at 1, 10, 50 and 200 runs at once.

Three deployments, one after another: SQLite + in-memory layer on one
`manage.py serve` process; PostgreSQL + Redis on one process; and
PostgreSQL + Redis on three processes sharing the database and a Redis
channel prefix (as behind a proxy). On three, the bench's API calls and
sockets go to the processes in turn, so a run streamed by one process is
heard on sockets of the others through Redis.

Latency, at each level N: N runs of bench/agent.py's /interrupt/ all open
at once, whose terminal frames (RUN_FINISHED with an interrupt) then come at
random over one second; from the agent writing each frame to each of three
reviewers' inbox sockets hearing of it (p50 / p99 over every run and
socket; rounds: 10 at N=1, 2 at N=10, 1 above). What no socket heard within
a minute is counted as lost.

Relay, at each level N: N runs of /stream/ sharing 20,000 events between
them (20,000 at N=1 … 100 each at N=200), held by the agent until all N
streams are open and a WebSocket on each thread listens, then released at
once; the rate is every event stored and heard on its thread's socket, over
the time from the release to the last RUN_FINISHED heard. Baseline in the
same run: N bare httpx clients reading (and parsing) the same N streams from
the same agent, released the same way, median of 3. Ratio = Countersign ÷
baseline. Server CPU per event is the user + system time of every server
process over the relay, per event.

The app's default caps, 50 streams per process (a fifth kept for resumes)
and 10 per agent across the deployment, would queue most of 200 runs of one
agent: here COUNTERSIGN_MAX_STREAMS=256 and COUNTERSIGN_MAX_AGENT_STREAMS=255
on every process, so the runs are really open together. Which process
streamed each run is read from Run.claimed_by and shown.

Writes bench/results/scaling.json and the chart bench/results/scaling.svg
(matplotlib, from bench/requirements.txt; `make bench` installs it).

    .venv/bin/python bench/scaling.py [--backend all|sqlite|postgres] [--levels 1,10,50,200]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import time
import uuid
from collections import Counter

import httpx
from backends import agent, arguments, backends, register_agent, served, served_cluster, session_cookie, ws_url
from report import RESULTS, percentile, run_folder, save, table
from ws_client import HandshakeRefused, WebSocket

LEVELS = (1, 10, 50, 200)
ROUNDS = {1: 10, 10: 2}  # latency rounds per level; 1 for the others
RELAY_EVENTS = 20_000  # per level, shared between its runs
SPREAD = 1.0  # seconds over which a round's terminal frames come
HOLD = 0.05  # seconds between RUN_STARTED and the terminal frame (plus the spread)
SOCKETS = 3  # reviewers with the inbox open
CAPS = {"COUNTERSIGN_MAX_STREAMS": "256", "COUNTERSIGN_MAX_AGENT_STREAMS": "255"}
WAIT = 60  # seconds a round or a relay may take before what is missing counts as lost
FINISHED = "RUN_FINISHED"
RESULTS_CHART = RESULTS / "scaling.svg"


def deployments(chosen) -> list[tuple[str, object, int]]:
    """(key, back end, processes): SQLite on one process; PostgreSQL + Redis on one and on three."""
    found = []
    for backend in chosen:
        found.append((f"{backend.name}-1", backend, 1))
        if backend.database_url:
            found.append((f"{backend.name}-3", backend, 3))
    return found


def label(backend, processes: int) -> str:
    return f"{backend.label}, {processes} process{'es' if processes > 1 else ''}"


@contextlib.contextmanager
def deployment(backend, processes: int):
    """The served apps of one deployment, as a list (one, or three sharing a database and Redis)."""
    if processes == 1:
        with served(backend, "scaling", **CAPS) as app:
            yield [app]
    else:
        with served_cluster(backend, "scaling", processes, **CAPS) as cluster:
            yield cluster.apps


class Inbox:
    """Reviewers' inbox sockets, spread over the processes: when each heard of each thread's interrupt."""

    def __init__(self, apps, cookie: str) -> None:
        self.apps, self.cookie = apps, cookie
        self.heard: list[dict[int, float]] = []
        self.drops = 0
        self.changed = asyncio.Event()
        self.readers: list[asyncio.Task] = []
        self.sockets: list[WebSocket] = []

    async def open(self, count: int = SOCKETS) -> Inbox:
        for n in range(count):
            heard: dict[int, float] = {}
            self.heard.append(heard)
            app = self.apps[n % len(self.apps)]
            socket = await self._connect(app)
            self.readers.append(asyncio.create_task(self._read(app, socket, heard)))
        return self

    async def _connect(self, app) -> WebSocket:
        socket = await WebSocket.connect(ws_url(app, "/ws/inbox/"), cookie=self.cookie, origin=app.url)
        first = await socket.recv_json()
        assert first and first["type"] == "pending", first
        self.sockets.append(socket)
        return socket

    async def _read(self, app, socket: WebSocket, heard: dict[int, float]) -> None:
        while True:
            message = await socket.recv_json()
            if message is None:  # dropped by the server: reopen at once, as the inbox page does
                self.drops += 1
                for attempt in range(20):
                    try:
                        socket = await self._connect(app)
                        break
                    except (OSError, HandshakeRefused, asyncio.IncompleteReadError, TimeoutError):
                        await asyncio.sleep(0.1 * (attempt + 1))
                else:
                    return
            elif message.get("type") == "changed" and message.get("reason") == "raised":
                heard.setdefault(message["thread"], time.time())
                self.changed.set()

    async def wait_for(self, threads: set[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not all(threads <= heard.keys() for heard in self.heard) and time.monotonic() < deadline:
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), max(deadline - time.monotonic(), 0.001))

    async def close(self) -> None:
        for reader in self.readers:
            reader.cancel()
        await asyncio.gather(*(socket.close() for socket in self.sockets), return_exceptions=True)


async def start_runs(apis, agent_name: str, props: dict, count: int) -> list[str]:
    """``count`` new threads on ``agent_name``, started at once through the processes' APIs in turn."""

    async def one(n: int) -> str:
        response = await apis[n % len(apis)].post("/api/threads/", json={"agent": agent_name, "forwarded_props": props})
        assert response.status_code == 201, response.text
        return response.json()["thread"]

    return list(await asyncio.gather(*(one(n) for n in range(count))))


def thread_rows(app, thread_ids: list[str]) -> dict[str, tuple[int, str]]:
    """Each thread's primary key and the worker that claimed its (first) run, from the database."""
    marks = ", ".join(["%s"] * len(thread_ids))
    rows = app.query(
        "SELECT t.thread_id, t.id, r.claimed_by FROM interrupts_thread t JOIN interrupts_run r ON r.thread_id = t.id "
        f"WHERE t.thread_id IN ({marks}) ORDER BY r.id DESC", *thread_ids)
    return {thread_id: (pk, claimed or "") for thread_id, pk, claimed in rows}


def per_process(apps, claimed: list[str]) -> list[int]:
    """How many of the runs each process streamed (``claimed_by`` is host:pid:nonce)."""
    pids = Counter(c.rsplit(":", 2)[1] if c.count(":") >= 2 else "" for c in claimed)
    return [pids.get(str(app.process.pid), 0) for app in apps]


async def latency_round(apps, apis, inbox: Inbox, agent_process, runs: int) -> dict:
    props = {"group": uuid.uuid4().hex, "size": runs, "spread": SPREAD if runs > 1 else 0.0, "hold": HOLD}
    thread_ids = await start_runs(apis, "bench-interrupt", props, runs)
    # The agent ends each run only once all are open; a thread's pk (what the inbox names) comes from the database.
    deadline = time.monotonic() + WAIT
    rows: dict = {}
    while time.monotonic() < deadline:
        rows = await asyncio.to_thread(thread_rows, apps[0], thread_ids)
        if len(rows) == runs:
            break
        await asyncio.sleep(0.1)
    pks = {pk for pk, _ in rows.values()}
    await inbox.wait_for(pks, timeout=max(deadline - time.monotonic(), 1))
    written = (await asyncio.to_thread(agent_process.log))["terminal"]
    rows = await asyncio.to_thread(thread_rows, apps[0], thread_ids)
    latencies, lost = [], 0
    for thread_id, (pk, _) in rows.items():
        for heard in inbox.heard:
            if pk in heard and thread_id in written:
                latencies.append(heard[pk] - written[thread_id])
            else:
                lost += 1
    lost += (runs - len(rows)) * len(inbox.heard)
    return {"latencies": latencies, "lost": lost, "per_process": per_process(apps, [c for _, c in rows.values()])}


async def measure_latency(apps, apis, inbox: Inbox, agent_process, runs: int) -> dict:
    samples, lost, drops, spread = [], 0, inbox.drops, [0] * len(apps)
    for _ in range(ROUNDS.get(runs, 1)):
        result = await latency_round(apps, apis, inbox, agent_process, runs)
        samples += result["latencies"]
        lost += result["lost"]
        spread = [a + b for a, b in zip(spread, result["per_process"], strict=False)]
        await asyncio.sleep(0.5)  # the interrupted runs' after-work is done before the next round
    return {
        "runs": runs, "rounds": ROUNDS.get(runs, 1), "sockets": len(inbox.heard),
        "samples": len(samples), "lost": lost, "socket_drops": inbox.drops - drops,
        "p50_ms": percentile(samples, 50) * 1e3 if samples else None,
        "p99_ms": percentile(samples, 99) * 1e3 if samples else None,
        "max_ms": max(samples) * 1e3 if samples else None,
        "runs_per_process": spread,
        "latencies_ms": [round(s * 1e3, 2) for s in samples],
    }


async def bare_clients(agent_process, runs: int, events: int) -> float:
    """Events/s for ``runs`` plain httpx clients reading ``events`` each, released together by the agent."""
    gate = uuid.uuid4().hex
    done: list[float] = []

    async def read(client: httpx.AsyncClient) -> None:
        body = {"threadId": f"bare-{uuid.uuid4().hex}", "runId": f"bare-{uuid.uuid4().hex}", "state": {},
                "messages": [], "tools": [], "context": [], "forwardedProps": {"events": events, "gate": gate}}
        count = 0
        async with client.stream("POST", agent_process.url("/stream/"), json=body,
                                 headers={"Accept": "text/event-stream"}) as response:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    json.loads(line[5:])
                    count += 1
        assert count == events, (count, events)
        done.append(time.time())

    limits = httpx.Limits(max_connections=runs + 5, max_keepalive_connections=runs + 5)
    async with httpx.AsyncClient(timeout=WAIT, limits=limits) as client, \
            httpx.AsyncClient(base_url=agent_process.base, timeout=WAIT) as control:
        readers = [asyncio.create_task(read(client)) for _ in range(runs)]
        released = (await control.get(f"/release/{gate}/{runs}/")).json()
        await asyncio.gather(*readers)
    return runs * events / (max(done) - released["at"])


async def measure_relay(apps, apis, agent_process, cookie: str, runs: int) -> dict:
    events = max(RELAY_EVENTS // runs, 10)
    baseline_runs = [await bare_clients(agent_process, runs, events) for _ in range(3)]
    baseline = statistics.median(baseline_runs)

    gate = uuid.uuid4().hex
    thread_ids = await start_runs(apis, "bench-relay", {"events": events, "gate": gate}, runs)
    sockets: list[WebSocket] = []
    starts: list[int] = []
    for n, thread_id in enumerate(thread_ids):
        app = apps[n % len(apps)]
        socket = await WebSocket.connect(ws_url(app, f"/ws/threads/{thread_id}/"), cookie=cookie, origin=app.url)
        hello = await socket.recv_json()
        assert hello and hello["type"] == "hello", hello
        sockets.append(socket)
        starts.append(hello["last_seq"])
    heard_last = [0.0] * runs
    last_seq = list(starts)

    async def listen(n: int) -> None:
        while (message := await sockets[n].recv_json()) is not None:
            if message.get("type") != "event":
                continue
            last_seq[n] = max(last_seq[n], message["seq"])
            heard_last[n] = time.time()
            if message.get("event_type") == FINISHED:
                return

    async with httpx.AsyncClient(base_url=agent_process.base, timeout=WAIT) as control:
        cpu_before = sum(app.cpu_seconds() for app in apps)
        listeners = [asyncio.create_task(listen(n)) for n in range(runs)]
        released = (await control.get(f"/release/{gate}/{runs}/")).json()
        finished, unfinished = await asyncio.wait(listeners, timeout=WAIT)
        cpu_after = sum(app.cpu_seconds() for app in apps)
    for task in unfinished:
        task.cancel()
    await asyncio.gather(*(socket.close() for socket in sockets), return_exceptions=True)
    delivered = sum(last - first for last, first in zip(last_seq, starts, strict=False))
    elapsed = max(heard_last) - released["at"] if any(heard_last) else None
    rate = delivered / elapsed if elapsed else None
    rows = await asyncio.to_thread(thread_rows, apps[0], thread_ids)
    return {
        "runs": runs, "events_per_run": events, "streams_open_at_release": released["arrived"],
        "complete_runs": len(finished), "delivered": delivered, "expected": runs * events,
        "seconds": elapsed, "events_per_s": rate,
        "baseline_events_per_s": baseline, "baseline_runs": baseline_runs,
        "ratio": rate / baseline if rate else None,
        "server_cpu_us_per_event": (cpu_after - cpu_before) / delivered * 1e6 if delivered else None,
        "runs_per_process": per_process(apps, [c for _, c in rows.values()]),
    }


async def measure(backend, processes: int, agent_process, levels) -> dict:
    with deployment(backend, processes) as apps:
        register_agent(apps[0], "bench-interrupt", agent_process.url("/interrupt/"))
        register_agent(apps[0], "bench-relay", agent_process.url("/stream/"))
        cookie = session_cookie(apps[0])
        limits = httpx.Limits(max_connections=100)
        async with contextlib.AsyncExitStack() as stack:
            apis = [await stack.enter_async_context(httpx.AsyncClient(
                base_url=app.url, headers={"Authorization": f"Token {app.token}"}, timeout=WAIT, limits=limits))
                for app in apps]
            inbox = await Inbox(apps, cookie).open()
            # Warm-up, not counted: one of each on every process.
            await latency_round(apps, apis, inbox, agent_process, len(apps))
            await measure_relay(apps, apis, agent_process, cookie, len(apps))
            latency, relay = {}, {}
            for runs in levels:
                began = time.monotonic()
                latency[runs] = await measure_latency(apps, apis, inbox, agent_process, runs)
                relay[runs] = await measure_relay(apps, apis, agent_process, cookie, runs)
                print(f"  {label(backend, processes)}: {runs} at once measured in {time.monotonic() - began:.0f} s",
                      flush=True)
                await asyncio.sleep(1)
            await inbox.close()
    return {"backend": backend.name, "processes": processes, "label": label(backend, processes),
            "latency": latency, "relay": relay}


def chart(results: dict, levels, measured: str, cpus: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # text stays text: a small file
    plt.rcParams["svg.hashsalt"] = "countersign"  # stable ids: a redraw of the same figures is the same file

    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 4.6))
    for result in results.values():
        lat, rel = result["latency"], result["relay"]
        xs = [n for n in levels if lat[n]["p50_ms"] is not None]
        line, = left.plot(xs, [lat[n]["p50_ms"] for n in xs], marker="o", label=f"{result['label']} p50")
        left.plot(xs, [lat[n]["p99_ms"] for n in xs], marker="^", linestyle="--", color=line.get_color(),
                  label=f"{result['label']} p99")
        xs = [n for n in levels if rel[n]["events_per_s"]]
        line, = middle.plot(xs, [rel[n]["events_per_s"] for n in xs], marker="o", label=result["label"])
        middle.plot(xs, [rel[n]["baseline_events_per_s"] for n in xs], marker="x", linestyle=":",
                    color=line.get_color(), label=f"bare httpx, same run as {result['label']}")
        right.plot(xs, [rel[n]["ratio"] for n in xs], marker="o", label=result["label"])
    left.axhline(25, color="grey", linewidth=0.8)  # the goals: p50 solid, p99 dashed
    left.axhline(100, color="grey", linewidth=0.8, linestyle="--")
    left.set(title="Interrupt → inbox socket (goal p50 ≤ 25, p99 ≤ 100)", ylabel="ms", yscale="log")
    middle.set(title="Relay: stored + heard on the socket", ylabel="events/s", yscale="log")
    right.axhline(0.3, color="grey", linewidth=0.8)
    right.set(title="Relay ÷ bare httpx read (goal ≥ 0.3)", ylabel="ratio", yscale="log", ylim=(0.01, 1))
    for axes in (left, middle, right):
        axes.set_xscale("log")
        axes.set_xticks(list(levels), [str(n) for n in levels])
        axes.set_xlabel("runs at once")
        axes.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=7)
    middle.legend(fontsize=7)
    right.legend(fontsize=7)
    figure.suptitle(f"Countersign at 1–{max(levels)} runs at once (measured {measured}, {cpus} cores)")
    figure.tight_layout()
    figure.savefig(RESULTS_CHART, metadata={"Date": None})  # no timestamp in the file
    if os.environ.get("BENCH_RUN"):  # this run's own copy, which `bench/summary.py --docs` puts back here
        copy = run_folder(os.environ["BENCH_RUN"]) / RESULTS_CHART.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(copy, metadata={"Date": None})
    if os.environ.get("BENCH_CHART_PNG"):  # a PNG to look at, e.g. where nothing renders SVG
        figure.savefig(os.environ["BENCH_CHART_PNG"], dpi=80)
    plt.close(figure)
    print(f"wrote {RESULTS_CHART}")


def main() -> None:
    global RELAY_EVENTS  # --events sets it for the run
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)),
                        help="Runs at once, comma-separated (default 1,10,50,200).")
    parser.add_argument("--events", type=int, default=RELAY_EVENTS,
                        help=f"Relay events per level, shared between its runs (default {RELAY_EVENTS:,}).")
    parser.add_argument("--rounds", type=int, default=None,
                        help="At most this many latency rounds per level (default: 10 at 1 run, 2 at 10, else 1).")
    parser.add_argument("--chart-only", action="store_true",
                        help="Only redraw bench/results/scaling.svg from bench/results/scaling.json.")
    args = parser.parse_args()
    if args.chart_only:
        document = json.loads((RESULTS / "scaling.json").read_text())
        results = {key: {**r, "latency": {int(n): v for n, v in r["latency"].items()},
                         "relay": {int(n): v for n, v in r["relay"].items()}}
                   for key, r in document["results"].items()}
        chart(results, tuple(document["levels"]), document["measured_at"][:10], document["machine"]["cpus"])
        return
    levels = tuple(int(n) for n in args.levels.split(","))
    RELAY_EVENTS = args.events
    if args.rounds is not None:
        ROUNDS.update({n: min(ROUNDS.get(n, 1), args.rounds) for n in levels})
    chosen = backends(args.backend)
    results = {}
    with agent("scaling") as agent_process:
        for key, backend, processes in deployments(chosen):
            began = time.monotonic()
            results[key] = asyncio.run(measure(backend, processes, agent_process, levels))
            print(f"  {results[key]['label']}: {time.monotonic() - began:.0f} s in all", flush=True)

    def latency_cell(r) -> str:
        if r["p50_ms"] is None:
            return f"none heard ({r['lost']} lost)"
        extra = f", {r['lost']} lost" if r["lost"] else ""
        extra += f", dropped {r['socket_drops']}x" if r["socket_drops"] else ""
        return f"{r['p50_ms']:.0f} / {r['p99_ms']:.0f}{extra}"

    def relay_cell(r) -> str:
        if not r["events_per_s"]:
            return "nothing heard"
        cut = "" if r["complete_runs"] == r["runs"] else f", {r['runs'] - r['complete_runs']} unfinished"
        return (f"{r['events_per_s']:,.0f} / {r['baseline_events_per_s']:,.0f} = {r['ratio']:.3f}; "
                f"{r['server_cpu_us_per_event']:.0f} us{cut}")

    header = ["runs at once", *(r["label"] for r in results.values())]
    table("Scaling: interrupt to inbox socket, ms p50 / p99 over every run and each of 3 sockets "
          "(goal <= 25 / <= 100)", header,
          [[str(n), *(latency_cell(r["latency"][n]) for r in results.values())] for n in levels])
    table("Scaling: relay, events/s stored + heard / bare httpx read (same run) = ratio (goal >= 0.3); "
          "server CPU per event", header,
          [[str(n), *(relay_cell(r["relay"][n]) for r in results.values())] for n in levels])
    if any(r["processes"] > 1 for r in results.values()):
        table("Runs streamed by each process (latency rounds; relay)", header,
              [[str(n), *(f"{'/'.join(map(str, r['latency'][n]['runs_per_process']))}; "
                          f"{'/'.join(map(str, r['relay'][n]['runs_per_process']))}" for r in results.values())]
               for n in levels])
    save("scaling", results, levels=list(levels), relay_events_per_level=RELAY_EVENTS, caps=CAPS,
         spread_s=SPREAD, sockets=SOCKETS)
    chart(results, levels, time.strftime("%Y-%m-%d"), os.cpu_count())


if __name__ == "__main__":
    main()
