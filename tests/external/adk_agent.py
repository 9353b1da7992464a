"""A Google ADK agent behind ag-ui-adk, for the end-to-end tests: a refund that needs a person's confirmation.

The model is scripted (no LLM, no key, no network): the user's message names
an order, and it calls ``issue_refund(order=<that message>, amount=42)``; given
the tool's response, it says what happened. The tool is a ``FunctionTool(..., require_confirmation=True)``,
so ADK pauses on its own ``adk_request_confirmation`` call, and ag-ui-adk
(``emit_interrupt_outcome=True``) reports that pause as an AG-UI interrupt.
Each time the refund really runs, its args are kept (tests/external/refund_service.py): ``GET /executed`` answers
``{"executed": [{"thread": ..., "order": ..., "amount": ...}, ...]}``, and
``--record FILE`` appends the same as JSON lines.

    .venv-adk/bin/python tests/external/adk_agent.py --port 8767
"""

import os

# ADK exports no traces unless told to; this keeps OpenTelemetry off even if
# the environment configures an exporter. Set before ADK is imported.
os.environ["OTEL_SDK_DISABLED"] = "true"

from collections.abc import AsyncGenerator  # noqa: E402

import refund_service  # noqa: E402
from ag_ui_adk import ADKAgent, add_adk_fastapi_endpoint  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.models.base_llm import BaseLlm  # noqa: E402
from google.adk.models.llm_request import LlmRequest  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.tools import FunctionTool, ToolContext  # noqa: E402
from google.genai import types  # noqa: E402


def issue_refund(order: str, amount: float, tool_context: ToolContext) -> dict:
    """Refund ``amount`` EUR on ``order``."""
    refund_service.record({"thread": _thread_of(tool_context), "order": order, "amount": amount})
    return {"status": "refunded", "order": order, "amount": amount}


def _thread_of(tool_context: ToolContext) -> str | None:
    # ag-ui-adk keeps the AG-UI thread id in the session's state.
    state = tool_context.state.to_dict() if hasattr(tool_context.state, "to_dict") else dict(tool_context.state)
    for key in ("_ag_ui_thread_id", "thread_id"):
        if state.get(key):
            return state[key]
    return tool_context.session.id if getattr(tool_context, "session", None) else None


class ScriptedModel(BaseLlm):
    """Proposes the refund once; after the tool's response, reports it."""

    model: str = "scripted"

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        answered, order = None, "A-1001"
        for content in llm_request.contents or []:
            for part in content.parts or []:
                if part.function_response and part.function_response.name == "issue_refund":
                    answered = part.function_response.response
                elif content.role == "user" and part.text and part.text.strip():
                    order, answered = part.text.strip(), None
        if answered is None:
            call = types.FunctionCall(name="issue_refund", args={"order": order, "amount": 42})
            parts = [types.Part(text=f"I propose refunding 42 EUR on order {order}."), types.Part(function_call=call)]
        elif answered.get("status") == "refunded":
            parts = [types.Part(text=f"Done: refunded {answered['amount']} EUR on {answered['order']}.")]
        else:
            parts = [types.Part(text="The refund was not issued.")]
        yield LlmResponse(content=types.Content(role="model", parts=parts), turn_complete=True)


def build_app() -> FastAPI:
    agent = LlmAgent(
        name="refunds", model=ScriptedModel(), instruction="Refund orders.",
        tools=[FunctionTool(issue_refund, require_confirmation=True)],
    )
    served = ADKAgent(adk_agent=agent, app_name="refunds", user_id="countersign",
                      use_in_memory_services=True, use_thread_id_as_session_id=True,
                      emit_messages_snapshot=True, emit_interrupt_outcome=True)
    app = FastAPI()
    add_adk_fastapi_endpoint(app, served, path="/")
    return app


if __name__ == "__main__":
    refund_service.main(build_app, doc=__doc__, port=8767)
