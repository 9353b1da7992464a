"""The seed's deployer: one approval with a custom, namespaced reason."""

from ..sdk import Agent, InterruptDefinition, RunOutcome

APPROVE_DEPLOY = InterruptDefinition(
    id="approve-deploy",
    # Namespaced custom reason: clients must render reasons they do not know.
    reason="countersign:deploy",
    message="Deploy build 42 to production?",
    response_schema={
        "type": "object",
        "properties": {"build": {"type": "integer", "minimum": 1, "description": "The build to deploy."}},
        "required": ["build"],
    },
)


class Deployer(Agent):
    name = "deployer"
    description = "Asks before deploying build 42 to production."

    async def run(self, ctx):
        # Validated against the schema: an approval without a build number
        # fails the run (RUN_ERROR INVALID_RESUME) instead of deploying something.
        answer = ctx.resume_for(APPROVE_DEPLOY)
        if answer is None:
            ctx.say("Deploying to production needs a human.")
            return RunOutcome.interrupt(
                [APPROVE_DEPLOY.interrupt(metadata={"environment": "production", "build": 42})]
            )
        if answer.status == "resolved":
            build = answer.payload["build"]
            # Only a signed, fingerprint-checked resume names its approvers; a direct curl names nobody.
            approvers = [a.username for a in ctx.approvals_for(APPROVE_DEPLOY) if a.action != "reject"]
            if approvers:
                ctx.set_state({**ctx.state, "deployed": build, "approvedBy": approvers})
                ctx.say(f"Deployed build {build}, approved by {', '.join(approvers)}.")
            else:
                ctx.set_state({**ctx.state, "deployed": build})
                ctx.say(f"Deployed build {build}.")
        else:
            ctx.say("Left production alone.")
        return RunOutcome.success()
