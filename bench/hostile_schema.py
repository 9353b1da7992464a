"""Hostile schemas: a decision's cost when the agent's responseSchema is built to make the server work.

Two figures, each against a baseline measured in the same run, through
``manage.py serve`` and ``POST /api/interrupts/<id>/decide/``:

1. **Catastrophic pattern.** An answer checked against ``"pattern":
   "^(a+)+$"`` (Python's backtracking ``re`` took 9.8 s on 28 characters)
   against the same answer checked against ``"^a+$"``. The answer ends in
   "!", so both refuse it, each after checking it: the refusal is the
   decision's whole work. Goal: ratio <= 2.
2. **A decision on thread A while thread B's answer is validated against a
   hostile schema.** B's schema is the costliest Countersign accepts: a
   chain of ``$defs`` where each level checks the next twice (``allOf``),
   doubling the work per level, plus the catastrophic pattern; B's
   reviewers send answers to it in a loop, from several clients at once.
   Meanwhile plain approvals are decided on other threads, one at a time.
   Goal: A's decision <= 100 ms (p50), against A's decisions alone.

    .venv/bin/python bench/hostile_schema.py [--samples 20] [--backend all|sqlite|postgres]
"""

from __future__ import annotations

import asyncio
import time

import httpx
from backends import agent, arguments, backends, register_agent, served
from report import percentile, save, table

PLAIN = {"type": "object", "properties": {"answer": {"type": "string", "pattern": "^a+$"}}, "required": ["answer"]}
CATASTROPHIC = {"type": "object", "properties": {"answer": {"type": "string", "pattern": "^(a+)+$"}},
                "required": ["answer"]}
# 28 characters took 9.8 s with Python's re; 10,000 would take longer than the universe has left.
ANSWERS = {"28 characters": "a" * 28 + "!", "10,000 characters": "a" * 10_000 + "!"}
HOSTILE_LOOPS = 4  # clients sending B's hostile answers at once


def doubling_schema(levels: int = 40) -> dict:
    """A small schema whose checking doubles with each level: level n checks level n+1 twice."""
    defs = {f"l{n}": {"allOf": [{"$ref": f"#/$defs/l{n + 1}"}, {"$ref": f"#/$defs/l{n + 1}"}]}
            for n in range(levels)}
    defs[f"l{levels}"] = {"type": "string", "pattern": "^(a+)+$"}
    return {"type": "object", "$defs": defs, "properties": {"answer": {"$ref": "#/$defs/l0"}},
            "required": ["answer"]}


async def pending_interrupt(api: httpx.AsyncClient, schema: dict, timeout: float = 30) -> int:
    response = await api.post("/api/threads/", json={"agent": "bench-interrupt", "forwarded_props": {"schema": schema}})
    assert response.status_code == 201, response.text
    thread_id = response.json()["thread"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = (await api.get("/api/interrupts/", params={"thread": thread_id})).json()["results"]
        if found:
            return found[0]["id"]
        await asyncio.sleep(0.02)
    raise TimeoutError(f"no pending interrupt on {thread_id} after {timeout} s")


async def timed_decision(api: httpx.AsyncClient, interrupt: int, body: dict) -> tuple[float, int, str]:
    started = time.perf_counter()
    response = await api.post(f"/api/interrupts/{interrupt}/decide/", json=body)
    elapsed = time.perf_counter() - started
    return elapsed, response.status_code, response.json().get("code", "")


async def refusals(api, plain: int, hostile: int, answer: str, samples: int) -> tuple[list, list, set[str]]:
    """The same refused answer to both interrupts, alternately, ``samples`` times each.

    A refusal leaves them pending, so every sample meets the same two interrupts.
    """
    body = {"action": "respond", "payload": {"answer": answer}}
    for interrupt in (plain, hostile):
        await timed_decision(api, interrupt, body)  # warm-up: caches, connections
    taken: dict[int, list[float]] = {plain: [], hostile: []}
    codes = set()
    for _ in range(samples):
        for interrupt in (plain, hostile):
            elapsed, status, code = await timed_decision(api, interrupt, body)
            assert 400 <= status < 500, (status, code)
            taken[interrupt].append(elapsed)
            codes.add(code)
    return taken[plain], taken[hostile], codes


async def approvals(api, interrupts: list[int]) -> list[float]:
    taken = []
    for interrupt in interrupts:
        elapsed, status, code = await timed_decision(api, interrupt, {"action": "approve"})
        assert status == 201, (status, code)
        taken.append(elapsed)
    return taken


async def measure(backend, agent_process, samples: int) -> dict:
    with served(backend, "hostile-schema") as app:
        register_agent(app, "bench-interrupt", agent_process.url("/interrupt/"))
        headers = {"Authorization": f"Token {app.token}"}
        async with httpx.AsyncClient(base_url=app.url, headers=headers, timeout=120) as api:
            result: dict = {"pattern": {}}
            plain, catastrophic = await pending_interrupt(api, PLAIN), await pending_interrupt(api, CATASTROPHIC)
            for label, answer in ANSWERS.items():
                base, hostile, codes = await refusals(api, plain, catastrophic, answer, samples)
                result["pattern"][label] = {
                    "plain_p50_ms": percentile(base, 50) * 1e3, "hostile_p50_ms": percentile(hostile, 50) * 1e3,
                    "hostile_max_ms": max(hostile) * 1e3,
                    "ratio": percentile(hostile, 50) / percentile(base, 50),
                    "codes": sorted(codes),
                }

            # Thread A's decisions, first alone, then while B's hostile answers are being checked.
            alone_targets = [await pending_interrupt(api, {}) for _ in range(samples)]
            busy_targets = [await pending_interrupt(api, {}) for _ in range(samples)]
            hostile = await pending_interrupt(api, doubling_schema())
            alone = await approvals(api, alone_targets)

            stop = asyncio.Event()
            b_times: list[float] = []
            b_codes: set[str] = set()

            async def hostile_loop():
                async with httpx.AsyncClient(base_url=app.url, headers=headers, timeout=120) as b:
                    while not stop.is_set():
                        elapsed, status, code = await timed_decision(
                            b, hostile, {"action": "respond", "payload": {"answer": ANSWERS["28 characters"]}})
                        b_times.append(elapsed)
                        b_codes.add(code)

            loops = [asyncio.create_task(hostile_loop()) for _ in range(HOSTILE_LOOPS)]
            await asyncio.sleep(0.5)  # B's checks are under way
            busy = await approvals(api, busy_targets)
            stop.set()
            await asyncio.gather(*loops)
            result["concurrent"] = {
                "a_alone_p50_ms": percentile(alone, 50) * 1e3, "a_alone_max_ms": max(alone) * 1e3,
                "a_while_b_p50_ms": percentile(busy, 50) * 1e3, "a_while_b_max_ms": max(busy) * 1e3,
                "ratio": percentile(busy, 50) / percentile(alone, 50),
                "b_decisions": len(b_times), "b_p50_ms": percentile(b_times, 50) * 1e3,
                "b_codes": sorted(b_codes),
            }
    return result


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20)
    args = parser.parse_args()
    chosen = backends(args.backend)
    results = {}
    with agent("hostile-schema") as agent_process:
        for backend in chosen:
            results[backend.name] = asyncio.run(measure(backend, agent_process, args.samples))
    header = ["", *(b.label for b in chosen)]
    rows = []
    for label in ANSWERS:
        rows += [
            [f"refused answer of {label}, plain '^a+$': p50 ms",
             *(f"{results[b.name]['pattern'][label]['plain_p50_ms']:.1f}" for b in chosen)],
            ["  catastrophic '^(a+)+$': p50 ms",
             *(f"{results[b.name]['pattern'][label]['hostile_p50_ms']:.1f}" for b in chosen)],
            ["  ratio (goal <= 2)", *(f"{results[b.name]['pattern'][label]['ratio']:.2f}" for b in chosen)],
        ]
    table(f"Catastrophic pattern against a plain one ({args.samples} decisions each)", header, rows)
    print()
    rows = [
        [
            "thread A's approval alone: p50 ms",
            *(f"{results[b.name]['concurrent']['a_alone_p50_ms']:.1f}" for b in chosen),
        ],
        [
            "  while B's hostile answers are checked: p50 ms (goal <= 100)",
            *(f"{results[b.name]['concurrent']['a_while_b_p50_ms']:.1f}" for b in chosen),
        ],
        ["  max ms", *(f"{results[b.name]['concurrent']['a_while_b_max_ms']:.1f}" for b in chosen)],
        ["  ratio to alone", *(f"{results[b.name]['concurrent']['ratio']:.2f}" for b in chosen)],
        [
            f"B's answers checked meanwhile ({HOSTILE_LOOPS} clients)",
            *(str(results[b.name]["concurrent"]["b_decisions"]) for b in chosen),
        ],
        ["  each took: p50 ms", *(f"{results[b.name]['concurrent']['b_p50_ms']:.1f}" for b in chosen)],
        ["  refused with", *(",".join(results[b.name]["concurrent"]["b_codes"]) for b in chosen)],
    ]
    table(f"A decision on thread A while thread B's answers are checked ({args.samples} approvals)", header, rows)
    save("hostile_schema", results)


if __name__ == "__main__":
    main()
