"""The refusals the protocol layer raises.

Every refusal carries a stable ``code`` (for RUN_ERROR events and 4xx JSON
bodies) and a ``message`` a person can act on; ``details`` holds structured
extras such as the interrupt id or the failing field's path.
"""

from __future__ import annotations

from typing import Any


class ProtocolError(Exception):
    """Base of every refusal raised by ``interrupts.protocol``."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = details

    def as_dict(self) -> dict[str, Any]:
        """The refusal as a JSON-ready object: ``{code, message, **details}``."""
        return {"code": self.code, "message": self.message, **self.details}


class MalformedStream(ProtocolError):
    """The bytes of a ``text/event-stream`` cannot be read as SSE frames."""


class MalformedMessage(ProtocolError):
    """A frame or request body is not a valid AG-UI event or RunAgentInput."""


class ContractViolation(ProtocolError):
    """An input or answer breaks one of the interrupt contract's rules."""
