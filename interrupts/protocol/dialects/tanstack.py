"""TanStack AI's generic interrupts: the continuation its ``chat()`` needs on every resume entry.

Why it is shaped so: docs/internals/protocol.md (protocol/dialects/tanstack.py).
"""

from __future__ import annotations

import json
from datetime import datetime

BINDING_KEY = "tanstack:interruptBinding"
PAYLOAD_KEY = "tanstack:interruptPayload"
CONTINUATION_KEY = "tanstack:interruptContinuation"
#: ``INTERRUPT_BINDING_VERSION`` and ``INTERRUPT_CONTINUATION_VERSION``, both 1 in 0.58.0.
VERSION = 1

#: Longest id, key or hash taken from a binding. TanStack's are short (a
#: definition id, an application key, ``sha256:`` + 64 hex digits); anything
#: longer is not TanStack's and is not echoed back.
MAX_BINDING_CHARS = 1_000
#: Largest display payload echoed back, as JSON (UTF-8 bytes). TanStack sends
#: it for the client to show; the same size as a schema Countersign takes.
MAX_PAYLOAD_BYTES = 64 * 1024
#: ``Number.MAX_SAFE_INTEGER``: a larger batch index does not survive JavaScript.
MAX_BATCH_INDEX = 2**53 - 1


def entry_metadata(raw_interrupt: dict, status: str, payload: object) -> dict:
    """``{"tanstack:interruptContinuation": ...}`` for an interrupt TanStack bound, else {}.

    ``status`` and ``payload`` (the answer) do not change it: TanStack needs
    the request back, whatever the answer.
    """
    continuation = _continuation(raw_interrupt)
    return {CONTINUATION_KEY: continuation} if continuation is not None else {}


def _text(value: object) -> str | None:
    """A string TanStack's ``stringField`` reads, within bounds; None for anything else."""
    return value if isinstance(value, str) and len(value) <= MAX_BINDING_CHARS else None


def _is_number(value: object) -> bool:
    # bool is an int to Python, never a number to JavaScript.
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _parses_as_date(value: str) -> bool:
    # TanStack drops a binding whose expiresAt Date.parse cannot read. Python
    # reads ISO 8601 only, a subset: a date in any other form is refused here
    # (no continuation) where TanStack might have taken it.
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    except ValueError:
        return False
    return True


def _generic_binding(interrupt: dict) -> dict | None:
    """The first-party generic binding of ``interrupt`` as TanStack reads it, or None."""
    metadata = interrupt.get("metadata")
    interrupt_id = interrupt.get("id")
    if not isinstance(metadata, dict) or not interrupt_id or _text(interrupt_id) is None:
        return None
    raw = metadata.get(BINDING_KEY)
    if not isinstance(raw, dict) or raw.get("interruptId") != interrupt_id:
        return None
    # No ``v`` is read as the current version; any other version is someone else's.
    if "v" in raw and not (_is_number(raw["v"]) and raw["v"] == VERSION):
        return None
    if raw.get("kind") != "generic":
        return None
    fields = {}
    for name in ("definitionId", "key", "responseSchemaHash", "payloadSchemaHash", "expiresAt"):
        value = raw.get(name)
        if isinstance(value, str) and _text(value) is None:
            return None  # too long to be TanStack's
        # A field of another type is absent to TanStack (stringField).
        fields[name] = value if isinstance(value, str) else None
    if fields["responseSchemaHash"] == "":
        return None
    if fields["expiresAt"] is not None and not _parses_as_date(fields["expiresAt"]):
        return None
    batch_index = raw.get("batchIndex")
    if not fields["definitionId"] or not fields["key"]:
        return None
    # Number.isInteger: 2.0 is one, 2.5, NaN and Infinity are not.
    if isinstance(batch_index, float) and batch_index.is_integer():
        batch_index = int(batch_index)
    if not _is_number(batch_index) or isinstance(batch_index, float) or not 0 <= batch_index <= MAX_BATCH_INDEX:
        return None
    return {**fields, "batchIndex": batch_index}


def _continuation(interrupt: object) -> dict | None:
    if not isinstance(interrupt, dict):
        return None
    binding = _generic_binding(interrupt)
    if binding is None:
        return None
    reason, message = interrupt.get("reason"), interrupt.get("message")
    if message is None:
        message = ""
    # TanStack's server refuses a continuation whose reason or message is not
    # a string (and with it the whole resume): no continuation is as clear.
    if not isinstance(reason, str) or not isinstance(message, str):
        return None
    continuation: dict = {"v": VERSION, "definitionId": binding["definitionId"], "key": binding["key"],
                          "batchIndex": binding["batchIndex"], "reason": reason, "message": message}
    # The interrupt's own expiresAt, not the binding's; only a string, which is all TanStack takes.
    if isinstance(interrupt.get("expiresAt"), str):
        continuation["expiresAt"] = interrupt["expiresAt"]
    for name in ("responseSchemaHash", "payloadSchemaHash"):
        if binding[name]:
            continuation[name] = binding[name]
    metadata = interrupt["metadata"]
    if PAYLOAD_KEY in metadata:
        try:
            text = json.dumps(metadata[PAYLOAD_KEY], ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            return None  # not JSON TanStack could read back
        if len(text.encode()) > MAX_PAYLOAD_BYTES:
            return None
        # A copy: the entry is the resume's, the stored interrupt stays as the agent sent it.
        continuation["payload"] = json.loads(text)
    return continuation
