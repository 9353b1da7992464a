"""Tool-bound interrupts: sendEmail proposed as a tool call, run only once approved.

The ledger of every proposed email lives in the agent's state, so a resumed
run knows what it proposed, and tests can see that a declined email never went.
"""

from ..protocol.errors import ContractViolation
from ..protocol.schema.edits import apply_edits
from ..protocol.schema.payloads import payload_errors
from ..sdk import Agent, InvalidResume, RunOutcome, interrupt
from . import asked

# The approve-with-edits pattern of interrupts.mdx: editedArgs is a full replacement.
SEND_EMAIL_SCHEMA = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "editedArgs": {
            "type": "object",
            "title": "The email as it will be sent",
            "description": "Every field as it should go out: what you leave here is what is sent.",
            "properties": {
                "to": {"type": "string", "format": "email"},
                "subject": {"type": "string"},
                "body": {"type": "string"},
            },
            "required": ["to", "subject", "body"],
            "additionalProperties": False,
        },
    },
    "required": ["approved"],
}

def interrupt_id(tool_call_id: str) -> str:
    return f"approve-{tool_call_id}"


def in_order(emails: dict) -> list:
    """The ledger in the order the emails were proposed.

    JSON objects have no order (PostgreSQL's jsonb, for one, stores the state
    with its keys sorted), so the ledger carries its own.
    """
    return sorted(emails.items(), key=lambda item: item[1].get("n", 0))


class Mailer(Agent):
    name = "mailer"
    description = "Drafts the email your message asks for (to, subject, saying …) and sends it once approved."

    def tool_call_ids_for(self, run_input, interrupt_id: str):
        # The interrupt id names the tool call, and the ledger says it was ours:
        # the fingerprint is then bound to exactly that call.
        emails = run_input.state.get("emails", {}) if isinstance(run_input.state, dict) else {}
        tool_call_id = interrupt_id.removeprefix("approve-")
        return [tool_call_id] if interrupt_id.startswith("approve-") and tool_call_id in emails else [None]

    def drafts(self, ctx) -> list[dict]:
        text = asked.last_user_text(ctx)
        return [{"to": asked.recipient(text, "a@b.com"), "subject": asked.subject(text, "Hi"),
                 "body": asked.body(text, "Hello from Countersign's demo mailer.")}]

    async def run(self, ctx):
        state = ctx.state if isinstance(ctx.state, dict) else {}
        emails = dict(state.get("emails", {}))
        if not ctx.is_resume():
            for args in self.drafts(ctx):
                tool_call_id = ctx.tool_call("sendEmail", args)
                emails[tool_call_id] = {"args": args, "status": "proposed", "n": len(emails)}
        else:
            # Refuse before sending anything: a resume is applied whole or not at all.
            waiting = {interrupt_id(t) for t, e in emails.items() if e["status"] == "proposed"}
            unknown = [e.interrupt_id for e in ctx.resume() if e.interrupt_id not in waiting]
            if unknown:
                raise InvalidResume(f"No email of this thread waits for {', '.join(unknown)}.")
            for tool_call_id, email in in_order(emails):
                answer = ctx.resume_for(interrupt_id(tool_call_id))
                if email["status"] == "proposed" and answer is not None:
                    emails[tool_call_id] = self.settle(ctx, tool_call_id, email, answer)
        ctx.set_state({**state, "emails": emails})
        pending = [
            interrupt(
                interrupt_id(tool_call_id),
                "tool_call",
                tool_call_id=tool_call_id,
                message=f"Send email to {email['args']['to']} with subject '{email['args']['subject']}'?",
                response_schema=SEND_EMAIL_SCHEMA,
            )
            for tool_call_id, email in in_order(emails)
            if email["status"] == "proposed"
        ]
        if pending:
            return RunOutcome.interrupt(pending)
        return RunOutcome.success()

    def settle(self, ctx, tool_call_id: str, email: dict, answer) -> dict:
        """Send or skip one proposed email according to its answer; return its ledger entry."""
        if answer.status == "cancelled":
            ctx.say(f"Did not send the email to {email['args']['to']}: the request was cancelled.")
            return {**email, "status": "cancelled"}
        errors = payload_errors(SEND_EMAIL_SCHEMA, answer.payload)
        if errors:
            raise InvalidResume(
                f"The answer to {answer.interrupt_id} does not fit its responseSchema: "
                f"{errors[0]['path'] or 'the payload'}: {errors[0]['message']}"
            )
        if not answer.payload["approved"]:
            ctx.say(f"Did not send the email to {email['args']['to']}: declined.")
            return {**email, "status": "declined"}
        try:
            sent = apply_edits(email["args"], answer.payload)
        except ContractViolation as problem:
            raise InvalidResume(problem.message) from None
        # Only the approvers Countersign signed for; an unsigned request names nobody.
        approvers = [a.username for a in ctx.approvals_for(answer.interrupt_id) if a.action != "reject"]
        signed_by = {"approvedBy": approvers} if approvers else {}
        ctx.tool_result(tool_call_id, {"sent": True, **sent})
        if approvers:
            ctx.say(f"Sent the email to {sent['to']}, approved by {', '.join(approvers)}.")
        return {**email, "status": "sent", "sent": sent, **signed_by}


class BulkMailer(Mailer):
    name = "bulk-mailer"
    description = "Proposes three emails at once: parallel interrupts, answered together."

    def drafts(self, ctx) -> list[dict]:
        return [
            {"to": to, "subject": "Quarterly update", "body": f"Hello {to.split('@')[0]}, here is the update."}
            for to in ("x@y.com", "y@z.com", "z@w.com")
        ]
