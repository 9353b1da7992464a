"""Two decisions pending at once: both must be answered in one request.

The agent remembers nothing between runs, so each request is judged on the
answers it carries alone: answer the budget, then the date, and the budget is
unanswered again. Only both at once books the trip.
"""

from ..sdk import Agent, InterruptDefinition, RunOutcome

APPROVE_BUDGET = InterruptDefinition(
    id="approve-budget",
    reason="confirmation",
    message="Approve a travel budget of 1,200 EUR?",
    response_schema={
        "type": "object",
        "properties": {"approved": {"type": "boolean"}},
        "required": ["approved"],
    },
)
CONFIRM_DATE = InterruptDefinition(
    id="confirm-date",
    reason="input_required",
    message="Which date should the trip start?",
    response_schema={
        "type": "object",
        "properties": {"date": {"type": "string", "format": "date"}},
        "required": ["date"],
    },
)


class Planner(Agent):
    name = "planner"
    description = "Needs a budget and a date, answered together, to book a trip."

    async def run(self, ctx):
        # Read every answer before emitting anything: what is still open must
        # all be asked again, together.
        answers = {d.id: ctx.resume_for(d) for d in (APPROVE_BUDGET, CONFIRM_DATE)}
        pending = [d.interrupt() for d in (APPROVE_BUDGET, CONFIRM_DATE) if answers[d.id] is None]
        if pending:
            return RunOutcome.interrupt(pending)
        budget, date = answers[APPROVE_BUDGET.id], answers[CONFIRM_DATE.id]
        if budget.status == "resolved" and budget.payload["approved"] and date.status == "resolved":
            ctx.set_state({**ctx.state, "booked": date.payload["date"]})
            ctx.say(f"Booked for {date.payload['date']}.")
        else:
            ctx.say("Not booked.")
        return RunOutcome.success()
