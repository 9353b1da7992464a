"""A long conversation: what a slowly written token costs on a thread of 1 MB, against one on a fresh thread.

An agent that writes as it thinks (bench/agent.py's ``pace``: a token every
few milliseconds) gives the relay one event a read, so each token is a batch
of its own. Two threads of the same served app: a fresh one, and one whose
conversation was first grown to about ``--history-kb`` (default 1,000) by fast
runs (of words of random letters, which no store compresses away). On each,
in turn, a paced run of ``--tokens`` tokens (default 500, one every
``--pace`` seconds), median of ``--rounds`` (default 3). Two figures:

- what the database writes per token on the long thread, over the size of
  its conversation (the smoke's judged ratio): each token's batch used to
  rewrite the whole conversation, 0.5 of it a token on SQLite (the relay
  batched a few tokens a write) and 0.06 on PostgreSQL (TOAST, compressed);
  PostgreSQL's is its WAL, so measure on an otherwise idle server;
- the server's CPU (user + system time of its process) per token on the long
  thread over the same on the fresh one.

    .venv/bin/python bench/long_thread.py [--tokens 500] [--history-kb 1000] [--backend all|sqlite|postgres]
"""

from __future__ import annotations

import asyncio
import json
import statistics

import httpx
from backends import agent, arguments, backends, register_agent, served, session_cookie, wait_run, ws_url
from report import save, table
from ws_client import WebSocket

HISTORY_RUN_EVENTS = 50_000  # a fast run's tokens (random words, 6.5 bytes each): about 330 KB of conversation


async def finished(api: httpx.AsyncClient, run_id: str) -> None:
    run = await wait_run(api, run_id, timeout=120)
    assert run["status"] == "succeeded", run


async def run_on(api: httpx.AsyncClient, thread_id: str, props: dict) -> None:
    response = await api.post(f"/api/threads/{thread_id}/runs/", json={"forwarded_props": props})
    assert response.status_code == 201, response.text
    await finished(api, response.json()["run_id"])


async def paced_run(app, api: httpx.AsyncClient, cookie: str, thread_id: str, props: dict) -> tuple[float, int]:
    """The server's CPU seconds and database bytes from starting a run to its RUN_FINISHED on the thread's socket.

    Not by polling the run: the API's run carries its input, the whole conversation, so each poll would
    cost what the conversation's size does, and the figure is what a token costs.
    """
    socket = await WebSocket.connect(ws_url(app, f"/ws/threads/{thread_id}/"), cookie=cookie, origin=app.url)
    try:
        hello = await socket.recv_json()
        assert hello["type"] == "hello", hello
        cpu, wrote = app.cpu_seconds(), app.database_written()
        response = await api.post(f"/api/threads/{thread_id}/runs/", json={"forwarded_props": props})
        assert response.status_code == 201, response.text
        while True:
            message = await asyncio.wait_for(socket.recv_json(), 120)
            assert message is not None, "the thread's socket closed"
            if message.get("type") == "event" and message.get("event_type") == "RUN_FINISHED":
                break
        spent = (app.cpu_seconds() - cpu, app.database_written() - wrote)
    finally:
        await socket.close()
    await finished(api, response.json()["run_id"])  # ended, before the thread takes its next run
    return spent


async def conversation_bytes(api: httpx.AsyncClient, thread_id: str) -> int:
    return len(json.dumps((await api.get(f"/api/threads/{thread_id}/")).json()["messages"]))


async def measure(backend, agent_process, tokens: int, pace: float, history_kb: int, rounds: int) -> dict:
    with served(backend, "long-thread") as app:
        register_agent(app, "bench-long", agent_process.url("/stream/"))
        cookie = session_cookie(app)
        async with httpx.AsyncClient(base_url=app.url, headers={"Authorization": f"Token {app.token}"},
                                     timeout=60) as api:
            threads = {}
            for name in ("fresh", "long"):
                made = (await api.post("/api/threads/", json={"agent": "bench-long",
                                                              "forwarded_props": {"events": 10}})).json()
                await finished(api, made["run_id"])
                threads[name] = made["thread"]
            while await conversation_bytes(api, threads["long"]) < history_kb * 1000:
                await run_on(api, threads["long"], {"events": HISTORY_RUN_EVENTS, "varied": True})
            sizes = {name: await conversation_bytes(api, thread) for name, thread in threads.items()}
            spent: dict[str, list[float]] = {"fresh": [], "long": []}
            written: dict[str, list[float]] = {"fresh": [], "long": []}
            for _ in range(rounds):
                for name, thread in threads.items():
                    cpu, wrote = await paced_run(app, api, cookie, thread,
                                                 {"events": tokens + 4, "pace": pace, "varied": True})
                    spent[name].append(cpu / tokens * 1e6)
                    written[name].append(wrote / tokens)
    fresh, long = statistics.median(spent["fresh"]), statistics.median(spent["long"])
    return {"conversation_bytes": sizes, "cpu_us_per_token": spent, "fresh_us": fresh, "long_us": long,
            "ratio": long / fresh, "written_per_token": written,
            "fresh_written": statistics.median(written["fresh"]), "long_written": statistics.median(written["long"]),
            "written_share": statistics.median(written["long"]) / sizes["long"]}


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--pace", type=float, default=0.002, help="Seconds between two tokens.")
    parser.add_argument("--history-kb", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    chosen = backends(args.backend)
    results = {}
    with agent("long-thread") as agent_process:
        for backend in chosen:
            results[backend.name] = asyncio.run(measure(backend, agent_process, args.tokens, args.pace,
                                                        args.history_kb, args.rounds))
    rows = [
        ["conversation before the paced runs: fresh / long, KB",
         *(f"{r['conversation_bytes']['fresh'] / 1000:,.0f} / {r['conversation_bytes']['long'] / 1000:,.0f}"
           for r in results.values())],
        ["database writes per token, fresh / long thread, KB (median)",
         *(f"{r['fresh_written'] / 1000:,.1f} / {r['long_written'] / 1000:,.1f}" for r in results.values())],
        ["long thread: written per token ÷ its conversation", *(f"{r['written_share']:.3f}" for r in results.values())],
        ["server CPU per token, fresh / long thread, µs (median)",
         *(f"{r['fresh_us']:,.0f} / {r['long_us']:,.0f}" for r in results.values())],
        ["server CPU per token, long ÷ fresh", *(f"{r['ratio']:.2f}" for r in results.values())],
    ]
    table(f"A long conversation: {args.tokens} tokens, one every {args.pace * 1e3:g} ms, median of {args.rounds}",
          ["", *(b.label for b in chosen)], rows)
    save("long_thread", results, tokens=args.tokens, pace=args.pace, history_kb=args.history_kb,
         rounds=args.rounds)


if __name__ == "__main__":
    main()
