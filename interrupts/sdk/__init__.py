"""Write an AG-UI agent that honours the interrupt contract, in plain Python, without Django.

Serve an ``Agent`` with ``asgi.agent_app`` under any ASGI server, or drive it
with ``driver.run``. Installed alone it is ``countersign.sdk`` (docs/sdk.md).
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
