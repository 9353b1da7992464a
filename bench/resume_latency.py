"""Decision-to-resume latency: from a reviewer's decision request to the agent receiving the resume.

Each sample: a run on a new thread ends with one confirmation interrupt;
once it is pending, the bench POSTs /api/interrupts/<id>/decide/ (approve)
and the agent (bench/agent.py) notes when the resume run's POST has been
read. Also shown: how long the decision request itself took to answer, so
the rest is the supervisor picking up the queued resume and calling the
agent. Goals: p50 <= 15 ms, and p50 <= 10 ms for the decision request's own answer.

Baseline, same server, same run: just before each decision, with the server
as idle, an authenticated API read of the run about to be decided
(GET /api/runs/<id>/, three statements): what any request costs here (the
client, daphne, the middleware, the token, DRF) before a decision does any
work of its own.

Measured with COUNTERSIGN_UNDO_SECONDS=0: a deployment holds each decision's
resume for that many seconds (default 5) so it can be undone, a wait chosen
by policy, not a cost of the path measured here.

    .venv/bin/python bench/resume_latency.py [--samples 30] [--backend all|sqlite|postgres]
"""

from __future__ import annotations

import asyncio
import time

import httpx
from backends import agent, arguments, backends, register_agent, served
from report import percentile, save, table


async def pending_interrupt(api: httpx.AsyncClient, thread_id: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = (await api.get("/api/interrupts/", params={"thread": thread_id})).json()["results"]
        if found:
            return found[0]
        await asyncio.sleep(0.02)
    raise TimeoutError(f"no pending interrupt on {thread_id} after {timeout} s")


async def sample(api: httpx.AsyncClient, agent_client: httpx.AsyncClient) -> tuple[float, float, float]:
    response = await api.post("/api/threads/", json={"agent": "bench-interrupt", "forwarded_props": {}})
    assert response.status_code == 201, response.text
    thread_id = response.json()["thread"]
    pending = await pending_interrupt(api, thread_id)
    interrupt = pending["id"]
    await asyncio.sleep(0.1)  # the interrupted run's own after-work (broadcasts, stream close) is done
    # The baseline, in the same conditions as the decision that follows (the server idle).
    read_started = time.time()
    read = await api.get(f"/api/runs/{pending['run']}/")
    read_answered = time.time()
    assert read.status_code == 200, read.text
    arrival = asyncio.create_task(agent_client.get(f"/wait/resume/{thread_id}/"))
    started = time.time()
    decided = await api.post(f"/api/interrupts/{interrupt}/decide/", json={"action": "approve"})
    answered = time.time()
    assert decided.status_code == 201, decided.text
    arrived = (await arrival).json()["at"]
    return arrived - started, answered - started, read_answered - read_started


async def measure(backend, agent_process, samples: int) -> dict:
    # No hold for undo (see the docstring): the figure is the path from decision to agent.
    with served(backend, "resume-latency", COUNTERSIGN_UNDO_SECONDS="0") as app:
        register_agent(app, "bench-interrupt", agent_process.url("/interrupt/"))
        async with (
            httpx.AsyncClient(base_url=app.url, headers={"Authorization": f"Token {app.token}"}, timeout=60) as api,
            httpx.AsyncClient(base_url=agent_process.base, timeout=60) as agent_client,
        ):
            await sample(api, agent_client)  # warm-up, not counted
            taken = [await sample(api, agent_client) for _ in range(samples)]
    resume = [t[0] for t in taken]
    response = [t[1] for t in taken]
    floor = [t[2] for t in taken]
    return {
        "samples": samples,
        "resume_p50_ms": percentile(resume, 50) * 1e3, "resume_p99_ms": percentile(resume, 99) * 1e3,
        "resume_max_ms": max(resume) * 1e3,
        "decide_response_p50_ms": percentile(response, 50) * 1e3,
        "decide_response_p99_ms": percentile(response, 99) * 1e3,
        "api_read_p50_ms": percentile(floor, 50) * 1e3,
        "resume_ms": [round(s * 1e3, 2) for s in resume],
        "decide_response_ms": [round(s * 1e3, 2) for s in response],
    }


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()
    chosen = backends(args.backend)
    results = {}
    with agent("resume-latency") as agent_process:
        for backend in chosen:
            results[backend.name] = asyncio.run(measure(backend, agent_process, args.samples))
    rows = [
        ["decision request to resume at the agent: p50 (goal <= 15)",
         *(f"{results[b.name]['resume_p50_ms']:.1f}" for b in chosen)],
        ["  p99", *(f"{results[b.name]['resume_p99_ms']:.1f}" for b in chosen)],
        ["  max", *(f"{results[b.name]['resume_max_ms']:.1f}" for b in chosen)],
        ["the decision request's own answer: p50 (goal <= 10)",
         *(f"{results[b.name]['decide_response_p50_ms']:.1f}" for b in chosen)],
        ["  p99", *(f"{results[b.name]['decide_response_p99_ms']:.1f}" for b in chosen)],
        ["baseline: an authenticated API read of that run, p50",
         *(f"{results[b.name]['api_read_p50_ms']:.1f}" for b in chosen)],
    ]
    table(f"Decision to resume, ms ({args.samples} decisions, one at a time; COUNTERSIGN_UNDO_SECONDS=0, "
          "no hold for undo)", ["", *(b.label for b in chosen)], rows)
    save("resume_latency", results)


if __name__ == "__main__":
    main()
