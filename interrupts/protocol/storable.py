"""Whether decoded JSON can be kept and sent on: the values every door must refuse.

JSON allows what Countersign cannot carry through: a NUL character, which
PostgreSQL refuses in text and jsonb columns (SQLite would keep it, so the
same input must be refused on both); a lone UTF-16 surrogate (``"\\ud800"``
without its pair), which decodes to a Python string no UTF-8 encoder takes, so
once stored it made every page, API answer and resume that showed it fail;
and nesting deeper than the AG-UI models serialise (a decision's payload
travels on inside the resume).
"""

from __future__ import annotations

import json
import re
from typing import Any

from .errors import MalformedMessage
from .wire import MAX_DEPTH


def problem(value: Any, subject: str) -> MalformedMessage | None:
    """Why ``value`` cannot be stored and sent on as it is, or None.

    ``subject`` names it in the message ("The request body"). Walks the value
    without recursion, so the check cannot overflow the stack it protects.
    """
    pending: list[tuple[Any, str, int]] = [(value, "", 1)]
    while pending:
        node, path, depth = pending.pop()
        if isinstance(node, str):
            if "\x00" in node:
                return _nul(subject, f"'{path}'" if path else "the top level")
            if _SURROGATE.search(node):
                return _surrogate(subject, f"'{path}'" if path else "the top level")
        elif isinstance(node, dict):
            if depth > MAX_DEPTH:
                return too_deep(subject)
            for key, item in node.items():
                where = f"{path}.{key}" if path else str(key)
                if "\x00" in key:
                    return _nul(subject, f"the key {where!r}")
                if _SURROGATE.search(key):
                    return _surrogate(subject, f"a key under {path or 'the top level'!r}")
                pending.append((item, where, depth + 1))
        elif isinstance(node, list):
            if depth > MAX_DEPTH:
                return too_deep(subject)
            pending.extend((item, f"{path}[{index}]", depth + 1) for index, item in enumerate(node))
    return None


# Any UTF-16 surrogate left in a decoded string is a lone one: json.loads joins
# the pairs that encode a character beyond the BMP into that character.
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def needs_check(text: str) -> bool:
    """Whether JSON text may decode to something ``problem`` refuses (NUL, a surrogate): both need an escape."""
    return "\\u0000" in text or "\\ud" in text or "\\uD" in text


def embedded(text: str) -> tuple[bool, Any]:
    """JSON an agent wrote inside a string (tool args, a tool result), decoded: (True, value), or (False, None).

    False when the text is not JSON, or when decoding it makes what
    ``problem`` refuses: text that passed every door as a string can still
    spell ``\\ud800`` inside, and decoded, that lone surrogate made the page
    showing it fail for good. Such text is shown and kept as sent.
    """
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False, None
    return (False, None) if problem(value, "") is not None else (True, value)


def too_deep(subject: str) -> MalformedMessage:
    """The refusal of a value nested more than ``MAX_DEPTH`` levels deep."""
    return MalformedMessage(
        "TOO_DEEP", f"{subject} nests objects and arrays more than {MAX_DEPTH} levels deep; flatten it.",
        limit=MAX_DEPTH,
    )


def _nul(subject: str, where: str) -> MalformedMessage:
    return MalformedMessage(
        "NUL_CHARACTER", f"{subject} has a NUL character (\\u0000) in {where}, which cannot be stored; remove it."
    )


def _surrogate(subject: str, where: str) -> MalformedMessage:
    return MalformedMessage(
        "LONE_SURROGATE", f"{subject} has a lone UTF-16 surrogate (a \\ud800-\\udfff escape without its pair) in "
                          f"{where}, which is no character and cannot be stored; remove it or send the whole pair."
    )
