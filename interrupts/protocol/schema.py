"""An interrupt's ``responseSchema``: checking it, validating answers against it,
and the approve-with-edits pattern built on it.

The schema comes from the agent and is untrusted: every function here reports a
broken schema as ``ContractViolation("INVALID_SCHEMA")`` rather than letting a
``jsonschema`` or ``referencing`` exception escape, so one bad interrupt can
never turn a reviewer's page or a resume request into a server error.

Validation is JSON Schema draft 2020-12 *with* format checking switched on:
``jsonschema`` treats ``format`` as an annotation unless a format checker is
passed, and the approve-with-edits example in the AG-UI spec relies on
``"format": "email"`` being enforced. Only the formats ``jsonschema`` can check
without optional dependencies are enforced (``email``, ``ipv4``, ``ipv6``,
``date``, ``regex``, ...); others, such as ``date-time`` without
``rfc3339-validator`` installed, are accepted unchecked.
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .errors import ContractViolation

__all__ = [
    "apply_edits",
    "check_schema",
    "edited_args_schema",
    "payload_errors",
    "supports_edits",
    "validate_payload",
]

#: The payload key the AG-UI spec names for approve-with-edits.
EDITED_ARGS = "editedArgs"

# How many errors the human summary of INVALID_PAYLOAD spells out; the full
# list is always in ``details["errors"]``.
_SUMMARY_ERRORS = 3


def _details(interrupt_id: str | None, **details: Any) -> dict[str, Any]:
    """Refusal details, with ``interrupt_id`` only when one interrupt is concerned."""
    if interrupt_id is not None:
        details["interrupt_id"] = interrupt_id
    return details


def _pointer(path: Any) -> str:
    """A JSON pointer (RFC 6901) for a ``jsonschema`` error path; ``""`` is the root."""
    # "~" and "/" must be escaped, in that order, or a key like "a/b" would
    # read back as two levels.
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


@functools.lru_cache(maxsize=1024)
def _check_against_metaschema(schema_json: str) -> None:
    # Checking against the metaschema takes ~3 ms, and the same few schemas
    # come back with every decision: remember the ones that passed (a
    # SchemaError is not cached, so a bad schema is re-checked, and cheap to).
    Draft202012Validator.check_schema(json.loads(schema_json))


def check_schema(schema: Any, *, interrupt_id: str | None = None) -> None:
    """Raise ``ContractViolation("INVALID_SCHEMA")`` unless *schema* is a usable
    JSON Schema draft 2020-12 object.

    Boolean schemas (``true``/``false``), although valid JSON Schema, are
    refused: the AG-UI ``Interrupt`` model declares ``responseSchema`` as an
    object, so anything else arrived by bypassing it. ``$ref`` targets are only
    resolved at validation time, where an unresolvable one is reported the same
    way (see ``payload_errors``).
    """
    if not isinstance(schema, dict):
        raise ContractViolation(
            "INVALID_SCHEMA",
            f"The responseSchema must be a JSON object, not {type(schema).__name__}; "
            "the agent must send a JSON Schema (draft 2020-12) object.",
            **_details(interrupt_id),
        )
    try:
        # check_schema validates against the draft 2020-12 metaschema and, by
        # default, checks formats in it too (so an invalid "pattern" regex is
        # caught here rather than crashing validation later).
        _check_against_metaschema(json.dumps(schema, sort_keys=True))
    except SchemaError as exc:
        where = _pointer(exc.absolute_path) or "the top level"
        raise ContractViolation(
            "INVALID_SCHEMA",
            f"The responseSchema is not a valid JSON Schema (draft 2020-12) at {where}: "
            f"{exc.message}. The agent must fix the schema; the interrupt can only be cancelled meanwhile.",
            **_details(interrupt_id, errors=[{"path": _pointer(exc.absolute_path), "message": exc.message}]),
        ) from None
    except Exception as exc:  # noqa: BLE001 - untrusted input: report, never crash
        raise ContractViolation(
            "INVALID_SCHEMA",
            f"The responseSchema could not be checked ({type(exc).__name__}: {exc}).",
            **_details(interrupt_id),
        ) from None


def payload_errors(schema: Any, payload: Any, *, interrupt_id: str | None = None) -> list[dict[str, str]]:
    """Every way *payload* fails *schema*, as ``{"path", "message"}`` dicts sorted
    by path (then message); an empty list means the payload is valid.

    ``path`` is a JSON pointer to the offending value in the payload (``""`` for
    the payload itself; for a missing ``required`` property it is the object
    that lacks it, and the message names the property). Raises
    ``ContractViolation("INVALID_SCHEMA")`` when the schema itself is broken,
    including a ``$ref`` that cannot be resolved or that recurses forever.
    """
    check_schema(schema, interrupt_id=interrupt_id)
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    try:
        # Errors are produced lazily, so unresolvable $refs and the like only
        # surface while iterating: the whole iteration sits in the try.
        found = [{"path": _pointer(err.absolute_path), "message": err.message} for err in validator.iter_errors(payload)]
    except Exception as exc:  # noqa: BLE001 - untrusted schema: report, never crash
        # Covers referencing.exceptions.Unresolvable (a $ref to nowhere or to
        # a remote document, which is never fetched) and RecursionError (a
        # $ref cycle such as {"$ref": "#"}), which pass the metaschema check.
        raise ContractViolation(
            "INVALID_SCHEMA",
            f"The responseSchema cannot be used to validate an answer ({type(exc).__name__}: {exc}). "
            "The agent must fix the schema; the interrupt can only be cancelled meanwhile.",
            **_details(interrupt_id),
        ) from None
    return sorted(found, key=lambda e: (e["path"], e["message"]))


def _summary(errors: list[dict[str, str]]) -> str:
    """A sentence naming the first few payload errors and how many more there are."""
    parts = [f"at {e['path'] or 'the top level'}: {e['message']}" for e in errors[:_SUMMARY_ERRORS]]
    text = "; ".join(parts)
    rest = len(errors) - _SUMMARY_ERRORS
    if rest > 0:
        text += f" (and {rest} more problem{'s' if rest > 1 else ''})"
    return text


def validate_payload(schema: Any, payload: Any, interrupt_id: str | None = None) -> None:
    """Raise ``ContractViolation("INVALID_PAYLOAD", errors=[...])`` when *payload*
    does not match *schema* (rule 6), or ``INVALID_SCHEMA`` when the schema is broken.
    """
    errors = payload_errors(schema, payload, interrupt_id=interrupt_id)
    if errors:
        subject = f"The answer to interrupt {interrupt_id}" if interrupt_id else "The answer"
        raise ContractViolation(
            "INVALID_PAYLOAD",
            f"{subject} does not match its responseSchema: {_summary(errors)}. "
            "Correct the payload and submit it again.",
            **_details(interrupt_id, errors=errors),
        )


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
                **_details(interrupt_id, errors=[{"path": "/" + EDITED_ARGS, "message": message}]),
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
