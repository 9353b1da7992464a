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
        late = deadline is not None and datetime.now(UTC) >= deadline
        answer = FILING.check_answer(answer)
        if answer.status == "cancelled":
            # AG-UI 1.0: an expired request is covered by a cancel, which is how the agent hears of it.
            ctx.say(f"The filing request expired at {iso(deadline)} unanswered: filing skipped." if late
                    else "Filing skipped.")
            return RunOutcome.success()
        if late:
            raise AgentError(f"The filing request expired at {iso(deadline)}.", code="EXPIRED")
        filing = answer.payload
        ctx.set_state({**state, "filed": filing})
        ctx.say(f"Filed {filing['quarter']} {filing['year']}: revenue {filing['revenue']:,}.")
        return RunOutcome.success()
