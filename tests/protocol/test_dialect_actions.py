"""The card shows the real action: what a framework's wrapping or describing interrupt asks to do.

On streams captured from the real adapters (tests/protocol/fixtures/frameworks/README.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from interrupts.protocol import dialects

FIXTURES = Path(__file__).parent / "fixtures" / "frameworks"


def interrupts_of(name: str) -> list[dict]:
    events = [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()]
    return events[-1]["outcome"]["interrupts"]


def test_adk_s_confirmation_asks_about_the_original_call_not_its_wrapper():
    [raw] = interrupts_of("adk_confirmation.jsonl")
    assert raw["reason"] == "confirmation" and raw["toolCallId"].startswith("adk-")
    assert dialects.proposed_action(raw) == ("issue_refund", {"order": "A-1001", "amount": 42})
    # The wrapper's own call is in the stream under the interrupt's toolCallId; the original's id is ADK's.
    events = [json.loads(line) for line in (FIXTURES / "adk_confirmation.jsonl").read_text().splitlines()]
    names = {e["toolCallId"]: e["toolCallName"] for e in events if e["type"] == "TOOL_CALL_START"}
    assert names[raw["toolCallId"]] == "adk_request_confirmation"
    assert names[dialects.adk_call(raw)["id"]] == "issue_refund"


def test_crewai_s_feedback_on_a_proposed_call_shows_the_call():
    [raw] = interrupts_of("crewai_feedback_tool.jsonl")
    assert "toolCallId" not in raw and raw["reason"] == "crewai:human_feedback"
    assert dialects.proposed_action(raw) == ("issue_refund", {"order": "A-1001", "amount": 42})


def test_crewai_s_feedback_on_a_draft_shows_the_draft_as_the_thing_to_approve():
    [raw] = interrupts_of("crewai_feedback_draft.jsonl")
    assert dialects.proposed_action(raw) == (
        None, "Dear customer, your refund of 42 EUR on order A-1001 is on its way.")


@pytest.mark.parametrize("raw", [
    {"id": "i1", "reason": "tool_call", "toolCallId": "c1"},  # plain AG-UI: the stream's call is the call
    {"id": "i1", "reason": "confirmation", "metadata": {"adk": {"originalFunctionCall": {"name": 7}}}},
    {"id": "i1", "reason": "confirmation", "metadata": {"adk": {"originalFunctionCall": {"name": "x" * 500}}}},
    {"id": "i1", "reason": "confirmation", "metadata": {"adk": {"originalFunctionCall": {"name": "t", "args": "a"}}}},
    {"id": "i1", "reason": "crewai:human_feedback", "metadata": {"crewai": {"output": None}}},
    {"id": "i1", "reason": "crewai:human_feedback", "metadata": "not a dict"},
    "not an interrupt",
])
def test_an_interrupt_that_wraps_nothing_readable_names_no_action(raw):
    assert dialects.proposed_action(raw) is None


def test_a_crewai_output_naming_a_tool_without_args_is_shown_whole():
    raw = {"id": "t", "reason": "crewai:human_feedback", "metadata": {"crewai": {"output": {"tool": "x"}}}}
    assert dialects.proposed_action(raw) == (None, {"tool": "x"})
