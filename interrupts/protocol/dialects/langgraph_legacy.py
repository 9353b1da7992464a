"""ag-ui-langgraph's default form: a CUSTOM ``on_interrupt`` event per interrupt, no outcome.

Why it is shaped so: docs/internals/protocol.md (protocol/dialects/langgraph_legacy.py).
"""

from __future__ import annotations

import hashlib
import re

from .. import storable, wire
from ..errors import MalformedMessage
from .agui import LANGGRAPH_LEGACY, ON_INTERRUPT, Dialect, without_steering

#: The reason ag-ui-langgraph gives an interrupt whose value names none.
DEFAULT_REASON = "langgraph:interrupt"
#: What a single cancelled entry becomes in ag-ui-langgraph (``DEFAULT_RESUME_SENTINEL_CANCELLED``):
#: several cancelled answers are given the same, so a graph reads a cancellation one way.
CANCELLED = "__agui_cancelled__"
#: Metadata of every interrupt this dialect raised: {"position", "langgraphId"[, "unread", "ignored"]}.
METADATA_KEY = "countersign:langgraphLegacy"
#: The code of a run that paused on several interrupts none of which can be addressed.
IDS_MISSING = "LANGGRAPH_IDS_MISSING"

# Values past this many on_interrupt events are not read: conf.MAX_INTERRUPTS
# (100) is what a run may raise, and more are refused (TOO_MANY_INTERRUPTS)
# before any is recorded, so reading them would only cost the event loop.
MAX_READ = 100
# Each event was held to COUNTERSIGN_MAX_EVENT_BYTES already; the value inside is no larger.
MAX_VALUE_BYTES = wire.DEFAULT_MAX_BYTES

# LangGraph's interrupt ids (xxh3-128, ``langgraph.pregel._utils.is_xxh3_128_hexdigest``):
# only a map whose every key is one resumes by id.
_LANGGRAPH_ID = re.compile(r"[0-9a-f]{32}")


def interrupt_id(run_id: str, position: int) -> str:
    """The id of the interrupt the run's ``position``-th on_interrupt raised: the same every time it is read.

    Crash recovery reads the recorded events again and must raise the same ids;
    the prefix keeps it from ever passing for one of LangGraph's own.
    """
    return "lg-" + hashlib.sha256(f"{run_id}\n{position}".encode()).hexdigest()[:32]


class LegacyLangGraph(Dialect):
    name = LANGGRAPH_LEGACY
    label = "LangGraph on_interrupt (ag-ui-langgraph's default)"
    reshapes_resume = True

    def notice(self, terminal, customs) -> str:
        return ""

    def terminal(self, terminal: dict, customs: list[dict], run_id: str) -> dict:
        if terminal.get("type") != "RUN_FINISHED" or terminal.get("outcome") is not None:
            # An agent that sends an outcome after all (emit_interrupt_outcome=True)
            # is read as it says: its interrupts carry LangGraph's own ids.
            return terminal
        asked = [event for event in customs if event.get("name") == ON_INTERRUPT]
        if not asked:
            return terminal
        interrupts = [_interrupt(event, run_id, position) if position < MAX_READ
                      else {"id": interrupt_id(run_id, position), "reason": DEFAULT_REASON}
                      for position, event in enumerate(asked)]
        langgraph_ids = [item["metadata"][METADATA_KEY]["langgraphId"] for item in interrupts[:MAX_READ]]
        if 1 < len(interrupts) <= MAX_READ and (None in langgraph_ids or len(set(langgraph_ids)) < len(interrupts)):
            # Nobody should answer what cannot be sent back: fail the run now, saying
            # why. An id given twice is as bad as none: the answers' map keeps one.
            return {"type": "RUN_ERROR", "code": IDS_MISSING, "message": (
                f"The agent paused on {len(interrupts)} interrupts with LangGraph's on_interrupt event, without "
                "a distinct LangGraph interrupt id for each (ag-ui-langgraph sends them in each event's rawEvent, "
                "with emit_raw_events on): it resumes several interrupts only by those ids. Serve it with "
                "emit_interrupt_outcome=True (and register it as 'agui'), or with emit_raw_events=True.")}
        return {**terminal, "outcome": {"type": "interrupt", "interrupts": interrupts}}

    def resume_input(self, run_input: dict, interrupts: list[dict]) -> dict:
        raised = {raw.get("id"): raw["metadata"][METADATA_KEY] for raw in interrupts
                  if isinstance(raw, dict) and isinstance((raw.get("metadata") or {}).get(METADATA_KEY), dict)}
        # The resume's command is Countersign's: a client's own (the gateway keeps
        # its forwardedProps) could answer the graph with what nobody decided,
        # and ``outgoing`` sends a command.resume that stands beside resume[].
        forwarded = {k: v for k, v in (without_steering(run_input).get("forwardedProps") or {}).items()
                     if k != "command"}
        shaped = {**run_input, "forwardedProps": forwarded}
        if not raised:
            return shaped  # raised as an outcome: the AG-UI resume[] is what the agent takes
        entries = run_input.get("resume") or []
        ids = [raised.get(entry.get("interruptId"), {}).get("langgraphId") for entry in entries]
        if len(entries) > 1 and all(ids):
            shaped["forwardedProps"] = {**forwarded, "command": {"resume": {
                langgraph_id: (entry.get("payload") if entry.get("status") == "resolved"
                               else {CANCELLED: True, "interrupt_id": langgraph_id})
                for langgraph_id, entry in zip(ids, entries, strict=False)}}}
        return shaped

    def outgoing(self, run_input: dict) -> dict:
        forwarded = run_input.get("forwardedProps")
        command = forwarded.get("command") if isinstance(forwarded, dict) else None
        if run_input.get("resume") and isinstance(command, dict) and "resume" in command:
            # Several answers by LangGraph's ids, Countersign's own (``resume_input``
            # drops a client's command): prepare_stream reads forwardedProps.command.resume
            # only when resume[] is absent.
            return {k: v for k, v in run_input.items() if k != "resume"}
        # Anything else carrying a resume of its own, or a node to skip to, would
        # act on what nobody decided: never sent.
        return without_steering(run_input)


def _interrupt(event: dict, run_id: str, position: int) -> dict:
    """One on_interrupt event as an AG-UI interrupt, read as ``lg_interrupt_to_agui`` reads LangGraph's."""
    raw_event = event.get("rawEvent")
    langgraph = raw_event if isinstance(raw_event, dict) and "value" in raw_event else None
    unread = None
    if langgraph is not None:
        value = langgraph["value"]  # LangGraph's Interrupt itself: the value as the node gave it
    else:
        value, unread = _value(event.get("value"))
    found = value if isinstance(value, dict) else {}
    ignored = []

    def field(*names: str, kind: type):
        given = next((found[name] for name in names if found.get(name) is not None), None)
        if given is not None and not isinstance(given, kind):
            ignored.append(names[0])  # ag-ui-langgraph itself would fail on it; the value keeps it
            return None
        return given

    item = {"id": interrupt_id(run_id, position), "reason": field("reason", kind=str) or DEFAULT_REASON}
    if found.get("reason") == "":
        item["reason"] = ""  # an explicit "" is kept, as ag-ui-langgraph keeps it
    message = value if isinstance(value, str) else field("message", kind=str)
    for key, given in (("message", message),
                       ("toolCallId", field("toolCallId", "tool_call_id", kind=str)),
                       ("responseSchema", field("responseSchema", "response_schema", kind=dict)),
                       ("expiresAt", field("expiresAt", "expires_at", kind=str))):
        if given is not None:
            item[key] = given
    if isinstance(event.get("subagentRunId"), str):
        item["subagentRunId"] = event["subagentRunId"]
    langgraph_id = langgraph.get("id") if langgraph is not None else None
    mine = {"position": position,
            "langgraphId": langgraph_id if isinstance(langgraph_id, str) and _LANGGRAPH_ID.fullmatch(langgraph_id)
            else None}
    if unread:
        mine["unread"] = unread
    if ignored:
        mine["ignored"] = ignored
    item["metadata"] = {"langgraph": {"raw": value, "ns": None, "resumable": None, "when": None},
                        METADATA_KEY: mine}
    return item


def _value(sent: object) -> tuple[object, str | None]:
    """The interrupt's value from the event's ``value`` (JSON text, or a string value as it was), and why not, if not.

    A string that is not JSON is the value itself (ag-ui-langgraph sends a
    string value verbatim). JSON that decodes to what Countersign cannot
    hold (a NUL, a lone surrogate, nesting past ``wire.MAX_DEPTH``) is kept
    as the text it came in, which the stream's own checks passed.
    """
    if not isinstance(sent, str):
        return sent, None
    try:
        value = wire._decode(sent, MAX_VALUE_BYTES, "The on_interrupt value")
    except MalformedMessage as problem:
        if "line" in problem.details:  # no JSON at all (only a syntax error has a line): a string value
            return sent, None
        return sent, problem.message
    refused = storable.problem(value, "The on_interrupt value")
    if refused is not None:
        return sent, refused.message
    return value, None
