"""An agent as its author writes it: on the installed countersign-sdk alone, under uvicorn, in .venv-sdk.

    .venv-sdk/bin/python -I tests/external/sdk_agent.py --port 8001 --secret css_...

-I keeps the checkout off sys.path, so only the wheel's ``countersign`` can be
imported. tests/e2e/test_sdk_package.py runs it through the hub.
"""

import argparse
import sys

import countersign.sdk
import uvicorn
from countersign.sdk import Agent, InterruptDefinition, RunOutcome
from countersign.sdk.asgi import agent_app

APPROVE_REFUND = InterruptDefinition(
    id="approve-refund",
    reason="countersign:refund",
    message="Refund 30 EUR for order 1234?",
    response_schema={"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]},
)


class Refunder(Agent):
    name = "refunder"

    async def run(self, ctx):
        answer = ctx.resume_for(APPROVE_REFUND)
        if answer is None:
            ctx.say("Refunds need a human.")
            return RunOutcome.interrupt([APPROVE_REFUND.interrupt({"order": 1234, "amount": 30})])
        # Filled only from a resume whose signature and fingerprint the SDK checked.
        approvers = [a.username for a in ctx.approvals_for(APPROVE_REFUND)]
        if answer.status == "resolved" and answer.payload["approved"] and approvers:
            ctx.say(f"Refunded 30 EUR, approved by {', '.join(approvers)}.")
        else:
            ctx.say("Not refunded.")
        # What this process runs on, for the test to see: the wheel, and nothing of the app.
        loaded = sorted({m.split(".")[0] for m in sys.modules} & {"django", "interrupts", "channels", "daphne"})
        return RunOutcome.success(result={"approvers": approvers, "sdk": countersign.sdk.__file__, "loaded": loaded})


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--secret", required=True)
    options = parser.parse_args()
    uvicorn.run(agent_app(Refunder(signing_secret=options.secret)), host="127.0.0.1", port=options.port,
                log_level="info", access_log=False)
