"""Connections: 1,000 idle, logged-in inbox WebSockets on one daphne process.

Resident memory per connection: the server's VmRSS (/proc/<pid>/status)
with the sockets open, less before they were opened, over their number.
Broadcast: an agent ends a run with an interrupt; from the agent writing
that terminal frame to the first, median and last of the open sockets
hearing of it (best of up to 3 broadcasts by last arrival, each in the JSON).
Sockets the server closes while idle are counted, not reopened. Goal for
the broadcast: the last socket hears it within 100 ms, for at most 0.1 s of
server CPU (user + system time of the server process from an idle server,
through the run that raises the interrupt, to the last socket hearing it).
What the server spends after that, until it is idle again (each socket
counting what waits for its user a second after a change), is shown apart.

    .venv/bin/python bench/connections.py [--sockets 1000] [--backend all|sqlite|postgres]
"""

from __future__ import annotations

import asyncio
import time

import httpx
from backends import agent, arguments, backends, register_agent, served, session_cookie, ws_url
from report import percentile, save, table
from ws_client import WebSocket

BATCH = 50  # sockets opened at once
BROADCASTS = 3
BROADCAST_BUDGET = 15  # seconds: no further broadcast is started after this


class Listener:
    """One idle inbox socket: when it heard of each thread's new interrupt, and whether it was closed."""

    def __init__(self, socket: WebSocket) -> None:
        self.socket = socket
        self.heard: dict[int, float] = {}
        self.closed_at: float | None = None
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, app, cookie: str) -> Listener:
        socket = await WebSocket.connect(ws_url(app, "/ws/inbox/"), cookie=cookie, origin=app.url, timeout=60)
        first = await asyncio.wait_for(socket.recv_json(), 60)
        assert first and first["type"] == "pending", first
        return cls(socket)

    async def _read(self) -> None:
        while (message := await self.socket.recv_json()) is not None:
            if message.get("type") == "changed" and message.get("reason") == "raised":
                self.heard.setdefault(message["thread"], time.time())
        self.closed_at = time.time()

    async def close(self) -> None:
        self.reader.cancel()
        await self.socket.close()


async def broadcast(api: httpx.AsyncClient, agent_process, listeners: list[Listener]) -> dict:
    response = await api.post("/api/threads/", json={"agent": "bench-interrupt", "forwarded_props": {"hold": 0.05}})
    assert response.status_code == 201, response.text
    thread_id = response.json()["thread"]
    pk = (await api.get(f"/api/threads/{thread_id}/")).json()["id"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        waiting = [x for x in listeners if pk not in x.heard and x.closed_at is None]
        if not waiting:
            break
        await asyncio.sleep(0.1)  # each socket noted its own arrival time: this only decides when to stop
    written = (await asyncio.to_thread(agent_process.log))["terminal"][thread_id]
    arrivals = [x.heard[pk] - written for x in listeners if pk in x.heard]
    return {
        "heard": len(arrivals),
        "first_ms": min(arrivals) * 1e3 if arrivals else None,
        "p50_ms": percentile(arrivals, 50) * 1e3 if arrivals else None,
        "last_ms": max(arrivals) * 1e3 if arrivals else None,
    }


async def idle(app, quiet: float = 0.5, most: float = 15) -> float:
    """Wait (at most ``most`` s) until the server has used under 2% of a core for ``quiet`` s; how long it took."""
    began = time.monotonic()
    await asyncio.sleep(1.2)  # the sockets' recount comes RECOUNT_SECONDS (1 s) after a change
    while time.monotonic() - began < most:
        cpu = app.cpu_seconds()
        await asyncio.sleep(quiet)
        if app.cpu_seconds() - cpu < 0.02 * quiet + 0.011:  # one clock tick is 10 ms
            break
    return time.monotonic() - began


async def measure(backend, agent_process, count: int, most_broadcasts: int = BROADCASTS) -> dict:
    with served(backend, "connections") as app:
        register_agent(app, "bench-interrupt", agent_process.url("/interrupt/"))
        cookie = session_cookie(app)
        async with httpx.AsyncClient(base_url=app.url, headers={"Authorization": f"Token {app.token}"},
                                     timeout=60) as api:
            # Warm-up: the code paths of a connect and a broadcast are loaded before the first reading.
            warm = await Listener.open(app, cookie)
            await broadcast(api, agent_process, [warm])
            await warm.close()
            await idle(app)
            rss_before, cpu_before, db_before = app.rss_kib(), app.cpu_seconds(), app.database_stats()
            started = time.monotonic()
            listeners: list[Listener] = []
            while len(listeners) < count:
                size = min(BATCH, count - len(listeners))
                listeners += await asyncio.gather(*(Listener.open(app, cookie) for _ in range(size)))
            open_seconds = time.monotonic() - started
            open_cpu = app.cpu_seconds() - cpu_before
            await idle(app)  # the connects' follow-up (each socket's first count) is in the RSS
            rss_after, db_opened = app.rss_kib(), app.database_stats()
            broadcasts, spent = [], 0.0
            # Up to BROADCASTS, while they stay quick: a slow one is not worth repeating.
            while len(broadcasts) < most_broadcasts and spent < BROADCAST_BUDGET:
                # From an idle server: the previous broadcast's follow-up (each socket's recount) is not this one's.
                await idle(app)
                cpu, began = app.cpu_seconds(), time.monotonic()
                result = await broadcast(api, agent_process, listeners)
                spent += time.monotonic() - began
                result["server_cpu_s"] = app.cpu_seconds() - cpu
                # What follows a broadcast: each socket counting what waits for its user (RECOUNT_SECONDS later).
                cpu = app.cpu_seconds()
                result["idle_after_s"] = await idle(app)
                result["server_cpu_after_s"] = app.cpu_seconds() - cpu
                result["open_sockets"] = sum(1 for x in listeners if x.closed_at is None)
                broadcasts.append(result)
            if db_before:
                await asyncio.sleep(1.5)  # PostgreSQL publishes a backend's counters within a second or so
            db_after = app.database_stats()
            dropped = sum(1 for x in listeners if x.closed_at is not None)
            idle_seconds = time.monotonic() - started
            await asyncio.gather(*(x.close() for x in listeners))
    timed = [b for b in broadcasts if b["last_ms"] is not None]
    best = min(timed, key=lambda b: b["last_ms"]) if timed else None
    return {
        "sockets": count,
        "open_seconds": open_seconds,
        "open_server_cpu_ms_per_socket": open_cpu / count * 1e3,
        "rss_before_kib": rss_before,
        "rss_after_kib": rss_after,
        "rss_per_socket_kib": (rss_after - rss_before) / count,
        "dropped_by_server": dropped,
        "seconds_open": idle_seconds,
        "broadcast": best,
        "broadcasts": broadcasts,
        "database_per_connect": db_before and {
            key: round((db_opened[key] - db_before[key]) / count, 2) for key in db_before},
        "database_per_broadcast": db_before and {
            key: round((db_after[key] - db_opened[key]) / len(broadcasts), 1) for key in db_before},
    }


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--sockets", type=int, default=1000)
    parser.add_argument("--broadcasts", type=int, default=BROADCASTS, help="at most this many (the best is reported)")
    args = parser.parse_args()
    chosen = backends(args.backend)
    results = {}
    with agent("connections") as agent_process:
        for backend in chosen:
            results[backend.name] = asyncio.run(measure(backend, agent_process, args.sockets, args.broadcasts))

    def row(name, fn):
        return [name, *(fn(results[b.name]) for b in chosen)]

    def broadcast_row(name, fn):
        return row(name, lambda r: fn(r["broadcast"]) if r["broadcast"] else "n/a")

    def database_row(name, key):
        return row(name, lambda r: f"{r[key]['sessions']:g} / {r[key]['transactions']:g}" if r[key] else "n/a")

    def ms(value):
        return "n/a" if value is None else f"{value:.0f}"

    rows = [
        row("server RSS before / after, MiB",
            lambda r: f"{r['rss_before_kib'] / 1024:.0f} / {r['rss_after_kib'] / 1024:.0f}"),
        row("RSS per connection, KiB", lambda r: f"{r['rss_per_socket_kib']:.1f}"),
        row(f"time to open all (batches of {BATCH}), s", lambda r: f"{r['open_seconds']:.1f}"),
        row("server CPU per connect, ms", lambda r: f"{r['open_server_cpu_ms_per_socket']:.1f}"),
        broadcast_row("broadcast to all, ms after the agent's frame: first / p50 / last (goal last <= 100)",
                      lambda b: " / ".join(ms(b[k]) for k in ("first_ms", "p50_ms", "last_ms"))),
        broadcast_row("sockets that heard it / open", lambda b: f"{b['heard']} / {b['open_sockets']}"),
        broadcast_row("server CPU for one broadcast, s (goal <= 0.1)", lambda b: f"{b['server_cpu_s']:.2f}"),
        broadcast_row("  then, until the server is idle again (the sockets' recount), s",
                      lambda b: f"{b['server_cpu_after_s']:.2f} in {b['idle_after_s']:.1f} s"),
        row("closed by the server while idle", lambda r: f"{r['dropped_by_server']} in {r['seconds_open']:.0f} s"),
        database_row("PostgreSQL per connect: new sessions / transactions", "database_per_connect"),
        database_row("PostgreSQL per broadcast: new sessions / transactions", "database_per_broadcast"),
    ]
    table(f"Connections: {args.sockets:,} idle inbox WebSockets on one daphne process "
          f"(broadcast: best of up to {args.broadcasts} by last arrival)", ["", *(b.label for b in chosen)], rows)
    save("connections", results, sockets=args.sockets)


if __name__ == "__main__":
    main()
