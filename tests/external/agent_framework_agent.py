"""A real, external AG-UI agent for end-to-end tests: Microsoft Agent Framework's own AG-UI adapter.

An ``agent_framework.Agent`` on a scripted chat client (no LLM, no network),
with one tool that needs approval, ``issue_refund(order, amount)``
(``approval_mode="always_require"``), served by ``agent-framework-ag-ui``'s
``add_agent_framework_fastapi_endpoint`` under uvicorn. It runs in its own venv
(``.venv-agent_framework``, from ``requirements-agent_framework.txt``), never in
the project's ``.venv``:

    .venv-agent_framework/bin/python tests/external/agent_framework_agent.py --port 8768

It prints ``ready on http://127.0.0.1:PORT`` once listening. ``POST /refund/``
is the agent. The model proposes ``issue_refund(order=<the user's last
message>, amount=42)``, so each test names its own order. Agent Framework
pauses with an interrupt per approval (plus its CUSTOM
``function_approval_request`` and a synthetic ``confirm_changes`` tool call);
once the tool has run, or was refused, the model says ``Done: refunded ...``
or ``Not refunded: ...`` and the run ends. Every execution of the tool is
recorded (tests/external/refund_service.py): ``GET /executed`` answers
``{"executed": [{"order", "amount"}, ...]}``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterable, Sequence
from typing import Any

import refund_service
from agent_framework import (
    Agent,
    BaseChatClient,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    FunctionInvocationLayer,
    Message,
    tool,
)
from agent_framework_ag_ui import add_agent_framework_fastapi_endpoint
from fastapi import FastAPI

AMOUNT = 42


@tool(approval_mode="always_require")
def issue_refund(order: str, amount: int) -> str:
    """Refund ``amount`` EUR on ``order``."""
    refund_service.record({"order": order, "amount": amount})
    return f"refunded {amount} EUR on {order}"


def _reply(messages: Sequence[Message]) -> list[Content]:
    """The model: propose the refund for the order the user named, then say what the tool answered."""
    last = messages[-1]
    results = [c for c in last.contents if c.type == "function_result"]
    if results:
        text = str(results[-1].result)
        return [Content.from_text(f"Done: {text}." if text.startswith("refunded ") else f"Not refunded: {text}")]
    said = [c.text for m in messages if m.role == "user" for c in m.contents if c.type == "text" and c.text]
    order = (said[-1] if said else "A-1001").strip()[:64]
    return [Content.from_function_call(f"call_{uuid.uuid4().hex[:12]}", "issue_refund",
                                       arguments=json.dumps({"order": order, "amount": AMOUNT}))]


class ScriptedChatClient(FunctionInvocationLayer, BaseChatClient):
    """A chat client whose "model" is ``_reply``; the function-invocation layer runs tools and approvals."""

    def _inner_get_response(self, *, messages: Sequence[Message], stream: bool, options: Any, **kwargs: Any):
        contents = _reply(messages)
        if stream:
            async def updates() -> AsyncIterable[ChatResponseUpdate]:
                yield ChatResponseUpdate(role="assistant", contents=contents, message_id=f"msg_{uuid.uuid4().hex[:12]}")

            return self._build_response_stream(updates())

        async def response() -> ChatResponse:
            return ChatResponse(messages=[Message(role="assistant", contents=contents)])

        return response()


def app() -> FastAPI:
    api = FastAPI()
    agent = Agent(client=ScriptedChatClient(), name="refunds", instructions="Refund orders.", tools=[issue_refund])
    # One caller (Countersign) per test: no per-user scoping of threads.
    add_agent_framework_fastapi_endpoint(api, agent, "/refund/", single_user=True)
    return api


if __name__ == "__main__":
    refund_service.main(app, doc=__doc__, port=8768)
