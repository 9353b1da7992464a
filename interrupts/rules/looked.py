"""What a reviewer had in view when deciding: the card's parts they opened, how long it was open, what it showed.

The inbox's script reports it with the decision (``looked`` on the form);
the decision keeps it and its trail entry covers it. It says what the page
reported, not what eyes read: a script can be bypassed by whoever controls
the browser (SECURITY.md).
"""

from __future__ import annotations

import hashlib
import json

from ..models import Interrupt
from ..protocol.signing import Unsignable, canonical

#: The parts of a card beyond its summary, as the card names them (data-looked-part), and in words.
PARTS = {"args": "the full args", "metadata": "the metadata", "edit": "the edit form", "diff": "the edited args"}
#: The longest a card counts as open, in seconds (a tab left open overnight is not a day of reading).
MAX_OPEN_SECONDS = 86_400
#: The most a form's ``looked`` field may hold, in characters.
MAX_LOOKED_CHARS = 1_000
#: Args longer than this (as compact JSON) are "long": a policy that requires it wants them opened first.
LONG_ARGS_CHARS = 400
#: The actions that approve what the card proposes.
APPROVING = ("approve", "edit", "grant", "respond")


def must_open(rule, interrupt: Interrupt) -> bool:
    """Whether ``rule`` wants the full args of ``interrupt`` opened before it is approved from a card."""
    if not rule.require_look or interrupt.proposed_args is None:
        return False
    return len(json.dumps(interrupt.proposed_args, separators=(",", ":"), default=str)) > LONG_ARGS_CHARS


def unopened(rule, interrupt: Interrupt, action: str, reported: dict | None) -> bool:
    """Whether approving ``interrupt`` now would skip the full args its policy wants opened first."""
    return (action in APPROVING and must_open(rule, interrupt)
            and not (reported and "args" in reported["opened"]))


def shown_digest(interrupt: Interrupt) -> str:
    """``sha256:`` over what a card shows of ``interrupt``: its message, tool, args, metadata and answer schema."""
    shown = {"message": interrupt.message, "toolName": interrupt.tool_name, "args": interrupt.proposed_args,
             "metadata": interrupt.metadata, "responseSchema": interrupt.response_schema}
    try:
        body = canonical(shown)
    except Unsignable:  # stored agent JSON that RFC 8785 cannot spell (huge integers): hash it as stored
        body = json.dumps(shown, sort_keys=True, default=str).encode()
    return "sha256:" + hashlib.sha256(body).hexdigest()


def parse(text: str, interrupt: Interrupt) -> dict:
    """The ``looked`` a form sent for ``interrupt``, checked: ValueError, with what is wrong, otherwise."""
    if len(text) > MAX_LOOKED_CHARS:
        raise ValueError(f"it holds at most {MAX_LOOKED_CHARS} characters")
    try:
        found = json.loads(text)
    except ValueError:
        raise ValueError("it is not JSON") from None
    if not isinstance(found, dict) or set(found) != {"opened", "seconds", "shown"}:
        raise ValueError("it must hold exactly opened, seconds and shown")
    opened, seconds, shown = found["opened"], found["seconds"], found["shown"]
    if not (isinstance(opened, list) and all(part in PARTS for part in opened) and len(set(opened)) == len(opened)):
        raise ValueError(f"opened lists parts of the card: {', '.join(PARTS)}")
    if type(seconds) not in (int, float) or not 0 <= seconds <= MAX_OPEN_SECONDS:
        raise ValueError(f"seconds is a number from 0 to {MAX_OPEN_SECONDS}")
    if shown != shown_digest(interrupt):
        raise ValueError("the card it describes is not this request as it stands: reload the page")
    return {"opened": sorted(opened), "seconds": round(float(seconds), 1), "shown": shown}
