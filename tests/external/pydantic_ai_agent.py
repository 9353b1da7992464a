"""A real, external AG-UI agent for end-to-end tests: Pydantic AI's own AG-UI adapter.

``pydantic_ai.Agent`` on a ``FunctionModel`` (a scripted model: no LLM, no
network), with one tool that needs approval, ``issue_refund(order, amount)``
(``requires_approval=True``), served by ``AGUIAdapter.dispatch_request`` under
uvicorn. It runs in its own venv (``.venv-pydantic_ai``, from
``requirements-pydantic_ai.txt``), never in the project's ``.venv``:

    .venv-pydantic_ai/bin/python tests/external/pydantic_ai_agent.py --port 8767

It prints ``ready on http://127.0.0.1:PORT`` once listening. Two agents:

``/client/``  the client holds the history (the adapter's default): a resume
              must send the assistant turn that made the tool call.
``/store/``   Pydantic AI keeps the conversation itself, in an
              ``InMemoryConversationStore`` keyed by the thread id.

The model proposes ``issue_refund(order=<the user's last message>, amount=42)``,
so each test names its own order; Pydantic AI
pauses with interrupt ``int-<toolCallId>``. Once the tool has run (or was
denied) the model says ``Done: refunded ...`` or ``Not refunded: ...`` and the
run ends. Every execution of the tool is recorded (tests/external/refund_service.py):
``GET /executed`` answers ``{"executed": [{"agent", "thread", "order", "amount"}, ...]}``
in order (``agent`` is ``client`` or ``store``).
"""

from __future__ import annotations

import json

import refund_service
from pydantic_ai import Agent, DeferredToolRequests, RunContext
from pydantic_ai.conversation_store import InMemoryConversationStore
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.ui.ag_ui import AGUIAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

AMOUNT = 42


async def scripted(messages: list[ModelMessage], info: AgentInfo):
    """The model, streamed: propose the refund, then say what the tool answered once it is in.

    A FunctionModel stream is either all tool calls or all text, never both.
    """
    last = messages[-1]
    results = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
    if not results:
        said = [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
                if isinstance(p, UserPromptPart) and isinstance(p.content, str)]
        order = (said[-1] if said else "A-1001").strip()[:64]
        yield {0: DeltaToolCall(name="issue_refund", json_args=json.dumps({"order": order, "amount": AMOUNT}))}
        return
    [result] = results
    content = str(result.content)
    yield f"Done: {content}." if content.startswith("refunded ") else f"Not refunded: {content}"


def build(name: str) -> Agent:
    agent = Agent(FunctionModel(stream_function=scripted), name=name, output_type=[str, DeferredToolRequests])

    @agent.tool(requires_approval=True)
    def issue_refund(ctx: RunContext, order: str, amount: int) -> str:
        """Refund ``amount`` EUR on ``order``."""
        refund_service.record({"agent": name, "thread": ctx.conversation_id, "order": order, "amount": amount})
        return f"refunded {amount} EUR on {order}"

    return agent


def app() -> Starlette:
    client_held = build("client")
    stored = build("store")
    store = InMemoryConversationStore()

    async def client_run(request: Request) -> Response:
        return await AGUIAdapter.dispatch_request(request, agent=client_held)

    async def store_run(request: Request) -> Response:
        return await AGUIAdapter.dispatch_request(request, agent=stored, conversation_store=store)

    return Starlette(routes=[
        Route("/client/", client_run, methods=["POST"]),
        Route("/store/", store_run, methods=["POST"]),
    ])


if __name__ == "__main__":
    refund_service.main(app, doc=__doc__, port=8767)
