"""How a refusal about a schema is worded: every one carries a code, a place and what happens next."""

from __future__ import annotations

from typing import Any

from ..errors import ContractViolation

#: Sentence every refusal of an unusable schema ends with.
ONLY_CANCEL = "The agent must fix the schema; the interrupt can only be cancelled meanwhile."


class Problem(Exception):
    """A refusal found without an interrupt id; ``as_violation`` adds it."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.details = code, message, details

    def as_violation(self, interrupt_id: str | None) -> ContractViolation:
        """The refusal as the ``ContractViolation`` callers see."""
        return ContractViolation(self.code, self.message, **with_id(interrupt_id, **self.details))


def with_id(interrupt_id: str | None, **found: Any) -> dict[str, Any]:
    """Refusal details, with ``interrupt_id`` only when one interrupt is concerned."""
    if interrupt_id is not None:
        found["interrupt_id"] = interrupt_id
    return found


def json_pointer(path: Any) -> str:
    """A JSON pointer (RFC 6901) for a ``jsonschema`` error path; ``""`` is the root."""
    # "~" before "/", or a key like "a/b" would read back as two levels.
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


def place(at: str) -> str:
    """A pointer as prose: ``/a/b`` stays, ``""`` is "the top level"."""
    return at or "the top level"


def shortened(text: str, limit: int = 80) -> str:
    """*text* cut to *limit* characters for a message (the full value is in the details)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
