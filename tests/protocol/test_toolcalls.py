"""Reassembling a run's tool calls (interrupts/protocol/toolcalls.py), fed directly.

tests/protocol/test_lifecycle.py covers the same behaviour through
``RunLifecycle``; these tests hold ``ToolCalls`` to it without a run around
it, so the lifecycle is not what makes them pass.
"""

from __future__ import annotations

import json

import pytest
from ag_ui.core import AssistantMessage, FunctionCall, ToolCall, UserMessage

from interrupts.protocol.errors import StreamFault
from interrupts.protocol.toolcalls import DEFAULT_MAX_TOOL_CALL_BYTES, ProposedArgs, ProposedCall, ToolCalls

ARGS = {"to": "a@b.com", "subject": "Hi", "body": "Hello from the mailer"}
ARGS_TEXT = json.dumps(ARGS)


def assistant_calling(tool_call_id: str, name: str, arguments: str) -> AssistantMessage:
    call = ToolCall(id=tool_call_id, type="function", function=FunctionCall(name=name, arguments=arguments))
    return AssistantMessage(id=f"m-{tool_call_id}", role="assistant", tool_calls=[call])


def streamed(tool_call_id: str = "tc-1", deltas=(ARGS_TEXT[:17], ARGS_TEXT[17:]), name: str = "sendEmail",
             **kwargs) -> ToolCalls:
    calls = ToolCalls(**kwargs)
    calls.start(tool_call_id, name, "TOOL_CALL_START")
    for delta in deltas:
        calls.append(tool_call_id, delta, "TOOL_CALL_ARGS")
    calls.end(tool_call_id, "TOOL_CALL_END")
    return calls


def test_deltas_are_joined_in_order_into_the_proposal():
    calls = streamed(deltas=[ARGS_TEXT[i:i + 3] for i in range(0, len(ARGS_TEXT), 3)])
    assert calls.calls == {"tc-1": ProposedCall("sendEmail", ARGS_TEXT, source="stream", ended=True)}
    assert calls.proposed_args("tc-1") == ProposedArgs("sendEmail", ARGS, [])
    # Read twice: joining once must not change what a second read sees.
    assert calls.calls["tc-1"].args_text == ARGS_TEXT


def test_args_for_a_call_that_is_not_open_are_refused_and_change_nothing():
    calls = streamed()
    for feed in (lambda: calls.append("tc-1", "x", "TOOL_CALL_ARGS"),
                 lambda: calls.append("tc-9", "x", "TOOL_CALL_ARGS"),
                 lambda: calls.end("tc-9", "TOOL_CALL_END"),
                 lambda: calls.start("tc-1", "sendEmail", "TOOL_CALL_START")):
        with pytest.raises(StreamFault) as err:
            feed()
        assert err.value.code == "TOOL_CALL_ORDER"
    assert calls.proposed_args("tc-1") == ProposedArgs("sendEmail", ARGS, [])


def test_a_snapshot_that_disagrees_with_the_stream_is_reported_and_the_stream_wins():
    calls = streamed()
    calls.learn_from_snapshot(
        [UserMessage(id="u", role="user", content="Email a@b.com"),
         assistant_calling("tc-1", "sendMail", json.dumps({**ARGS, "to": "eve@x.com"}))],
        "MESSAGES_SNAPSHOT",
    )
    name, args, problems = calls.proposed_args("tc-1")
    assert (name, args) == ("sendEmail", ARGS)
    assert len(problems) == 2
    assert "'sendMail'" in problems[0] and "'sendEmail'" in problems[0]
    assert "different arguments for tc-1" in problems[1]
    assert calls.calls["tc-1"].source == "stream"


def test_a_snapshot_that_only_reformats_the_args_is_no_problem_and_teaches_calls_the_stream_did_not_carry():
    calls = streamed()
    reformatted = json.dumps(ARGS, indent=2, sort_keys=True)
    calls.learn_from_snapshot(
        [assistant_calling("tc-1", "sendEmail", reformatted), assistant_calling("tc-0", "lookup", '{"q": 1}')],
        "MESSAGES_SNAPSHOT",
    )
    assert calls.proposed_args("tc-1").problems == []
    assert calls.calls["tc-0"] == ProposedCall("lookup", '{"q": 1}', source="snapshot", ended=True)


def test_chunked_calls_are_closed_by_the_next_chunked_call_and_by_close_chunked():
    calls = ToolCalls()
    calls.chunk("tc-1", "sendEmail", ARGS_TEXT[:10], "TOOL_CALL_CHUNK")
    calls.chunk(None, None, ARGS_TEXT[10:], "TOOL_CALL_CHUNK")  # no id: continues tc-1
    calls.chunk("tc-2", "archive", '{"id": 7}', "TOOL_CALL_CHUNK")
    assert calls.calls["tc-1"] == ProposedCall("sendEmail", ARGS_TEXT, source="stream", ended=True)
    assert calls.calls["tc-2"].ended is False
    # Chunked calls have no TOOL_CALL_END to miss, so an open one is not doubted.
    assert calls.proposed_args("tc-2") == ProposedArgs("archive", {"id": 7}, [])

    calls.close_chunked()
    assert calls.calls["tc-2"].ended is True
    with pytest.raises(StreamFault) as err:
        calls.chunk(None, None, "more", "TOOL_CALL_CHUNK")
    assert err.value.code == "TOOL_CALL_ORDER"
    with pytest.raises(StreamFault) as err:
        calls.chunk("tc-1", None, "more", "TOOL_CALL_CHUNK")
    assert err.value.code == "TOOL_CALL_ORDER" and "after that call was closed" in err.value.message


def test_the_budget_charges_ids_names_and_utf8_bytes_and_a_refusal_keeps_nothing():
    assert ToolCalls().max_bytes == DEFAULT_MAX_TOOL_CALL_BYTES
    calls = ToolCalls(max_bytes=15)
    calls.start("tc-1", "sendEmail", "TOOL_CALL_START")
    assert calls.held == len("tc-1") + len("sendEmail") == 13
    calls.append("tc-1", "é", "TOOL_CALL_ARGS")  # two UTF-8 bytes, one character
    assert calls.held == 15

    with pytest.raises(StreamFault) as err:
        calls.append("tc-1", "x", "TOOL_CALL_ARGS")
    assert err.value.code == "TOO_LARGE"
    assert err.value.details == {"event_type": "TOOL_CALL_ARGS", "tool_call_id": "tc-1", "size": 16, "limit": 15}
    assert calls.held == 15
    assert calls.calls["tc-1"].args_text == "é"


def test_a_repeated_snapshot_is_charged_once():
    history = [assistant_calling("tc-0", "lookup", '{"q": 1}')]
    calls = ToolCalls()
    calls.learn_from_snapshot(history, "MESSAGES_SNAPSHOT")
    once = calls.held
    assert once == len("tc-0") + len("lookup") + len('{"q": 1}')
    for _ in range(3):
        calls.learn_from_snapshot(history, "MESSAGES_SNAPSHOT")
    assert calls.held == once
