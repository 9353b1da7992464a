"""``protocolVersion`` as AG-UI 1.0 negotiates it (C64-C68): what Countersign declares, and how it reads a peer's.

Countersign speaks ``ag_ui.core.version.PROTOCOL_VERSION`` (the pinned
package's, never written by hand) and declares it on every RunAgentInput it
sends, toward every agent (C64). It never omits it, even toward an agent whose
RUN_STARTED declared nothing: the 0.x models (``ag-ui-protocol`` 0.1.22, which
Microsoft Agent Framework pins) allow extra fields and take the input as
before, so declaring costs an older peer nothing, and C68 says a peer whose
version is unknown is treated as current.
"""

from __future__ import annotations

import re

from ag_ui.core.version import PROTOCOL_VERSION

__all__ = ["PROTOCOL_VERSION", "compare", "declare", "notice", "parse"]

# MAJOR.MINOR, each a decimal number (C65); nothing else is a published identifier.
_VERSION = re.compile(r"(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})")
# An agent's declaration is shown in a notice: at most this much of it.
_SHOWN = 40


def parse(version: object) -> tuple[int, int] | None:
    """``"1.10"`` as ``(1, 10)``; None when it is no ``MAJOR.MINOR`` identifier."""
    if not isinstance(version, str) or (found := _VERSION.fullmatch(version)) is None:
        return None
    return int(found[1]), int(found[2])


def compare(version: object, ours: str = PROTOCOL_VERSION) -> int | None:
    """-1, 0 or 1 as ``version`` is older, equal or newer than ``ours`` (1.10 > 1.9); None if unreadable."""
    theirs, mine = parse(version), parse(ours)
    if theirs is None or mine is None:
        return None
    return (theirs > mine) - (theirs < mine)


def declare(run_input: dict) -> dict:
    """``run_input`` as sent: with Countersign's ``protocolVersion``, whatever a stored or forwarded one said (C64)."""
    return {**run_input, "protocolVersion": PROTOCOL_VERSION}


def notice(declared: object) -> str:
    """What a run's notice says about the version its agent declared on RUN_STARTED; empty when nothing to say.

    Missing: a peer from before versioning (C65), read as it always was, no
    warning. Older: served as it is. Newer or unreadable: the run is read
    under 1.0's processing model and the reviewer is warned (C66, C67).
    """
    if declared is None:
        return ""
    order = compare(declared)
    shown = repr(declared[:_SHOWN]) if isinstance(declared, str) else f"a {type(declared).__name__}"
    if order is None:
        return (f"The agent declared AG-UI protocol version {shown}, which Countersign cannot read; "
                f"its run was read as AG-UI {PROTOCOL_VERSION}, so anything newer in it may have been left out.")
    if order > 0:
        return (f"The agent speaks AG-UI {declared}, newer than Countersign's {PROTOCOL_VERSION}; "
                "its run was read as AG-UI "
                f"{PROTOCOL_VERSION}, so anything newer in it may have been left out.")
    return ""
