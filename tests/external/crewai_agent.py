"""A CrewAI Flow behind ag-ui-crewai, for the end-to-end tests: a proposed refund a person approves.

No LLM, no key, no network: the user's message names an order, and the Flow's
first step proposes ``issue_refund(order=<that message>, amount=42)`` and asks for feedback with
``@human_feedback(provider=agui_feedback_provider)`` (no ``emit``, so no LLM
reads the feedback). ag-ui-crewai pauses the run there and reports an AG-UI
interrupt (``emit_interrupt_outcome=True``) whose metadata carries the proposal.
The next step gets the answer as JSON text (``{"approved": true}`` or
``{"approved": false}``, Countersign's approve and reject) and issues the
refund with the proposal's args only when approved. Each time the refund
really runs, its args are kept (tests/external/refund_service.py): ``GET /executed`` answers
``{"executed": [{"thread": ..., "order": ..., "amount": ...}, ...]}``, and
``--record FILE`` appends the same as JSON lines.

    .venv-crewai/bin/python tests/external/crewai_agent.py --port 8769
"""

import json
import os

# CrewAI's anonymous telemetry, its trace upload, its version check, and the
# model price list LiteLLM (a crewai dependency) downloads on import are each
# a network call: all off, before crewai is imported.
for flag in ("OTEL_SDK_DISABLED", "CREWAI_DISABLE_TELEMETRY", "CREWAI_DISABLE_TRACKING",
             "CREWAI_DISABLE_VERSION_CHECK", "LITELLM_LOCAL_MODEL_COST_MAP"):
    os.environ[flag] = "true"
os.environ["CREWAI_TRACING_ENABLED"] = "false"

import refund_service  # noqa: E402
from ag_ui_crewai import add_crewai_flow_fastapi_endpoint, agui_feedback_provider  # noqa: E402
from crewai.flow.flow import Flow, listen, start  # noqa: E402
from crewai.flow.human_feedback import HumanFeedbackResult, human_feedback  # noqa: E402
from fastapi import FastAPI  # noqa: E402


def issue_refund(thread: str, order: str, amount: float) -> str:
    refund_service.record({"thread": thread, "order": order, "amount": amount})
    return f"refunded {amount} EUR on {order}"


class RefundFlow(Flow):
    @start()
    @human_feedback(message="Issue this refund?", provider=agui_feedback_provider)
    def propose_refund(self):
        said = [m.get("content") for m in self.state.get("messages") or [] if m.get("role") == "user"]
        order = said[-1].strip() if said and isinstance(said[-1], str) and said[-1].strip() else "A-1001"
        return {"tool": "issue_refund", "args": {"order": order, "amount": 42}}

    @listen(propose_refund)
    def act(self, review: HumanFeedbackResult):
        try:
            answer = json.loads(review.feedback or "null")
        except ValueError:
            answer = None
        # Only an explicit approval runs the refund; a cancel arrives as "".
        if isinstance(answer, dict) and answer.get("approved") is True:
            proposal = review.output
            return "Done: " + issue_refund(self.state["id"], **proposal["args"]) + "."
        return "The refund was not issued."


def build_app() -> FastAPI:
    app = FastAPI()
    add_crewai_flow_fastapi_endpoint(app, RefundFlow(), "/", emit_interrupt_outcome=True)
    return app


if __name__ == "__main__":
    refund_service.main(build_app, doc=__doc__, port=8769)
