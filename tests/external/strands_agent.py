"""An AWS Strands agent behind ag-ui-strands, for the end-to-end tests: a refund that needs approval.

The model is scripted (no LLM, no AWS account, no network): the user's message
names an order, and it calls ``issue_refund(order=<that message>, amount=42)``;
given the tool's result, it says what happened. The tool's ``ToolBehavior(interrupt_on_call=True)`` makes
ag-ui-strands interrupt before it runs and run it only on ``{"approved": true}``.
Each time the refund really runs, its args are kept (tests/external/refund_service.py): ``GET /executed`` answers
``{"executed": [{"thread": ..., "order": ..., "amount": ...}, ...]}``, and
``--record FILE`` appends the same as JSON lines.

    .venv-strands/bin/python tests/external/strands_agent.py --port 8768
"""

import json
import os
import uuid

# Strands traces through OpenTelemetry and exports nothing unless told to;
# this keeps it off even if the environment configures an exporter.
os.environ["OTEL_SDK_DISABLED"] = "true"

import refund_service  # noqa: E402
from ag_ui_strands import StrandsAgent, StrandsAgentConfig, ToolBehavior, add_strands_fastapi_endpoint  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from strands import Agent, ToolContext, tool  # noqa: E402
from strands.models.model import Model  # noqa: E402


@tool(context=True)
def issue_refund(order: str, amount: int, tool_context: ToolContext) -> dict:
    """Refund ``amount`` EUR on ``order``.

    Args:
        order: the order's number
        amount: how much to refund, in EUR
    """
    refund_service.record({"thread": tool_context.invocation_state.get("thread"), "order": order, "amount": amount})
    return {"status": "success", "content": [{"text": f"refunded {amount} EUR on {order}"}]}


class ScriptedModel(Model):
    """Proposes the refund once; after the tool's result, reports it."""

    def update_config(self, **model_config):
        pass

    def get_config(self):
        return {"model_id": "scripted"}

    async def structured_output(self, output_model, prompt, system_prompt=None, **kwargs):
        raise NotImplementedError("the scripted model gives no structured output")
        yield {}

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs):
        result, order = None, "A-1001"
        for message in messages:
            for block in message.get("content", []):
                if "toolResult" in block:
                    result = block["toolResult"]
                elif message.get("role") == "user" and (block.get("text") or "").strip():
                    order, result = block["text"].strip(), None
        yield {"messageStart": {"role": "assistant"}}
        if result is None:
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": f"I propose refunding 42 EUR on order {order}."}}}
            yield {"contentBlockStop": {}}
            yield {
                "contentBlockStart": {
                    "start": {"toolUse": {"name": "issue_refund", "toolUseId": f"call_refund_{uuid.uuid4().hex[:8]}"}}
                }
            }
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps({"order": order, "amount": 42})}}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "tool_use"}}
            return
        said = " ".join(part.get("text", "") for part in result.get("content", []))
        text = f"Done: {said}." if result.get("status") == "success" else f"The refund was not issued: {said}"
        yield {"contentBlockStart": {"start": {}}}
        yield {"contentBlockDelta": {"delta": {"text": text}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "end_turn"}}


def build_app() -> FastAPI:
    template = Agent(model=ScriptedModel(), tools=[issue_refund], system_prompt="Refund orders.",
                     callback_handler=None)
    config = StrandsAgentConfig(tool_behaviors={"issue_refund": ToolBehavior(interrupt_on_call=True)})
    served = StrandsAgent(template, name="refunds", description="Refunds orders.", config=config)
    app = FastAPI()
    add_strands_fastapi_endpoint(app, served, "/",
                                 invocation_state_provider=lambda request, run: {"thread": run.thread_id})
    return app


if __name__ == "__main__":
    refund_service.main(build_app, doc=__doc__, port=8768)
