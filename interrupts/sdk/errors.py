"""The SDK's base error: the one class both the agent and the signature check raise."""


class AgentError(Exception):
    """Raise from ``Agent.run`` to fail the run with RUN_ERROR and this code."""

    def __init__(self, message: str, code: str = "AGENT_ERROR") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
