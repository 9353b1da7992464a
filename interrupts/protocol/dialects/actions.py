"""What an interrupt asks to do, where its framework wraps or describes the call: the call itself.

Why it is shaped so: docs/internals/protocol.md (protocol/dialects/actions.py).
"""

from __future__ import annotations

from .detection import CREWAI_REASON, as_sent

#: Longest tool name taken from an interrupt's metadata (a tool name is short; the column is cut anyway).
MAX_TOOL_NAME = 200


def _name(value: object) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= MAX_TOOL_NAME else None


def adk_call(raw: dict) -> dict | None:
    """ADK's original call ``{id, name, args}`` behind a confirmation interrupt, or None."""
    metadata = raw.get("metadata")
    adk = metadata.get("adk") if isinstance(metadata, dict) else None
    call = adk.get("originalFunctionCall") if isinstance(adk, dict) else None
    if not isinstance(call, dict) or _name(call.get("name")) is None or not isinstance(call.get("args", {}), dict):
        return None
    return {"id": call.get("id") if isinstance(call.get("id"), str) else None, "name": call["name"],
            "args": call.get("args", {})}


def _crewai_proposal(raw: dict) -> tuple[str | None, object] | None:
    metadata = raw.get("metadata")
    crewai = metadata.get("crewai") if isinstance(metadata, dict) else None
    if not isinstance(crewai, dict) or (raw.get("reason") != CREWAI_REASON and "output" not in crewai):
        return None
    output = crewai.get("output")
    if output is None:
        return None
    if isinstance(output, dict):
        tool = _name(output.get("tool") or output.get("toolName") or output.get("tool_name"))
        args = next((output[key] for key in ("args", "arguments") if isinstance(output.get(key), dict)), None)
        if tool is not None and args is not None:
            return tool, args
    return None, output  # a draft, a plan: the thing itself is what the reviewer approves


def proposed_action(raw: object) -> tuple[str | None, object] | None:
    """(tool name or None, args or proposal) of an interrupt whose framework wraps or describes the call, else None."""
    if not isinstance(raw, dict):
        return None
    for seen in (raw, as_sent(raw)):  # as raised, then as its framework sent it through on_interrupt
        if seen is None:
            continue
        if (call := adk_call(seen)) is not None:
            return call["name"], call["args"]
        if (proposal := _crewai_proposal(seen)) is not None:
            return proposal
    return None
