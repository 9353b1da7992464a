"""Dialects detected, not configured: a run's own events say how its agent paused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from interrupts.protocol import dialects
from interrupts.protocol.dialects import detection
from interrupts.protocol.dialects.langgraph_legacy import METADATA_KEY, interrupt_id

FIXTURES = Path(__file__).parent / "fixtures" / "frameworks"
FINISHED = {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"}
VALUE = {"reason": "tool_call", "message": "Refund 42 EUR?", "toolCallId": "call_0"}
LG_ID = "8f10c6ab379009b2acb7dc9549cdb97a"
ON_INTERRUPT = {"type": "CUSTOM", "name": "on_interrupt", "value": json.dumps(VALUE),
                "rawEvent": {"value": VALUE, "id": LG_ID}}


def stream(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()]


def test_a_default_agent_that_pauses_the_langgraph_way_is_read_as_langgraph_reads_it():
    default = dialects.for_agent(dialects.AGUI)
    assert dialects.detect(FINISHED, [ON_INTERRUPT]) == dialects.LANGGRAPH_LEGACY
    read = default.terminal(FINISHED, [ON_INTERRUPT], "r1")
    [raised] = read["outcome"]["interrupts"]
    assert read["outcome"]["type"] == "interrupt" and raised["id"] == interrupt_id("r1", 0)
    assert (raised["reason"], raised["toolCallId"]) == ("tool_call", "call_0")
    assert raised["metadata"][METADATA_KEY]["langgraphId"] == LG_ID
    # Nothing for the operator to set: no warning about the registration.
    assert default.notice(FINISHED, [ON_INTERRUPT]) == ""
    # Remembered from the interrupts themselves, so the resume is shaped for LangGraph.
    assert dialects.pause_kind(read["outcome"]["interrupts"]) == dialects.LANGGRAPH_LEGACY
    assert dialects.for_agent(dialects.AGUI, dialects.LANGGRAPH_LEGACY).reshapes_resume


def test_the_1_0_outcome_wins_over_a_legacy_on_interrupt_beside_it():
    """ag-ui-langgraph with emit_interrupt_outcome, and CrewAI (captured), send both."""
    crewai = stream("crewai_feedback_tool.jsonl")
    terminal, customs = crewai[-1], [e for e in crewai if e["type"] == "CUSTOM"]
    assert customs and customs[0]["name"] == "on_interrupt" and terminal["outcome"]["type"] == "interrupt"
    assert dialects.detect(terminal, customs) == dialects.AGUI
    for dialect in (dialects.for_agent(dialects.AGUI), dialects.for_agent(dialects.AGUI, dialects.LANGGRAPH_LEGACY)):
        assert dialect.terminal(terminal, customs, "r1") is terminal
    assert dialects.pause_kind(terminal["outcome"]["interrupts"]) == detection.CREWAI


@pytest.mark.parametrize("terminal", [
    FINISHED,  # no on_interrupt: a plain success
    {**FINISHED, "outcome": {"type": "success"}},
    {"type": "RUN_ERROR", "message": "boom"},
])
def test_an_end_without_on_interrupt_or_with_an_outcome_is_read_as_it_says(terminal):
    customs = [ON_INTERRUPT] if terminal is not FINISHED else []
    assert dialects.detect(terminal, customs) == dialects.AGUI
    assert dialects.for_agent(dialects.AGUI).terminal(terminal, customs, "r1") is terminal


def test_the_registered_dialect_stays_an_override():
    legacy = dialects.for_agent(dialects.LANGGRAPH_LEGACY)
    assert dialects.for_agent(dialects.LANGGRAPH_LEGACY, detection.ADK) is legacy
    assert dialects.for_agent(dialects.AGUI, detection.ADK) is dialects.for_agent(dialects.AGUI)
    assert dialects.for_agent("gone-dialect") is dialects.for_agent(dialects.AGUI)


def test_how_each_framework_pauses_is_recognised_from_its_interrupts():
    adk = stream("adk_confirmation.jsonl")[-1]["outcome"]["interrupts"]
    assert dialects.pause_kind(adk) == detection.ADK
    tanstack = [{"id": "i1", "metadata": {"tanstack:interruptBinding": {"kind": "generic"}}}]
    assert dialects.pause_kind(tanstack) == detection.TANSTACK
    assert dialects.pause_kind([{"id": "i1", "reason": "tool_call", "toolCallId": "c1"}]) == dialects.AGUI
    assert dialects.pause_kind(["not an interrupt", {"id": "x", "metadata": "nope"}]) == dialects.AGUI


def test_how_it_pauses_reads_in_plain_words():
    assert dialects.pause_words(dialects.LANGGRAPH_LEGACY, dialects.AGUI) == \
        "Pauses with LangGraph's on_interrupt event (detected)"
    assert dialects.pause_words(dialects.LANGGRAPH_LEGACY, dialects.LANGGRAPH_LEGACY).endswith("(as registered)")
    assert dialects.pause_words(detection.ADK, dialects.AGUI) == "Google ADK confirmations"
    assert dialects.pause_words("", dialects.AGUI) == "It has not paused yet"


def test_crewai_served_with_its_defaults_is_detected_and_still_recognised_as_crewai():
    """ag-ui-crewai's default: only on_interrupt (the interrupt itself as its value), no outcome."""
    sent = stream("crewai_feedback_default.jsonl")
    terminal, customs = sent[-1], [e for e in sent if e["type"] == "CUSTOM"]
    assert "outcome" not in terminal and dialects.detect(terminal, customs) == dialects.LANGGRAPH_LEGACY
    read = dialects.for_agent(dialects.AGUI).terminal(terminal, customs, "r1")
    [raised] = read["outcome"]["interrupts"]
    assert (raised["reason"], raised["message"]) == ("crewai:human_feedback", "Issue this refund?")
    assert dialects.pause_kind([raised]) == detection.CREWAI
    assert dialects.proposed_action(raised) == ("issue_refund", {"order": "A-1001", "amount": 42})
