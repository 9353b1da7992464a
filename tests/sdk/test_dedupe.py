"""An SDK agent dedupes by runId: a request it has handled is answered with what it produced, not run again.

Through the ASGI app, as a server calls it (tests/sdk/test_asgi.py's helpers).
The crash tests (tests/e2e/test_crash.py) show Countersign relying on it.
"""

import asyncio
import json

from interrupts.protocol import capabilities
from interrupts.sdk import Agent, RunOutcome, dedupe
from interrupts.sdk.asgi import agent_app

from .test_asgi import asgi, scope


def body(run_id="r1", thread_id="t", **more) -> bytes:
    return json.dumps({"threadId": thread_id, "runId": run_id, "messages": [], **more}).encode()


class Counter(Agent):
    """Counts the runs it acted on; waits for ``go`` when given one, so a test can hold it mid-run."""

    def __init__(self, go: asyncio.Event | None = None, **options):
        super().__init__(**options)
        self.acted, self.go, self.started = 0, go, asyncio.Event()

    async def run(self, ctx):
        self.acted += 1
        ctx.say(f"acted {self.acted} times")
        self.started.set()
        if self.go is not None:
            await self.go.wait()
        ctx.set_state({"acted": self.acted})
        return RunOutcome.success({"acted": self.acted})


async def test_a_repeated_request_is_answered_with_the_same_events_and_not_acted_on_again():
    agent = Counter()
    app = agent_app(agent)
    first, again = await asgi(app, body=body()), await asgi(app, body=body())
    assert agent.acted == 1
    assert again.status == 200 and again.body == first.body
    assert again.events()[-1]["type"] == "RUN_FINISHED" and again.events()[-1]["result"] == {"acted": 1}
    other = await asgi(app, body=body(run_id="r2"))  # another run acts
    assert agent.acted == 2 and other.events()[-1]["result"] == {"acted": 2}


async def test_a_run_whose_caller_went_away_runs_to_its_end_and_the_repeat_gets_that_end(monkeypatch):
    replaying, replay = asyncio.Event(), dedupe._replay

    async def noted(record):
        replaying.set()
        async for frame in replay(record):
            yield frame

    monkeypatch.setattr(dedupe, "_replay", noted)
    go = asyncio.Event()
    agent = Counter(go)
    app = agent_app(agent)
    incoming: asyncio.Queue = asyncio.Queue()
    incoming.put_nowait({"type": "http.request", "body": body(), "more_body": False})
    async def ignore(message):
        pass

    served = asyncio.ensure_future(app(scope("POST", {"content-type": "application/json"}), incoming.get, ignore))
    await asyncio.wait_for(agent.started.wait(), 5)
    incoming.put_nowait({"type": "http.disconnect"})  # Countersign's process died mid-stream
    await asyncio.wait_for(served, 5)
    repeat = asyncio.ensure_future(asgi(app, body=body()))  # the re-send waits for the run's end
    await asyncio.wait_for(replaying.wait(), 5)  # it is reading the recorded run, which cannot end before go
    assert not repeat.done()
    go.set()
    answer = await asyncio.wait_for(repeat, 5)
    assert agent.acted == 1
    assert [e["type"] for e in answer.events()][0] == "RUN_STARTED"
    assert answer.events()[-1]["result"] == {"acted": 1}


async def test_it_remembers_a_bounded_number_of_runs(monkeypatch):
    agent = Counter()
    agent.remember_runs = 2
    app = agent_app(agent)
    for run_id in ("a", "b", "c"):
        await asgi(app, body=body(run_id=run_id))
    assert len(dedupe.handled_runs(agent).runs) == 2
    await asgi(app, body=body(run_id="c"))
    assert agent.acted == 3  # remembered
    await asgi(app, body=body(run_id="a"))
    assert agent.acted == 4  # forgotten: the oldest goes first


async def test_a_long_run_keeps_what_its_ending_needs(monkeypatch):
    monkeypatch.setattr(dedupe, "MAX_REPLAY_BYTES", 600)

    class Talker(Counter):
        async def run(self, ctx):
            for n in range(20):
                ctx.say(f"line {n} " + "x" * 40)
            return await super().run(ctx)

    agent = Talker()
    app = agent_app(agent)
    first, again = await asgi(app, body=body()), await asgi(app, body=body())
    assert agent.acted == 1
    kinds = [e["type"] for e in again.events()]
    assert kinds == ["RUN_STARTED", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert again.events()[-1] == first.events()[-1]


async def test_a_different_request_under_the_same_run_id_is_not_a_repeat():
    agent = Counter()
    app = agent_app(agent)
    await asgi(app, body=body())
    await asgi(app, body=body(state={"changed": True}))
    assert agent.acted == 2


def test_the_sdk_declares_that_it_dedupes_and_countersign_reads_it():
    assert capabilities.dedupes_run_id(Counter().capabilities())
    quiet = Counter()
    quiet.remember_runs = 0
    assert not capabilities.dedupes_run_id(quiet.capabilities())


async def test_a_run_whose_first_caller_never_read_is_run_by_the_repeat():
    agent = Counter()
    unread = dedupe.handled_runs(agent).answer(("t", "r1", "body", False), lambda: _events(agent))
    await unread.aclose()  # closed before its first frame: the run never started
    again = dedupe.handled_runs(agent).answer(("t", "r1", "body", False), lambda: _events(agent))
    frames = [frame async for frame in again]
    assert agent.acted == 1 and b"RUN_FINISHED" in frames[-1]


def _events(agent):
    from ag_ui.core import RunAgentInput

    from interrupts.sdk import driver

    return driver.run(agent, RunAgentInput.model_validate({"threadId": "t", "runId": "r1", "messages": [],
                                                            "state": None, "tools": [], "context": [],
                                                            "forwardedProps": None}))
