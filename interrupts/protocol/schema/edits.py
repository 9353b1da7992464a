"""Approve-with-edits and one-click answers: what a schema offers, and the arguments an answer executes."""

from __future__ import annotations

import copy
from typing import Any

from ..errors import ContractViolation
from .problems import with_id

#: The payload key the AG-UI spec names for approve-with-edits.
EDITED_ARGS = "editedArgs"


def supports_edits(schema: Any) -> bool:
    """Whether the interrupt offers approve-with-edits: ``editedArgs`` is declared
    under the schema's top-level ``properties`` (the spec's capability signal).

    ``"editedArgs": false`` forbids the key outright, so it does not count.
    """
    return edited_args_schema(schema) is not None


def edited_args_schema(schema: Any) -> dict[str, Any] | None:
    """The schema declared for ``editedArgs``, or ``None`` when edits are not offered.

    A ``true`` sub-schema (anything goes) is returned as the equivalent ``{}``
    so callers always get a dict to build an edit form from.
    """
    if not isinstance(schema, dict):
        return None
    properties = schema.get("properties")
    if not isinstance(properties, dict) or EDITED_ARGS not in properties:
        return None
    sub = properties[EDITED_ARGS]
    if sub is True:
        return {}
    if isinstance(sub, dict):
        return sub
    return None


def apply_edits(proposed_args: dict[str, Any], payload: Any, *, interrupt_id: str | None = None) -> dict[str, Any]:
    """The tool arguments to execute: a deep copy of ``payload["editedArgs"]`` when
    the answer carries edits, else a deep copy of *proposed_args*.

    ``editedArgs`` is a FULL REPLACEMENT, never merged with the proposal (spec,
    "Approve with edits"): a key the reviewer removed must not come back from the
    agent's proposal. Copies are returned so later changes to the result can
    never alter the recorded proposal or answer. Raises
    ``ContractViolation("INVALID_PAYLOAD")`` when ``editedArgs`` is present but
    is not an object (``null`` included).
    """
    if isinstance(payload, dict) and EDITED_ARGS in payload:
        edited = payload[EDITED_ARGS]
        if not isinstance(edited, dict):
            kind = "null" if edited is None else type(edited).__name__
            message = f"editedArgs must be an object holding the full tool arguments, not {kind}"
            subject = f"The answer to interrupt {interrupt_id}" if interrupt_id else "The answer"
            raise ContractViolation(
                "INVALID_PAYLOAD",
                f"{subject} is unusable: {message}. Send the complete arguments or leave editedArgs out.",
                **with_id(interrupt_id, errors=[{"path": "/" + EDITED_ARGS, "message": message}]),
            )
        return copy.deepcopy(edited)
    return copy.deepcopy(proposed_args)


def approval_payload(schema: Any, approved: bool) -> Any:
    """The payload meaning "yes" (or "no") under ``schema``, or ``None`` when it has none.

    Denials go inside the payload (``{"approved": false}``), so a one-click
    approve or reject needs the schema's yes/no field: ``approved`` when the
    schema has it (the spec's tool-approval pattern), else its only required
    boolean property (``{"confirm": true}``), or a bare boolean for a boolean
    schema. No schema means the spec's default, ``{"approved": ...}``.
    """
    if schema is None:
        return {"approved": approved}
    if not isinstance(schema, dict):
        return None
    if schema.get("type") == "boolean":
        return approved
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return None

    def is_boolean(name: str) -> bool:
        return isinstance(properties.get(name), dict) and properties[name].get("type") == "boolean"

    if is_boolean("approved"):
        return {"approved": approved}
    required = [name for name in schema.get("required") or [] if isinstance(name, str)]
    if len(required) == 1 and is_boolean(required[0]):
        return {required[0]: approved}
    return None
