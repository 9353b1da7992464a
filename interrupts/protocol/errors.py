"""The refusals the protocol layer raises.

Every refusal carries a stable ``code`` (for RUN_ERROR events and 4xx JSON
bodies) and a ``message`` a person can act on; ``details`` holds structured
extras such as the interrupt id or the failing field's path.

On the wire a refusal has two forms. Toward an AG-UI client it is a RUN_ERROR
event, ``{code, message}`` as AG-UI names them. As an HTTP answer, on every
surface (the REST API, the gateway, agent endpoints, the pages' JSON), it is
the body :func:`refusal_body` builds: ``{code, detail}``, ``fields`` only when
named fields are invalid, then any structured details. ``detail`` is the name
DRF and RFC 9457 give the sentence, so API clients read it already.
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

    def body(self) -> dict[str, Any]:
        """The refusal as an HTTP answer's body (see :func:`refusal_body`)."""
        return refusal_body(self.code, self.message, **self.details)


def refusal_body(code: str, detail: str, /, *, fields: Any = None, **details: Any) -> dict[str, Any]:
    """The JSON body of every HTTP refusal: ``{code, detail[, fields], **details}``.

    ``fields`` maps each invalid field to what is wrong with it, and is left
    out when no field is (an empty ``fields`` would read as "these fields are
    fine"). The code and the sentence always win over a detail of that name.
    """
    body: dict[str, Any] = {"code": code, "detail": detail}
    if fields:
        body["fields"] = fields
    body.update((key, value) for key, value in details.items() if key not in body)
    return body


class MalformedStream(ProtocolError):
    """The bytes of a ``text/event-stream`` cannot be read as SSE frames."""


class MalformedMessage(ProtocolError):
    """A frame or request body is not a valid AG-UI event or RunAgentInput."""


class ContractViolation(ProtocolError):
    """An input or answer breaks one of the interrupt contract's rules."""


class StreamFault(ProtocolError):
    """An event arrived where the run lifecycle does not allow it, or the stream ended early.

    Codes: ``NOT_STARTED``, ``RUN_MISMATCH``, ``DUPLICATE_START``,
    ``AFTER_END``, ``TOOL_CALL_ORDER``, ``TOO_LARGE``, ``INCOMPLETE_STREAM``.
    ``details`` always carries ``event_type`` when an event was refused.
    Raised by lifecycle.py and by toolcalls.py, which it feeds.
    """
