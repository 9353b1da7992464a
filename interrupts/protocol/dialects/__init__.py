"""How each framework raises and takes interrupts, where it departs from the AG-UI contract.

Why it is shaped so: docs/internals/protocol.md (protocol/dialects/__init__.py).
"""

from __future__ import annotations

from . import tanstack
from .actions import adk_call, proposed_action
from .agui import AGUI, LANGGRAPH_LEGACY, ON_INTERRUPT, Dialect, steering, without_steering
from .detection import Detected, detect, pause_kind, pause_words
from .langgraph_legacy import LegacyLangGraph

__all__ = ["AGUI", "DIALECTS", "LANGGRAPH_LEGACY", "ON_INTERRUPT", "RESERVED_METADATA_KEYS", "Detected", "Dialect",
           "LegacyLangGraph", "adk_call", "detect", "entry_metadata", "for_agent", "pause_kind", "pause_words",
           "proposed_action", "steering", "without_steering"]


#: Metadata keys of a resume entry that an adapter writes (``entry_metadata``): a
#: reviewer's or client's own would be sent signed as Countersign's, and
#: TanStack rebuilds its pending batch from the continuation alone.
RESERVED_METADATA_KEYS = frozenset({tanstack.CONTINUATION_KEY})


def entry_metadata(raw_interrupt: dict, status: str, payload: object) -> dict:
    """Metadata a framework needs on the resume entry that answers ``raw_interrupt`` ({} for plain AG-UI)."""
    return tanstack.entry_metadata(raw_interrupt, status, payload)


#: Every dialect by its registered name.
DIALECTS: dict[str, Dialect] = {AGUI: Detected(), LANGGRAPH_LEGACY: LegacyLangGraph()}


def for_agent(name: str, paused_as: str = "") -> Dialect:
    """The dialect of an agent registered under ``name`` whose last pause was ``paused_as`` (``pause_kind``).

    A registered dialect other than the default is an override; otherwise an
    agent last seen pausing LangGraph's way is answered that way (its resumes
    are shaped by ``LegacyLangGraph``, which reads an outcome as it says).
    An unknown name (an old row) is the default.
    """
    if name and name != AGUI and name in DIALECTS:
        return DIALECTS[name]
    return DIALECTS[LANGGRAPH_LEGACY] if paused_as == LANGGRAPH_LEGACY else DIALECTS[AGUI]
