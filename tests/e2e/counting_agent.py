"""A real AG-UI agent over HTTP that logs every request it receives, and every time it acts.

An SDK agent (``interrupts.sdk``) under uvicorn, on a thread of the test
process, at three paths: ``/dedupes/`` remembers the runs it handled (the SDK's
default, which declares ``custom.dedupesRunId``), ``/plain/`` does not
(``remember_runs = 0``), ``/slow/`` neither, and reports for two seconds. Its first run asks to approve deleting a
repository; the resume acts at once (``acted`` gets the runId and the
answers), then reports in a few events sent ``pace`` seconds apart, so a
test can kill Countersign mid-stream.
"""

from __future__ import annotations

import asyncio
import json
import threading

import uvicorn

from interrupts.sdk import Agent, RunOutcome, interrupt
from interrupts.sdk.asgi import agent_app

from ..servers import free_port
from .conftest import wait_for

APPROVAL = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}
#: Events the resumed run sends after acting, before its terminal event.
REPORTS = 4


class Deleter(Agent):
    def __init__(self, acted: list, pace: float, remember: bool, reports: int = REPORTS) -> None:
        super().__init__()
        self.acted, self.pace, self.reports = acted, pace, reports
        self.remember_runs = Agent.remember_runs if remember else 0

    async def run(self, ctx):
        if not ctx.is_resume():
            call = ctx.tool_call("deleteRepo", {"repo": "acme/web"})
            return RunOutcome.interrupt([interrupt("approve-delete", "tool_call", tool_call_id=call,
                                                   message="Delete acme/web?", response_schema=APPROVAL)])
        self.acted.append((ctx.run_id, [entry.model_dump(mode="json", by_alias=True, exclude_none=True)
                                        for entry in ctx.resume()]))
        for n in range(self.reports):
            await asyncio.sleep(self.pace)
            ctx.say(f"report {n}")
        return RunOutcome.success({"deleted": ctx.resume()[0].payload})


class CountingAgent:
    """Serves the two agents; ``requests`` and ``acted`` are (runId, ...) lists the test reads."""

    def __init__(self, pace: float = 0.15) -> None:
        self.requests: list[dict] = []  # every request's path, runId and body as received
        self.acted: list[tuple[str, list]] = []
        self.apps = {path: agent_app(Deleter(self.acted, pace, remember=path == "dedupes"))
                     for path in ("dedupes", "plain")}
        # A longer resume, for a test that breaks the database connection mid-stream.
        self.apps["slow"] = agent_app(Deleter(self.acted, 0.25, remember=False, reports=8))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port, lifespan="off",
                                                    interface="asgi3", log_level="warning"))

    async def app(self, scope, receive, send):
        if scope["type"] != "http":
            return
        path = scope["path"].strip("/")
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            run_id = json.loads(body).get("runId")
        except ValueError:
            run_id = None
        self.requests.append({"path": path, "runId": run_id, "body": body})
        replayed = iter([{"type": "http.request", "body": body, "more_body": False}])

        async def receive_again():
            return next(replayed, None) or await receive()

        await self.apps[path](scope, receive_again, send)

    def received(self, run_id: str) -> list[dict]:
        return [json.loads(r["body"]) for r in self.requests if r["runId"] == run_id]

    def start(self) -> CountingAgent:
        threading.Thread(target=self.server.run, daemon=True, name="counting-agent").start()
        try:
            wait_for(lambda: self.server.started, timeout=10, interval=0.02)
        except AssertionError:
            raise AssertionError("the counting agent did not start") from None
        return self

    def stop(self) -> None:
        self.server.should_exit = True
