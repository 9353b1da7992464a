"""Relay throughput: events/s through Countersign, stored and seen on a thread's WebSocket.

An agent (bench/agent.py, its own process) streams 20,000 events as fast as
its reader takes them. Countersign's figure: from the agent reading the
request to the moment every event is stored and a WebSocket client on
ws/threads/<threadId>/ has seen the last sequence number. Baseline: a bare
httpx client reading (and parsing) the same stream from the same agent in the
same run, median of 3. Goal: ratio >= 0.3,
and at most 10 µs of server CPU per event (user + system time of the server process). A back end that has not delivered
every event after --max-seconds (30) is cut there, and its rate is taken over
what had arrived: the server is stopped right after, so the rest costs nothing.

    .venv/bin/python bench/relay_throughput.py [--events 20000] [--backend all|sqlite|postgres]
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid

import httpx
from backends import Backend, agent, arguments, backends, register_agent, served, session_cookie, wait_run, ws_url
from report import save, table
from ws_client import WebSocket


async def bare_client(agent_process, events: int) -> dict:
    """Read the stream as a plain AG-UI client would: httpx, line by line, each event parsed."""
    run_id = f"bare-{uuid.uuid4().hex}"
    body = {"threadId": f"bare-{uuid.uuid4().hex}", "runId": run_id, "state": {}, "messages": [], "tools": [],
            "context": [], "forwardedProps": {"events": events}}
    count = 0
    async with httpx.AsyncClient(timeout=60) as client:
        async with client.stream("POST", agent_process.url("/stream/"), json=body,
                                 headers={"Accept": "text/event-stream"}) as response:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    json.loads(line[5:])
                    count += 1
    done = time.time()
    started = (await asyncio.to_thread(agent_process.log))["requests"][run_id]
    assert count == events, (count, events)
    return {"seconds": done - started, "events_per_s": events / (done - started)}


async def through_countersign(app, agent_process, events: int, max_seconds: float) -> dict:
    cookie = session_cookie(app)
    async with httpx.AsyncClient(base_url=app.url, headers={"Authorization": f"Token {app.token}"},
                                 timeout=60) as api:
        # A short first run makes the thread (the socket needs it) and warms the code paths.
        first = (await api.post("/api/threads/",
                                json={"agent": "bench-relay", "forwarded_props": {"events": 10}})).json()
        thread_id = first["thread"]
        await wait_run(api, first["run_id"])
        socket = await WebSocket.connect(ws_url(app, f"/ws/threads/{thread_id}/"), cookie=cookie, origin=app.url)
        hello = await socket.recv_json()
        assert hello["type"] == "hello", hello
        base, target = hello["last_seq"], hello["last_seq"] + events
        if app.backend.database_url:
            await asyncio.sleep(1.5)  # let the warm-up's counters reach pg_stat_database first
        stats_before, cpu_before = app.database_stats(), app.cpu_seconds()
        response = await api.post(f"/api/threads/{thread_id}/runs/", json={"forwarded_props": {"events": events}})
        assert response.status_code == 201, response.text
        run_id = response.json()["run_id"]
        hints, jumps, last, first_hint_at, last_hint_at = 0, 0, base, None, None
        deadline = time.monotonic() + max_seconds
        while last < target:
            try:
                message = await asyncio.wait_for(socket.recv_json(), max(deadline - time.monotonic(), 0.001))
            except TimeoutError:
                break
            if message is None:
                break
            if message.get("type") != "event":
                continue
            hints += 1
            last_hint_at = time.time()
            first_hint_at = first_hint_at or last_hint_at
            if message["seq"] > last + 1:
                jumps += 1  # a poke for several events (a batch), or lost pokes: the log has them
            last = max(last, message["seq"])
        cpu_after = app.cpu_seconds()
        await socket.close()
        complete = last >= target
        # What the log held at the cut: all of it, if only the socket's last hints were dropped.
        stored_at_cut = (await api.get(f"/api/threads/{thread_id}/")).json()["last_seq"] - base
        run = await wait_run(api, run_id, timeout=20) if complete else None
        if app.backend.database_url:
            await asyncio.sleep(1.5)  # PostgreSQL publishes a backend's counters within a second or so
        stats_after = app.database_stats()
        stored_now = (await api.get(f"/api/threads/{thread_id}/")).json()["last_seq"] - base
    started = (await asyncio.to_thread(agent_process.log))["requests"][run_id]
    # Events on the socket were stored first (the hint is sent after commit).
    delivered = last - base
    elapsed = (last_hint_at - started) if last_hint_at else None
    result = {
        "complete": complete,
        "delivered": delivered,
        "stored_at_cut": stored_at_cut,
        "run_status": run["status"] if run else "still streaming at the cut",
        "seconds": elapsed,
        "events_per_s": delivered / elapsed if elapsed else None,
        "hints_received": hints,
        "seq_jumps": jumps,
        "first_hint_after_s": (first_hint_at - started) if first_hint_at else None,
        "server_cpu_us_per_event": (cpu_after - cpu_before) / delivered * 1e6 if delivered else None,
    }
    if stats_before and stats_after and stored_now:
        result["database_per_event"] = {
            key: round((stats_after[key] - stats_before[key]) / stored_now, 2) for key in stats_before
        }
    return result


async def measure(backend: Backend, agent_process, events: int, max_seconds: float) -> dict:
    with served(backend, "relay") as app:
        register_agent(app, "bench-relay", agent_process.url("/stream/"))
        bare = [await bare_client(agent_process, events) for _ in range(3)]
        baseline = statistics.median(b["events_per_s"] for b in bare)
        hub = await through_countersign(app, agent_process, events, max_seconds)
    ratio = hub["events_per_s"] / baseline if hub["events_per_s"] else None
    return {"baseline_events_per_s": baseline, "baseline_runs": bare, "countersign": hub, "ratio": ratio}


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--max-seconds", type=float, default=30,
                        help="Stop waiting after this long; the rate is then taken over what arrived.")
    args = parser.parse_args()
    chosen = backends(args.backend)
    results = {}
    with agent("relay") as agent_process:
        for backend in chosen:
            results[backend.name] = asyncio.run(measure(backend, agent_process, args.events, args.max_seconds))

    def row(name, fn, fmt):
        cells = []
        for b in chosen:
            value = fn(results[b.name], results[b.name]["countersign"])
            cells.append("n/a" if value is None else format(value, fmt))
        return [name, *cells]

    rows = [
        row("bare httpx client, events/s (median of 3)", lambda r, c: r["baseline_events_per_s"], ",.0f"),
        row("Countersign: stored + seen on the socket, events/s", lambda r, c: c["events_per_s"], ",.0f"),
        row("ratio (goal >= 0.3)", lambda r, c: r["ratio"], ".3g"),
        row("events delivered", lambda r, c: f"{c['delivered']:,}" + (
            "" if c["complete"] else f" (cut; {c['stored_at_cut']:,} stored)"), ""),
        row("seconds", lambda r, c: c["seconds"], ".1f"),
        row("first event on the socket after, ms",
            lambda r, c: c["first_hint_after_s"] and c["first_hint_after_s"] * 1e3, ".0f"),
        row("socket messages (of which skip ahead)", lambda r, c: f"{c['hints_received']:,} ({c['seq_jumps']:,})", ""),
        row("server CPU per event, us (goal <= 10)", lambda r, c: c["server_cpu_us_per_event"], ".0f"),
        row("PostgreSQL per event: transactions", lambda r, c: c.get("database_per_event", {}).get("transactions"), ""),
        row("PostgreSQL per event: rows inserted / updated", lambda r, c: c.get("database_per_event") and
            f"{c['database_per_event']['inserted']} / {c['database_per_event']['updated']}", ""),
        row("PostgreSQL per event: new sessions", lambda r, c: c.get("database_per_event", {}).get("sessions"), ""),
    ]
    table(f"Relay throughput: {args.events:,} events from a standalone agent "
          f"(at most {args.max_seconds:g} s per back end; '(cut)': the rate is over what arrived by then)",
          ["", *(b.label for b in chosen)], rows)
    save("relay_throughput", results, events=args.events, max_seconds=args.max_seconds)


if __name__ == "__main__":
    main()
