"""AG-UI 1.0's rules on frontend tool calls (C21-C23) and protocolVersion (C64-C67), the pure parts.

Each test is named after the checklist rule it checks
(/work/shared/reference/ag-ui/spec-1.0-checklist.md).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from ag_ui.core import RunAgentInput
from ag_ui.core.version import PROTOCOL_VERSION

from interrupts.protocol import versioning
from interrupts.protocol.contract import ThreadGate, check_input
from interrupts.protocol.errors import ContractViolation
from interrupts.protocol.lifecycle import RunLifecycle
from interrupts.protocol.wire import parse_event

THREAD, RUN = "thread-1", "run-1"
NOW = datetime(2026, 4, 20, 12, 0, tzinfo=UTC)


def stream(*events: dict, outcome: dict | None = None, version: str | None = None) -> RunLifecycle:
    lifecycle = RunLifecycle(THREAD, RUN)
    lifecycle.accept(parse_event({"type": "RUN_STARTED", "threadId": THREAD, "runId": RUN,
                                  **({"protocolVersion": version} if version is not None else {})}))
    for event in events:
        lifecycle.accept(parse_event(event))
    lifecycle.accept(parse_event({"type": "RUN_FINISHED", "threadId": THREAD, "runId": RUN,
                                  **({"outcome": outcome} if outcome is not None else {})}))
    return lifecycle


def call(tool_call_id: str, name: str, args: str = "{}") -> list[dict]:
    return [{"type": "TOOL_CALL_START", "toolCallId": tool_call_id, "toolCallName": name},
            {"type": "TOOL_CALL_ARGS", "toolCallId": tool_call_id, "delta": args},
            {"type": "TOOL_CALL_END", "toolCallId": tool_call_id}]


def result(tool_call_id: str) -> dict:
    return {"type": "TOOL_CALL_RESULT", "messageId": f"m-{tool_call_id}", "toolCallId": tool_call_id,
            "content": "done"}


def snapshot(*messages: dict) -> dict:
    return {"type": "MESSAGES_SNAPSHOT", "messages": list(messages)}


def assistant(*calls: tuple[str, str]) -> dict:
    return {"id": "a-1", "role": "assistant", "toolCalls": [
        {"id": i, "type": "function", "function": {"name": name, "arguments": "{}"}} for i, name in calls]}


# --- C21: pending calls derived from the stream ----------------------------------------------


def test_c21_a_call_without_result_is_pending_though_the_outcome_says_nothing():
    # LlamaIndex's AG-UI router: its frontend tool's call, no result, no pendingToolCallIds.
    lifecycle = stream(*call("tc-1", "change_theme"), *call("tc-2", "lookup"), result("tc-2"))
    assert lifecycle.outcome_type == "success"
    assert lifecycle.pending_tool_calls() == [("tc-1", "change_theme")]


def test_c21_an_empty_pending_list_is_not_read_as_nothing_pending():
    lifecycle = stream(*call("tc-1", "pick_date"), outcome={"type": "success", "pendingToolCallIds": []})
    assert lifecycle.pending_tool_calls() == [("tc-1", "pick_date")]


def test_c21_declared_pending_calls_come_first_as_listed():
    lifecycle = stream(*call("tc-1", "a"), *call("tc-2", "b"),
                       outcome={"type": "success", "pendingToolCallIds": ["tc-2", "tc-1"]})
    assert lifecycle.pending_tool_calls() == [("tc-2", "b"), ("tc-1", "a")]


def test_c21_a_call_only_in_a_snapshot_counts_unless_a_tool_message_answers_it():
    lifecycle = stream(snapshot({"id": "u-1", "role": "user", "content": "hi"},
                                assistant(("tc-1", "confirm"), ("tc-2", "search")),
                                {"id": "t-2", "role": "tool", "toolCallId": "tc-2", "content": "found"}))
    assert lifecycle.pending_tool_calls() == [("tc-1", "confirm")]


def test_c21_calls_the_input_already_held_were_not_started_by_this_run():
    # A resumed run's snapshot repeats the earlier run's calls: not this run's to leave pending.
    lifecycle = stream(snapshot(assistant(("tc-old", "send_email"))))
    assert lifecycle.pending_tool_calls(earlier={"tc-old"}) == []


def test_c21_every_call_answered_leaves_nothing_pending():
    assert stream(*call("tc-1", "lookup"), result("tc-1")).pending_tool_calls() == []


# --- C22: on an interrupted run, the same way, less what the interrupts ask about -------------


def test_c22_an_interrupted_run_shows_its_frontend_calls_but_not_the_approved_one():
    # MAF: the call awaiting approval, and a synthetic confirm_changes call for its client.
    outcome = {"type": "interrupt", "interrupts": [{"id": "int-1", "reason": "tool_call", "toolCallId": "tc-1"}]}
    lifecycle = stream(*call("tc-1", "send_email"), *call("tc-2", "confirm_changes"), outcome=outcome)
    assert lifecycle.pending_tool_calls(asked={"tc-1"}) == [("tc-2", "confirm_changes")]


# --- C23: the next input answers every pending call ------------------------------------------


def _input(messages: list[dict], resume=None) -> RunAgentInput:
    return RunAgentInput.model_validate({"threadId": THREAD, "runId": "run-2", "state": {}, "messages": messages,
                                         "tools": [], "context": [], "forwardedProps": {},
                                         **({"resume": resume} if resume else {})})


GATE = ThreadGate(THREAD, pending_tool_calls=("tc-1", "tc-2"))
HISTORY = [assistant(("tc-1", "pick_date"), ("tc-2", "pick_time"))]


def test_c23_new_input_must_answer_each_pending_call():
    with pytest.raises(ContractViolation) as exc:
        check_input(GATE, _input([*HISTORY, {"id": "t-1", "role": "tool", "toolCallId": "tc-1", "content": "5 May"}]),
                    NOW)
    assert exc.value.code == "UNANSWERED_TOOL_CALLS" and exc.value.details["tool_call_ids"] == ["tc-2"]
    assert "new thread" in exc.value.message


def test_c23_a_tool_message_per_call_continues_the_thread_an_error_is_an_answer_too():
    answers = [{"id": "t-1", "role": "tool", "toolCallId": "tc-1", "content": "5 May"},
               {"id": "t-2", "role": "tool", "toolCallId": "tc-2", "content": "", "error": "the user declined"}]
    assert check_input(GATE, _input([*HISTORY, *answers]), NOW).kind == "new"


def test_c23_a_thread_with_nothing_pending_is_not_asked_for_answers():
    assert check_input(ThreadGate(THREAD), _input([]), NOW).kind == "new"


# --- C64-C67: protocolVersion ------------------------------------------------------------------


def test_c64_countersign_declares_the_pinned_package_version_on_what_it_sends():
    sent = versioning.declare({"threadId": THREAD, "runId": "r", "protocolVersion": "0.9"})
    assert sent["protocolVersion"] == PROTOCOL_VERSION == "1.0"


def test_c68_a_peer_of_unknown_version_gets_what_a_current_one_gets_unchanged_otherwise():
    run_input = {"threadId": THREAD, "runId": "r", "messages": [{"id": "m", "role": "user", "content": "hi"}],
                 "state": {"k": None}, "tools": [], "context": []}
    sent = versioning.declare(run_input)
    # No downgrade is chosen by a peer's version: one input for every agent, only the declaration added.
    assert sent == {**run_input, "protocolVersion": PROTOCOL_VERSION}
    assert list(sent)[:len(run_input)] == list(run_input)


def test_c65_versions_compare_numerically_component_by_component():
    assert versioning.compare("1.10", "1.9") == 1
    assert versioning.compare("1.9", "1.10") == -1
    assert versioning.compare("1.0", "1.0") == 0
    assert versioning.compare("2.0", "1.99") == 1
    for unreadable in ("1", "1.0.0", "v1.0", "01.0", "1.x", "", " 1.0", 1.0, None):
        assert versioning.compare(unreadable) is None


def test_c65_a_missing_declaration_is_a_peer_from_before_versioning_and_no_warning():
    assert stream().declared_version is None
    assert versioning.notice(None) == ""


def test_c67_a_newer_declaration_is_served_with_a_warning():
    lifecycle = stream(version="1.10")
    assert lifecycle.declared_version == "1.10" and lifecycle.outcome_type == "success"
    assert "1.10" in versioning.notice(lifecycle.declared_version) and "newer" in versioning.notice("1.10")
    assert versioning.notice("1.0") == "" and versioning.notice("0.9") == ""


def test_c66_an_unreadable_declaration_is_read_like_a_newer_one():
    words = versioning.notice("one point oh" * 20)
    assert "cannot read" in words and len(words) < 300


# --- C17: only what AG-UI defines is sent ----------------------------------------------------


def test_c17_unrecognised_material_is_removed_before_sending_and_named():
    from interrupts.protocol.wire import known_input

    sent, removed = known_input({
        "threadId": "t", "runId": "r", "messages": [], "copilotkit": {"x": 1}, "forwardedProps": {"mine": 1},
        "resume": [{"interruptId": "i", "status": "resolved", "payload": {"ok": True}, "metadata": {"k": 1},
                    "signature": "abc"}]})
    assert sent == {"threadId": "t", "runId": "r", "messages": [], "forwardedProps": {"mine": 1},
                    "resume": [{"interruptId": "i", "status": "resolved", "payload": {"ok": True},
                                "metadata": {"k": 1}}]}
    assert removed == ["copilotkit", "resume[0].signature"]


# --- C13: what a resume entry's fields mean ------------------------------------------------


def test_c13_status_says_answered_or_abandoned_and_a_cancellation_carries_no_answer():
    from ag_ui.core import Interrupt

    gate = ThreadGate(THREAD, "run-1", (Interrupt(id="int-1", reason="confirmation"),))

    def verdict(entry: dict):
        return check_input(gate, _input([], resume=[{"interruptId": "int-1", **entry}]), NOW)

    assert verdict({"status": "resolved", "payload": {"ok": True}}).kind == "resume"
    assert verdict({"status": "cancelled"}).kind == "resume"
    with pytest.raises(ContractViolation) as exc:
        verdict({"status": "cancelled", "payload": {"ok": True}})
    assert exc.value.code == "PAYLOAD_ON_CANCEL"
