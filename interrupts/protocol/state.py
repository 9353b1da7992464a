"""Applying an agent's STATE_DELTA (RFC 6902 JSON Patch) to the thread's state, with bounded work.

Why it is shaped so: docs/internals/protocol.md (protocol/state.py).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import jsonpointer

from .errors import ProtocolError

__all__ = ["DeltaRefused", "apply_delta", "json_size"]


class DeltaRefused(ProtocolError):
    """A STATE_DELTA that cannot be applied: ``INVALID_DELTA`` or ``STATE_TOO_LARGE``."""


def json_size(value: Any, limit: int | None = None) -> int:
    """About how many bytes ``value`` takes as JSON; stops counting once past ``limit`` (iterative).

    Strings and numbers count their JSON text, containers their brackets and
    separators; the figure is close to ``len(json.dumps(value))`` and never
    walks further than ``limit`` bytes' worth of the value.
    """
    size, stack = 0, [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            size += 2 + len(node)  # braces, commas and colons
            for key, item in node.items():
                size += len(key) + 2
                stack.append(item)
        elif isinstance(node, list):
            size += 2 + len(node)
            stack.extend(node)
        elif isinstance(node, str):
            size += len(node) + 2
        else:
            size += len(json.dumps(node))
        if limit is not None and size > limit:
            return size
    return size


def apply_delta(state: Any, delta: Any, *, max_bytes: int) -> Any:
    """``state`` patched by ``delta``, as a new value; ``state`` itself is left alone.

    Raises ``DeltaRefused``: ``INVALID_DELTA`` when ``delta`` is not a list
    of operations or an operation fails (a missing path, a failed ``test``),
    ``STATE_TOO_LARGE`` when the operations would add more than the state
    may grow to (``max_bytes`` in all, the state's size included).
    """
    if not isinstance(delta, list) or not all(isinstance(op, dict) for op in delta):
        raise DeltaRefused("INVALID_DELTA", "A STATE_DELTA's delta must be a list of JSON Patch operations.")
    budget = max_bytes - json_size(state, max_bytes)
    document = copy.deepcopy(state)
    for index, operation in enumerate(delta):
        kind = operation.get("op")
        try:
            if kind == "copy":
                source = jsonpointer.resolve_pointer(document, operation.get("from"))
                budget -= json_size(source, max(budget, 0))
            elif kind in ("add", "replace"):
                budget -= json_size(operation.get("value"), max(budget, 0))
            if budget < 0:
                raise DeltaRefused(
                    "STATE_TOO_LARGE",
                    f"Operation {index} of a STATE_DELTA ({kind} at {operation.get('path')!r}) would make the "
                    f"thread's state larger than {max_bytes} bytes; the delta was not applied.",
                    operation=index,
                )
            document = jsonpatch.JsonPatch([operation]).apply(document, in_place=True)
        except DeltaRefused:
            raise
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError, KeyError,
                IndexError, ValueError) as problem:
            raise DeltaRefused(
                "INVALID_DELTA", f"Operation {index} of a STATE_DELTA does not apply to the thread's state: {problem}",
                operation=index,
            ) from None
    return document
