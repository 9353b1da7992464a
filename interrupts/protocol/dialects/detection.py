"""Which dialect a run used, read from its own events and interrupts: nothing for the operator to set.

An agent registered with the default dialect may still pause the LangGraph
way (ag-ui-langgraph served with its defaults: a CUSTOM ``on_interrupt`` per
interrupt, RUN_FINISHED without outcome). ``Detected`` reads such a run as
``LegacyLangGraph`` does, and the hub remembers on the agent how it paused
(``pause_kind``), so its resumes are shaped for it. When a run sends both an
interrupt outcome and ``on_interrupt`` (ag-ui-langgraph with
``emit_interrupt_outcome=True``, CrewAI), the 1.0 outcome wins.
"""

from __future__ import annotations

from . import tanstack
from .agui import AGUI, LANGGRAPH_LEGACY, ON_INTERRUPT, Dialect
from .langgraph_legacy import METADATA_KEY, LegacyLangGraph

#: How an agent's runs pause, by what its interrupts show (``pause_kind``); AGUI and
#: LANGGRAPH_LEGACY are also dialects, the others are recognised from the interrupt alone.
TANSTACK = "tanstack"
ADK = "adk"
CREWAI = "crewai"
#: CrewAI's ``@human_feedback`` interrupt reason (ag-ui-crewai 1.0.0).
CREWAI_REASON = "crewai:human_feedback"
#: The name of the wrapper call Google ADK asks a confirmation through.
ADK_CONFIRMATION = "adk_request_confirmation"

LEGACY = LegacyLangGraph()


def detect(terminal: dict | None, customs: list[dict]) -> str:
    """The dialect a run's end shows: LANGGRAPH_LEGACY for on_interrupt without any outcome, else AGUI."""
    terminal = terminal or {}
    if terminal.get("type") == "RUN_FINISHED" and terminal.get("outcome") is None and any(
            event.get("name") == ON_INTERRUPT for event in customs):
        return LANGGRAPH_LEGACY
    return AGUI


class Detected(Dialect):
    """The default: the AG-UI contract, and LangGraph's on_interrupt read as LegacyLangGraph reads it."""

    def terminal(self, terminal: dict, customs: list[dict], run_id: str) -> dict:
        if detect(terminal, customs) == LANGGRAPH_LEGACY:
            return LEGACY.terminal(terminal, customs, run_id)
        return terminal

    def notice(self, terminal, customs) -> str:
        return ""


def as_sent(raw: dict) -> dict | None:
    """The framework's own interrupt behind one read from on_interrupt, when its value was one (CrewAI's is).

    ``LegacyLangGraph`` keeps the value whole in ``metadata.langgraph.raw``;
    a value that carries ``metadata`` of its own is an AG-UI interrupt as its
    framework made it, whose marks say who raised it.
    """
    metadata = raw.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get(METADATA_KEY), dict):
        return None
    langgraph = metadata.get("langgraph")
    value = langgraph.get("raw") if isinstance(langgraph, dict) else None
    return value if isinstance(value, dict) and isinstance(value.get("metadata"), dict) else None


def _framework(raw: dict) -> str | None:
    metadata = raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {}
    if isinstance(metadata.get(tanstack.BINDING_KEY), dict):
        return TANSTACK
    if isinstance(metadata.get("adk"), dict):
        return ADK
    if raw.get("reason") == CREWAI_REASON or isinstance(metadata.get("crewai"), dict):
        return CREWAI
    return None


def pause_kind(interrupts: list[object]) -> str:
    """How a batch of interrupts (as raised, wire form) shows its agent pauses: the first one recognised, else AGUI.

    A framework's own marks come first, also on an interrupt read from
    on_interrupt (``as_sent``): CrewAI served with its defaults sends only
    that event, and is still CrewAI. LANGGRAPH_LEGACY is for the rest of
    what on_interrupt raised, whose resumes ``LegacyLangGraph`` shapes.
    """
    for raw in interrupts:
        if not isinstance(raw, dict):
            continue
        sent = as_sent(raw)
        kind = _framework(raw) or (_framework(sent) if sent is not None else None)
        if kind is not None:
            return kind
        if isinstance(raw.get("metadata"), dict) and isinstance(raw["metadata"].get(METADATA_KEY), dict):
            return LANGGRAPH_LEGACY
    return AGUI


#: How each pause kind reads on the Agents page.
PAUSE_WORDS = {
    AGUI: "Ends its runs with an AG-UI interrupt",
    LANGGRAPH_LEGACY: "Pauses with LangGraph's on_interrupt event",
    TANSTACK: "TanStack AI interrupts",
    ADK: "Google ADK confirmations",
    CREWAI: "CrewAI human feedback",
}


def pause_words(kind: str, registered: str) -> str:
    """How an agent pauses, in words, from its last pause (``kind``, "" for none) and its registered dialect."""
    if not kind:
        if registered == LANGGRAPH_LEGACY:
            return PAUSE_WORDS[LANGGRAPH_LEGACY] + " (as registered); it has not paused yet"
        return "It has not paused yet"
    words = PAUSE_WORDS.get(kind, PAUSE_WORDS[AGUI])
    if kind == LANGGRAPH_LEGACY:
        words += " (as registered)" if registered == LANGGRAPH_LEGACY else " (detected)"
    return words
