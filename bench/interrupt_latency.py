"""Interrupt-to-inbox latency: from the agent writing RUN_FINISHED(interrupt) to an inbox socket hearing of it.

The agent (bench/agent.py) notes time.time() just before it writes the
terminal frame; three WebSockets on ws/inbox/, logged in as a reviewer, note
when the "raised" message for that thread first arrives on one of them (same
machine, same clock).
Rows: one run at a time; 50 runs streaming at once (all 50 open before the
first ends) whose terminal frames come at random over a second. Goal:
p50 <= 25 ms, p99 <= 100 ms. A socket the server drops is reopened at once,
as the inbox page does, and counted; what no socket heard is counted as lost.

The app's default caps (COUNTERSIGN_MAX_STREAMS 50 a process, a fifth of them
kept for resumes; COUNTERSIGN_MAX_AGENT_STREAMS 10 for one agent) would
stream only 10 of the 50 runs of the one bench agent at a time, the rest
queued (and the agent would hold each group for its 20 s timeout): the
served app here has room for all 50 at once (CAPS).

    .venv/bin/python bench/interrupt_latency.py [--backend all|sqlite|postgres]
"""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
from backends import agent, arguments, backends, register_agent, served, session_cookie, ws_url
from report import percentile, save, table
from ws_client import HandshakeRefused, WebSocket

SOCKETS = 3  # reviewers with the inbox open
HOLD = 0.05  # seconds between RUN_STARTED and the terminal frame: Countersign is mid-stream when it comes
SCENARIOS = (
    # name, runs at once, rounds, spread of the terminal frames (s)
    ("1 run at a time", 1, 20, 0.0),
    ("50 at once, ends spread over 1 s", 50, 1, 1.0),
)
# Also possible, at about 20 s a round: ("50 at once, ends in one burst", 50, 1, 0.0).
CAPS = {"COUNTERSIGN_MAX_STREAMS": "64", "COUNTERSIGN_MAX_AGENT_STREAMS": "60"}  # 51 slots for new runs


class Inbox:
    """Reviewers' inbox sockets: when each thread's "raised" message first reached one of them.

    Several sockets, as several reviewers have: one that the server drops
    (it reconnects at once, as the inbox page does, and counts the drop)
    misses what was announced meanwhile, and the others still hear it.
    """

    def __init__(self, app, cookie: str) -> None:
        self.app, self.cookie = app, cookie
        self.raised: dict[int, float] = {}
        self.drops = 0
        self.changed = asyncio.Event()
        self.readers: list[asyncio.Task] = []
        self.sockets: list[WebSocket] = []

    @classmethod
    async def open(cls, app, cookie: str, count: int = SOCKETS) -> Inbox:
        inbox = cls(app, cookie)
        for _ in range(count):
            socket = await inbox._connect()
            inbox.readers.append(asyncio.create_task(inbox._read(socket)))
        return inbox

    async def _connect(self) -> WebSocket:
        socket = await WebSocket.connect(ws_url(self.app, "/ws/inbox/"), cookie=self.cookie, origin=self.app.url)
        first = await socket.recv_json()
        assert first and first["type"] == "pending", first
        self.sockets.append(socket)
        return socket

    async def _read(self, socket: WebSocket) -> None:
        while True:
            message = await socket.recv_json()
            if message is None:
                self.drops += 1
                for attempt in range(20):
                    try:
                        socket = await self._connect()
                        break
                    except (OSError, HandshakeRefused, asyncio.IncompleteReadError, TimeoutError):
                        await asyncio.sleep(0.1 * (attempt + 1))
                else:
                    return
            elif message.get("type") == "changed" and message.get("reason") == "raised":
                self.raised.setdefault(message["thread"], time.time())
                self.changed.set()

    async def wait_for(self, threads: set[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not threads <= self.raised.keys() and time.monotonic() < deadline:
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), deadline - time.monotonic())
            except TimeoutError:
                break

    async def close(self) -> None:
        for reader in self.readers:
            reader.cancel()
        await asyncio.gather(*(socket.close() for socket in self.sockets))


async def one_round(api: httpx.AsyncClient, inbox: Inbox, agent_process, runs: int, spread: float) -> tuple[list, int]:
    """Start ``runs`` runs at once; each one's latency (s), and how many never reached the inbox."""
    props = {"group": uuid.uuid4().hex, "size": runs, "spread": spread, "hold": HOLD}

    async def start() -> tuple[str, int]:
        response = await api.post("/api/threads/", json={"agent": "bench-interrupt", "forwarded_props": props})
        assert response.status_code == 201, response.text
        thread_id = response.json()["thread"]
        return thread_id, (await api.get(f"/api/threads/{thread_id}/")).json()["id"]

    threads = await asyncio.gather(*(start() for _ in range(runs)))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        await inbox.wait_for({pk for _, pk in threads}, timeout=2)
        missing = [thread_id for thread_id, pk in threads if pk not in inbox.raised]
        if not missing:
            break
        # Interrupted on the server a while ago but never announced on a socket: lost.
        written = (await asyncio.to_thread(agent_process.log))["terminal"]
        if all(t in written for t in missing) and time.time() - max(written[t] for t in missing) > 3:
            statuses = await asyncio.gather(*(api.get(f"/api/threads/{thread_id}/") for thread_id in missing))
            if all(s.json()["status"] == "interrupted" for s in statuses):
                break
    written = (await asyncio.to_thread(agent_process.log))["terminal"]
    latencies = [inbox.raised[pk] - written[thread_id] for thread_id, pk in threads if pk in inbox.raised]
    return latencies, runs - len(latencies)


async def measure(backend, agent_process, max_rounds: int) -> dict:
    with served(backend, "inbox-latency", **CAPS) as app:
        register_agent(app, "bench-interrupt", agent_process.url("/interrupt/"))
        inbox = await Inbox.open(app, session_cookie(app))
        results = {}
        async with httpx.AsyncClient(base_url=app.url, headers={"Authorization": f"Token {app.token}"},
                                     timeout=60) as api:
            await one_round(api, inbox, agent_process, 1, 0)  # warm-up, not counted
            for name, runs, rounds, spread in SCENARIOS:
                samples, missing, drops = [], 0, inbox.drops
                for _ in range(min(rounds, max_rounds)):
                    latencies, lost = await one_round(api, inbox, agent_process, runs, spread)
                    samples += latencies
                    missing += lost
                results[name] = {
                    "samples": len(samples), "missing": missing, "socket_drops": inbox.drops - drops,
                    "p50_ms": percentile(samples, 50) * 1e3 if samples else None,
                    "p99_ms": percentile(samples, 99) * 1e3 if samples else None,
                    "max_ms": max(samples) * 1e3 if samples else None,
                    "latencies_ms": [round(s * 1e3, 2) for s in samples],
                }
        await inbox.close()
    return results


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="At most this many rounds per scenario.")
    args = parser.parse_args()
    chosen = backends(args.backend)
    results = {}
    with agent("inbox-latency") as agent_process:
        for backend in chosen:
            results[backend.name] = asyncio.run(measure(backend, agent_process, args.rounds))
    rows = []
    for name, *_ in SCENARIOS:
        cells = []
        for b in chosen:
            r = results[b.name][name]
            missing = f", {r['missing']} lost" if r["missing"] else ""
            missing += f", socket dropped {r['socket_drops']}x" if r["socket_drops"] else ""
            if r["samples"]:
                cells.append(f"{r['p50_ms']:.1f} / {r['p99_ms']:.1f} / {r['max_ms']:.1f} (n={r['samples']}{missing})")
            else:
                cells.append(f"none arrived ({r['missing']} lost, socket dropped {r['socket_drops']}x)")
        rows.append([name, *cells])
    table("Interrupt to inbox socket, ms: p50 / p99 / max (goal p50 <= 25, p99 <= 100)",
          ["", *(b.label for b in chosen)], rows)
    save("interrupt_latency", results, caps=CAPS)


if __name__ == "__main__":
    main()
