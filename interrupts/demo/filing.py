"""A structured form: reason ``input_required`` with a responseSchema and an expiry."""

from datetime import UTC, datetime, timedelta

from ..protocol.contract import parse_expiry
from ..sdk import Agent, AgentError, InterruptDefinition, RunOutcome

FILING = InterruptDefinition(
    id="quarterly-filing",
    reason="input_required",
    message="Please provide the quarterly filing details.",
    response_schema={
        "type": "object",
        "properties": {
            "quarter": {"type": "string", "enum": ["Q1", "Q2", "Q3", "Q4"]},
            "year": {"type": "integer", "minimum": 2000},
            "revenue": {"type": "number"},
        },
        "required": ["quarter", "year", "revenue"],
    },
)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


class Filing(Agent):
    name = "filing"
    description = "Asks for the quarterly filing details before a deadline."

    def __init__(self, expires_in: timedelta = timedelta(hours=1)) -> None:
        self.expires_in = expires_in

    async def run(self, ctx):
        state = ctx.state if isinstance(ctx.state, dict) else {}
        answer = ctx.resume_for(FILING.id)
        if answer is None:
            expires_at = iso(datetime.now(UTC) + self.expires_in)
            # The deadline travels in state: the resumed run has nothing else to go by.
            ctx.set_state({**state, "filingExpiresAt": expires_at})
            return RunOutcome.interrupt([FILING.interrupt(expires_at=expires_at)])
        deadline = parse_expiry(state.get("filingExpiresAt"))
        if deadline is not None and datetime.now(UTC) >= deadline:
            raise AgentError(f"The filing request expired at {iso(deadline)}.", code="EXPIRED")
        answer = FILING.check_answer(answer)
        if answer.status == "cancelled":
            ctx.say("Filing skipped.")
            return RunOutcome.success()
        filing = answer.payload
        ctx.set_state({**state, "filed": filing})
        ctx.say(f"Filed {filing['quarter']} {filing['year']}: revenue {filing['revenue']:,}.")
        return RunOutcome.success()
