"""SDK agents served by plain uvicorn, with no Django configured: tests/sdk/test_asgi.py runs them through the hub.

    AGENT_SIGNING_SECRETS='{"asgi-shipper": "css_..."}' python -m uvicorn tests.sdk.asgi_agent:app --port 8001

One process, one agent per path (``/<name>/``), as a FastAPI app mounting
several ``agent_app`` would; each verifies with its own signing secret.
Each proposes a tool call and asks for its approval; resumed, it runs the
call only for an answer whose signature and fingerprint checked, and says
who approved it.
"""

import json
import os
import sys

from ag_ui.core import ToolCallArgsEvent, ToolCallEndEvent, ToolCallStartEvent

from interrupts.sdk import Agent, RunOutcome, interrupt
from interrupts.sdk.asgi import agent_app

APPROVAL_SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}


class Shipper(Agent):
    """Proposes with ``ctx.tool_call``: the driver's MESSAGES_SNAPSHOT holds the call.

    So the default fingerprint check binds it.
    """

    name = "asgi-shipper"

    def propose(self, ctx) -> str:
        return ctx.tool_call("ship", {"crate": 7})

    async def run(self, ctx):
        if not ctx.is_resume():
            ctx.say("Shipping needs a human.")
            tool_call_id = self.propose(ctx)
            return RunOutcome.interrupt([interrupt(
                f"approve-{tool_call_id}", "tool_call", tool_call_id=tool_call_id,
                message="Ship crate 7?", response_schema=APPROVAL_SCHEMA,
            )])
        [answer] = ctx.resume()
        approvers = [a.username for a in ctx.approvals_for(answer.interrupt_id)]
        if answer.status == "resolved" and answer.payload["approved"] and approvers:
            ctx.say(f"Shipped crate 7, approved by {', '.join(approvers)}.")
        else:
            ctx.say("Not shipped.")
        # What the server process had loaded, for the test to see: the SDK alone, no Django.
        return RunOutcome.success(result={"approvers": approvers, "djangoLoaded": "django" in sys.modules})


class StreamOnly(Shipper):
    """Streams its call as bare TOOL_CALL events: no snapshot holds it, so the default check cannot bind the answer."""

    name = "asgi-stream-only"

    def propose(self, ctx) -> str:
        tool_call_id = "tc-streamed"
        ctx.emit(ToolCallStartEvent(tool_call_id=tool_call_id, tool_call_name="ship"))
        ctx.emit(ToolCallArgsEvent(tool_call_id=tool_call_id, delta=json.dumps({"crate": 7})))
        ctx.emit(ToolCallEndEvent(tool_call_id=tool_call_id))
        return tool_call_id


class StreamOnlyBound(StreamOnly):
    """The same, saying which call each interrupt was about: the answer checks."""

    name = "asgi-stream-only-bound"

    def tool_call_ids_for(self, run_input, interrupt_id):
        return [interrupt_id.removeprefix("approve-")]


SECRETS = json.loads(os.environ.get("AGENT_SIGNING_SECRETS") or "{}")
APPS = {f"/{kind.name}/": agent_app(kind(signing_secret=SECRETS.get(kind.name)))
        for kind in (Shipper, StreamOnly, StreamOnlyBound)}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await next(iter(APPS.values()))(scope, receive, send)
        return
    served = APPS.get(scope.get("path"))
    if served is None:
        await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"No agent here."})
        return
    await served(scope, receive, send)
