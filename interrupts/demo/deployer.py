"""The seed's deployer: one approval with a custom, namespaced reason."""

from ..sdk import Agent, InterruptDefinition, RunOutcome
from . import asked

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
    description = "Asks before deploying the build your message names (build 42 to production if it names none)."

    async def run(self, ctx):
        # Validated against the schema: an approval without a build number
        # fails the run (RUN_ERROR INVALID_RESUME) instead of deploying something.
        answer = ctx.resume_for(APPROVE_DEPLOY)
        text = asked.last_user_text(ctx)
        if answer is None:
            build, environment = asked.build(text, 42), asked.environment(text, "production")
            ctx.say(f"Deploying to {environment} needs a human.")
            return RunOutcome.interrupt([APPROVE_DEPLOY.interrupt(
                message=f"Deploy build {build} to {environment}?",
                metadata={"environment": environment, "build": build})])
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
            # The thread's messages come with the resume: the environment is read from them again.
            ctx.say(f"Left {asked.environment(text, 'production')} alone.")
        return RunOutcome.success()
