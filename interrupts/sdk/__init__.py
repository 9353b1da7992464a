"""Write an AG-UI agent that honours the interrupt contract, in plain Python.

    from interrupts.sdk import Agent, RunOutcome, interrupt

    class Deployer(Agent):
        name = "deployer"

        async def run(self, ctx):
            answer = ctx.resume_for("approve-deploy")
            if answer is None:
                return RunOutcome.interrupt([interrupt("approve-deploy", "countersign:deploy")])
            ...

Serve it with ``interrupts.sdk.views.agent_view(Deployer())`` in Django, with
``interrupts.sdk.asgi.agent_app(Deployer())`` under any ASGI server (no Django), or drive it
directly with ``interrupts.sdk.driver.run``. Nothing here but ``views`` knows
Django.
"""

from .agent import Agent, AgentError, InterruptDefinition, InvalidOutcome, InvalidResume, RunOutcome, interrupt
from .context import RunContext
from .driver import run

__all__ = [
    "Agent",
    "AgentError",
    "InterruptDefinition",
    "InvalidOutcome",
    "InvalidResume",
    "RunContext",
    "RunOutcome",
    "interrupt",
    "run",
]
